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
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// A Network's segment on a node is a VXLAN device named netbackend.SegmentDeviceName(key),
// marked like the bridge (alias Alias(key)), enslaved to the bridge: VNI, UDP port 4789, the
// node's underlay address as source (and the underlay interface, when given), learning on,
// the bridge's MTU. Its flood list is one all-zero FDB entry per peer. Learning sends unicast
// to the one peer behind a MAC once a frame from it was seen; the flood list carries the rest.

var zeroMAC = net.HardwareAddr{0, 0, 0, 0, 0, 0}

// isSegmentOf tells whether link is key's VXLAN device.
func isSegmentOf(link netlink.Link, key string) bool {
	return link.Type() == "vxlan" && link.Attrs().Alias == Alias(key) && link.Attrs().Name == netbackend.SegmentDeviceName(key)
}

// isSegmentLink tells whether link is one of our VXLAN devices, and whose.
func isSegmentLink(link netlink.Link) (string, bool) {
	key, ok := KeyOfAlias(link.Attrs().Alias)
	if !ok || !isSegmentOf(link, key) {
		return "", false
	}
	return key, true
}

// segmentMatches tells whether the kernel's device has the parameters that cannot be changed
// in place: VNI, port, source, underlay interface and learning.
func segmentMatches(vx *netlink.Vxlan, s *netbackend.Segment, underlayIndex int) bool {
	local, _ := netip.AddrFromSlice(vx.SrcAddr)
	return vx.VxlanId == int(s.VNI) && vx.Port == netbackend.VXLANPort && local.Unmap() == s.UnderlayAddress &&
		vx.VtepDevIndex == underlayIndex && vx.Learning
}

// underlay returns the index of the segment's underlay interface (0 when not given) after
// checking that it exists and that the underlay address is on the node.
func (b *Backend) underlay(key string, s *netbackend.Segment) (int, error) {
	index := 0
	if s.UnderlayLink != "" {
		l, err := b.linkByName(s.UnderlayLink)
		if err != nil {
			return 0, fail(err, "looking up underlay interface %s", s.UnderlayLink)
		}
		if l == nil {
			return 0, netbackend.Errorf(netbackend.ReasonSegmentDown, "network %s: underlay interface %s is not on the node", key, s.UnderlayLink)
		}
		index = l.Attrs().Index
	}
	holder, err := b.addressHolder(s.UnderlayAddress, -1)
	if err != nil {
		return 0, fail(err, "listing the addresses of the namespace")
	}
	if holder == "" {
		return 0, netbackend.Errorf(netbackend.ReasonSegmentDown, "network %s: underlay address %s is not on the node", key, s.UnderlayAddress)
	}
	return index, nil
}

// ensureSegment makes key's VXLAN device match d.Segment (or removes it when d.Segment is nil)
// as a port of bridge, with one flood entry per peer, behind the gateway filter for the bridge's
// MAC mac (set up first: the rules name the device, so they hold from its first frame). A device with the segment's name that is
// not ours is left alone (ReasonNotOurs); a VXLAN device with that name and no alias is what a
// creation interrupted before its alias was set left, and is replaced.
func (b *Backend) ensureSegment(bridge netlink.Link, d netbackend.Desired, mtu int, mac net.HardwareAddr) ([]string, error) {
	name := netbackend.SegmentDeviceName(d.Key)
	link, err := b.linkByName(name)
	if err != nil {
		return nil, fail(err, "looking up VXLAN device %s of network %s", name, d.Key)
	}
	ours := link != nil && isSegmentOf(link, d.Key)
	leftover := link != nil && !ours && link.Type() == "vxlan" && link.Attrs().Alias == ""
	if link != nil && !ours && !leftover {
		return nil, netbackend.Errorf(netbackend.ReasonNotOurs,
			"interface %s (a %s interface, alias %q) in %s has the name of network %s's VXLAN device; leaving it alone",
			name, link.Type(), link.Attrs().Alias, nsDescription(b.cfg.NetNSPath), d.Key)
	}
	var changes []string
	s := d.Segment
	if s == nil {
		removed, err := b.removeGatewayFilter(d.Key)
		if err != nil && !nftUnsupported(err) {
			return nil, err
		}
		if removed {
			changes = append(changes, fmt.Sprintf("removed the gateway filter of %s", name))
		}
		removed, err = b.removeSourceFilter(d.Key)
		if err != nil && !nftUnsupported(err) {
			return changes, err
		}
		if removed {
			changes = append(changes, fmt.Sprintf("removed the source filter of %s", name))
		}
		if link != nil {
			if err := b.nl().LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
				return nil, fail(err, "deleting VXLAN device %s of network %s", name, d.Key)
			}
			changes = append(changes, fmt.Sprintf("deleted VXLAN device %s: the network has no segment on this node", name))
		}
		return changes, nil
	}
	b.rememberSegment(d.Key, name)
	underlayIndex, err := b.underlay(d.Key, s)
	if err != nil {
		return nil, err
	}
	// Before the device can carry anything: the gateway stays local.
	filterChanges, err := b.ensureGatewayFilter(d.Key, mac, d.Gateway)
	changes = append(changes, filterChanges...)
	if err != nil {
		return changes, err
	}
	// And only the peers are on the segment: written before the flood list changes (see
	// sourcefilter.go), so that a peer leaving is refused before what was learnt behind it goes.
	filterChanges, err = b.ensureSourceFilter(d.Key, s)
	changes = append(changes, filterChanges...)
	if err != nil {
		return changes, err
	}
	if link != nil {
		vx, isVX := link.(*netlink.Vxlan)
		if leftover || !isVX || !segmentMatches(vx, s, underlayIndex) {
			if err := b.nl().LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
				return nil, fail(err, "deleting VXLAN device %s of network %s to recreate it", name, d.Key)
			}
			if leftover {
				changes = append(changes, fmt.Sprintf("deleted %s, left by an interrupted creation", name))
			} else {
				changes = append(changes, fmt.Sprintf("deleted VXLAN device %s to recreate it with VNI %d, local %s", name, s.VNI, s.UnderlayAddress))
			}
			link = nil
		}
	}
	if link == nil {
		attrs := netlink.NewLinkAttrs()
		attrs.Name = name
		attrs.MTU = mtu
		vx := &netlink.Vxlan{LinkAttrs: attrs, VxlanId: int(s.VNI), SrcAddr: s.UnderlayAddress.AsSlice(),
			VtepDevIndex: underlayIndex, Port: netbackend.VXLANPort, Learning: true}
		if err := b.nl().LinkAdd(vx); err != nil {
			return changes, &netbackend.Error{Reason: netbackend.ReasonSegmentDown,
				Err: fmt.Errorf("creating VXLAN device %s (VNI %d) for network %s: %w", name, s.VNI, d.Key, err)}
		}
		if link, err = b.linkByName(name); err == nil && link == nil {
			err = errors.New("it vanished")
		}
		if err != nil {
			return changes, fail(err, "looking up new VXLAN device %s", name)
		}
		if err := b.nl().LinkSetAlias(link, Alias(d.Key)); err != nil {
			_ = b.nl().LinkDel(link)
			return changes, fail(err, "setting the alias of new VXLAN device %s", name)
		}
		changes = append(changes, fmt.Sprintf("created VXLAN device %s (VNI %d, local %s, port %d)", name, s.VNI, s.UnderlayAddress, netbackend.VXLANPort))
	}
	a := link.Attrs()
	if a.MTU != mtu {
		if err := b.nl().LinkSetMTU(link, mtu); err != nil {
			if errors.Is(err, unix.EINVAL) {
				return changes, &netbackend.Error{Reason: netbackend.ReasonSegmentDown,
					Err: fmt.Errorf("setting the MTU of VXLAN device %s to %d: %w (more than the underlay carries after %d bytes of encapsulation?)",
						name, mtu, err, netbackend.SegmentOverhead(s.UnderlayAddress))}
			}
			return changes, fail(err, "setting the MTU of VXLAN device %s to %d", name, mtu)
		}
		changes = append(changes, fmt.Sprintf("set MTU of %s from %d to %d", name, a.MTU, mtu))
	}
	if a.MasterIndex != bridge.Attrs().Index {
		if err := b.nl().LinkSetMaster(link, bridge); err != nil {
			return changes, fail(err, "attaching VXLAN device %s to bridge %s", name, bridge.Attrs().Name)
		}
		changes = append(changes, fmt.Sprintf("attached VXLAN device %s to %s", name, bridge.Attrs().Name))
	}
	if a.Flags&net.FlagUp == 0 {
		if err := b.nl().LinkSetUp(link); err != nil {
			return changes, fail(err, "setting VXLAN device %s up", name)
		}
		changes = append(changes, fmt.Sprintf("set %s up", name))
	}
	fdbChanges, err := b.ensureFlood(link, s.Peers)
	return append(changes, fdbChanges...), err
}

// fdbEntries returns the VXLAN device's own FDB entries (not the bridge's).
func (b *Backend) fdbEntries(link netlink.Link) ([]netlink.Neigh, error) {
	entries, err := dump(func() ([]netlink.Neigh, error) { return b.nl().NeighList(link.Attrs().Index, unix.AF_BRIDGE) })
	if err != nil {
		return nil, err
	}
	var out []netlink.Neigh
	for _, e := range entries {
		if e.Flags&unix.NTF_SELF != 0 && e.IP != nil {
			out = append(out, e)
		}
	}
	return out, nil
}

// floodPeers returns the destinations of the flood entries among entries, sorted.
func floodPeers(entries []netlink.Neigh) []netip.Addr {
	var peers []netip.Addr
	for _, e := range entries {
		if bytes.Equal(e.HardwareAddr, zeroMAC) {
			if ip, ok := netip.AddrFromSlice(e.IP); ok {
				peers = append(peers, ip.Unmap())
			}
		}
	}
	slices.SortFunc(peers, func(a, b netip.Addr) int { return a.Compare(b) })
	return slices.Compact(peers)
}

func fdbEntry(link netlink.Link, mac net.HardwareAddr, dst netip.Addr, state int) *netlink.Neigh {
	return &netlink.Neigh{LinkIndex: link.Attrs().Index, Family: unix.AF_BRIDGE, Flags: unix.NTF_SELF,
		State: state, HardwareAddr: mac, IP: dst.AsSlice()}
}

// ensureFlood makes the device's flood entries exactly peers. For a peer that left, the
// entries learnt with it as destination go too: frames for its MACs flood instead of going
// to an address that no longer belongs to the segment.
func (b *Backend) ensureFlood(link netlink.Link, peers []netip.Addr) ([]string, error) {
	name := link.Attrs().Name
	entries, err := b.fdbEntries(link)
	if err != nil {
		return nil, fail(err, "listing the FDB of VXLAN device %s", name)
	}
	have := floodPeers(entries)
	var changes []string
	for _, p := range peers {
		if slices.Contains(have, p) {
			continue
		}
		if err := b.nl().NeighAppend(fdbEntry(link, zeroMAC, p, unix.NUD_NOARP|unix.NUD_PERMANENT)); err != nil && !errors.Is(err, unix.EEXIST) {
			return changes, fail(err, "adding peer %s to the flood list of %s", p, name)
		}
		have = append(have, p)
		changes = append(changes, fmt.Sprintf("added peer %s to %s", p, name))
	}
	for _, e := range entries {
		dst, ok := netip.AddrFromSlice(e.IP)
		if !ok || slices.Contains(peers, dst.Unmap()) {
			continue
		}
		dst = dst.Unmap()
		if err := b.nl().NeighDel(fdbEntry(link, e.HardwareAddr, dst, e.State)); err != nil && !errors.Is(err, unix.ENOENT) {
			return changes, fail(err, "removing FDB entry %s dst %s from %s", e.HardwareAddr, dst, name)
		}
		if bytes.Equal(e.HardwareAddr, zeroMAC) {
			changes = append(changes, fmt.Sprintf("removed peer %s from %s", dst, name))
		}
	}
	slices.Sort(changes)
	return changes, nil
}

// segmentState returns what is on the node of key's VXLAN device, nil when it is absent.
func (b *Backend) segmentState(key string, bridgeIndex int) (*netbackend.SegmentState, error) {
	name := netbackend.SegmentDeviceName(key)
	link, err := b.linkByName(name)
	if err != nil || link == nil || !isSegmentOf(link, key) {
		return nil, err
	}
	b.rememberSegment(key, name)
	a := link.Attrs()
	st := &netbackend.SegmentState{Device: name, Enslaved: bridgeIndex != 0 && a.MasterIndex == bridgeIndex,
		Up: a.Flags&net.FlagUp != 0, MTU: a.MTU}
	if vx, ok := link.(*netlink.Vxlan); ok {
		st.VNI = uint32(vx.VxlanId)
		st.Local, _ = netip.AddrFromSlice(vx.SrcAddr)
		st.Local = st.Local.Unmap()
	}
	entries, err := b.fdbEntries(link)
	if err != nil {
		return nil, err
	}
	st.Peers = floodPeers(entries)
	rules, err := b.filterRuleCount(key)
	if err != nil && !nftUnsupported(err) {
		return nil, err
	}
	st.GatewayFilter = rules > 0
	st.SourceFilter, st.Sources, err = b.observeSourceFilter(key, st.VNI, st.Local.Is6())
	if err != nil && !nftUnsupported(err) {
		return nil, err
	}
	return st, nil
}

// removeSegment deletes key's VXLAN device if it is ours, and its gateway and source filters.
func (b *Backend) removeSegment(key string) error {
	if _, err := b.removeGatewayFilter(key); err != nil && !nftUnsupported(err) {
		return err
	}
	if _, err := b.removeSourceFilter(key); err != nil && !nftUnsupported(err) {
		return err
	}
	name := netbackend.SegmentDeviceName(key)
	link, err := b.linkByName(name)
	if err != nil {
		return fail(err, "looking up VXLAN device %s of network %s", name, key)
	}
	if link != nil && isSegmentOf(link, key) {
		if err := b.nl().LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return fail(err, "deleting VXLAN device %s of network %s", name, key)
		}
	}
	return nil
}
