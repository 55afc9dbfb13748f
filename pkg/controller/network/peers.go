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

package network

import (
	"net/netip"
	"slices"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// ReasonNodeDeleted is the reason of an entry whose Node is gone; such a node is no peer.
const ReasonNodeDeleted = nodestatus.ReasonNodeDeleted

// withSegment adds the segment to desired when the node has an underlay: the overlay MTU from
// the first pod on, and, once the server has given the Network a VNI, the VXLAN device and its
// peers (the other entries' underlay addresses of the same family).
func (c *Controller) withSegment(desired *netbackend.Desired, n *v1.Network) {
	if !c.opts.Underlay.IsValid() {
		return
	}
	desired.MTU = c.opts.OverlayMTU
	if n.Status.VNI <= 0 {
		return
	}
	desired.Segment = &netbackend.Segment{
		VNI:             uint32(n.Status.VNI),
		UnderlayAddress: c.opts.Underlay,
		UnderlayLink:    c.opts.UnderlayLink,
		Peers:           peersOf(n, c.opts.NodeName, c.opts.Underlay),
		MTU:             c.opts.OverlayMTU,
	}
}

// peersOf returns the underlay addresses of n's other entries, of self's family, sorted.
func peersOf(n *v1.Network, node string, self netip.Addr) []netip.Addr {
	var peers []netip.Addr
	for _, e := range n.Status.Nodes {
		if e.NodeName == node || e.Reason == ReasonNodeDeleted || e.UnderlayAddress == "" {
			continue
		}
		a, err := netip.ParseAddr(e.UnderlayAddress)
		if err != nil || a == self || a.Is4() != self.Is4() || slices.Contains(peers, a) {
			continue
		}
		peers = append(peers, a)
	}
	slices.SortFunc(peers, netip.Addr.Compare)
	return peers
}
