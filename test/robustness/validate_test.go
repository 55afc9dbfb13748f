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

package robustness

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apiserver"
)

// The suite's self-checks: the validation must catch each kind of violation it claims to, in
// histories and logs made up for the purpose, and pass the correct ones.

var testLayout = layout{Prefix: etcdPrefix}

// stored encodes a Network the way the server stores it (protobuf, v1).
func stored(t *testing.T, ns, name, uid, cidr string, mutate ...func(*v1.Network)) []byte {
	t.Helper()
	n := &v1.Network{TypeMeta: metav1.TypeMeta{APIVersion: "samplecrd.k8s.io/v1", Kind: "Network"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(uid)}, Spec: v1.NetworkSpec{CIDR: cidr}}
	for _, m := range mutate {
		m(n)
	}
	info, ok := runtime.SerializerInfoForMediaType(apiserver.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	var buf bytes.Buffer
	if err := apiserver.Codecs.EncoderForVersion(info.Serializer, v1.SchemeGroupVersion).Encode(n, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func netKey(ns, name string) string { return etcdPrefix + "/networks/" + ns + "/" + name }

func allocKey(l layout, ns, cidr string) string {
	return l.allocationKey(ns, netip.MustParsePrefix(cidr))
}

func allocValue(ns, name, uid, cidr string) []byte {
	b, _ := json.Marshal(allocation{CIDR: cidr, Namespace: ns, Name: name, UID: uid})
	return b
}

// create is the events of a create in one transaction.
func create(t *testing.T, l layout, rev int64, ns, name, uid, cidr string) []kvEvent {
	return []kvEvent{
		{Rev: rev, Key: netKey(ns, name), Value: stored(t, ns, name, uid, cidr)},
		{Rev: rev, Key: allocKey(l, ns, cidr), Value: allocValue(ns, name, uid, cidr)},
	}
}

func remove(l layout, rev int64, ns, name, cidr string) []kvEvent {
	return []kvEvent{{Rev: rev, Key: netKey(ns, name), Delete: true}, {Rev: rev, Key: allocKey(l, ns, cidr), Delete: true}}
}

func join(lists ...[]kvEvent) []kvEvent {
	var out []kvEvent
	for _, l := range lists {
		out = append(out, l...)
	}
	return out
}

func wantViolations(t *testing.T, r *replay, want ...string) {
	t.Helper()
	var got []string
	for _, v := range r.violations {
		got = append(got, invariantCheck(v.What)+"@"+itoa(v.FirstRev)+".."+itoa(v.LastRev))
	}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("violations %v, want %v\n%+v", got, want, r.violations)
	}
}

func itoa(i int64) string {
	return strings.TrimSpace(strings.Replace(time.Duration(i).String(), "ns", "", 1))
}

func TestInvariantHolds(t *testing.T) {
	l := testLayout
	r := replayHistory(l, join(
		create(t, l, 2, "a", "x", "u1", "10.1.0.0/24"),
		create(t, l, 3, "a", "y", "u2", "10.1.1.0/24"), // beside x
		create(t, l, 4, "b", "z", "u3", "fd01::/64"),
		remove(l, 5, "a", "x", "10.1.0.0/24"),
		create(t, l, 6, "a", "x", "u4", "10.1.0.0/16"), // re-created, now containing y's prefix? no: y is gone next
	))
	// x (10.1.0.0/16) contains y (10.1.1.0/24) at revision 6: the one overlap.
	wantViolations(t, r, "invariant/overlap@6..6")
	if len(r.changes) != 5 || r.changes[3].Type != "DELETED" || r.changes[3].Obj.UID != "u1" {
		t.Errorf("changes %+v", r.changes)
	}
}

func TestInvariantCatches(t *testing.T) {
	l := testLayout
	cases := map[string]struct {
		events []kvEvent
		want   []string
	}{
		"allocation without uid (owner is namespace/name)": {
			events: []kvEvent{
				{Rev: 2, Key: netKey("a", "x"), Value: stored(t, "a", "x", "u1", "10.1.0.0/24")},
				{Rev: 2, Key: allocKey(l, "a", "10.1.0.0/24"), Value: []byte(`{"cidr":"10.1.0.0/24","namespace":"a","name":"x","claimed":1}`)},
			},
			want: []string{"invariant/allocation-mismatch@2..2"},
		},
		"claim, then store (two revisions)": {
			events: []kvEvent{
				{Rev: 2, Key: allocKey(l, "a", "10.1.0.0/24"), Value: allocValue("a", "x", "u1", "10.1.0.0/24")},
				{Rev: 3, Key: netKey("a", "x"), Value: stored(t, "a", "x", "u1", "10.1.0.0/24")},
			},
			want: []string{"invariant/orphan-allocation@2..2"},
		},
		"delete, then release (two revisions)": {
			events: join(create(t, l, 2, "a", "x", "u1", "10.1.0.0/24"),
				[]kvEvent{{Rev: 3, Key: netKey("a", "x"), Delete: true}, {Rev: 4, Key: allocKey(l, "a", "10.1.0.0/24"), Delete: true}}),
			want: []string{"invariant/orphan-allocation@3..3"},
		},
		"another incarnation's allocation (same name, other uid)": {
			events: []kvEvent{
				{Rev: 2, Key: netKey("a", "x"), Value: stored(t, "a", "x", "u2", "10.1.0.0/24")},
				{Rev: 2, Key: allocKey(l, "a", "10.1.0.0/24"), Value: allocValue("a", "x", "u1", "10.1.0.0/24")},
			},
			want: []string{"invariant/allocation-mismatch@2..2"},
		},
		"network without allocation": {
			events: []kvEvent{{Rev: 2, Key: netKey("a", "x"), Value: stored(t, "a", "x", "u1", "10.1.0.0/24")}},
			want:   []string{"invariant/network-without-allocation@2..2"},
		},
		"same prefix twice (the intruder)": {
			events: join(create(t, l, 2, "a", "twin", "u1", "10.1.0.0/24"),
				[]kvEvent{{Rev: 3, Key: netKey("a", "intruder"), Value: stored(t, "a", "intruder", "u2", "10.1.0.0/24")}},
				remove(l, 4, "a", "twin", "10.1.0.0/24")),
			// Both need the same key at 3, which holds twin's record; once twin is gone,
			// intruder has no allocation.
			want: []string{"invariant/overlap@3..3", "invariant/allocation-mismatch@3..3", "invariant/other@3..3",
				"invariant/network-without-allocation@4..4"},
		},
		"contained IPv6 prefix across namespaces": {
			events: join(create(t, l, 2, "a", "x", "u1", "fd01::/48"), create(t, l, 3, "b", "y", "u2", "fd01:0:0:1::/64")),
			want:   []string{"invariant/overlap@3..3"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { wantViolations(t, replayHistory(l, tc.events), tc.want...) })
	}
	// Per-namespace scope: overlaps across namespaces are fine, keys are per namespace.
	ns := layout{Prefix: etcdPrefix, PerNamespace: true}
	wantViolations(t, replayHistory(ns, join(create(t, ns, 2, "a", "x", "u1", "10.0.0.0/8"), create(t, ns, 3, "b", "y", "u2", "10.1.0.0/24"))))
	wantViolations(t, replayHistory(ns, join(create(t, ns, 2, "a", "x", "u1", "10.0.0.0/8"), create(t, ns, 3, "a", "y", "u2", "10.1.0.0/24"))),
		"invariant/overlap@3..3")
	// A cluster-scope key in a namespace-scope layout is an orphan, and the Network lacks its key.
	wantViolations(t, replayHistory(ns, create(t, l, 2, "a", "x", "u1", "10.1.0.0/24")),
		"invariant/network-without-allocation@2..2", "invariant/orphan-allocation@2..2")
}

// With length records, each Network's prefix length must be recorded at every revision: in the
// create's own transaction, or earlier; deletes leave the key.
func TestInvariantLengthRecord(t *testing.T) {
	l := layout{Prefix: etcdPrefix, Lengths: true}
	length := func(rev int64, ns, cidr string) kvEvent {
		return kvEvent{Rev: rev, Key: l.lengthKey(ns, netip.MustParsePrefix(cidr))}
	}
	if got := l.lengthKey("a", netip.MustParsePrefix("fd01::/56")); got != etcdPrefix+"/allocation-lengths/_cluster/6/56" {
		t.Errorf("length key %s", got)
	}
	wantViolations(t, replayHistory(l, join(
		create(t, l, 2, "a", "x", "u1", "10.1.0.0/24"), []kvEvent{length(2, "a", "10.1.0.0/24")},
		create(t, l, 3, "a", "y", "u2", "10.2.0.0/24"), // the length is there already
		remove(l, 4, "a", "x", "10.1.0.0/24"),
		remove(l, 5, "a", "y", "10.2.0.0/24"),
		create(t, l, 6, "a", "x", "u3", "10.1.0.0/24"),
	)))
	wantViolations(t, replayHistory(l, join(
		create(t, l, 2, "a", "x", "u1", "10.1.0.0/24"), []kvEvent{length(2, "a", "10.1.0.0/24")},
		create(t, l, 3, "a", "w", "u2", "10.8.0.0/16"), // no key for 16 until 5
		[]kvEvent{length(5, "a", "10.8.0.0/16")},
		[]kvEvent{{Rev: 6, Key: length(6, "a", "10.1.0.0/24").Key, Delete: true}},
	)), "invariant/unrecorded-length@3..4", "invariant/unrecorded-length@6..6")
}

func ms(s int) int64 { return time.Unix(1000, 0).Add(time.Duration(s) * time.Millisecond).UnixNano() }

func TestOperationChecks(t *testing.T) {
	l := testLayout
	withOp := func(id string) func(*v1.Network) {
		return func(n *v1.Network) { n.Annotations = map[string]string{opAnnotation: id} }
	}
	events := []kvEvent{
		{Rev: 2, Key: netKey("a", "x"), Value: stored(t, "a", "x", "u1", "10.1.0.0/24", withOp("c0-1"))},
		{Rev: 2, Key: allocKey(l, "a", "10.1.0.0/24"), Value: allocValue("a", "x", "u1", "10.1.0.0/24")},
		// A create the client was told failed (409), stored anyway.
		{Rev: 3, Key: netKey("a", "y"), Value: stored(t, "a", "y", "u2", "10.1.1.0/24", withOp("c1-1"))},
		{Rev: 3, Key: allocKey(l, "a", "10.1.1.0/24"), Value: allocValue("a", "y", "u2", "10.1.1.0/24")},
		{Rev: 4, Key: netKey("a", "x"), Delete: true},
		{Rev: 4, Key: allocKey(l, "a", "10.1.0.0/24"), Delete: true},
	}
	r := replayHistory(l, events)
	outage := []fault{{Kind: faultKillEtcd, EtcdOutage: true, Replica: -1, Start: ms(1000), Restored: ms(2000), Ready: ms(3000)}}
	ops := []op{
		{ID: "c0-1", Kind: "create", Namespace: "a", Name: "x", CIDR: "10.1.0.0/24", Start: ms(0), End: ms(10), Code: 201, UID: "u1", RV: 2},
		{ID: "c1-1", Kind: "create", Namespace: "a", Name: "y", CIDR: "10.1.1.0/24", Start: ms(0), End: ms(10), Code: 409},
		{ID: "c2-1", Kind: "delete", Namespace: "a", Name: "x", Start: ms(20), End: ms(30), Code: 200, UID: "u1"},
		// Acknowledged, never stored.
		{ID: "c3-1", Kind: "create", Namespace: "a", Name: "z", CIDR: "10.2.0.0/24", Start: ms(20), End: ms(30), Code: 201, UID: "u9", RV: 5},
		// A delete acknowledged for an incarnation that was never deleted.
		{ID: "c4-1", Kind: "delete", Namespace: "a", Name: "y", Start: ms(20), End: ms(30), Code: 200, UID: "u7"},
		{ID: "c5-1", Kind: "label", Namespace: "a", Name: "y", Start: ms(40), End: ms(50), Code: 500, Message: "boom"},
		{ID: "c6-1", Kind: "label", Namespace: "a", Name: "y", Start: ms(40), End: ms(50), Code: 503},                 // no outage
		{ID: "c7-1", Kind: "label", Namespace: "a", Name: "y", Start: ms(1500), End: ms(1600), Code: 504},             // in the outage
		{ID: "c8-1", Kind: "label", Namespace: "a", Name: "y", Start: ms(40), End: ms(50), Err: "connection refused"}, // no fault
		{ID: "c9-1", Kind: "label", Namespace: "a", Name: "y", Start: ms(40), End: ms(50), Code: 400},
		// 503 from a replica shutting down gracefully: fine on that replica, not on another one.
		{ID: "c10-1", Replica: 1, Kind: "label", Namespace: "a", Name: "y", Start: ms(10000), End: ms(10001), Code: 503},
		{ID: "c11-1", Replica: 0, Kind: "label", Namespace: "a", Name: "y", Start: ms(10000), End: ms(10001), Code: 503},
	}
	outage = append(outage, fault{Kind: faultRestart, Replica: 1, Start: ms(9900), Restored: ms(10100), Ready: ms(10200)})
	f := validate(l, r, ops, nil, outage)
	want := map[string]int{checkFailed: 1, checkAcked: 2, checkStatus: 5}
	for check, n := range want {
		if len(f.byCheck[check]) != n {
			t.Errorf("%s: %d findings, want %d: %v", check, len(f.byCheck[check]), n, f.byCheck[check])
		}
	}
	for _, s := range []string{"c1-1", "c3-1", "c4-1", "c5-1", "c6-1", "c8-1", "c9-1", "c11-1"} {
		if !strings.Contains(f.summary(100), "op "+s+" ") {
			t.Errorf("no finding names %s:\n%s", s, f.summary(100))
		}
	}
	if strings.Contains(f.summary(100), "op c7-1 ") || strings.Contains(f.summary(100), "op c10-1 ") || strings.Contains(f.summary(100), "op c0-1 ") || strings.Contains(f.summary(100), "op c2-1 ") {
		t.Errorf("a correct operation was reported:\n%s", f.summary(100))
	}
}

func TestRealTimeOrder(t *testing.T) {
	ops := []op{
		{ID: "a", Kind: "label", Start: ms(0), End: ms(10), Code: 200, RV: 7},
		{ID: "b", Kind: "label", Start: ms(20), End: ms(30), Code: 200, RV: 5}, // after a, lower revision
		{ID: "c", Kind: "label", Start: ms(5), End: ms(40), Code: 200, RV: 6},  // concurrent with both: fine
	}
	f := &findings{}
	checkOrdering(f, ops)
	if got := f.byCheck[checkOrder]; len(got) != 1 || !strings.Contains(got[0], "op a ") || !strings.Contains(got[0], "op b ") {
		t.Errorf("findings %v, want one naming a before b", got)
	}
	f = &findings{}
	ops[1].RV = 8
	checkOrdering(f, ops)
	if f.total() != 0 {
		t.Errorf("ordered writes reported: %v", f.byCheck)
	}
}

func TestWatchChecks(t *testing.T) {
	l := testLayout
	r := replayHistory(l, join(
		create(t, l, 2, "a", "x", "u1", "10.1.0.0/24"),
		create(t, l, 3, "a", "y", "u2", "10.1.1.0/24"),
		remove(l, 4, "a", "x", "10.1.0.0/24"),
		create(t, l, 5, "a", "x", "u3", "10.1.0.0/24"),
	))
	list := watchRecord{Watcher: "w", Seg: 1, What: "list", RV: 2, Items: []listItem{{Key: "a/x", UID: "u1", RV: 2}}}
	ev := func(typ, key, uid string, rv int64) watchRecord {
		return watchRecord{Watcher: "w", Seg: 1, What: "event", Type: typ, Key: key, UID: uid, RV: rv}
	}
	good := []watchRecord{list, ev("ADDED", "a/y", "u2", 3), {Watcher: "w", Seg: 1, What: "resume", RV: 3},
		ev("DELETED", "a/x", "u1", 4), ev("ADDED", "a/x", "u3", 5)}
	f := &findings{}
	checkWatches(f, r, good)
	if f.total() != 0 {
		t.Fatalf("a correct watch was reported: %v", f.byCheck)
	}
	cases := map[string][]watchRecord{
		"gap":                {list, ev("ADDED", "a/y", "u2", 3), ev("ADDED", "a/x", "u3", 5)},
		"duplicate":          {list, ev("ADDED", "a/y", "u2", 3), ev("ADDED", "a/y", "u2", 3), ev("DELETED", "a/x", "u1", 4)},
		"out of order":       {list, ev("DELETED", "a/x", "u1", 4), ev("ADDED", "a/y", "u2", 3)},
		"not in the history": {list, ev("ADDED", "a/y", "u9", 3)},
		"wrong type":         {list, ev("MODIFIED", "a/y", "u2", 3)},
		"list differs":       {{Watcher: "w", Seg: 1, What: "list", RV: 3, Items: []listItem{{Key: "a/x", UID: "u1"}}}},
		"resume skipped an event": {list, ev("ADDED", "a/y", "u2", 3), {Watcher: "w", Seg: 1, What: "resume", RV: 4},
			ev("ADDED", "a/x", "u3", 5)},
	}
	for name, recs := range cases {
		f := &findings{}
		checkWatches(f, r, recs)
		if len(f.byCheck[checkWatch]) == 0 {
			t.Errorf("%s: not reported", name)
		}
	}
}

func TestExistenceChecks(t *testing.T) {
	l := testLayout
	r := replayHistory(l, join(
		create(t, l, 2, "a", "x", "u1", "10.1.0.0/24"),
		create(t, l, 3, "a", "y", "u2", "10.1.1.0/24"),
		remove(l, 4, "a", "x", "10.1.0.0/24"),
	))
	ops := []op{
		{ID: "c0-1", Kind: "create", Namespace: "a", Name: "x", Start: ms(0), End: ms(10), Code: 201, UID: "u1", RV: 2},
		{ID: "c0-2", Kind: "create", Namespace: "a", Name: "y", Start: ms(20), End: ms(30), Code: 201, UID: "u2", RV: 3},
		{ID: "c0-3", Kind: "delete", Namespace: "a", Name: "x", Start: ms(40), End: ms(50), Code: 200, UID: "u1", RV: 4},
		// Right: x existed at 2..3, y from 3 on.
		{ID: "c1-1", Kind: "create", Namespace: "a", Name: "x", Start: ms(12), End: ms(35), Code: 409, Reason: "AlreadyExists"},
		{ID: "c1-2", Kind: "label", Namespace: "a", Name: "x", Start: ms(55), End: ms(60), Code: 404},
		{ID: "c1-3", Kind: "label", Namespace: "a", Name: "y", Start: ms(5), End: ms(25), Code: 404}, // before 3
		// Wrong: x was gone for good after 4; y existed throughout after 3.
		{ID: "c2-1", Kind: "create", Namespace: "a", Name: "x", Start: ms(55), End: ms(60), Code: 409, Reason: "AlreadyExists"},
		{ID: "c2-2", Kind: "delete", Namespace: "a", Name: "y", Start: ms(35), End: ms(60), Code: 404},
	}
	f := &findings{}
	checkExistence(f, r, ops)
	got := f.byCheck[checkExists]
	if len(got) != 2 || !strings.Contains(got[0]+got[1], "op c2-1 ") || !strings.Contains(got[0]+got[1], "op c2-2 ") {
		t.Errorf("findings %v, want c2-1 and c2-2", got)
	}
}

func TestRefusedOverlapChecks(t *testing.T) {
	l := testLayout
	r := replayHistory(l, join(
		create(t, l, 2, "a", "x", "u1", "10.1.0.0/16"),
		remove(l, 3, "a", "x", "10.1.0.0/16"),
	))
	ops := []op{
		{ID: "c0-1", Kind: "create", Namespace: "a", Name: "x", CIDR: "10.1.0.0/16", Start: ms(0), End: ms(10), Code: 201, UID: "u1", RV: 2},
		{ID: "c0-2", Kind: "delete", Namespace: "a", Name: "x", Start: ms(40), End: ms(50), Code: 200, UID: "u1", RV: 3},
		// Right: x overlapped while it existed (and b/y in another namespace counts in cluster scope).
		{ID: "c1-1", Kind: "create", Namespace: "b", Name: "y", CIDR: "10.1.2.0/24", Start: ms(12), End: ms(30), Code: 422},
		{ID: "c1-2", Kind: "apply", Namespace: "a", Name: "z", CIDR: "10.0.0.0/8", Start: ms(35), End: ms(45), Code: 422},
		// Wrong: nothing overlaps 10.2.0.0/24, ever; nothing is left after x's delete.
		{ID: "c2-1", Kind: "create", Namespace: "a", Name: "y", CIDR: "10.2.0.0/24", Start: ms(12), End: ms(30), Code: 422},
		{ID: "c2-2", Kind: "create-v1beta1", Namespace: "a", Name: "y", CIDR: "10.1.0.0/24", Start: ms(55), End: ms(60), Code: 422},
	}
	f := &findings{}
	checkRefusedOverlaps(f, l, r, ops)
	got := strings.Join(f.byCheck[checkRefused], "\n")
	if len(f.byCheck[checkRefused]) != 2 || !strings.Contains(got, "op c2-1 ") || !strings.Contains(got, "op c2-2 ") {
		t.Errorf("findings %v, want c2-1 and c2-2", got)
	}
	// In namespace scope, another namespace's Network explains nothing.
	ns := layout{Prefix: etcdPrefix, PerNamespace: true}
	f = &findings{}
	checkRefusedOverlaps(f, ns, r, ops[:3])
	if len(f.byCheck[checkRefused]) != 1 || !strings.Contains(f.byCheck[checkRefused][0], "op c1-1 ") {
		t.Errorf("namespace scope: findings %v, want c1-1", f.byCheck[checkRefused])
	}
}

func TestNameLinearizability(t *testing.T) {
	ops := []op{
		{ID: "c0-1", Client: 0, Kind: "create", Namespace: "a", Name: "x", Start: ms(0), End: ms(10), Code: 201, UID: "u1", RV: 2},
		{ID: "c1-1", Client: 1, Kind: "label", Namespace: "a", Name: "x", Start: ms(20), End: ms(30), Code: 200, UID: "u1", RV: 3},
		{ID: "c0-2", Client: 0, Kind: "delete", Namespace: "a", Name: "x", Start: ms(40), End: ms(50), Code: 200, UID: "u1"},
		{ID: "c1-2", Client: 1, Kind: "status", Namespace: "a", Name: "x", Start: ms(60), End: ms(70), Code: 404},
		{ID: "c2-1", Client: 2, Kind: "label", Namespace: "a", Name: "x", Start: ms(5), End: ms(15), Err: "EOF"}, // no answer
	}
	f := &findings{}
	checkLinearizable(f, ops, 10*time.Second)
	if f.total() != 0 {
		t.Fatalf("a linearizable history was reported: %v", f.byCheck)
	}
	bad := map[string]op{
		"404 while present":                {ID: "c3-1", Client: 3, Kind: "label", Namespace: "a", Name: "x", Start: ms(20), End: ms(30), Code: 404},
		"AlreadyExists while absent":       {ID: "c3-1", Client: 3, Kind: "create", Namespace: "a", Name: "x", Start: ms(60), End: ms(70), Code: 409, Reason: "AlreadyExists"},
		"a second 201 while present":       {ID: "c3-1", Client: 3, Kind: "create", Namespace: "a", Name: "x", Start: ms(20), End: ms(30), Code: 201, UID: "u2"},
		"an update of another incarnation": {ID: "c3-1", Client: 3, Kind: "label", Namespace: "a", Name: "x", Start: ms(20), End: ms(30), Code: 200, UID: "u9"},
	}
	for name, o := range bad {
		f := &findings{}
		checkLinearizable(f, append(slices.Clone(ops), o), 10*time.Second)
		if len(f.byCheck[checkLinear]) != 1 {
			t.Errorf("%s: findings %v", name, f.byCheck)
		}
	}
}
