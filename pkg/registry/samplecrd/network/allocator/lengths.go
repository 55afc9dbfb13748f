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
	"iter"
	"maps"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The prefix lengths in use.
//
// A create of p guards one key per distinct start address of p's shorter prefixes, where an
// allocation containing p would be stored: 8.4 keys on average for the bench's /28s, up to 31
// for IPv4 and 126 for IPv6, each read by etcd inside the transaction's apply. Most scopes hold
// a handful of lengths. So each scope and family has a length record: one empty key per prefix
// length ever stored there, <lengths root>/<scope>/<family>/<length>. A create may then guard
// only the container keys of the recorded lengths shorter than its own, if it also compares
// that no length key of its scope and family was created after it read them (their
// CreateRevisions): a containing prefix of a length the record lacked when it was read must
// have created that length's key before it committed, and then the compare fails. A create of a
// length the record lacks creates its key in its own transaction, without a compare (a key per
// length: two creates adding lengths at once never overwrite each other). The record only
// grows (deletes leave it); a length no longer stored costs only its guard.
//
// Guards trust the record only in GuardsRecorded mode, and only once the verifier has recorded
// every length stored when this process started (RecordLengths). A replica of an earlier build
// neither reads nor writes the record, and could store a containing prefix of an unrecorded
// length beside a replica that trusts it. GuardsAll keeps the record (creates the length keys)
// but guards every container key, as earlier builds do; it is safe beside them, and
// GuardsRecorded is safe beside it (docs/allocation.md, "The length record").

// Guards says which container keys a create guards.
type Guards int

const (
	// GuardsAll guards every container key and keeps the length record (safe beside replicas
	// of builds that do not keep it).
	GuardsAll Guards = iota
	// GuardsRecorded guards only the container keys of recorded lengths (every replica must
	// keep the record).
	GuardsRecorded
)

// maxTxnOps is etcd's default --max-txn-ops: the most compares, and the most operations in each
// branch, of one transaction.
const maxTxnOps = 128

// lengthSet is a set of prefix lengths, 0 to 128.
type lengthSet [3]uint64

func (s lengthSet) has(b int) bool { return s[b/64]&(1<<(b%64)) != 0 }

func (s *lengthSet) add(b int) { s[b/64] |= 1 << (b % 64) }

// without is s less every length of o.
func (s lengthSet) without(o lengthSet) lengthSet {
	for i := range s {
		s[i] &^= o[i]
	}
	return s
}

// Lengths lists the set's lengths in ascending order.
func (s lengthSet) Lengths() []int {
	var out []int
	for b := 0; b <= 128; b++ {
		if s.has(b) {
			out = append(out, b)
		}
	}
	return out
}

// parseLength reads the last part of a length key: a decimal prefix length of the family, in
// canonical form.
func parseLength(name string, is4 bool) (int, bool) {
	b, err := strconv.Atoi(name)
	most := 128
	if is4 {
		most = 32
	}
	return b, err == nil && b >= 0 && b <= most && strconv.Itoa(b) == name
}

// lengthRecords caches the length records by their key prefix, safe for concurrent use. A
// cached record is never wrong in a way that matters: records only grow, so what was read is a
// subset of what is stored, and a trusting create compares against the revision it was read at.
type lengthRecords struct {
	root  string // ends in "/"
	guard Guards
	// complete is set once RecordLengths has recorded every length stored (the verifier's
	// first pass): only then does GuardsRecorded trust the records. Data an older build wrote
	// before this process started (a restart with the new build) is recorded by then.
	complete atomic.Bool
	mu       sync.Mutex
	m        map[string]lengthRecord
}

// trusted says whether creates may guard only the recorded lengths now.
func (l *lengthRecords) trusted() bool { return l.guard == GuardsRecorded && l.complete.Load() }

// lengthRecord is a record as this allocator last saw it.
type lengthRecord struct {
	set lengthSet
	// readAt is the etcd revision at which set was every length key (0: never read, and so the
	// empty set at revision 0, which a compare holds only while there are no keys).
	readAt int64
}

// prefix is the key prefix of the record of scope and p's family.
func (l *lengthRecords) prefix(scope string, p netip.Prefix) string {
	return l.root + scope + "/" + familyOf(p.Addr()) + "/"
}

func (l *lengthRecords) get(prefix string) lengthRecord {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.m[prefix]
}

func (l *lengthRecords) update(prefix string, f func(*lengthRecord)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) >= maxSeen {
		l.m = make(map[string]lengthRecord)
	}
	rec := l.m[prefix]
	f(&rec)
	l.m[prefix] = rec
}

// read remembers the record read at revision readAt (its length keys), unless one read later
// is remembered.
func (l *lengthRecords) read(prefix string, kvs []*mvccpb.KeyValue, is4 bool, readAt int64) {
	var set lengthSet
	for _, kv := range kvs {
		if b, ok := parseLength(strings.TrimPrefix(string(kv.Key), prefix), is4); ok {
			set.add(b)
		}
	}
	l.update(prefix, func(rec *lengthRecord) {
		if rec.readAt <= readAt {
			*rec = lengthRecord{set: set, readAt: readAt}
		}
	})
}

// added remembers that length b's key was created at revision rev; exact says that the
// transaction also compared that no other length key was created since the record was read at
// readAt, so the record is now exactly the one read and b.
func (l *lengthRecords) added(prefix string, b int, readAt, rev int64, exact bool) {
	l.update(prefix, func(rec *lengthRecord) {
		rec.set.add(b)
		if exact && rec.readAt == readAt {
			rec.readAt = rev
		}
	})
}

// KeepLengths makes a keep a length record per scope and family under root (never under a's
// own root, whose keys the repair owns) and guard creates as guard says. It returns a.
func (a *Allocator) KeepLengths(root string, guard Guards) *Allocator {
	a.lengths = &lengthRecords{root: strings.TrimSuffix(root, "/") + "/", guard: guard}
	return a
}

// lengthKey is the key of length b in the record at prefix.
func lengthKey(prefix string, b int) string { return prefix + strconv.Itoa(b) }

// noLengthSince compares that every length key of the record at prefix was created at or before
// revision readAt.
func noLengthSince(prefix string, readAt int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(prefix).WithPrefix(), "<", readAt+1)
}

// LengthFinding is what RecordLengths found at one length record.
type LengthFinding struct {
	// Record is the record's key prefix.
	Record string
	// Missing are the stored lengths the record lacked.
	Missing []int
	// Fixed says the record now holds every stored length.
	Fixed bool
	// Err is why it was not fixed.
	Err error
	// Trusted says creates trusted the records when this one was found lacking (GuardsRecorded,
	// after an earlier call made them complete): a missing length is a violation. Otherwise it is
	// what a replica of a build that does not keep the record stored, beside this one or before
	// this process started.
	Trusted bool
}

// RecordLengths makes every length record hold the length of each prefix stored (prefixes
// yields each stored Network's scope and prefix, as the verifier read them), and returns what
// was missing. Once a call has found or made every record complete, GuardsRecorded trusts them.
// A length key is created without a compare: records only grow. Nil when the allocator keeps
// no records.
func (a *Allocator) RecordLengths(ctx context.Context, prefixes iter.Seq2[string, netip.Prefix]) ([]LengthFinding, error) {
	if a.lengths == nil {
		return nil, nil
	}
	type want struct {
		is4       bool
		set, have lengthSet
	}
	trusted := a.lengths.trusted()
	wanted := map[string]*want{}
	for scope, p := range prefixes {
		prefix := a.lengths.prefix(scope, p)
		w := wanted[prefix]
		if w == nil {
			w = &want{is4: p.Addr().Is4()}
			wanted[prefix] = w
		}
		w.set.add(p.Bits())
	}
	resp, err := a.client.Get(ctx, a.lengths.root, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	for _, kv := range resp.Kvs {
		key := string(kv.Key)
		i := strings.LastIndexByte(key, '/')
		if w := wanted[key[:i+1]]; w != nil {
			if b, ok := parseLength(key[i+1:], w.is4); ok {
				w.have.add(b)
			}
		}
	}
	var out []LengthFinding
	for _, prefix := range slices.Sorted(maps.Keys(wanted)) {
		missing := wanted[prefix].set.without(wanted[prefix].have)
		if missing == (lengthSet{}) {
			continue
		}
		f := LengthFinding{Record: prefix, Missing: missing.Lengths(), Trusted: trusted}
		var puts []clientv3.Op
		for _, b := range f.Missing {
			puts = append(puts, clientv3.OpPut(lengthKey(prefix, b), ""))
		}
		if _, f.Err = a.client.Txn(ctx).Then(puts...).Commit(); f.Err == nil {
			f.Fixed = true
			for _, b := range f.Missing {
				a.lengths.added(prefix, b, 0, 0, false)
			}
		}
		out = append(out, f)
	}
	if !slices.ContainsFunc(out, func(f LengthFinding) bool { return !f.Fixed }) {
		a.lengths.complete.Store(true)
	}
	return out, nil
}

func (g Guards) String() string {
	if g == GuardsRecorded {
		return "recorded"
	}
	return "all"
}
