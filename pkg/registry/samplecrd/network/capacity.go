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
	"math/big"
	"net/netip"
	"slices"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// deriveCapacity sets status.capacity and every entry's capacity from spec.cidr, spec.gateway
// and the entries' blocks and leases, replacing whatever a client sent: the counts follow what
// the nodes report and nothing else, so they are right after a restart of anything, a node's
// entry going and a block coming. Without a valid spec.cidr (a prefix not yet allocated) there
// is no capacity.
//
// Counts are math/big integers printed in base 10: exact for any prefix.
//   - total: the prefix's addresses minus its network address, its IPv4 broadcast address and the
//     gateway (the addresses host-local never hands out); 0 for a prefix with none left.
//   - allocated: the union of the entries' blocks, clipped to the prefix, minus those same
//     addresses where they fall inside; a block two entries report is counted once.
//   - used: the sum of the entries' leases. An entry without leases is unknown, not zero: used
//     and available are then left empty and nodesWithoutLeases counts such entries. An entry
//     whose controller cannot run (ControllerUnavailable) realises nothing, so has no leases and
//     counts as zero.
//   - available: total - used, never below zero.
func deriveCapacity(n *samplecrd.Network) {
	prefix, err := netip.ParsePrefix(n.Spec.CIDR)
	if err != nil {
		n.Status.Capacity = nil
		for i := range n.Status.Nodes {
			n.Status.Nodes[i].Capacity = nil
		}
		return
	}
	prefix = prefix.Masked()
	gateway, _ := netip.ParseAddr(n.Spec.Gateway)
	reserved := reservedAddrs(prefix, gateway)

	capacity := &samplecrd.NetworkCapacity{}
	total := prefixSize(prefix)
	total.Sub(total, big.NewInt(int64(len(reserved))))
	if total.Sign() < 0 {
		total.SetInt64(0)
	}
	capacity.Total = total.String()

	var all []interval
	used := new(big.Int)
	for i := range n.Status.Nodes {
		node := &n.Status.Nodes[i]
		blocks := blockIntervals(prefix, node.Blocks)
		all = append(all, blocks...)
		nc := &samplecrd.NodeCapacity{Allocated: countUsable(blocks, reserved).String()}
		switch {
		case node.Leases != nil:
			nc.Used = big.NewInt(int64(*node.Leases)).String()
			used.Add(used, big.NewInt(int64(*node.Leases)))
		case samplecrd.ControllerUnavailable(node.Reason):
		default:
			capacity.NodesWithoutLeases++
		}
		node.Capacity = nc
	}
	capacity.Allocated = countUsable(all, reserved).String()
	if capacity.NodesWithoutLeases == 0 {
		capacity.Used = used.String()
		available := new(big.Int).Sub(total, used)
		if available.Sign() < 0 {
			available.SetInt64(0)
		}
		capacity.Available = available.String()
	}
	n.Status.Capacity = capacity
}

// interval is a closed range of addresses as integers.
type interval struct{ lo, hi *big.Int }

func addrInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

// prefixSize is the number of addresses of p: 2^(bits of the family - prefix length).
func prefixSize(p netip.Prefix) *big.Int {
	return new(big.Int).Lsh(big.NewInt(1), uint(p.Addr().BitLen()-p.Bits()))
}

func prefixInterval(p netip.Prefix) interval {
	lo := addrInt(p.Masked().Addr())
	hi := new(big.Int).Add(lo, prefixSize(p))
	return interval{lo, hi.Sub(hi, big.NewInt(1))}
}

// reservedAddrs are the addresses of prefix no pod gets: the network address, the IPv4
// broadcast address and the gateway (when it is another address inside prefix), each once.
func reservedAddrs(prefix netip.Prefix, gateway netip.Addr) []*big.Int {
	whole := prefixInterval(prefix)
	reserved := []*big.Int{whole.lo}
	if prefix.Addr().Is4() && whole.hi.Cmp(whole.lo) != 0 {
		reserved = append(reserved, whole.hi)
	}
	if gateway.IsValid() && prefix.Contains(gateway) {
		g := addrInt(gateway)
		if !slices.ContainsFunc(reserved, func(r *big.Int) bool { return r.Cmp(g) == 0 }) {
			reserved = append(reserved, g)
		}
	}
	return reserved
}

// blockIntervals returns the parts of blocks inside prefix; blocks that do not parse, are of the
// other family or lie outside prefix give nothing (validation refuses them on write).
func blockIntervals(prefix netip.Prefix, blocks []string) []interval {
	whole := prefixInterval(prefix)
	var out []interval
	for _, b := range blocks {
		p, err := netip.ParsePrefix(b)
		if err != nil || p.Addr().Is4() != prefix.Addr().Is4() || !p.Overlaps(prefix) {
			continue
		}
		iv := prefixInterval(p)
		if iv.lo.Cmp(whole.lo) < 0 {
			iv.lo = whole.lo
		}
		if iv.hi.Cmp(whole.hi) > 0 {
			iv.hi = whole.hi
		}
		out = append(out, iv)
	}
	return out
}

// countUsable is the number of addresses in the union of ivs that are not reserved.
func countUsable(ivs []interval, reserved []*big.Int) *big.Int {
	ivs = slices.Clone(ivs)
	slices.SortFunc(ivs, func(a, b interval) int { return a.lo.Cmp(b.lo) })
	one := big.NewInt(1)
	count := new(big.Int)
	var merged []interval
	for _, iv := range ivs {
		if last := len(merged) - 1; last >= 0 && iv.lo.Cmp(new(big.Int).Add(merged[last].hi, one)) <= 0 {
			if iv.hi.Cmp(merged[last].hi) > 0 {
				merged[last].hi = iv.hi
			}
			continue
		}
		merged = append(merged, interval{iv.lo, iv.hi})
	}
	for _, iv := range merged {
		count.Add(count, new(big.Int).Sub(iv.hi, iv.lo))
		count.Add(count, one)
		for _, r := range reserved {
			if r.Cmp(iv.lo) >= 0 && r.Cmp(iv.hi) <= 0 {
				count.Sub(count, one)
			}
		}
	}
	return count
}
