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

package storage

import (
	"context"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// DefaultMaxFreeAddresses is the default --max-free-addresses-per-node. An agent claims a block
// when fewer than its --min-free-addresses (default 16) of its blocks are free, counting the
// leases it sees on the node; the server counts the leases of the node's status entry, which
// may trail them by the leases made since the agent's last status write. With 128, an honest
// agent is refused only when more than 112 leases trail, while a node holds at most 128 free
// addresses plus one block beyond what its leases need (with /26 blocks about three spare
// blocks, instead of --max-blocks-per-node of them).
const DefaultMaxFreeAddresses = 128

// Quota bounds the free addresses a node agent may hold in one Network's blocks before it
// claims another (issue 26): one node cannot claim every free block.
type Quota struct {
	// Identity tells node agents' requests; other users' claims are not bounded.
	Identity nodeidentity.Identity
	// MaxFree is --max-free-addresses-per-node: a node agent whose blocks hold this many free
	// addresses or more may claim no more.
	MaxFree int64
}

// checkQuota refuses (403) a node agent's claim for node when node's blocks of n (current)
// already hold at least MaxFree free addresses. Used addresses are the larger of the leases and
// the attachments its status.nodes[] entry reports (an entry without leases counts attachments).
func (q *Quota) checkQuota(ctx context.Context, n *samplecrd.Network, prefix netip.Prefix, gateway netip.Addr, current *samplecrd.BlockAllocation) error {
	if q == nil || q.MaxFree <= 0 || len(current.Blocks) == 0 {
		return nil
	}
	u, ok := genericapirequest.UserFrom(ctx)
	if !ok {
		return nil
	}
	if _, agent := q.Identity.Node(u); !agent {
		return nil
	}
	node := current.NodeName
	var total int64
	for _, b := range current.Blocks {
		if p, err := netip.ParsePrefix(b.CIDR); err == nil {
			total += usableIn(p.Masked(), prefix, gateway)
		}
	}
	var used int64
	source := "no status.nodes entry"
	for _, e := range n.Status.Nodes {
		if e.NodeName != node {
			continue
		}
		used = int64(e.Attachments)
		source = fmt.Sprintf("%d attachments in its status.nodes entry", e.Attachments)
		if e.Leases != nil {
			source = fmt.Sprintf("%d leases, %d attachments in its status.nodes entry", *e.Leases, e.Attachments)
			used = max(used, int64(*e.Leases))
		}
	}
	free := total - used
	if free < q.MaxFree {
		return nil
	}
	return apierrors.NewForbidden(samplecrd.Resource("networks/blockclaims"), n.Name,
		fmt.Errorf("node %s may not claim another block of network %s/%s: its %d blocks hold %d free addresses (%d usable, %s), "+
			"and a node claims only below %d free (--max-free-addresses-per-node)",
			node, n.Namespace, n.Name, len(current.Blocks), free, total, source, q.MaxFree))
}

// usableIn counts the addresses of block a node hands out: without the prefix's network and
// (IPv4) broadcast addresses and the gateway; capped for huge IPv6 blocks.
func usableIn(block, prefix netip.Prefix, gateway netip.Addr) int64 {
	host := block.Addr().BitLen() - block.Bits()
	if host > 40 {
		return 1 << 40
	}
	n := int64(1) << host
	if block.Addr() == prefix.Masked().Addr() {
		n--
	}
	if prefix.Addr().Is4() && prefix.Bits() < 32 && block.Contains(lastOf(prefix)) {
		n--
	}
	if block.Contains(gateway) {
		n--
	}
	return max(n, 0)
}

// lastOf is an IPv4 prefix's broadcast address.
func lastOf(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])
	v |= 1<<(32-p.Bits()) - 1
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}
