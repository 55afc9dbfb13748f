// Package allocator keeps the CIDRs of all Networks in etcd so that no two overlap, whatever the
// number of clients or server replicas racing to create them. Each allocation is one key named
// by its start address; a claim reads the allocations that could overlap and writes its own key
// in one transaction guarded by what it read, so two overlapping claims can never both succeed,
// while claims of disjoint ranges touch different keys and do not contend.
package allocator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterScope is the scope of allocations when overlap is forbidden across all namespaces.
// Namespace names cannot start with "_", so it never collides with a namespace scope.
const ClusterScope = "_cluster"

// maxAttempts bounds the retries of a claim whose guarded transaction lost a race.
const maxAttempts = 64

// Owner identifies the Network an allocation belongs to.
type Owner struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

func (o Owner) String() string { return o.Namespace + "/" + o.Name }

// record is the value stored for an allocation.
type record struct {
	CIDR  string `json:"cidr"`
	Owner `json:",inline"`
	// Claimed is when the claim was made (Unix seconds); repair leaves young records alone
	// because their create may still be in flight.
	Claimed int64 `json:"claimed"`
}

// Allocation is a stored allocation.
type Allocation struct {
	Prefix netip.Prefix
	Owner  Owner
}

// OverlapError says that a prefix overlaps an existing allocation.
type OverlapError struct {
	Prefix netip.Prefix
	Other  Allocation
}

func (e *OverlapError) Error() string {
	return fmt.Sprintf("%s overlaps network %s (%s)", e.Prefix, e.Other.Owner, e.Other.Prefix)
}

// ExhaustedError says that a pool has no free prefix of the requested length.
type ExhaustedError struct {
	Pool netip.Prefix
	Bits int
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("pool %s has no free /%d left", e.Pool, e.Bits)
}

// Allocator claims and releases prefixes in etcd under root.
type Allocator struct {
	client *clientv3.Client
	root   string
	now    func() time.Time
}

// New returns an allocator storing its keys under root (for example "/registry/samplecrd.k8s.io/allocations").
func New(client *clientv3.Client, root string) *Allocator {
	return &Allocator{client: client, root: root, now: time.Now}
}

func (a *Allocator) familyPrefix(scope string, p netip.Prefix) string {
	return a.root + "/" + scope + "/" + familyOf(p.Addr()) + "/"
}

func (a *Allocator) key(scope string, p netip.Prefix) string {
	return a.familyPrefix(scope, p) + addrHex(p.Addr())
}

func decode(kv []byte) (Allocation, error) {
	var r record
	if err := json.Unmarshal(kv, &r); err != nil {
		return Allocation{}, err
	}
	p, err := netip.ParsePrefix(r.CIDR)
	if err != nil {
		return Allocation{}, err
	}
	return Allocation{Prefix: p, Owner: r.Owner}, nil
}

// Claim records p for owner in scope. It returns an *OverlapError when p overlaps another
// Network's allocation. claimed is false when owner already held exactly p (nothing was written,
// so a failed create must not release it).
func (a *Allocator) Claim(ctx context.Context, scope string, p netip.Prefix, owner Owner) (claimed bool, err error) {
	return a.claim(ctx, scope, p, owner, false)
}

// Check reports, without writing, whether p could be claimed now (for dry runs).
func (a *Allocator) Check(ctx context.Context, scope string, p netip.Prefix, owner Owner) error {
	_, err := a.claim(ctx, scope, p, owner, true)
	return err
}

// containerKeys returns the keys at which an allocation containing p (and starting below it)
// would be stored: the distinct start addresses of p's shorter prefixes, one per 1 bit of p's
// address, so at most 32 for IPv4 and 127 for IPv6 (etcd's default --max-txn-ops is 128).
func (a *Allocator) containerKeys(scope string, p netip.Prefix) []string {
	var keys []string
	prev := p.Addr()
	for bits := p.Bits() - 1; bits >= 0; bits-- {
		q, _ := p.Addr().Prefix(bits)
		if q.Addr() != prev {
			keys = append(keys, a.key(scope, q))
			prev = q.Addr()
		}
	}
	return keys
}

func (a *Allocator) claim(ctx context.Context, scope string, p netip.Prefix, owner Owner, dryRun bool) (bool, error) {
	p = p.Masked()
	startKey := a.key(scope, p)
	endKey := a.familyPrefix(scope, p) + addrHex(lastAddr(p)) + "\x00" // exclusive end of the keys starting inside p
	containers := a.containerKeys(scope, p)
	value, err := json.Marshal(record{CIDR: p.String(), Owner: owner, Claimed: a.now().Unix()})
	if err != nil {
		return false, err
	}
	reads := []clientv3.Op{clientv3.OpGet(startKey, clientv3.WithRange(endKey), clientv3.WithLimit(1))}
	for _, key := range containers {
		reads = append(reads, clientv3.OpGet(key))
	}
	for range maxAttempts {
		// One consistent read: any allocation starting inside p, and those that could contain it.
		read, err := a.client.Txn(ctx).Then(reads...).Commit()
		if err != nil {
			return false, err
		}
		if inside := read.Responses[0].GetResponseRange().Kvs; len(inside) > 0 {
			return false, a.conflict(p, owner, inside[0].Value)
		}
		// The txn commits only if nothing starts inside p and every container key is as read.
		guards := []clientv3.Cmp{clientv3.Compare(clientv3.Version(startKey).WithRange(endKey), "=", 0)}
		for i, key := range containers {
			kvs := read.Responses[i+1].GetResponseRange().Kvs
			if len(kvs) == 0 {
				guards = append(guards, clientv3.Compare(clientv3.Version(key), "=", 0))
				continue
			}
			// A shorter prefix's start can hold a small allocation beside p (10.1.0.0/24 next to
			// 10.1.2.0/24); only one that contains p is a conflict.
			below, err := decode(kvs[0].Value)
			if err != nil {
				return false, fmt.Errorf("allocation %s is corrupt: %w", kvs[0].Key, err)
			}
			if below.Prefix.Overlaps(p) {
				return false, a.conflict(p, owner, kvs[0].Value)
			}
			guards = append(guards, clientv3.Compare(clientv3.ModRevision(key), "=", kvs[0].ModRevision))
		}
		if dryRun {
			return false, nil
		}
		resp, err := a.client.Txn(ctx).If(guards...).Then(clientv3.OpPut(startKey, string(value))).Commit()
		if err != nil {
			return false, err
		}
		if resp.Succeeded {
			return true, nil
		}
	}
	return false, fmt.Errorf("claiming %s: gave up after %d attempts lost to concurrent claims", p, maxAttempts)
}

// conflict builds the error for an overlap with the stored value; an allocation of the same
// owner and prefix is not a conflict (it is this Network's own, for example after a repair).
func (a *Allocator) conflict(p netip.Prefix, owner Owner, stored []byte) error {
	other, err := decode(stored)
	if err != nil {
		return fmt.Errorf("an allocation overlapping %s is corrupt: %w", p, err)
	}
	if other.Owner == owner && other.Prefix == p {
		return nil
	}
	return &OverlapError{Prefix: p, Other: other}
}

// Release removes owner's allocation of p, if it is still owner's.
func (a *Allocator) Release(ctx context.Context, scope string, p netip.Prefix, owner Owner) error {
	key := a.key(scope, p.Masked())
	resp, err := a.client.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return err
	}
	stored, err := decode(resp.Kvs[0].Value)
	if err == nil && stored.Owner != owner {
		return nil
	}
	_, err = a.client.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)).
		Then(clientv3.OpDelete(key)).Commit()
	return err
}

// Allocate claims a free /bits inside pool for owner and returns it. It returns an
// *ExhaustedError when the pool has no free prefix of that length.
func (a *Allocator) Allocate(ctx context.Context, scope string, pool netip.Prefix, bits int, owner Owner) (netip.Prefix, error) {
	pool = pool.Masked()
	if bits < pool.Bits() || bits > pool.Addr().BitLen() {
		return netip.Prefix{}, &ExhaustedError{Pool: pool, Bits: bits}
	}
	for range maxAttempts {
		candidates, err := a.freeBlocks(ctx, scope, pool, bits, 32)
		if err != nil {
			return netip.Prefix{}, err
		}
		if len(candidates) == 0 {
			return netip.Prefix{}, &ExhaustedError{Pool: pool, Bits: bits}
		}
		// A random pick among the first free blocks keeps racing allocators apart.
		p := candidates[rand.IntN(len(candidates))]
		if _, err := a.Claim(ctx, scope, p, owner); err == nil {
			return p, nil
		} else if !errors.As(err, new(*OverlapError)) {
			return netip.Prefix{}, err
		}
	}
	return netip.Prefix{}, fmt.Errorf("allocating a /%d from %s: gave up after %d attempts lost to concurrent claims", bits, pool, maxAttempts)
}

// Peek returns a free /bits of pool without claiming it (for dry runs).
func (a *Allocator) Peek(ctx context.Context, scope string, pool netip.Prefix, bits int) (netip.Prefix, error) {
	pool = pool.Masked()
	free, err := a.freeBlocks(ctx, scope, pool, bits, 1)
	if err != nil {
		return netip.Prefix{}, err
	}
	if len(free) == 0 || bits < pool.Bits() {
		return netip.Prefix{}, &ExhaustedError{Pool: pool, Bits: bits}
	}
	return free[0], nil
}

// freeBlocks returns up to limit free aligned /bits blocks of pool, lowest first.
func (a *Allocator) freeBlocks(ctx context.Context, scope string, pool netip.Prefix, bits, limit int) ([]netip.Prefix, error) {
	startKey := a.key(scope, pool)
	endKey := a.familyPrefix(scope, pool) + addrHex(lastAddr(pool)) + "\x00"
	// Allocations that contain the pool, then every allocation inside it (in address order): this
	// read is as long as the pool is full, which is what finding a gap in it takes.
	var reads []clientv3.Op
	for _, key := range a.containerKeys(scope, pool) {
		reads = append(reads, clientv3.OpGet(key))
	}
	reads = append(reads, clientv3.OpGet(startKey, clientv3.WithRange(endKey)))
	read, err := a.client.Txn(ctx).Then(reads...).Commit()
	if err != nil {
		return nil, err
	}
	var used []netip.Prefix
	for _, r := range read.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			if al, err := decode(kv.Value); err == nil && al.Prefix.Overlaps(pool) {
				used = append(used, al.Prefix)
			}
		}
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

// Desired is an allocation that a stored Network needs.
type Desired struct {
	Scope  string
	Prefix netip.Prefix
	Owner  Owner
}

// RepairResult counts what Repair changed.
type RepairResult struct {
	Restored, Removed int
	// Overlaps are stored Networks whose prefix overlaps another's allocation (possible only when
	// data predates the allocator or the overlap scope was widened); they are left as they are.
	Overlaps []error
}

// Repair makes the allocations match the stored Networks: it restores missing allocations and
// removes those of Networks that no longer exist, unless they are younger than grace (their
// create may still be in flight on some replica).
func (a *Allocator) Repair(ctx context.Context, desired []Desired, grace time.Duration) (RepairResult, error) {
	var result RepairResult
	want := make(map[string]Owner, len(desired))
	for _, d := range desired {
		want[a.key(d.Scope, d.Prefix.Masked())] = d.Owner
	}
	resp, err := a.client.Get(ctx, a.root+"/", clientv3.WithPrefix())
	if err != nil {
		return result, err
	}
	have := make(map[string]bool, len(resp.Kvs))
	cutoff := a.now().Add(-grace).Unix()
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		var r record
		corrupt := json.Unmarshal(kv.Value, &r) != nil
		if owner, ok := want[key]; ok && !corrupt && owner == r.Owner {
			have[key] = true
			continue
		}
		if !corrupt && r.Claimed > cutoff {
			continue
		}
		del, err := a.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", kv.ModRevision)).Then(clientv3.OpDelete(key)).Commit()
		if err != nil {
			return result, err
		}
		if del.Succeeded {
			result.Removed++
		}
	}
	for _, d := range desired {
		if have[a.key(d.Scope, d.Prefix.Masked())] {
			continue
		}
		claimed, err := a.Claim(ctx, d.Scope, d.Prefix, d.Owner)
		var overlap *OverlapError
		switch {
		case errors.As(err, &overlap):
			result.Overlaps = append(result.Overlaps, fmt.Errorf("network %s: %w", d.Owner, err))
		case err != nil:
			return result, err
		case claimed:
			result.Restored++
		}
	}
	return result, nil
}
