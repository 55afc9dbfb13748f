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
	"net/http"
	"net/netip"
	"slices"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/storage"
)

// The upgrade from the whole-prefix configuration (docs/design/cross-node.md §6): a node that
// leased addresses before blocks existed claims, once, blocks that cover those leases
// (BlockClaim.cover); fresh claims wait while any node still hands out the whole prefix.

// ReasonWaitingForUpgrade is the reason of a fresh claim's answer while another node of the
// Network still hands out addresses from the whole prefix (the node entries' reason too).
const ReasonWaitingForUpgrade metav1.StatusReason = "WaitingForUpgrade"

// maxCover bounds BlockClaim.cover: a node's leases of one Network.
const maxCover = 65536

// legacyNodes returns the entries of n, other than node's, whose node does not (yet) hand out
// addresses from its blocks only: an agent from before blocks writes no ipamMode, a new agent
// keeping its old configuration until its leases are covered writes Legacy.
func legacyNodes(n *samplecrd.Network, node string) []samplecrd.NetworkNodeStatus {
	var out []samplecrd.NetworkNodeStatus
	for _, e := range n.Status.Nodes {
		if e.NodeName != node && e.IPAMMode != samplecrd.IPAMModeBlocks {
			out = append(out, e)
		}
	}
	return out
}

// waitingForUpgrade is a fresh claim's answer while legacy entries remain: 409 with reason
// WaitingForUpgrade, naming each such node, so that an operator finds a node that never upgrades
// (its entry going, with the node, ends the wait).
func waitingForUpgrade(network string, prefix netip.Prefix, node string, legacy []samplecrd.NetworkNodeStatus) error {
	names := make([]string, 0, len(legacy))
	for _, e := range legacy {
		mode := "ipamMode " + e.IPAMMode
		if e.IPAMMode == "" {
			mode = "no ipamMode: an agent from before blocks"
		}
		if !e.Ready && e.Reason != "" {
			mode += ", " + e.Reason
		}
		names = append(names, fmt.Sprintf("%s (%s)", e.NodeName, mode))
	}
	message := fmt.Sprintf("%s: no new block for %s while nodes still hand out addresses from the whole prefix: %s; "+
		"upgrade their agents, or remove the entries of nodes that are gone", prefix, node, strings.Join(names, ", "))
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusConflict,
		Reason:  ReasonWaitingForUpgrade,
		Message: message,
		Details: &metav1.StatusDetails{Group: samplecrd.GroupName, Kind: "networks", Name: network,
			Causes: []metav1.StatusCause{{Type: metav1.CauseType(ReasonWaitingForUpgrade), Message: message}}},
	}}
}

// coverPick returns the block that covers lease given the allocations taken in the Network's
// block scope (every node's blocks and the gateway key): the aligned block of the preferred
// length containing lease when nothing taken overlaps it, else the next smaller aligned block containing it, down to the
// single address. When the address itself is taken (inside another node's block, or the
// gateway), it returns that allocation instead: a conflict, never a block.
func coverPick(lease netip.Addr, preferred int, taken []allocator.Allocation) (netip.Prefix, *allocator.Allocation) {
	single := netip.PrefixFrom(lease, lease.BitLen())
	for i := range taken {
		if taken[i].Prefix.Overlaps(single) {
			return netip.Prefix{}, &taken[i]
		}
	}
	for bits := preferred; bits < lease.BitLen(); bits++ {
		candidate, _ := lease.Prefix(bits)
		if !slices.ContainsFunc(taken, func(t allocator.Allocation) bool { return t.Prefix.Overlaps(candidate) }) {
			return candidate, nil
		}
	}
	return single, nil
}

// coverOnce gives node blocks covering the addresses of cover (leased before it had blocks),
// one guarded transaction per block (each adds one block of origin CoversLeases to the node's
// object). Leases its blocks already cover are skipped, so a repeated claim changes nothing; a
// lease inside another node's block gets no block (the agent reports it as AddressConflict).
// It answers the node's object afterwards.
func (r *ClaimREST) coverOnce(ctx context.Context, ns, name, netKey, objName, objKey, node string, cover []string, dryRun bool) (runtime.Object, error) {
	sn, err := r.network(ctx, netKey, name)
	if err != nil {
		return nil, err
	}
	n, prefix := sn.Network, sn.prefix
	leases := make([]netip.Addr, 0, len(cover))
	var errs field.ErrorList
	for i, c := range cover {
		a := netip.MustParseAddr(c) // validated
		if !prefix.Contains(a) {
			errs = append(errs, field.Invalid(field.NewPath("cover").Index(i), c, fmt.Sprintf("not inside the Network's prefix %s", prefix)))
			continue
		}
		leases = append(leases, a)
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(samplecrd.Kind("BlockClaim"), name, errs)
	}
	slices.SortFunc(leases, func(a, b netip.Addr) int { return a.Compare(b) })
	leases = slices.Compact(leases)
	if !dryRun {
		if err := r.ensureGateway(ctx, sn, netKey); err != nil {
			return nil, err
		}
	}
	current, objModRevision, err := r.nodeObject(ctx, ns, name, objName, objKey, node, n)
	if err != nil {
		return nil, err
	}
	taken, err := r.taken(ctx, string(n.UID))
	if err != nil {
		return nil, err
	}
	// The gateway as read with the allocation key (whose ModRevision guards each commit), which
	// without gateway keys is nowhere among the keys.
	taken = append(taken, allocator.Allocation{Prefix: netip.PrefixFrom(sn.gateway, sn.gateway.BitLen()), Role: allocator.RoleGateway})
	// Blocks the node already holds count as its own, whatever the keys say.
	for _, b := range current.Blocks {
		if p, err := netip.ParsePrefix(b.CIDR); err == nil {
			taken = append(taken, allocator.Allocation{Prefix: p.Masked(), Node: node, Role: allocator.RoleBlock})
		}
	}
	preferred := r.Sizes.Preferred(prefix)
	for _, lease := range leases {
		if slices.ContainsFunc(taken, func(t allocator.Allocation) bool { return t.Node == node && t.Prefix.Contains(lease) }) {
			continue // covered already
		}
		block, other := coverPick(lease, preferred, taken)
		if other != nil {
			continue // another node's block or the gateway: the agent names the conflict
		}
		if len(current.Blocks) >= r.Sizes.MaxPerNode {
			// Cover blocks count against the cap too (a release deletes a node's blocks in one
			// transaction): what is committed stays, the rest is named.
			return nil, exhausted(name, fmt.Sprintf("%s: node %s holds %d blocks, the most one node may hold (--max-blocks-per-node); lease %s and those after it are not covered",
				prefix, node, len(current.Blocks), lease))
		}
		taken = append(taken, allocator.Allocation{Prefix: block, Node: node, Role: allocator.RoleBlock})
		current.Blocks = append(current.Blocks, samplecrd.Block{CIDR: block.String(), ClaimedAt: metav1.Now(), Origin: samplecrd.BlockOriginCoversLeases})
		if dryRun {
			continue
		}
		stored, rev, err := r.commit(ctx, sn, netKey, objKey, objModRevision, current, block)
		if err != nil {
			return nil, err // a race: the caller reads again; blocks committed so far stay
		}
		current, objModRevision = stored, rev
	}
	return current, nil
}

// taken returns the allocations of the Network's block scope: every node's blocks and the gateway.
func (r *ClaimREST) taken(ctx context.Context, scope string) ([]allocator.Allocation, error) {
	var out []allocator.Allocation
	_, err := r.Blocks.Scan(ctx, r.Blocks.ScopePrefix(scope), 0, func(kv *mvccpb.KeyValue) error {
		if s := r.Blocks.Decode(kv); s.Corrupt == nil {
			out = append(out, s.Allocation)
		}
		return nil
	})
	if err != nil {
		return nil, networkstorage.StorageError(err)
	}
	return out, nil
}
