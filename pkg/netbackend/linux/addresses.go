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

package linux

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// bridgeAddrs returns the addresses on link, without the IPv6 link-local ones, which the
// kernel manages.
func (b *Backend) bridgeAddrs(link netlink.Link) ([]netip.Prefix, error) {
	addrs, err := b.linkAddrs(link.Attrs().Index, unix.AF_UNSPEC)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, p := range addrs {
		if p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

// ensureAddress leaves exactly the gateway (with the prefix's length) on the bridge, apart from
// IPv6 link-local addresses. The gateway found on another interface of the namespace is
// ReasonAddressInUse: the kernel itself accepts one address on several interfaces, so this is
// checked before adding; EADDRINUSE or EEXIST from the kernel are reported the same way.
func (b *Backend) ensureAddress(link netlink.Link, d netbackend.Desired) ([]string, error) {
	name := link.Attrs().Name
	want := netip.PrefixFrom(d.Gateway, d.Prefix.Bits())
	addrs, err := b.bridgeAddrs(link)
	if err != nil {
		return nil, fail(err, "listing the addresses of bridge %s", name)
	}
	var changes []string
	removed := false
	for _, p := range addrs {
		if p == want {
			continue
		}
		if err := b.nl().AddrDel(link, netlinkAddr(p)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return changes, fail(err, "removing stale address %s from bridge %s", p, name)
		}
		changes = append(changes, fmt.Sprintf("removed stale address %s from %s", p, name))
		removed = true
	}
	if removed { // deleting a primary IPv4 address can take the secondaries with it
		if addrs, err = b.bridgeAddrs(link); err != nil {
			return changes, fail(err, "listing the addresses of bridge %s", name)
		}
	}
	if slices.Contains(addrs, want) {
		return changes, nil
	}
	if holder := b.leaseHolder(d.Key, d.Gateway); holder != "" {
		return changes, netbackend.Errorf(netbackend.ReasonAddressInUse,
			"gateway %s of network %s is leased by host-local to container %s; not adding it to bridge %s", d.Gateway, d.Key, holder, name)
	}
	if holder, err := b.gatewayHolder(d.Gateway, link.Attrs().Index); err != nil {
		return changes, fail(err, "listing the addresses of the namespace")
	} else if holder != "" {
		return changes, netbackend.Errorf(netbackend.ReasonAddressInUse,
			"gateway %s of network %s is already on interface %s; not adding it to bridge %s", d.Gateway, d.Key, holder, name)
	}
	if err := b.nl().AddrAdd(link, netlinkAddr(want)); err != nil {
		if errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EEXIST) {
			return changes, &netbackend.Error{Reason: netbackend.ReasonAddressInUse,
				Err: fmt.Errorf("adding gateway %s to bridge %s: %w", want, name, err)}
		}
		return changes, fail(err, "adding gateway %s to bridge %s", want, name)
	}
	return append(changes, fmt.Sprintf("added address %s to %s", want, name)), nil
}

// netlinkAddr is the netlink form of p. IPv6 gateways skip duplicate address detection so
// that they are usable at once (host-local never hands the gateway out).
func netlinkAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   p.Addr().AsSlice(),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// gatewayHolder returns the name of an interface other than index that the namespace delivers
// ip to, "" if none. For IPv4 it asks the kernel which route of the FIB matches ip (`ip route get
// fibmatch`): an IPv4 address has a host route of type local in the local table for as long as it
// is on a link, up or down, so one lookup answers what a dump of every address in the namespace
// answered (addressHolder), in time independent of how many Networks the node has. An address on
// a link enslaved to a VRF has its local route in the VRF's table and is not found: it is no
// conflict either, the bridge's gateway being routed in the default table. IPv6 addresses have
// no local route while tentative or on a link that is down, so IPv6 keeps the dump.
func (b *Backend) gatewayHolder(ip netip.Addr, index int) (string, error) {
	if !ip.Is4() {
		return b.addressHolder(ip, index)
	}
	routes, err := b.nl().RouteGetWithOptions(ip.AsSlice(), &netlink.RouteGetOptions{FIBMatch: true})
	if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
		return "", nil // no route at all, so no local one
	}
	if err != nil {
		return "", err
	}
	for _, r := range routes {
		if r.Type != unix.RTN_LOCAL || r.Dst == nil || r.LinkIndex == index {
			continue
		}
		if ones, bits := r.Dst.Mask.Size(); ones != bits || !r.Dst.IP.Equal(ip.AsSlice()) {
			continue // a local route of a whole prefix (AnyIP) is not an address on a link
		}
		if l, err := b.nl().LinkByIndex(r.LinkIndex); err == nil {
			return l.Attrs().Name, nil
		}
		return fmt.Sprintf("index %d", r.LinkIndex), nil
	}
	return "", nil
}

// addressHolder returns the name of an interface other than index that has ip, "" if none.
func (b *Backend) addressHolder(ip netip.Addr, index int) (string, error) {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := dump(func() ([]netlink.Addr, error) { return b.nl().AddrList(nil, family) })
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IP, 0); !ok || p.Addr() != ip || a.LinkIndex == index {
			continue
		}
		if l, err := b.nl().LinkByIndex(a.LinkIndex); err == nil {
			return l.Attrs().Name, nil
		}
		return fmt.Sprintf("index %d", a.LinkIndex), nil
	}
	return "", nil
}
