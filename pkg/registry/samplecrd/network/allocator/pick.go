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

package allocator

import (
	"context"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"slices"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pick returns a free /bits of pool for a Network about to be created: the lowest on the first
// attempt (so a dry run shows what a create would get), a random one of the lowest 32 on a
// retry after a lost race (so racing creates spread out). It claims nothing: the create's own
// transaction does. It returns an *ExhaustedError when the pool has no free prefix that long.
func (a *Allocator) Pick(ctx context.Context, scope string, pool netip.Prefix, bits, attempt int) (netip.Prefix, error) {
	pool = pool.Masked()
	if bits < pool.Bits() || bits > pool.Addr().BitLen() {
		return netip.Prefix{}, &ExhaustedError{Pool: pool, Bits: bits}
	}
	limit := 32
	if attempt == 0 {
		limit = 1
	}
	free, err := a.freeBlocks(ctx, scope, pool, bits, limit)
	if err != nil {
		return netip.Prefix{}, err
	}
	if len(free) == 0 {
		return netip.Prefix{}, &ExhaustedError{Pool: pool, Bits: bits}
	}
	return free[rand.IntN(len(free))], nil
}

// blockPickSpread is how many of the lowest free blocks PickBlock chooses among.
const blockPickSpread = 4

// PickBlock returns a free /bits of pool in scope for a node's block: a random one of the lowest
// blockPickSpread. Blocks fill a prefix from its low end, so its high end stays free the longest
// (where an administrator can still move the gateway), and nodes claiming at once still rarely
// pick the same; a claim that loses a race picks again. Nothing in scope may extend beyond pool.
// A block never holds an address of avoid (the Network's gateway, which has no key of its own
// when --gateway-keys=none). It returns an *ExhaustedError when no free /bits is left.
func (a *Allocator) PickBlock(ctx context.Context, scope string, pool netip.Prefix, bits int, avoid ...netip.Addr) (netip.Prefix, error) {
	pool = pool.Masked()
	if bits < pool.Bits() || bits > pool.Addr().BitLen() {
		return netip.Prefix{}, &ExhaustedError{Pool: pool, Bits: bits}
	}
	free, err := a.freeBlocksWithin(ctx, scope, pool, bits, blockPickSpread, true, avoid...)
	if err != nil {
		return netip.Prefix{}, err
	}
	if len(free) == 0 {
		return netip.Prefix{}, &ExhaustedError{Pool: pool, Bits: bits}
	}
	return free[rand.IntN(len(free))], nil
}

// freeBlocks returns up to limit free aligned /bits blocks of pool, lowest first.
func (a *Allocator) freeBlocks(ctx context.Context, scope string, pool netip.Prefix, bits, limit int) ([]netip.Prefix, error) {
	return a.freeBlocksWithin(ctx, scope, pool, bits, limit, false)
}

// freeBlocksWithin is freeBlocks; with within, nothing in scope extends beyond pool, so no
// container key is read. The addresses of avoid count as used.
func (a *Allocator) freeBlocksWithin(ctx context.Context, scope string, pool netip.Prefix, bits, limit int, within bool, avoid ...netip.Addr) ([]netip.Prefix, error) {
	s := a.spanOf(scope, pool)
	if within {
		s.containers = nil
	}
	// Allocations that contain the pool, then every allocation inside it (in address order): this
	// read is as long as the pool is full, which is what finding a gap in it takes.
	var reads []clientv3.Op
	for _, key := range s.containers {
		reads = append(reads, clientv3.OpGet(key))
	}
	reads = append(reads, clientv3.OpGet(s.key, clientv3.WithRange(s.end)))
	read, err := a.client.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, err
	}
	var used []netip.Prefix
	for _, r := range read.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			if _, p, err := decode(kv.Value); err == nil && p.Overlaps(pool) {
				used = append(used, p)
			}
		}
	}
	if len(avoid) > 0 {
		for _, ad := range avoid {
			if pool.Contains(ad) {
				used = append(used, netip.PrefixFrom(ad, ad.BitLen()))
			}
		}
		// The keys came in address order; the gaps below are found in that order.
		slices.SortFunc(used, func(x, y netip.Prefix) int { return x.Addr().Compare(y.Addr()) })
	}
	is4 := pool.Addr().Is4()
	size := new(big.Int).Lsh(big.NewInt(1), uint(pool.Addr().BitLen()-bits))
	next := addrToInt(pool.Addr()) // lowest address not yet known to be used
	poolEnd := addrToInt(lastAddr(pool))
	var free []netip.Prefix
	collect := func(gapEnd *big.Int) { // gapEnd is inclusive
		// First block boundary at or after next.
		start := new(big.Int).Add(next, new(big.Int).Sub(size, big.NewInt(1)))
		start.Div(start, size).Mul(start, size)
		for len(free) < limit {
			last := new(big.Int).Add(start, size)
			last.Sub(last, big.NewInt(1))
			if last.Cmp(gapEnd) > 0 {
				return
			}
			free = append(free, netip.PrefixFrom(intToAddr(start, is4), bits))
			start.Add(start, size)
		}
	}
	for _, u := range used {
		uStart, uEnd := addrToInt(u.Addr()), addrToInt(lastAddr(u))
		if uStart.Cmp(next) > 0 {
			collect(new(big.Int).Sub(uStart, big.NewInt(1)))
		}
		if uEnd.Cmp(next) >= 0 {
			next = new(big.Int).Add(uEnd, big.NewInt(1))
		}
		if len(free) >= limit {
			return free, nil
		}
	}
	if next.Cmp(poolEnd) <= 0 {
		collect(poolEnd)
	}
	return free, nil
}
