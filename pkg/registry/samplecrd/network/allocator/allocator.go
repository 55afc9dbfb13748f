// Package allocator keeps the CIDRs of all Networks in etcd so that no two overlap, whatever the
// number of clients or server replicas racing to create them. Each allocation is one key named
// by its start address, written in the same etcd transaction as its Network and guarded by
// everything that could overlap it; it is deleted in the same transaction as its Network. So at
// every etcd revision the allocations are exactly the stored Networks, and two overlapping
// creates can never both commit, while creates of disjoint ranges touch different keys and do
// not contend.
package allocator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ClusterScope is the scope of allocations when overlap is forbidden across all namespaces.
// Namespace names cannot start with "_", so it never collides with a namespace scope.
const ClusterScope = "_cluster"

// maxAttempts bounds the retries of a write whose guard lost a race to a write beside it.
const maxAttempts = 64

// ErrObjectExists says that a create found its object's key taken.
var ErrObjectExists = errors.New("the object already exists")

// ErrObjectChanged says that a repair found the Network it was repairing deleted or replaced.
var ErrObjectChanged = errors.New("the network was deleted or replaced meanwhile")

// Owner identifies the Network incarnation an allocation belongs to: a Network deleted and
// created again under the same name has another UID, and so is another owner.
type Owner struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

func (o Owner) String() string { return o.Namespace + "/" + o.Name }

// record is the value stored for an allocation. Its encoding is deterministic, so that a delete
// can compare the stored value with the one its Network implies.
type record struct {
	CIDR string `json:"cidr"`
	Owner
}

// Allocation is one Network's prefix in its scope.
type Allocation struct {
	Scope  string
	Prefix netip.Prefix
	Owner  Owner
}

// Stored is an allocation as read from etcd.
type Stored struct {
	Allocation
	Key         string
	ModRevision int64
	// Corrupt is set when the value cannot be decoded; Allocation then holds only the scope.
	Corrupt error
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

// Allocator writes and removes allocations in etcd under root, together with their Networks.
type Allocator struct {
	client *clientv3.Client
	root   string
	// seen remembers the ModRevision this allocator last saw at allocation keys (0: absent), as
	// the first guess of the next guard that covers them. It is only a guess: the guard compares
	// it with etcd, and a wrong guess costs one more round trip, never correctness. Without it,
	// densely packed prefixes (a /28 next to another at a shorter prefix's start) would pay a
	// failed transaction on every create.
	seen revisions
}

// revisions is a bounded map of allocation keys to the ModRevision and prefix last seen there,
// safe for concurrent use.
type revisions struct {
	mu sync.Mutex
	m  map[string]seenAt
}

type seenAt struct {
	rev    int64
	prefix netip.Prefix
}

// maxSeen bounds the revisions remembered; past it the map starts again empty.
const maxSeen = 1 << 16

// guess returns the ModRevision to guard key with for a write of p: the one last seen there if
// what was there does not overlap p, else 0 ("absent"), which fails if it is still there and so
// makes the transaction read the truth. A ModRevision guard must never stand for an allocation
// that overlaps p: it would let the write through.
func (r *revisions) guess(key string, p netip.Prefix) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if at, ok := r.m[key]; ok && !at.prefix.Overlaps(p) {
		return at.rev
	}
	return 0
}

func (r *revisions) set(key string, rev int64, p netip.Prefix) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxSeen {
		r.m = make(map[string]seenAt)
	}
	if rev == 0 {
		delete(r.m, key)
		return
	}
	r.m[key] = seenAt{rev: rev, prefix: p}
}

// New returns an allocator storing its keys under root (for example "/registry/samplecrd.k8s.io/allocations").
func New(client *clientv3.Client, root string) *Allocator {
	return &Allocator{client: client, root: strings.TrimSuffix(root, "/")}
}

// Root is the key prefix of every allocation, ending in "/".
func (a *Allocator) Root() string { return a.root + "/" }

func (a *Allocator) familyPrefix(scope string, p netip.Prefix) string {
	return a.root + "/" + scope + "/" + familyOf(p.Addr()) + "/"
}

// Key is where an allocation of p in scope is stored.
func (a *Allocator) Key(scope string, p netip.Prefix) string {
	return a.familyPrefix(scope, p) + addrHex(p.Masked().Addr())
}

// Value is what is stored for an allocation.
func Value(al Allocation) string {
	b, err := json.Marshal(record{CIDR: al.Prefix.Masked().String(), Owner: al.Owner})
	if err != nil {
		panic(err) // strings only
	}
	return string(b)
}

func decode(value []byte) (record, netip.Prefix, error) {
	var r record
	if err := json.Unmarshal(value, &r); err != nil {
		return r, netip.Prefix{}, err
	}
	p, err := netip.ParsePrefix(r.CIDR)
	return r, p, err
}

// span is what a write of an allocation must be guarded by.
type span struct {
	key, end string
	// containers are the keys at which an allocation containing the prefix (and starting below
	// it) would be stored.
	containers []string
}

// spanOf returns the guard keys of p in scope: the range of keys starting inside p (its own
// key first), and one key per distinct start address of p's shorter prefixes (at most 31 for
// IPv4 and 127 for IPv6; etcd's default --max-txn-ops is 128 per list, and Networks are at most
// /126, so every guard fits).
func (a *Allocator) spanOf(scope string, p netip.Prefix) span {
	p = p.Masked()
	s := span{key: a.Key(scope, p), end: a.familyPrefix(scope, p) + addrHex(lastAddr(p)) + "\x00"}
	prev := p.Addr()
	for bits := p.Bits() - 1; bits >= 0; bits-- {
		q, _ := p.Addr().Prefix(bits)
		if q.Addr() != prev {
			s.containers = append(s.containers, a.Key(scope, q))
			prev = q.Addr()
		}
	}
	return s
}

// reads are the reads that tell whether p is free: the first key inside it and the containers.
func (s span) reads() []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpGet(s.key, clientv3.WithRange(s.end), clientv3.WithLimit(1))}
	for _, k := range s.containers {
		ops = append(ops, clientv3.OpGet(k))
	}
	return ops
}

// conflict returns the overlap the reads of s show for al, or, when nothing overlaps, the
// ModRevision each container key had (0: absent) and the prefix stored there.
func (a *Allocator) conflict(al Allocation, s span, rs []*etcdserverpb.ResponseOp) ([]int64, []netip.Prefix, error) {
	if inside := rs[0].GetResponseRange().Kvs; len(inside) > 0 {
		return nil, nil, a.overlapWith(al, inside[0])
	}
	revs := make([]int64, len(s.containers))
	prefixes := make([]netip.Prefix, len(s.containers))
	for i := range s.containers {
		kvs := rs[i+1].GetResponseRange().Kvs
		if len(kvs) == 0 {
			continue
		}
		// A shorter prefix's start can hold a small allocation beside p (10.1.0.0/24 next to
		// 10.1.2.0/24); only one that contains p is a conflict.
		_, other, err := decode(kvs[0].Value)
		if err != nil {
			return nil, nil, fmt.Errorf("allocation %s is corrupt: %w", kvs[0].Key, err)
		}
		if other.Overlaps(al.Prefix) {
			return nil, nil, a.overlapWith(al, kvs[0])
		}
		revs[i], prefixes[i] = kvs[0].ModRevision, other
	}
	return revs, prefixes, nil
}

func (a *Allocator) overlapWith(al Allocation, kv *mvccpb.KeyValue) error {
	r, p, err := decode(kv.Value)
	if err != nil {
		return fmt.Errorf("allocation %s, which overlaps %s, is corrupt: %w", kv.Key, al.Prefix, err)
	}
	return &OverlapError{Prefix: al.Prefix.Masked(), Other: Allocation{Scope: al.Scope, Prefix: p, Owner: r.Owner}}
}

// guardedWrite commits ops together with al's allocation in one transaction that holds only if
// nothing overlapping al is stored and the caller's compares hold. When the transaction fails,
// its else branch returns the caller's probes and the guard's reads at the same revision: check
// turns the probes into the caller's error, the reads tell an overlap from an allocation beside
// al (the next attempt is then guarded by exactly what was read). The first attempt guesses the
// container keys from what this allocator last saw of them (absent when it saw nothing), which
// is right almost always and then costs one round trip in all.
func (a *Allocator) guardedWrite(ctx context.Context, al Allocation, cmps []clientv3.Cmp, probes []clientv3.Op,
	check func([]*etcdserverpb.ResponseOp) error, ops ...clientv3.Op) (int64, error) {
	s := a.spanOf(al.Scope, al.Prefix)
	ops = append(ops, clientv3.OpPut(s.key, Value(al)))
	elseOps := append(append([]clientv3.Op(nil), probes...), s.reads()...)
	revs := make([]int64, len(s.containers))
	for i, k := range s.containers {
		revs[i] = a.seen.guess(k, al.Prefix)
	}
	for range maxAttempts {
		guards := append(append([]clientv3.Cmp(nil), cmps...), clientv3.Compare(clientv3.Version(s.key).WithRange(s.end), "=", 0))
		for i, k := range s.containers {
			if revs[i] == 0 {
				guards = append(guards, clientv3.Compare(clientv3.Version(k), "=", 0))
			} else {
				guards = append(guards, clientv3.Compare(clientv3.ModRevision(k), "=", revs[i]))
			}
		}
		resp, err := a.client.Txn(ctx).If(guards...).Then(ops...).Else(elseOps...).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			a.seen.set(s.key, resp.Header.Revision, al.Prefix)
			return resp.Header.Revision, nil
		}
		if err := check(resp.Responses[:len(probes)]); err != nil {
			return 0, err
		}
		var found []netip.Prefix
		if revs, found, err = a.conflict(al, s, resp.Responses[len(probes):]); err != nil {
			return 0, err
		}
		for i, k := range s.containers {
			a.seen.set(k, revs[i], found[i])
		}
	}
	return 0, fmt.Errorf("writing the allocation of %s: gave up after %d attempts lost to concurrent writes beside it", al.Prefix, maxAttempts)
}

// Create stores objValue at objKey and al's allocation in one transaction, if objKey is free and
// nothing overlaps al. It returns the revision of the write, ErrObjectExists, or an
// *OverlapError.
func (a *Allocator) Create(ctx context.Context, objKey, objValue string, al Allocation) (int64, error) {
	return a.guardedWrite(ctx, al,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(objKey), "=", 0)},
		[]clientv3.Op{clientv3.OpGet(objKey, clientv3.WithCountOnly())},
		func(rs []*etcdserverpb.ResponseOp) error {
			if rs[0].GetResponseRange().Count > 0 {
				return ErrObjectExists
			}
			return nil
		},
		clientv3.OpPut(objKey, objValue))
}

// Check reports, without writing, whether al could be created now (for dry runs): nil or an
// *OverlapError.
func (a *Allocator) Check(ctx context.Context, al Allocation) error {
	s := a.spanOf(al.Scope, al.Prefix)
	resp, err := a.client.Txn(ctx).Then(s.reads()...).Commit()
	if err != nil {
		return err
	}
	_, _, err = a.conflict(al, s, resp.Responses)
	return err
}

// Delete removes the object at objKey if its ModRevision is still modRevision, and in the same
// transaction al's allocation if it is stored as al (nil: the object has no valid prefix). It
// returns whether the object was deleted, and the revision of the transaction.
func (a *Allocator) Delete(ctx context.Context, objKey string, modRevision int64, al *Allocation) (bool, int64, error) {
	ops := []clientv3.Op{clientv3.OpDelete(objKey)}
	if al != nil {
		key := a.Key(al.Scope, al.Prefix)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", Value(*al))},
			[]clientv3.Op{clientv3.OpDelete(key)}, nil))
	}
	resp, err := a.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(objKey), "=", modRevision)).Then(ops...).Commit()
	if err != nil {
		return false, 0, err
	}
	if resp.Succeeded && al != nil {
		a.seen.set(a.Key(al.Scope, al.Prefix), 0, netip.Prefix{})
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

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

// freeBlocks returns up to limit free aligned /bits blocks of pool, lowest first.
func (a *Allocator) freeBlocks(ctx context.Context, scope string, pool netip.Prefix, bits, limit int) ([]netip.Prefix, error) {
	s := a.spanOf(scope, pool)
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

// listPage is how many keys one read of Scan returns. etcd counts every key left in the range
// for each read (a unary Range always fills in the response's count), so a scan of n keys
// costs etcd about n²/listPage key visits: at a million Networks (two million keys to verify)
// pages of 1000 kept both cores busy for minutes. A page of 10,000 keys is some 10 MB.
var listPage int64 = 10000 // a variable only so that a test can make pages small

// List returns every stored allocation at revision rev (0: the current one) and that revision.
func (a *Allocator) List(ctx context.Context, rev int64) ([]Stored, int64, error) {
	var out []Stored
	rev, err := a.Scan(ctx, a.Root(), rev, func(kv *mvccpb.KeyValue) error {
		out = append(out, a.stored(kv))
		return nil
	})
	return out, rev, err
}

// Scan calls fn for every key under prefix at revision rev (0: the current one), a page at a
// time, and returns that revision.
func (a *Allocator) Scan(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	start, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := a.client.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(listPage), clientv3.WithRev(rev))
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			// The first read fixes the revision. A response's header always carries the
			// store's current revision, also for a read at an older one: taking it from
			// every page would move a scan that spans pages to newer revisions.
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (a *Allocator) stored(kv *mvccpb.KeyValue) Stored {
	s := Stored{Key: string(kv.Key), ModRevision: kv.ModRevision}
	s.Scope, _, _ = strings.Cut(strings.TrimPrefix(s.Key, a.Root()), "/")
	r, p, err := decode(kv.Value)
	if err == nil && a.Key(s.Scope, p) != s.Key {
		err = fmt.Errorf("its prefix %s belongs at another key", p)
	}
	if err != nil {
		s.Corrupt = err
		return s
	}
	s.Prefix, s.Owner = p, r.Owner
	return s
}

// Restore writes the missing allocation al of the Network stored at objKey, if that Network is
// still the incarnation created at objCreateRevision and nothing overlaps al. It returns
// ErrObjectChanged or an *OverlapError otherwise.
func (a *Allocator) Restore(ctx context.Context, objKey string, objCreateRevision int64, al Allocation) error {
	_, err := a.guardedWrite(ctx, al,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(objKey), "=", objCreateRevision)},
		[]clientv3.Op{clientv3.OpGet(objKey, clientv3.WithKeysOnly())},
		func(rs []*etcdserverpb.ResponseOp) error {
			if kvs := rs[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != objCreateRevision {
				return ErrObjectChanged
			}
			return nil
		})
	return err
}

// Rewrite replaces the allocation at key (if still at keyModRevision) by al, the allocation of the
// Network stored at objKey (if still the incarnation created at objCreateRevision).
func (a *Allocator) Rewrite(ctx context.Context, key string, keyModRevision int64, objKey string, objCreateRevision int64, al Allocation) (bool, error) {
	if want := a.Key(al.Scope, al.Prefix); want != key {
		return false, fmt.Errorf("allocation of %s belongs at %s, not %s", al.Prefix, want, key)
	}
	resp, err := a.client.Txn(ctx).If(
		clientv3.Compare(clientv3.ModRevision(key), "=", keyModRevision),
		clientv3.Compare(clientv3.CreateRevision(objKey), "=", objCreateRevision),
	).Then(clientv3.OpPut(key, Value(al))).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Remove deletes the allocation at key if it is still at modRevision.
func (a *Allocator) Remove(ctx context.Context, key string, modRevision int64) (bool, error) {
	resp, err := a.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRevision)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Get reads one key (a Network's, for a delete) through the client the transactions use: nil
// when it is absent.
func (a *Allocator) Get(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	resp, err := a.client.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	return resp.Kvs[0], nil
}

// Ping reads through the allocator's client with a linearizable read, so that it fails while
// the client cannot reach an etcd quorum (for /readyz).
func (a *Allocator) Ping(ctx context.Context) error {
	_, err := a.client.Get(ctx, a.root, clientv3.WithCountOnly())
	return err
}
