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
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/klog/v2"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// The upgrade from the whole-prefix configuration (docs/design/cross-node.md §6). A node whose
// host-local holds leases of a Network outside its blocks (leased by the configuration from
// before blocks, which gave host-local the whole prefix) keeps that configuration (ipamMode
// Legacy) until a claim with cover = those leases gives it blocks around them; then its
// configuration holds its blocks only (ipamMode Blocks). A lease inside another node's block
// cannot be covered: the entry names it (AddressConflict).

// Reasons of a node's entry during the upgrade.
const (
	// ReasonAddressConflict: an address leased on this node is inside another node's block.
	ReasonAddressConflict = "AddressConflict"
	// ReasonWaitingForUpgrade: the node needs a new block, and the server gives none while
	// another node of the Network still hands out addresses from the whole prefix.
	ReasonWaitingForUpgrade = "WaitingForUpgrade"
)

// LeaseHolders is implemented by backends that can tell which container holds a lease.
type LeaseHolders interface {
	// LeaseHolder returns the container ID that holds ip in key's network, "" when unknown.
	LeaseHolder(key string, ip netip.Addr) string
}

// leasesIn returns the addresses host-local holds for key inside prefix (never the gateway),
// sorted; nil when the backend cannot tell.
func (c *Controller) leasesIn(ctx context.Context, key string, prefix netip.Prefix, gateway netip.Addr) []netip.Addr {
	leases, err := c.leases(ctx, key)
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, l := range leases {
		a, err := netip.ParseAddr(l)
		if err != nil || !prefix.Contains(a) || a == gateway {
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b netip.Addr) int { return a.Compare(b) })
	return out
}

// uncovered returns the leases outside blocks.
func uncovered(leases []netip.Addr, blocks []netip.Prefix) []netip.Addr {
	var out []netip.Addr
	for _, l := range leases {
		if !slices.ContainsFunc(blocks, func(b netip.Prefix) bool { return b.Contains(l) }) {
			out = append(out, l)
		}
	}
	return out
}

// nodeBlocks returns the node's blocks of n: with no lease outside them, those it holds (the
// first claimed when it holds none). Leases outside them are first looked up among the other
// nodes' blocks (a conflict each), then the rest covered by a claim. While the node holds no
// block and has leases, the view is legacy: the configuration keeps the whole prefix.
func (c *Controller) nodeBlocks(ctx context.Context, n *v1.Network, key string, prefix netip.Prefix, gateway netip.Addr) blockView {
	blocks := blocksOf(c.nodeAllocation(n), prefix)
	leases := c.leasesIn(ctx, key, prefix, gateway)
	outside := uncovered(leases, blocks)
	if len(outside) == 0 {
		if len(blocks) > 0 {
			return blockView{blocks: blocks}
		}
		return c.firstBlocks(ctx, n, prefix)
	}
	fail := func(err error) blockView {
		if len(blocks) == 0 {
			return blockView{legacy: true, failure: err}
		}
		return blockView{blocks: blocks, failure: err}
	}
	conflicts, toCover, err := c.othersBlocks(ctx, n, outside)
	if err != nil {
		return fail(netbackend.Errorf(ReasonReconciling, "reading the blocks of %s/%s: %v", n.Namespace, n.Name, err))
	}
	if len(toCover) > 0 {
		cover := make([]string, 0, len(toCover))
		for _, l := range toCover {
			cover = append(cover, l.String())
		}
		a, err := c.claimWith(ctx, n, &v1.BlockClaim{NodeName: c.opts.NodeName, Cover: cover})
		if err != nil {
			return fail(err)
		}
		blocks = blocksOf(a, prefix)
		klog.FromContext(ctx).Info("Covered the leases from the whole-prefix configuration with blocks", "network", klog.KObj(n),
			"leases", len(toCover), "blocks", len(blocks))
	}
	v := blockView{blocks: blocks}
	if len(blocks) == 0 {
		// Every lease is inside another node's block: the node needs a fresh block of its own.
		v = c.firstBlocks(ctx, n, prefix)
	}
	if len(conflicts) > 0 {
		v.conflict = netbackend.Errorf(ReasonAddressConflict, "%s", c.conflictMessage(key, conflicts))
	}
	return v
}

// conflict is a lease of this node inside another node's block.
type conflict struct {
	lease netip.Addr
	node  string
	block netip.Prefix
}

// othersBlocks reads the Network's BlockAllocations (a live list: the informer holds this
// node's only) and splits leases into those inside another node's block and the rest.
func (c *Controller) othersBlocks(ctx context.Context, n *v1.Network, leases []netip.Addr) ([]conflict, []netip.Addr, error) {
	list, err := c.client.SamplecrdV1().BlockAllocations(n.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("network", n.Name).String()})
	if apierrors.IsNotFound(err) {
		return nil, leases, nil
	}
	if err != nil {
		return nil, nil, err
	}
	var conflicts []conflict
	var rest []netip.Addr
	for _, l := range leases {
		found := false
		for _, o := range list.Items {
			if o.NodeName == c.opts.NodeName || o.Network != n.Name || o.NetworkUID != string(n.UID) {
				continue
			}
			for _, b := range o.Blocks {
				if p, err := netip.ParsePrefix(b.CIDR); err == nil && p.Contains(l) {
					conflicts = append(conflicts, conflict{lease: l, node: o.NodeName, block: p})
					found = true
				}
			}
		}
		if !found {
			rest = append(rest, l)
		}
	}
	return conflicts, rest, nil
}

// conflictMessage names each conflict: the address, the container that leased it here, and the
// other node's block.
func (c *Controller) conflictMessage(key string, conflicts []conflict) string {
	holders, _ := c.backend.(LeaseHolders)
	parts := make([]string, 0, len(conflicts))
	for _, cf := range conflicts {
		holder := ""
		if holders != nil {
			holder = holders.LeaseHolder(key, cf.lease)
		}
		if holder == "" {
			holder = "an unknown container"
		} else {
			holder = "container " + holder
		}
		parts = append(parts, fmt.Sprintf("%s leased on node %s by %s is inside node %s's block %s",
			cf.lease, c.opts.NodeName, holder, cf.node, cf.block))
	}
	return strings.Join(parts, "; ") + " (leased before blocks existed: restart that pod to give it an address of this node's blocks)"
}
