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
	"math/big"
	"net/netip"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Reasons of a node's entry about its blocks.
const (
	// ReasonAddressesExhausted: the node needs a block (its first, or another because its free
	// addresses ran low) and the Network has none left. The API's name, from which the server
	// derives the Network's AddressesExhausted condition. The entry is not ready when the node
	// has no address free; with some still free it stays ready and carries the reason.
	ReasonAddressesExhausted = samplecrd.ReasonAddressesExhausted
	// ReasonReconciling: the node's first block is being claimed (no configuration yet).
	ReasonReconciling = "Reconciling"
)

// DefaultMinFreeAddresses is how many free addresses a node keeps in its blocks of a Network:
// below that it claims another block.
const DefaultMinFreeAddresses = 16

// blockView is what the node holds of a Network's blocks and how much of them is in use.
type blockView struct {
	blocks []netip.Prefix
	// failure, when set, is why the node lacks a block it needs (the claim's error).
	failure error
	// legacy: the node holds no block yet but host-local holds leases from the whole-prefix
	// configuration, which it keeps until they are covered (blocks is nil).
	legacy bool
	// conflict, when set, names leases of this node inside other nodes' blocks.
	conflict error
}

// cidrs are the blocks as strings, for the entry.
func (v blockView) cidrs() []string {
	out := make([]string, 0, len(v.blocks))
	for _, b := range v.blocks {
		out = append(out, b.String())
	}
	return out
}

// nodeAllocation returns this node's BlockAllocation of n as the controller knows it: the
// informer's object, or the answer of a claim when that holds more blocks (the informer has not
// seen the claim yet). nil when the node holds none.
func (c *Controller) nodeAllocation(n *v1.Network) *v1.BlockAllocation {
	// By name, not a list of the namespace: that made every reconcile O(BlockAllocations).
	var found *v1.BlockAllocation
	o, err := c.blockLister.BlockAllocations(n.Namespace).Get(samplecrd.BlockAllocationName(n.Name, c.opts.NodeName))
	if err == nil && o.Network == n.Name && o.NodeName == c.opts.NodeName && o.NetworkUID == string(n.UID) {
		found = o
	}
	key := n.Namespace + "/" + n.Name
	c.claimedMu.Lock()
	defer c.claimedMu.Unlock()
	if claimed := c.claimed[key]; claimed != nil {
		switch {
		case claimed.NetworkUID != string(n.UID):
			delete(c.claimed, key)
		case found == nil || len(claimed.Blocks) > len(found.Blocks):
			return claimed
		default:
			delete(c.claimed, key) // the informer caught up
		}
	}
	return found
}

// blocksOf parses an allocation's blocks, keeping those inside prefix.
func blocksOf(a *v1.BlockAllocation, prefix netip.Prefix) []netip.Prefix {
	out := []netip.Prefix{}
	if a == nil {
		return out
	}
	for _, b := range a.Blocks {
		p, err := netip.ParsePrefix(b.CIDR)
		if err != nil || !prefix.Contains(p.Addr()) || p.Bits() < prefix.Bits() {
			continue
		}
		out = append(out, p.Masked())
	}
	return out
}

// claim asks the server for one more block of n for this node and remembers the answer.
func (c *Controller) claim(ctx context.Context, n *v1.Network) (*v1.BlockAllocation, error) {
	return c.claimWith(ctx, n, &v1.BlockClaim{NodeName: c.opts.NodeName})
}

// claimWith posts claim for n and remembers the answer.
func (c *Controller) claimWith(ctx context.Context, n *v1.Network, claim *v1.BlockClaim) (*v1.BlockAllocation, error) {
	if c.nodeStatus().deleted {
		// A node whose Node is gone keeps what it holds while pods may use it, and takes no more:
		// its blocks are released once it reports no leases.
		return nil, netbackend.Errorf(ReasonNodeDeleted, "node %s's Node is deleted: it claims no address block", c.opts.NodeName)
	}
	// The allocation's watch event may arrive before the answer: while the claim is in flight
	// the event is the claim's own (enqueueAllocationChange).
	key := n.Namespace + "/" + n.Name
	c.claimedMu.Lock()
	c.claiming[key]++
	c.claimedMu.Unlock()
	a, err := c.client.SamplecrdV1().Networks(n.Namespace).ClaimBlocks(ctx, n.Name, claim, metav1.CreateOptions{})
	c.claimedMu.Lock()
	if c.claiming[key]--; c.claiming[key] <= 0 {
		delete(c.claiming, key)
	}
	c.claimedMu.Unlock()
	if err != nil {
		return nil, claimError(n, err)
	}
	c.claimedMu.Lock()
	c.claimed[n.Namespace+"/"+n.Name] = a
	c.claimedMu.Unlock()
	klog.FromContext(ctx).Info("Claimed an address block", "network", klog.KObj(n), "blocks", len(a.Blocks))
	return a, nil
}

// claimError gives a failed claim its entry reason: AddressesExhausted (no block left) or
// WaitingForUpgrade (other nodes still on the whole prefix) with the server's message, else
// Reconciling (retried).
func claimError(n *v1.Network, err error) error {
	if status, ok := err.(apierrors.APIStatus); ok {
		switch reason := string(status.Status().Reason); reason {
		case ReasonAddressesExhausted, ReasonWaitingForUpgrade:
			return netbackend.Errorf(reason, "%s", status.Status().Message)
		}
	}
	return netbackend.Errorf(ReasonReconciling, "claiming an address block of %s/%s: %v", n.Namespace, n.Name, err)
}

// firstBlocks returns the node's blocks of n, claiming the first one when it holds none. With
// none (the claim failed), the view's blocks are empty but not nil: no configuration is written.
func (c *Controller) firstBlocks(ctx context.Context, n *v1.Network, prefix netip.Prefix) blockView {
	a := c.nodeAllocation(n)
	if blocks := blocksOf(a, prefix); len(blocks) > 0 {
		return blockView{blocks: blocks}
	}
	a, err := c.claim(ctx, n)
	if err != nil {
		return blockView{blocks: []netip.Prefix{}, failure: err}
	}
	blocks := blocksOf(a, prefix)
	if len(blocks) == 0 {
		return blockView{blocks: blocks, failure: netbackend.Errorf(ReasonReconciling, "the claim answered no block of %s inside %s", n.Name, prefix)}
	}
	return blockView{blocks: blocks}
}

// headroomRefusal is the state at which the server last refused a headroom claim of a Network
// (no block left) while the node still had free addresses: the claim is not repeated while that
// state lasts, so a small or nearly full Network costs no claim request per reconcile.
type headroomRefusal struct {
	uid    string
	blocks string // the node's blocks
	free   int64
	// others are the other nodes' blocks as their entries report them: a block they release
	// may be claimed, so a change tries again.
	others string
	// notice is what the node's entry says meanwhile (ready, reason AddressesExhausted).
	notice error
}

// keepHeadroom claims another block when fewer than MinFreeAddresses of the node's blocks are
// free. used is the larger of the leases inside the blocks and the attached ports (a port is
// attached before its address is leased). It reports whether a block was added.
//
// A claim the server refuses for want of a block (AddressesExhausted) while the node still has
// free addresses is no failure: pods still get addresses. It is returned as notice, which the
// entry carries as its reason while staying ready, and it is not tried again until the node's
// blocks, its free addresses or the other nodes' blocks change. Any other failed claim, and a
// refusal with no address free, is returned as err: the entry is not ready.
func (c *Controller) keepHeadroom(ctx context.Context, n *v1.Network, prefix netip.Prefix, gateway netip.Addr, v blockView, leases []string, ports int) (added bool, notice, err error) {
	key := n.Namespace + "/" + n.Name
	free := freeAddresses(v.blocks, prefix, gateway, leases, ports)
	if free >= int64(c.opts.MinFreeAddresses) || c.nodeStatus().deleted {
		c.forgetRefusal(key)
		return false, nil, nil
	}
	at := headroomRefusal{uid: string(n.UID), blocks: strings.Join(v.cidrs(), ","), free: free, others: c.othersBlocksOf(n)}
	c.claimedMu.Lock()
	last, refused := c.refused[key]
	c.claimedMu.Unlock()
	if refused && free > 0 && last.uid == at.uid && last.blocks == at.blocks && last.free == at.free && last.others == at.others {
		klog.FromContext(ctx).V(4).Info("Free addresses below the threshold; no block was left at the last claim and nothing changed since",
			"network", klog.KObj(n), "free", free, "min", c.opts.MinFreeAddresses)
		return false, last.notice, nil
	}
	klog.FromContext(ctx).V(2).Info("Free addresses below the threshold; claiming another block",
		"network", klog.KObj(n), "free", free, "min", c.opts.MinFreeAddresses)
	_, err = c.claim(ctx, n)
	if err != nil && free > 0 && netbackend.ReasonOf(err) == ReasonAddressesExhausted {
		var total int64
		for _, b := range v.blocks {
			total += usable(b, prefix, gateway)
		}
		// The message names no count that changes with the leases: a change of the counts
		// alone stays a count change of the entry (coalesce.go).
		at.notice = netbackend.Errorf(ReasonAddressesExhausted,
			"%s: node %s has fewer free addresses than its headroom of %d (--min-free-addresses) and no address block is left to claim; "+
				"it stays ready while its blocks' %d usable addresses are not all in use",
			prefix, c.opts.NodeName, c.opts.MinFreeAddresses, total)
		c.claimedMu.Lock()
		c.refused[key] = at
		c.claimedMu.Unlock()
		klog.FromContext(ctx).V(2).Info("No block left for headroom; the node stays ready while it has free addresses",
			"network", klog.KObj(n), "free", free, "min", c.opts.MinFreeAddresses, "err", err)
		return false, at.notice, nil
	}
	c.forgetRefusal(key)
	if err != nil {
		return false, nil, err
	}
	return true, nil, nil
}

// othersBlocksOf lists the blocks the other nodes' entries of n report.
func (c *Controller) othersBlocksOf(n *v1.Network) string {
	var b strings.Builder
	for _, e := range n.Status.Nodes {
		if e.NodeName == c.opts.NodeName || len(e.Blocks) == 0 {
			continue
		}
		b.WriteString(e.NodeName)
		b.WriteByte('=')
		b.WriteString(strings.Join(e.Blocks, ","))
		b.WriteByte(';')
	}
	return b.String()
}

// forgetRefusal drops the remembered refusal of a headroom claim of key.
func (c *Controller) forgetRefusal(key string) {
	c.claimedMu.Lock()
	defer c.claimedMu.Unlock()
	delete(c.refused, key)
}

// freeAddresses counts the addresses host-local can still hand out from blocks.
func freeAddresses(blocks []netip.Prefix, prefix netip.Prefix, gateway netip.Addr, leases []string, ports int) int64 {
	var total int64
	for _, b := range blocks {
		total += usable(b, prefix, gateway)
	}
	leased := 0
	for _, l := range leases {
		ip, err := netip.ParseAddr(l)
		if err != nil {
			continue
		}
		for _, b := range blocks {
			if b.Contains(ip) {
				leased++
				break
			}
		}
	}
	return total - int64(max(leased, ports))
}

// usable is the number of addresses of block host-local hands out: the block without the
// prefix's network and broadcast addresses and the gateway (capped for huge IPv6 blocks).
func usable(block, prefix netip.Prefix, gateway netip.Addr) int64 {
	host := block.Addr().BitLen() - block.Bits()
	if host > 40 {
		return 1 << 40
	}
	n := int64(1) << host
	first := block.Masked().Addr()
	last := lastAddr(block)
	if first == prefix.Masked().Addr() {
		n--
	}
	if prefix.Addr().Is4() && last == lastAddr(prefix) {
		n--
	}
	if block.Contains(gateway) {
		n--
	}
	return max(n, 0)
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	v := new(big.Int).SetBytes(b)
	host := p.Addr().BitLen() - p.Bits()
	v.Or(v, new(big.Int).Sub(new(big.Int).Lsh(big.NewInt(1), uint(host)), big.NewInt(1)))
	out := make([]byte, len(b))
	v.FillBytes(out)
	a, _ := netip.AddrFromSlice(out)
	return a
}

// enqueueAllocation queues the Network of a BlockAllocation of this node.
func (c *Controller) enqueueAllocation(obj interface{}) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	a, ok := obj.(*v1.BlockAllocation)
	if !ok || a.NodeName != c.opts.NodeName {
		return
	}
	c.queue.Add(a.Namespace + "/" + a.Network)
}

// enqueueAllocationChange is enqueueAllocation for an added or updated allocation, except the
// node's own claim coming back: the sync that claimed has realised the claim's answer already
// (and a headroom claim queues its Network itself), so reconciling again finds nothing to do.
// With 1000 Networks created at once that second reconcile was half of the node's work.
func (c *Controller) enqueueAllocationChange(obj interface{}) {
	if a, ok := obj.(*v1.BlockAllocation); ok && a.NodeName == c.opts.NodeName {
		key := a.Namespace + "/" + a.Network
		c.claimedMu.Lock()
		claimed, inFlight := c.claimed[key], c.claiming[key] > 0
		c.claimedMu.Unlock()
		if inFlight {
			return // the claiming sync realises the answer
		}
		if claimed != nil && claimed.NetworkUID == a.NetworkUID && slices.EqualFunc(claimed.Blocks, a.Blocks, func(x, y v1.Block) bool { return x.CIDR == y.CIDR }) {
			return
		}
	}
	c.enqueueAllocation(obj)
}
