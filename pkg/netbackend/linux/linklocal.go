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
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// The bridges of one Network on all nodes share the Network's fixed MAC, so the link-local
// addresses the kernel derives from it (EUI-64) would be the same on every node of a segment.
// A bridge with a segment therefore generates none (addr_gen_mode none, set before it first
// goes up) and carries SegmentLinkLocal instead, derived from the node's underlay address and
// the key, added without duplicate address detection. It also has multicast snooping off:
// with no multicast querier on the segment, snooping can stop forwarding neighbour discovery
// to the VXLAN port.

// in6AddrGenModeNone is IN6_ADDR_GEN_MODE_NONE.
const in6AddrGenModeNone = 1

// SegmentLinkLocal is the IPv6 link-local address of key's bridge on the node with the
// underlay address underlay: fe80::/64 with 64 bits of a hash of both.
func SegmentLinkLocal(key string, underlay netip.Addr) netip.Prefix {
	sum := sha256.Sum256([]byte("link-local:" + underlay.String() + "/" + key))
	var a [16]byte
	a[0], a[1] = 0xfe, 0x80
	copy(a[8:], sum[:8])
	return netip.PrefixFrom(netip.AddrFrom16(a), 64)
}

// linkLocals returns the IPv6 link-local addresses on link.
func (b *Backend) linkLocals(link netlink.Link) ([]netip.Prefix, error) {
	addrs, err := b.linkAddrs(link.Attrs().Index, unix.AF_INET6)
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, p := range addrs {
		if p.Addr().IsLinkLocalUnicast() {
			out = append(out, p)
		}
	}
	return out, nil
}

// prepareSegmentBridge runs before the bridge goes up: for a bridge with a segment it turns
// multicast snooping off and, when the bridge is down or carries a link-local address other
// than its own, turns the kernel's link-local generation off. Neither is written when already
// so: a resync writes nothing.
func (b *Backend) prepareSegmentBridge(link netlink.Link, d netbackend.Desired, up bool) ([]string, error) {
	if d.Segment == nil {
		return nil, nil
	}
	name := link.Attrs().Name
	var changes []string
	// A kernel built without IGMP/MLD snooping reports no snooping setting (and refuses one).
	if br, ok := link.(*netlink.Bridge); ok && br.MulticastSnooping != nil && *br.MulticastSnooping {
		// A request with only the name, index and the one setting: the library's modify sends
		// every attribute of the link it is given, some of which the kernel refuses to set.
		attrs := netlink.NewLinkAttrs()
		attrs.Name, attrs.Index = name, link.Attrs().Index
		if err := b.nl().BridgeSetMcastSnoop(&netlink.Bridge{LinkAttrs: attrs}, false); err != nil {
			return nil, fail(err, "turning multicast snooping off on bridge %s", name)
		}
		changes = append(changes, fmt.Sprintf("turned multicast snooping off on %s", name))
	}
	want := SegmentLinkLocal(d.Key, d.Segment.UnderlayAddress)
	lls, err := b.linkLocals(link)
	if err != nil {
		return changes, fail(err, "listing the addresses of bridge %s", name)
	}
	foreign := false
	for _, p := range lls {
		foreign = foreign || p != want
	}
	if !up || foreign {
		if err := b.nl().LinkSetIP6AddrGenMode(link, in6AddrGenModeNone); err != nil {
			return changes, fail(err, "turning IPv6 link-local address generation off on bridge %s", name)
		}
		if up {
			changes = append(changes, fmt.Sprintf("turned IPv6 link-local address generation off on %s", name))
		}
	}
	return changes, nil
}

// ensureSegmentLinkLocal leaves exactly the bridge's own link-local address on a bridge with a
// segment (after it is up: a link going down loses its IPv6 addresses).
func (b *Backend) ensureSegmentLinkLocal(link netlink.Link, d netbackend.Desired) ([]string, error) {
	if d.Segment == nil {
		return nil, nil
	}
	name := link.Attrs().Name
	want := SegmentLinkLocal(d.Key, d.Segment.UnderlayAddress)
	lls, err := b.linkLocals(link)
	if err != nil {
		return nil, fail(err, "listing the addresses of bridge %s", name)
	}
	var changes []string
	have := false
	for _, p := range lls {
		if p == want {
			have = true
			continue
		}
		if err := b.nl().AddrDel(link, netlinkAddr(p)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return changes, fail(err, "removing link-local address %s from bridge %s", p, name)
		}
		changes = append(changes, fmt.Sprintf("removed link-local address %s from %s", p, name))
	}
	if !have {
		if err := b.nl().AddrAdd(link, netlinkAddr(want)); err != nil && !errors.Is(err, unix.EEXIST) {
			return changes, fail(err, "adding link-local address %s to bridge %s", want, name)
		}
		changes = append(changes, fmt.Sprintf("added link-local address %s to %s", want, name))
	}
	return changes, nil
}
