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
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

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

// inflight is the set of allocation keys an allocator is writing now, with their prefixes,
// safe for concurrent use.
//
// Creates of neighbouring prefixes at once (a pool handing out the next free /28s, 32 clients)
// mostly lost their first guard: a /28 that starts a shorter prefix's range is stored at a key
// another create's guard covers, and while it was being written the other guessed that key
// absent and failed (1.18 lost guards per create in the bench's 2000 direct creates, each a
// failed transaction, a read and another attempt). A guard whose container key is being
// written beside it by the same allocator now waits for that write and guesses the revision
// it got. Waits go only from a key to lower keys (a container starts below the prefix), so they
// cannot wait on each other in a cycle. Writes by other replicas are still met by the guess.
type inflight struct {
	mu sync.Mutex
	m  map[string]*flight
}

type flight struct {
	prefix netip.Prefix
	done   chan struct{}
}

// begin records a write of p at key and returns the function that ends it. A second write of
// the same key meanwhile (a race for the same prefix) is not recorded again.
func (f *inflight) begin(key string, p netip.Prefix) func() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[key]; ok {
		return func() {}
	}
	if f.m == nil {
		f.m = make(map[string]*flight)
	}
	fl := &flight{prefix: p, done: make(chan struct{})}
	f.m[key] = fl
	return func() {
		f.mu.Lock()
		delete(f.m, key)
		f.mu.Unlock()
		close(fl.done)
	}
}

// beside returns a channel closed when the write at key ends, if one is running and does not
// overlap p (an overlapping one is for the guard to find), else nil.
func (f *inflight) beside(key string, p netip.Prefix) <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if fl, ok := f.m[key]; ok && !fl.prefix.Overlaps(p) {
		return fl.done
	}
	return nil
}

// span is what a write of an allocation must be guarded by.
type span struct {
	key, end string
	// containers are the keys at which an allocation containing the prefix (and starting below
	// it) would be stored.
	containers []string
	// lengths are, for each container key, the prefix lengths stored there that would contain
	// the prefix.
	lengths []lengthSet
}

// spanOf returns the guard keys of p in scope: the range of keys starting inside p (its own
// key first), and one key per distinct start address of p's shorter prefixes (at most 31 for
// IPv4 and 127 for IPv6; etcd's default --max-txn-ops is 128 per list, and Networks are at most
// /126, so every guard fits).
func (a *Allocator) spanOf(scope string, p netip.Prefix) span {
	return a.spanWithin(scope, p, netip.Prefix{})
}

// spanWithin is spanOf for an allocation that nothing in scope extends beyond within (when
// valid): its container keys stop at within's start.
func (a *Allocator) spanWithin(scope string, p, within netip.Prefix) span {
	p = p.Masked()
	s := span{key: a.Key(scope, p), end: a.familyPrefix(scope, p) + addrHex(lastAddr(p)) + "\x00"}
	prev := p.Addr()
	lowest := 0
	if within.IsValid() && within.Bits() <= p.Bits() && within.Contains(p.Addr()) {
		lowest = within.Bits()
	}
	for bits := p.Bits() - 1; bits >= lowest; bits-- {
		q, _ := p.Addr().Prefix(bits)
		if q.Addr() != prev {
			s.containers = append(s.containers, a.Key(scope, q))
			s.lengths = append(s.lengths, lengthSet{})
			prev = q.Addr()
		}
		if len(s.lengths) > 0 {
			s.lengths[len(s.lengths)-1].add(bits)
		}
	}
	return s
}

// guarded says whether container i must be guarded when only the lengths in recorded can be
// stored (nil: any length).
func (s span) guarded(i int, recorded *lengthSet) bool {
	if recorded == nil {
		return true
	}
	for w := range s.lengths[i] {
		if s.lengths[i][w]&recorded[w] != 0 {
			return true
		}
	}
	return false
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
	al.Prefix = al.Prefix.Masked()
	return &OverlapError{Allocation: al, Other: Allocation{Scope: al.Scope, Prefix: p, Owner: r.Owner, Node: r.Node, Role: r.Role}}
}

// guardedWrite commits ops together with al's allocation in one transaction that holds only if
// nothing overlapping al is stored and the caller's compares hold. When the transaction fails,
// one read-only transaction reads the caller's probes and the guard's keys, all at one revision:
// check turns the probes into the caller's error, the reads tell an overlap from an allocation
// beside al (the next attempt is then guarded by exactly what was read). The reads are not the
// write's else branch: an else branch travels in every write's raft entry — the WAL, the raft
// log etcd keeps in memory, and the decode in every member's apply — and only a lost write
// needs it (0.07 lost per create in the bench), so a lost write pays one read round trip
// instead. What was read may be newer than what the failed compares saw; that only decides the
// next attempt's guards, and a commit is guarded by its own compares alone. The first attempt
// guesses the container keys from what this allocator last saw of them (absent when it saw
// nothing), after waiting for its own writes at them (see inflight), which is right almost
// always and then costs one round trip in all.
//
// With a length record (KeepLengths; not for allocations bounded by Within, whose guards are
// few), the transaction creates al's length key when the record lacks it, and in GuardsRecorded
// mode guards only the container keys of the recorded lengths, comparing that no length key was
// created since the record was read (lengths.go). The reads after a lost write take every
// container key and the record, so one lost attempt tells all. A write whose reads would exceed
// etcd's --max-txn-ops with the record's (a /126 with 126 container keys) guards every length.
func (a *Allocator) guardedWrite(ctx context.Context, al Allocation, cmps []clientv3.Cmp, probes []clientv3.Op,
	check func([]*etcdserverpb.ResponseOp) error, ops ...clientv3.Op) (int64, error) {
	return a.guardedWriteStoring(ctx, al, true, cmps, probes, check, ops...)
}

// guardedWriteStoring is guardedWrite; without store it guards al alone and writes no key for it.
func (a *Allocator) guardedWriteStoring(ctx context.Context, al Allocation, store bool, cmps []clientv3.Cmp, probes []clientv3.Op,
	check func([]*etcdserverpb.ResponseOp) error, ops ...clientv3.Op) (int64, error) {
	s := a.spanWithin(al.Scope, al.Prefix, al.Within)
	if store {
		ops = append(slices.Clip(ops), clientv3.OpPut(s.key, Value(al)))
	}
	// guardReads: how many keys a lost write reads before the record (probes, then s.reads()).
	guardReads := len(probes) + 1 + len(s.containers)
	var record string // the length record's key prefix; empty without one
	// recordRead: the reads after a lost write take the record last; only then may the guards
	// trust it.
	recordRead, trusting := false, false
	if a.lengths != nil && !al.Within.IsValid() {
		record = a.lengths.prefix(al.Scope, al.Prefix)
		if guardReads < maxTxnOps {
			recordRead, trusting = true, a.lengths.trusted()
		}
	}
	// reads are what a lost write reads, built only then.
	reads := func() []clientv3.Op {
		r := append(append(make([]clientv3.Op, 0, guardReads+1), probes...), s.reads()...)
		if recordRead {
			r = append(r, clientv3.OpGet(record, clientv3.WithPrefix(), clientv3.WithKeysOnly()))
		}
		return r
	}
	bits := al.Prefix.Bits()
	// recorded is the record as last read, and the lengths an attempt guards (nil: all).
	recorded := func() (lengthRecord, *lengthSet) {
		if record == "" {
			return lengthRecord{}, nil
		}
		rec := a.lengths.get(record)
		if !trusting {
			return rec, nil
		}
		return rec, &rec.set
	}
	defer a.writing.begin(s.key, al.Prefix)()
	revs := make([]int64, len(s.containers))
	_, first := recorded()
	for i, k := range s.containers {
		if !s.guarded(i, first) {
			continue
		}
		if done := a.writing.beside(k, al.Prefix); done != nil {
			select {
			case <-done:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
		}
		revs[i] = a.seen.guess(k, al.Prefix)
	}
	for range maxAttempts {
		guards := append(append([]clientv3.Cmp(nil), cmps...), clientv3.Compare(clientv3.Version(s.key).WithRange(s.end), "=", 0))
		rec, guarded := recorded()
		unguarded := false
		for i, k := range s.containers {
			switch {
			case !s.guarded(i, guarded):
				unguarded = true
			case revs[i] == 0:
				guards = append(guards, clientv3.Compare(clientv3.Version(k), "=", 0))
			default:
				guards = append(guards, clientv3.Compare(clientv3.ModRevision(k), "=", revs[i]))
			}
		}
		if unguarded {
			guards = append(guards, noLengthSince(record, rec.readAt))
		}
		then := ops
		adds := store && record != "" && !rec.set.has(bits)
		if adds {
			then = append(slices.Clip(ops), clientv3.OpPut(lengthKey(record, bits), ""))
		}
		resp, err := a.client.Txn(ctx).If(guards...).Then(then...).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			guardedWrites.WithLabelValues("committed").Inc()
			if store {
				a.seen.set(s.key, resp.Header.Revision, al.Prefix)
			}
			if adds {
				a.lengths.added(record, bits, rec.readAt, resp.Header.Revision, unguarded)
			}
			return resp.Header.Revision, nil
		}
		guardedWrites.WithLabelValues("lost").Inc()
		read, err := a.client.Txn(ctx).Then(reads()...).Commit()
		if err != nil {
			return 0, err
		}
		rs := read.Responses
		if err := check(rs[:len(probes)]); err != nil {
			return 0, err
		}
		var found []netip.Prefix
		if revs, found, err = a.conflict(al, s, rs[len(probes):]); err != nil {
			return 0, err
		}
		for i, k := range s.containers {
			a.seen.set(k, revs[i], found[i])
		}
		if recordRead {
			a.lengths.read(record, rs[len(rs)-1].GetResponseRange().Kvs, al.Prefix.Addr().Is4(), read.Header.Revision)
		}
	}
	return 0, fmt.Errorf("writing the allocation of %s: gave up after %d attempts lost to concurrent writes beside it", al.Prefix, maxAttempts)
}
