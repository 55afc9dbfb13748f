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
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
)

// fakeVNIKeys holds VNI keys in memory and records the fixes asked of it.
type fakeVNIKeys struct {
	stored   segment.Stored
	full     bool // Assign answers that the range is exhausted
	removed  []string
	assigned []string
	// streaming: an Each is under way; writesInStream counts the fixes made then.
	streaming      bool
	writesInStream int
	// eachs counts the streams with values (Each); trusted and valuesRead the keys EachTrusting
	// handed out without and with values.
	eachs, trusted, valuesRead int
}

var _ VNIKeys = &fakeVNIKeys{}

func (f *fakeVNIKeys) Each(_ context.Context, _ int64, fn func(segment.Entry) error) error {
	f.eachs++
	f.streaming = true
	defer func() { f.streaming = false }()
	for _, e := range entries(f.stored) {
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// EachTrusting hands out the keys trust accepts (shown it without its value) with Trusted set
// and no value, the others whole.
func (f *fakeVNIKeys) EachTrusting(_ context.Context, _ int64, trust func(segment.Entry) bool, fn func(segment.Entry) error) error {
	f.streaming = true
	defer func() { f.streaming = false }()
	for _, e := range entries(f.stored) {
		keyOnly := e
		keyOnly.Value = ""
		if trust(keyOnly) {
			f.trusted++
			keyOnly.Trusted = true
			e = keyOnly
		} else {
			f.valuesRead++
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeVNIKeys) UIDKey(uid string) string { return "/seg/uid/" + uid }

// entries are the keys of s in key order, as etcd lists them.
func entries(s segment.Stored) []segment.Entry {
	var out []segment.Entry
	for uid, k := range s.ByUID {
		out = append(out, segment.Entry{Key: k, Kind: segment.KindUID, UID: uid})
	}
	for vni, k := range s.ByVNI {
		out = append(out, segment.Entry{Key: k, Kind: segment.KindVNI, VNI: vni})
	}
	for _, k := range s.Corrupt {
		out = append(out, segment.Entry{Key: k, Kind: segment.KindCorrupt})
	}
	slices.SortFunc(out, func(a, b segment.Entry) int { return strings.Compare(a.Key.Key, b.Key.Key) })
	return out
}

func (f *fakeVNIKeys) Remove(_ context.Context, key string, _ int64) (bool, error) {
	if f.streaming {
		f.writesInStream++
	}
	f.removed = append(f.removed, key)
	return true, nil
}

func (f *fakeVNIKeys) Assign(_ context.Context, uid string, cmps []clientv3.Cmp, _ []clientv3.Op, _ func([]*etcdserverpb.ResponseOp) error) (int32, error) {
	if len(cmps) == 0 {
		panic("an assignment without a guard on the Network")
	}
	if f.streaming {
		f.writesInStream++
	}
	if f.full {
		return 0, &segment.ExhaustedError{Range: segment.Range{First: 5, Last: 6}}
	}
	f.assigned = append(f.assigned, uid)
	return 900, nil
}

// storesWithVNI adds a Network whose status.vni is vni, and its allocation (10.<n>.0.0/24 for
// the n-th Network added), so that only the VNIs have violations.
func (f *fakeAllocations) storesWithVNI(t *testing.T, name string, vni int32) {
	cidr := "10." + itoa(int32(len(f.kvs))) + ".0.0/24"
	f.stored = append(f.stored, allocation(name, name, cidr))
	n := samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + name)},
		Spec: samplecrd.NetworkSpec{CIDR: cidr}, Status: samplecrd.NetworkStatus{VNI: vni}}
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	f.kvs = append(f.kvs, &mvccpb.KeyValue{Key: []byte("/networks/default/" + name), Value: data, CreateRevision: 1, ModRevision: 1})
}

func vniPair(s *segment.Stored, uid string, vni int32, vniKeyNames string) {
	v := itoa(vni)
	s.ByUID[uid] = segment.Key{Key: "/seg/uid/" + uid, Value: v, ModRevision: 3}
	if vniKeyNames != "" {
		s.ByVNI[vni] = segment.Key{Key: "/seg/vni/" + v, Value: vniKeyNames, ModRevision: 3}
	}
}

func itoa(v int32) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestVerifyVNIs checks every VNI violation with explicit inputs and the fixes: assignment of a
// missing VNI (guarded), removal of keys of gone Networks and of leftovers, a duplicate's key
// dropped and a fresh VNI assigned, status.vni mirrored.
func TestVerifyVNIs(t *testing.T) {
	f := &fakeAllocations{}
	for _, n := range []struct {
		name string
		vni  int32
	}{{"ok", 100}, {"missing", 0}, {"status", 7}, {"dup", 101}, {"half", 102}} {
		f.storesWithVNI(t, n.name, n.vni)
	}
	keys := &fakeVNIKeys{stored: segment.Stored{ByVNI: map[int32]segment.Key{}, ByUID: map[string]segment.Key{}}}
	s := &keys.stored
	vniPair(s, "uid-ok", 100, "uid-ok")
	vniPair(s, "uid-status", 200, "uid-status")
	vniPair(s, "uid-dup", 100, "uid-ok") // its VNI key names ok: a duplicate
	vniPair(s, "uid-half", 102, "")      // no VNI key: half a pair
	vniPair(s, "uid-gone", 300, "uid-gone")
	s.ByVNI[301] = segment.Key{Key: "/seg/vni/301", Value: "uid-ok", ModRevision: 3} // leftover of ok
	var mirrored []string
	mirror := func(_ context.Context, ns, name string, uid types.UID) error {
		mirrored = append(mirrored, ns+"/"+name+" "+string(uid))
		return nil
	}
	r := New(f, allocator.Scoping{}, "/networks/", decodeJSON).WithVNIs(keys, mirror)
	v, err := r.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{ViolationVNIMissing: 3, ViolationVNIDuplicate: 3, ViolationVNINetworkGone: 2, ViolationVNIStatus: 4}
	for kind, n := range want {
		if got := v.Count(kind); got != n {
			t.Errorf("%d %s violations, want %d", got, kind, n)
		}
	}
	for _, x := range v.Violations {
		if !x.Fixed {
			t.Errorf("not fixed: %s: %s", x.Kind, x.Detail)
		}
	}
	if t.Failed() {
		for _, x := range v.Violations {
			t.Logf("%s fixed=%v: %s", x.Kind, x.Fixed, x.Detail)
		}
	}
	// Each report names what it found: whom the VNI key of a duplicate or half pair names.
	for _, want := range []string{
		"network default/dup (uid uid-dup) had VNI 100, whose key names network uid uid-ok: its key was removed",
		"network default/half (uid uid-half) had VNI 102, whose key names no network: its key was removed",
		"VNI 301 is held by network uid uid-ok, whose key names VNI \"100\"",
		"VNI 300 is held by network uid uid-gone, which is gone",
		"VNI key /seg/uid/uid-gone (VNI 300) belongs to network uid uid-gone, which is gone",
	} {
		if !slices.ContainsFunc(v.Violations, func(x Violation) bool { return x.Detail == want }) {
			t.Errorf("no violation reads %q", want)
		}
	}
	if keys.writesInStream != 0 {
		t.Errorf("%d fixes made while the VNI keys were streamed", keys.writesInStream)
	}
	slices.Sort(keys.removed)
	if w := []string{"/seg/uid/uid-dup", "/seg/uid/uid-gone", "/seg/uid/uid-half", "/seg/vni/300", "/seg/vni/301"}; !slices.Equal(keys.removed, w) {
		t.Errorf("removed %v, want %v", keys.removed, w)
	}
	slices.Sort(keys.assigned)
	if w := []string{"uid-dup", "uid-half", "uid-missing"}; !slices.Equal(keys.assigned, w) {
		t.Errorf("assigned %v, want %v", keys.assigned, w)
	}
	slices.Sort(mirrored)
	if w := []string{"default/dup uid-dup", "default/half uid-half", "default/missing uid-missing", "default/status uid-status"}; !slices.Equal(mirrored, w) {
		t.Errorf("mirrored %v, want %v", mirrored, w)
	}

	// A full range: the Network without a VNI is reported, not fixed, and nothing is mirrored.
	keys.full, keys.removed, keys.assigned, mirrored = true, nil, nil, nil
	delete(s.ByUID, "uid-gone")
	delete(s.ByVNI, 300)
	delete(s.ByVNI, 301)
	delete(s.ByUID, "uid-dup")
	delete(s.ByUID, "uid-half")
	vniPair(s, "uid-dup", 101, "uid-dup")
	vniPair(s, "uid-half", 102, "uid-half")
	vniPair(s, "uid-status", 7, "uid-status")
	delete(s.ByVNI, 200)
	if v, err = r.Verify(context.Background()); err != nil {
		t.Fatal(err)
	}
	if v.Count(ViolationVNIMissing) != 1 || len(v.Violations) != 1 || v.Violations[0].Fixed {
		t.Errorf("with the range full: %+v, want one unfixed %s", v.Violations, ViolationVNIMissing)
	}
	if len(mirrored) != 0 || len(keys.removed) != 0 {
		t.Errorf("with the range full: mirrored %v, removed %v", mirrored, keys.removed)
	}
}

// TestLaterVNIChecksReadKeysOnly: after the first verification, the VNI keys are read without
// their values when each was last written by its Network's create, with their values otherwise;
// whatever the keys cannot vouch for sends the check back to every value, and then it reports
// what a verification reading every value reports.
func TestLaterVNIChecksReadKeysOnly(t *testing.T) {
	// a, b and d were created with their pairs (at revisions 10, 11, 13); c's pair was assigned
	// after its create (at 50), as for a Network created before VNIs.
	build := func() (*fakeAllocations, *fakeVNIKeys) {
		f := &fakeAllocations{}
		keys := &fakeVNIKeys{stored: segment.Stored{ByVNI: map[int32]segment.Key{}, ByUID: map[string]segment.Key{}}}
		for i, name := range []string{"a", "b", "c", "d"} {
			vni, rev := int32(100+i), int64(10+i)
			f.storesWithVNI(t, name, vni)
			f.kvs[i].CreateRevision, f.kvs[i].ModRevision = rev, rev
			if name == "c" {
				rev = 50
			}
			vniPairAt(&keys.stored, "uid-"+name, vni, "uid-"+name, rev)
		}
		return f, keys
	}
	verify := func(f *fakeAllocations, keys *fakeVNIKeys, passes int) Verification {
		t.Helper()
		r := New(f, allocator.Scoping{}, "/networks/", decodeJSON).WithVNIs(keys, func(context.Context, string, string, types.UID) error { return nil })
		var v Verification
		for range passes {
			var err error
			if v, err = r.Verify(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		return v
	}
	details := func(v Verification) []string {
		var out []string
		for _, x := range v.Violations {
			out = append(out, x.Kind+": "+x.Detail)
		}
		slices.Sort(out)
		return out
	}

	f, keys := build()
	if v := verify(f, keys, 2); len(v.Violations) != 0 {
		t.Fatalf("healthy keys: %v", details(v))
	}
	if keys.eachs != 1 || keys.trusted != 6 || keys.valuesRead != 2 {
		t.Errorf("the second verification: %d streams with values after the first's, %d keys trusted, %d read with values; want 1, 6 (a, b, d), 2 (c's pair)",
			keys.eachs, keys.trusted, keys.valuesRead)
	}

	for _, tc := range []struct {
		name    string
		corrupt func(f *fakeAllocations, s *segment.Stored)
		clean   bool // the keys are right, but cannot be vouched for without their values
	}{
		{name: "a uid key written after the create", corrupt: func(_ *fakeAllocations, s *segment.Stored) {
			s.ByUID["uid-b"] = segment.Key{Key: "/seg/uid/uid-b", Value: "999", ModRevision: 60}
		}},
		{name: "a vni key written after the create names another Network", corrupt: func(_ *fakeAllocations, s *segment.Stored) {
			s.ByVNI[101] = segment.Key{Key: "/seg/vni/101", Value: "uid-a", ModRevision: 60}
		}},
		{name: "status.vni differs from the keys", corrupt: func(f *fakeAllocations, _ *segment.Stored) {
			f.setStatusVNI(t, 3, 7)
		}},
		{name: "a leftover vni key", corrupt: func(_ *fakeAllocations, s *segment.Stored) {
			s.ByVNI[400] = segment.Key{Key: "/seg/vni/400", Value: "uid-a", ModRevision: 70}
		}},
		{name: "a vni key gone", corrupt: func(_ *fakeAllocations, s *segment.Stored) {
			delete(s.ByVNI, 100)
		}},
		{name: "a uid key of a Network that is gone", corrupt: func(_ *fakeAllocations, s *segment.Stored) {
			s.ByUID["uid-gone"] = segment.Key{Key: "/seg/uid/uid-gone", Value: "500", ModRevision: 12}
		}},
		// The create's uid key names the VNI the create picked (100); status.vni and a later vni
		// key name another (105), whose key names a: the uid key's value must be read.
		{name: "status.vni and its vni key moved, the create's uid key left", corrupt: func(f *fakeAllocations, s *segment.Stored) {
			f.setStatusVNI(t, 0, 105)
			delete(s.ByVNI, 100)
			s.ByVNI[105] = segment.Key{Key: "/seg/vni/105", Value: "uid-a", ModRevision: 80}
		}},
		{name: "a vni key rewritten with the same value", clean: true, corrupt: func(_ *fakeAllocations, s *segment.Stored) {
			s.ByVNI[100] = segment.Key{Key: "/seg/vni/100", Value: "uid-a", ModRevision: 80}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, keys := build()
			tc.corrupt(f, &keys.stored)
			full := details(verify(f, keys, 1))
			if len(full) == 0 != tc.clean {
				t.Fatalf("a verification reading every value found %v", full)
			}
			keys.eachs = 0
			if got := details(verify(f, keys, 2)); !slices.Equal(got, full) {
				t.Errorf("the second verification found %v, a verification reading every value %v", got, full)
			}
			if keys.eachs != 2 {
				t.Errorf("%d verifications read every VNI value, want both", keys.eachs)
			}
		})
	}
}

// vniPairAt is vniPair with both keys last written at rev.
func vniPairAt(s *segment.Stored, uid string, vni int32, vniKeyNames string, rev int64) {
	vniPair(s, uid, vni, vniKeyNames)
	k := s.ByUID[uid]
	k.ModRevision = rev
	s.ByUID[uid] = k
	if vk, ok := s.ByVNI[vni]; ok {
		vk.ModRevision = rev
		s.ByVNI[vni] = vk
	}
}

// setStatusVNI rewrites the status.vni of the i-th Network stored, keeping its revisions.
func (f *fakeAllocations) setStatusVNI(t *testing.T, i int, vni int32) {
	var n samplecrd.Network
	if err := json.Unmarshal(f.kvs[i].Value, &n); err != nil {
		t.Fatal(err)
	}
	n.Status.VNI = vni
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	f.kvs[i].Value = data
}

// vniSingleAt adds the single layout's key of uid: the vni key alone, written at rev.
func vniSingleAt(s *segment.Stored, uid string, vni int32, rev int64) {
	s.ByVNI[vni] = segment.Key{Key: "/seg/vni/" + itoa(vni), Value: uid, ModRevision: rev}
}

// TestVerifyVNIsSingleLayout: a Network whose create wrote the vni key alone (the single layout)
// holds its VNI when that key is the one of its status.vni, beside Networks with pairs; another
// vni key naming it is a leftover; without the key of its status.vni it has none and is given
// one. A later verification reading keys only vouches for single keys written by their creates,
// and reads every value when one was written later, finding what a full read finds.
func TestVerifyVNIsSingleLayout(t *testing.T) {
	f := &fakeAllocations{}
	keys := &fakeVNIKeys{stored: segment.Stored{ByVNI: map[int32]segment.Key{}, ByUID: map[string]segment.Key{}}}
	s := &keys.stored
	for i, name := range []string{"single", "pair", "extra", "lost", "taken"} {
		vni, rev := int32(100+i), int64(10+i)
		f.storesWithVNI(t, name, vni)
		f.kvs[i].CreateRevision, f.kvs[i].ModRevision = rev, rev
		switch name {
		case "pair":
			vniPairAt(s, "uid-pair", vni, "uid-pair", rev)
		case "lost":
			// no key: the single layout's key gone
		case "taken":
			vniSingleAt(s, "uid-single", vni, 60) // names another Network
		default:
			vniSingleAt(s, "uid-"+name, vni, rev)
		}
	}
	var mirrored []string
	mirror := func(_ context.Context, ns, name string, uid types.UID) error {
		mirrored = append(mirrored, name)
		return nil
	}
	r := New(f, allocator.Scoping{}, "/networks/", decodeJSON).WithVNIs(keys, mirror)
	verify := func() []string {
		t.Helper()
		v, err := r.Verify(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, x := range v.Violations {
			if !x.Fixed {
				t.Errorf("not fixed: %s: %s", x.Kind, x.Detail)
			}
			out = append(out, x.Kind+": "+x.Detail)
		}
		slices.Sort(out)
		return out
	}

	// extra has a leftover besides its own key.
	vniSingleAt(s, "uid-extra", 150, 70)
	want := []string{
		ViolationVNIDuplicate + ": VNI 104 is held by network uid uid-single, which has no uid key and status.vni 100",
		ViolationVNIDuplicate + ": VNI 150 is held by network uid uid-extra, which has no uid key and status.vni 102",
		ViolationVNIMissing + ": network default/lost (uid uid-lost) has no VNI key",
		ViolationVNIMissing + ": network default/taken (uid uid-taken) has no VNI key",
		ViolationVNIStatus + ": network default/lost (uid uid-lost) has status.vni 103, its key VNI 900",
		ViolationVNIStatus + ": network default/taken (uid uid-taken) has status.vni 104, its key VNI 900",
	}
	if got := verify(); !slices.Equal(got, want) {
		t.Errorf("found\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	slices.Sort(keys.removed)
	if w := []string{"/seg/vni/104", "/seg/vni/150"}; !slices.Equal(keys.removed, w) {
		t.Errorf("removed %v, want %v", keys.removed, w)
	}
	slices.Sort(keys.assigned)
	if w := []string{"uid-lost", "uid-taken"}; !slices.Equal(keys.assigned, w) {
		t.Errorf("assigned %v, want %v", keys.assigned, w)
	}

	// Mended as the fixes left it: single, pair and extra as created; lost and taken with the
	// pairs their assignments wrote (after their creates), status.vni mirrored.
	delete(s.ByVNI, 104)
	delete(s.ByVNI, 150)
	f.setStatusVNI(t, 3, 200)
	f.setStatusVNI(t, 4, 201)
	vniPairAt(s, "uid-lost", 200, "uid-lost", 90)
	vniPairAt(s, "uid-taken", 201, "uid-taken", 91)
	keys.eachs, keys.trusted, keys.valuesRead = 0, 0, 0
	if got := verify(); len(got) != 0 {
		t.Fatalf("after the fixes: %v", got)
	}
	if keys.eachs != 0 || keys.trusted != 4 || keys.valuesRead != 4 {
		t.Errorf("a later verification: %d streams with every value, %d keys trusted, %d read with values; want 0, 4 (single, pair's two, extra), 4 (the assigned pairs)",
			keys.eachs, keys.trusted, keys.valuesRead)
	}
	// A single key rewritten after its create (say, naming another Network) is read and judged.
	s.ByVNI[100] = segment.Key{Key: "/seg/vni/100", Value: "uid-pair", ModRevision: 95}
	got := verify()
	if keys.eachs != 1 || !slices.Contains(got, ViolationVNIMissing+": network default/single (uid uid-single) has no VNI key") {
		t.Errorf("after a single key was rewritten: %d full reads, found %v", keys.eachs, got)
	}
}
