/*
Copyright The network-apiserver Authors.

Licensed under the Apache License, Version 2.0 (the "License");
you may not use this file except in compliance with the License.
You may obtain a copy of the License at

    http://www.apache.org/licenses/LICENSE-2.0

Unless required by applicable law or agreed to in writing, software
distributed under the License is distributed on an "AS IS" BASIS,
WITHOUT WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied.
See the License for the specific language governing permissions and
limitations under the License.
*/

package agent

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// underlay resolves the node's underlay address and the overlay MTU from the flags: the
// address from --underlay-address, else the first global address of --underlay-interface (in
// the backend's namespace); the MTU from --overlay-mtu, else the interface's MTU (DefaultMTU
// without one) minus the VXLAN overhead. Without either flag it returns no address.
func (c *ControllerOptions) underlay() (netip.Addr, int, error) {
	if c.UnderlayAddress == "" && c.UnderlayInterface == "" {
		return netip.Addr{}, 0, nil
	}
	var addr netip.Addr
	if c.UnderlayAddress != "" {
		var err error
		if addr, err = netip.ParseAddr(c.UnderlayAddress); err != nil {
			return addr, 0, fmt.Errorf("--underlay-address: %w", err)
		}
	}
	linkMTU := netbackend.DefaultMTU
	if c.UnderlayInterface != "" {
		h, err := c.netlinkHandle()
		if err != nil {
			return addr, 0, err
		}
		defer h.Close()
		link, err := h.LinkByName(c.UnderlayInterface)
		if err != nil {
			return addr, 0, fmt.Errorf("--underlay-interface %s: %w", c.UnderlayInterface, err)
		}
		linkMTU = link.Attrs().MTU
		if !addr.IsValid() {
			addrs, err := h.AddrList(link, netlink.FAMILY_ALL)
			if err != nil {
				return addr, 0, fmt.Errorf("addresses of --underlay-interface %s: %w", c.UnderlayInterface, err)
			}
			for _, a := range addrs {
				if ip, ok := netip.AddrFromSlice(a.IP); ok && ip.Unmap().IsGlobalUnicast() {
					addr = ip.Unmap()
					break
				}
			}
			if !addr.IsValid() {
				return addr, 0, fmt.Errorf("--underlay-interface %s has no global address (set --underlay-address)", c.UnderlayInterface)
			}
		}
	}
	mtu := c.OverlayMTU
	if mtu == 0 {
		mtu = linkMTU - netbackend.SegmentOverhead(addr)
	}
	return addr, mtu, nil
}

// netlinkHandle is a netlink handle in the backend's namespace (the process's own without one).
func (c *ControllerOptions) netlinkHandle() (*netlink.Handle, error) {
	if c.BackendNetNS == "" {
		return netlink.NewHandle()
	}
	ns, err := netns.GetFromPath(c.BackendNetNS)
	if err != nil {
		return nil, fmt.Errorf("--backend-netns %s: %w", c.BackendNetNS, err)
	}
	defer ns.Close()
	return netlink.NewHandleAt(ns)
}
