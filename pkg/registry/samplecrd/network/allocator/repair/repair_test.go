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

package repair

import (
	"context"
	"encoding/json"
	"iter"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// fakeAllocations holds allocations and Networks in memory, and records the repairs asked of it.
type fakeAllocations struct {
	stored   []allocator.Stored
	kvs      []*mvccpb.KeyValue
	scanned  []string // the prefixes Scan was asked for
	restored []string
	rewrote  []string
	removed  []string
	// compactions: how many of the next Eachs end in ErrCompacted after handing out every
	// allocation; streaming: an Each is under way, and writesInStream counts the fixes made then.
	compactions    int
	streaming      bool
	writesInStream int
	// trusted and valuesRead count the keys EachTrusting handed out without and with values.
	trusted, valuesRead int
	// lengthsAsked are the prefixes RecordLengths was handed; lengthFindings what it returns.
	lengthsAsked   []string
	lengthFindings []allocator.LengthFinding
}

var _ allocator.RepairInterface = &fakeAllocations{}

// stream hands fn every key of stored, with *streaming set while it does.
func stream(streaming *bool, stored []allocator.Stored, fn func(allocator.Stored) error) error {
	*streaming = true
	defer func() { *streaming = false }()
	for _, st := range stored {
		if err := fn(st); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeAllocations) Each(_ context.Context, rev int64, fn func(allocator.Stored) error) (int64, error) {
	if err := stream(&f.streaming, f.stored, fn); err != nil {
		return 0, err
	}
	if f.compactions > 0 {
		f.compactions--
		return 0, rpctypes.ErrCompacted
	}
	return rev, nil
}

// EachTrusting hands out the keys trust accepts without their allocation, as the allocator does
// after a keys-only read, and counts them apart from the keys whose values it hands out.
func (f *fakeAllocations) EachTrusting(_ context.Context, rev int64, trust func([]byte, int64) bool, fn func(allocator.Stored) error) (int64, error) {
	trusted, read, err := streamTrusting(&f.streaming, f.stored, trust, fn)
	f.trusted, f.valuesRead = f.trusted+trusted, f.valuesRead+read
	return rev, err
}

// streamTrusting is stream after a keys-only read: the keys trust accepts are handed out with
// their key, revision and scope only. It counts the keys handed out without and with values.
func streamTrusting(streaming *bool, stored []allocator.Stored, trust func([]byte, int64) bool, fn func(allocator.Stored) error) (trusted, read int, err error) {
	err = stream(streaming, stored, func(st allocator.Stored) error {
		if trust([]byte(st.Key), st.ModRevision) {
			trusted++
			st = allocator.Stored{Allocation: allocator.Allocation{Scope: st.Scope}, Key: st.Key, ModRevision: st.ModRevision, Trusted: true}
		} else {
			read++
		}
		return fn(st)
	})
	return trusted, read, err
}

func (f *fakeAllocations) wrote() {
	if f.streaming {
		f.writesInStream++
	}
}

// Scan reads at revision 7 when asked for the current one, pausing as ctx's pacer says.
func (f *fakeAllocations) Scan(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	fn = etcdscan.Paced(ctx, fn)
	if rev == 0 {
		rev = 7
	}
	f.scanned = append(f.scanned, prefix)
	for _, kv := range f.kvs {
		if strings.HasPrefix(string(kv.Key), prefix) {
			if err := fn(kv); err != nil {
				return 0, err
			}
		}
	}
	return rev, nil
}

func (f *fakeAllocations) Count(_ context.Context, prefix string) (int64, error) {
	var n int64
	for _, kv := range f.kvs {
		if strings.HasPrefix(string(kv.Key), prefix) {
			n++
		}
	}
	return n, nil
}

func (f *fakeAllocations) Key(scope string, p netip.Prefix) string {
	return "/alloc/" + scope + "/" + p.String()
}

func (f *fakeAllocations) Restore(_ context.Context, objKey string, _ int64, _ allocator.Allocation) error {
	f.wrote()
	f.restored = append(f.restored, objKey)
	return nil
}

func (f *fakeAllocations) Rewrite(_ context.Context, key string, _ int64, _ string, _ int64, _ allocator.Allocation) (bool, error) {
	f.wrote()
	f.rewrote = append(f.rewrote, key)
	return true, nil
}

func (f *fakeAllocations) RecordLengths(_ context.Context, prefixes iter.Seq2[string, netip.Prefix]) ([]allocator.LengthFinding, error) {
	f.wrote()
	for scope, p := range prefixes {
		f.lengthsAsked = append(f.lengthsAsked, scope+" "+p.String())
	}
	return f.lengthFindings, nil
}

func (f *fakeAllocations) Remove(_ context.Context, key string, _ int64) (bool, error) {
	f.wrote()
	f.removed = append(f.removed, key)
	return true, nil
}

// stores adds a Network as JSON under /networks/default/<name>; decodeJSON reads it back.
func (f *fakeAllocations) stores(t *testing.T, name, uid, cidr string) {
	n := samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + uid)}, Spec: samplecrd.NetworkSpec{CIDR: cidr}}
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	f.kvs = append(f.kvs, &mvccpb.KeyValue{Key: []byte("/networks/default/" + name), Value: data, CreateRevision: 1, ModRevision: 1})
}

func decodeJSON(_ context.Context, kv *mvccpb.KeyValue, n *samplecrd.Network) error {
	*n = samplecrd.Network{}
	return json.Unmarshal(kv.Value, n)
}

func allocation(name, uid, cidr string) allocator.Stored {
	p := netip.MustParsePrefix(cidr)
	return allocator.Stored{
		Allocation: allocator.Allocation{Scope: allocator.ClusterScope, Prefix: p, Owner: allocator.Owner{Namespace: "default", Name: name, UID: "uid-" + uid}},
		Key:        "/alloc/" + allocator.ClusterScope + "/" + p.String(),
	}
}

// The repair reads the Networks under the key prefix it is given, with the decoder it is given,
// and reports and fixes each kind of violation.
func TestVerifyWithExplicitInputs(t *testing.T) {
	f := &fakeAllocations{}
	f.stores(t, "ok", "ok", "10.0.0.0/24")
	f.stores(t, "missing", "missing", "10.1.0.0/24")
	f.stores(t, "renamed", "renamed", "10.2.0.0/24")
	f.stores(t, "wide", "wide", "10.3.0.0/16")
	f.stores(t, "narrow", "narrow", "10.3.1.0/24")
	f.stores(t, "bad", "bad", "10.4.0.1/24")
	f.kvs = append(f.kvs, &mvccpb.KeyValue{Key: []byte("/networks/default/garbage"), Value: []byte("{")},
		&mvccpb.KeyValue{Key: []byte("/elsewhere/x"), Value: []byte("{")})
	f.stored = []allocator.Stored{
		allocation("ok", "ok", "10.0.0.0/24"),
		allocation("renamed", "old-uid", "10.2.0.0/24"),
		allocation("wide", "wide", "10.3.0.0/16"),
		allocation("narrow", "narrow", "10.3.1.0/24"),
		allocation("gone", "gone", "10.9.0.0/24"),
	}

	v, err := New(f, allocator.Scoping{}, "/networks/", decodeJSON).Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(f.scanned, []string{"/networks/"}) {
		t.Errorf("scanned %v, want the given prefix /networks/ only", f.scanned)
	}
	if v.Revision != 7 || v.Networks != 6 {
		t.Errorf("revision %d with %d networks, want 7 and 6", v.Revision, v.Networks)
	}
	for kind, want := range map[string]int{ViolationMissing: 1, ViolationMismatch: 1, ViolationOrphan: 1, ViolationOverlap: 1, ViolationInvalid: 2} {
		if got := v.Count(kind); got != want {
			t.Errorf("%d %s violations, want %d: %+v", got, kind, want, v.Violations)
		}
	}
	if !slices.Equal(f.restored, []string{"/networks/default/missing"}) ||
		!slices.Equal(f.rewrote, []string{"/alloc/_cluster/10.2.0.0/24"}) ||
		!slices.Equal(f.removed, []string{"/alloc/_cluster/10.9.0.0/24"}) {
		t.Errorf("restored %v, rewrote %v, removed %v; want the missing, the renamed and the gone one's", f.restored, f.rewrote, f.removed)
	}
}

// Every pass hands the allocator each stored Network's scope and prefix for the length records
// (after the stream); a length missing where creates trust the record is a violation, one a
// replica of an older build stored (creates guard every length) is not.
func TestVerifyRecordsTheLengthsStored(t *testing.T) {
	f := &fakeAllocations{lengthFindings: []allocator.LengthFinding{
		{Record: "/lengths/_cluster/4/", Missing: []int{16}, Fixed: true, Trusted: true},
		{Record: "/lengths/team-a/4/", Missing: []int{24}, Fixed: true},
	}}
	f.stores(t, "a", "a", "10.0.0.0/24")
	f.stores(t, "b", "b", "10.3.0.0/16")
	f.stores(t, "bad", "bad", "10.4.0.1/24")
	f.stored = []allocator.Stored{allocation("a", "a", "10.0.0.0/24"), allocation("b", "b", "10.3.0.0/16")}
	v, err := New(f, allocator.Scoping{}, "/networks/", decodeJSON).Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"_cluster 10.0.0.0/24", "_cluster 10.3.0.0/16"}; !slices.Equal(f.lengthsAsked, want) {
		t.Errorf("lengths asked for %v, want %v", f.lengthsAsked, want)
	}
	if f.writesInStream != 0 {
		t.Errorf("%d writes while the allocations were streamed", f.writesInStream)
	}
	if v.Count(ViolationUnrecordedLength) != 1 || len(v.Violations) != 2 { // and the invalid Network
		t.Fatalf("violations %+v, want one unrecordedLength (and bad's invalid prefix)", v.Violations)
	}
	for _, x := range v.Violations {
		if x.Kind == ViolationUnrecordedLength && (!x.Fixed || !strings.Contains(x.Detail, "/lengths/_cluster/4/ lacks the stored prefix lengths [16]")) {
			t.Errorf("violation %+v, want fixed, naming the record and the length", x)
		}
	}
}

// The allocations are streamed: a fix is made only once the stream has ended, never while it is
// open, and a pass whose stream fails (etcd compacted its revision) fixes nothing — the next
// pass decides again, so each fix is made once.
func TestVerifyFixesAfterTheStream(t *testing.T) {
	f := &fakeAllocations{compactions: 2}
	f.stores(t, "missing", "missing", "10.1.0.0/24")
	f.stores(t, "renamed", "renamed", "10.2.0.0/24")
	f.stored = []allocator.Stored{allocation("renamed", "old-uid", "10.2.0.0/24"), allocation("gone", "gone", "10.9.0.0/24")}
	v, err := New(f, allocator.Scoping{}, "/networks/", decodeJSON).Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.writesInStream != 0 {
		t.Errorf("%d fixes made while the allocations were streamed", f.writesInStream)
	}
	if f.compactions != 0 || len(f.scanned) != 3 {
		t.Errorf("%d compactions left, %d passes: want every pass read again after a compaction", f.compactions, len(f.scanned))
	}
	if !slices.Equal(f.restored, []string{"/networks/default/missing"}) || !slices.Equal(f.rewrote, []string{"/alloc/_cluster/10.2.0.0/24"}) ||
		!slices.Equal(f.removed, []string{"/alloc/_cluster/10.9.0.0/24"}) {
		t.Errorf("restored %v, rewrote %v, removed %v: want each fix once, from the pass that completed", f.restored, f.rewrote, f.removed)
	}
	if len(v.Violations) != 3 {
		t.Errorf("violations %+v: want the three of the last pass", v.Violations)
	}
}

// storesCreatedAt is stores with the Network's CreateRevision (and ModRevision) rev.
func (f *fakeAllocations) storesCreatedAt(t *testing.T, name, uid, cidr string, rev int64) {
	f.stores(t, name, uid, cidr)
	kv := f.kvs[len(f.kvs)-1]
	kv.CreateRevision, kv.ModRevision = rev, rev
}

func allocationAt(name, uid, cidr string, modRevision int64) allocator.Stored {
	st := allocation(name, uid, cidr)
	st.ModRevision = modRevision
	return st
}

// The first verification reads every allocation value. The later ones trust a key written with
// the create of the Network expected there (same revision) without its value, and still find what
// was written to the keys since: a key rewritten around the API, an orphan, a missing key.
func TestLaterVerificationsTrustOnlyKeysWrittenWithTheirCreate(t *testing.T) {
	f := &fakeAllocations{}
	f.storesCreatedAt(t, "kept", "kept", "10.1.0.0/24", 11)
	f.storesCreatedAt(t, "overwritten", "overwritten", "10.2.0.0/24", 12)
	f.storesCreatedAt(t, "missing", "missing", "10.3.0.0/24", 14)
	f.storesCreatedAt(t, "restored", "restored", "10.4.0.0/24", 15)
	f.stored = []allocator.Stored{
		allocationAt("kept", "kept", "10.1.0.0/24", 11),
		allocationAt("someone", "else", "10.2.0.0/24", 30), // written over around the API
		allocationAt("restored", "restored", "10.4.0.0/24", 16),
		allocationAt("gone", "gone", "10.9.0.0/24", 13),
	}
	r := New(f, allocator.Scoping{}, "/networks/", decodeJSON)
	want := map[string]int{ViolationMismatch: 1, ViolationOrphan: 1, ViolationMissing: 1, ViolationOverlap: 0}
	for pass, keysOnly := range []bool{false, true} {
		f.trusted, f.valuesRead = 0, 0
		f.restored, f.rewrote, f.removed = nil, nil, nil
		v, err := r.Verify(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for kind, n := range want {
			if got := v.Count(kind); got != n {
				t.Errorf("pass %d: %d %s violations, want %d: %+v", pass, got, kind, n, v.Violations)
			}
		}
		if !slices.Equal(f.restored, []string{"/networks/default/missing"}) || !slices.Equal(f.rewrote, []string{"/alloc/_cluster/10.2.0.0/24"}) ||
			!slices.Equal(f.removed, []string{"/alloc/_cluster/10.9.0.0/24"}) {
			t.Errorf("pass %d: restored %v, rewrote %v, removed %v", pass, f.restored, f.rewrote, f.removed)
		}
		wantTrusted, wantRead := 0, 0
		if keysOnly {
			wantTrusted, wantRead = 1, 3
		}
		if f.trusted != wantTrusted || f.valuesRead != wantRead {
			t.Errorf("pass %d: %d keys trusted and %d values read, want %d and %d", pass, f.trusted, f.valuesRead, wantTrusted, wantRead)
		}
	}
}
