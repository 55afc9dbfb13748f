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
	return a.familyPrefix(scope, p) + addrKey(p.Addr())
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

func (a *Allocator) claim(ctx context.Context, scope string, p netip.Prefix, owner Owner, dryRun bool) (bool, error) {
	p = p.Masked()
	family := a.familyPrefix(scope, p)
	startKey := a.key(scope, p)
	// Keys run from high addresses to low (keys.go): those of allocations starting inside p are
	// [lowKey, startKey], and the first key after startKey is the nearest allocation below p.
	lowKey := family + addrKey(lastAddr(p))
	familyEnd := clientv3.GetPrefixRangeEnd(family)
	value, err := json.Marshal(record{CIDR: p.String(), Owner: owner, Claimed: a.now().Unix()})
	if err != nil {
		return false, err
	}
	for range maxAttempts {
		// One read of one key: an allocation starting inside p if there is one (a conflict),
		// otherwise the nearest one below p. Prefixes are nested or disjoint, so that one overlaps
		// p exactly when it contains p.
		read, err := a.client.Get(ctx, lowKey, clientv3.WithRange(familyEnd), clientv3.WithLimit(1))
		if err != nil {
			return false, err
		}
		guards := []clientv3.Cmp{}
		gapEnd := familyEnd
		if len(read.Kvs) > 0 {
			kv := read.Kvs[0]
			if string(kv.Key) <= startKey {
				return false, a.conflict(p, owner, kv.Value)
			}
			below, err := decode(kv.Value)
			if err != nil {
				return false, fmt.Errorf("allocation %s is corrupt: %w", kv.Key, err)
			}
			if below.Prefix.Overlaps(p) {
				return false, a.conflict(p, owner, kv.Value)
			}
			guards = append(guards, clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision))
			gapEnd = string(kv.Key)
		}
		if dryRun {
			return false, nil
		}
		// Nothing may have appeared between the end of p and that allocation since the read.
		guards = append(guards, clientv3.Compare(clientv3.Version(lowKey).WithRange(gapEnd), "=", 0))
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

// freeBlocksPage is how many allocations freeBlocks reads at a time.
const freeBlocksPage = 256

// freeBlocks returns up to limit free aligned /bits blocks of pool, highest first. It reads the
// pool's allocations from the top down, a page at a time (all at one revision), and stops as soon
// as it has found limit blocks, so a sparse pool costs one short read however full others are.
func (a *Allocator) freeBlocks(ctx context.Context, scope string, pool netip.Prefix, bits, limit int) ([]netip.Prefix, error) {
	family := a.familyPrefix(scope, pool)
	from := family + addrKey(lastAddr(pool))
	insideEnd := a.key(scope, pool) + "\x00" // exclusive end of the keys starting inside pool
	is4 := pool.Addr().Is4()
	one := big.NewInt(1)
	size := new(big.Int).Lsh(one, uint(pool.Addr().BitLen()-bits))
	bottom := addrToInt(pool.Addr())
	top := addrToInt(lastAddr(pool)) // highest address not yet known to be used
	var free []netip.Prefix
	// collect adds the aligned blocks inside [bottom, top], from the highest down.
	collect := func(bottom *big.Int) {
		b := new(big.Int).Add(top, one)
		b.Div(b, size).Mul(b, size).Sub(b, size)
		for ; len(free) < limit && b.Cmp(bottom) >= 0; b.Sub(b, size) {
			free = append(free, netip.PrefixFrom(intToAddr(b, is4), bits))
		}
	}
	// use marks u as used: the addresses above it are free, the search goes on below it.
	use := func(u netip.Prefix) {
		if end := addrToInt(lastAddr(u)); end.Cmp(top) < 0 {
			collect(new(big.Int).Add(end, one))
		}
		if start := new(big.Int).Sub(addrToInt(u.Addr()), one); start.Cmp(top) < 0 {
			top = start
		}
	}
	var rev int64
	for len(free) < limit {
		opts := []clientv3.OpOption{clientv3.WithRange(insideEnd), clientv3.WithLimit(freeBlocksPage)}
		if rev != 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		page, err := a.client.Get(ctx, from, opts...)
		if err != nil {
			return nil, err
		}
		rev = page.Header.Revision
		for _, kv := range page.Kvs {
			if al, err := decode(kv.Value); err == nil && al.Prefix.Overlaps(pool) {
				use(al.Prefix)
			}
		}
		if !page.More || len(page.Kvs) == 0 {
			break
		}
		from = string(page.Kvs[len(page.Kvs)-1].Key) + "\x00"
	}
	if len(free) >= limit {
		return free[:limit], nil
	}
	// The nearest allocation below the pool covers its bottom if it contains the pool.
	below, err := a.client.Get(ctx, insideEnd, clientv3.WithRange(clientv3.GetPrefixRangeEnd(family)),
		clientv3.WithLimit(1), clientv3.WithRev(rev))
	if err != nil {
		return nil, err
	}
	for _, kv := range below.Kvs {
		if al, err := decode(kv.Value); err == nil && al.Prefix.Overlaps(pool) {
			use(al.Prefix)
		}
	}
	if top.Cmp(bottom) >= 0 {
		collect(bottom)
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
