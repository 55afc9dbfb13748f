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

package release

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// fakeStore holds candidates in memory and commits a release as etcd would: only while the
// Network and the object are at the candidate's revisions.
type fakeStore struct {
	// networks: revision and entries per Network key; objects: revision per object key.
	networks map[string]*fakeNetwork
	objects  map[string]*fakeObject
	released []string
	// beforeRelease runs just before a release's compare (a write racing the transaction).
	beforeRelease func()
}

type fakeNetwork struct {
	rev      int64
	entries  map[string]*samplecrd.NetworkNodeStatus
	selector *metav1.LabelSelector
}

type fakeObject struct {
	network, node string
	rev           int64
}

func newFakeStore() *fakeStore {
	return &fakeStore{networks: map[string]*fakeNetwork{}, objects: map[string]*fakeObject{}}
}

func (f *fakeStore) Candidates(context.Context) ([]Candidate, error) {
	var out []Candidate
	for key, o := range f.objects {
		n := f.networks[o.network]
		c := Candidate{Namespace: "team", Network: o.network, Node: o.node, ObjectKey: key, ObjectRevision: o.rev,
			NetworkKey: o.network, NetworkRevision: n.rev, Entry: n.entries[o.node], Selector: n.selector,
			Blocks: []allocator.Allocation{{Prefix: netip.MustParsePrefix("10.0.0.0/28"), Node: o.node, Role: allocator.RoleBlock}}}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Candidate) int {
		if a.ObjectKey < b.ObjectKey {
			return -1
		}
		return 1
	})
	return out, nil
}

func (f *fakeStore) Release(_ context.Context, c Candidate) (bool, error) {
	if f.beforeRelease != nil {
		f.beforeRelease()
	}
	o := f.objects[c.ObjectKey]
	if o == nil || o.rev != c.ObjectRevision || f.networks[c.NetworkKey].rev != c.NetworkRevision {
		return false, nil
	}
	delete(f.objects, c.ObjectKey)
	f.released = append(f.released, c.ObjectKey)
	return true, nil
}

// statusWrite sets (nil: removes) node's entry of network, moving its revision as any write does.
func (f *fakeStore) statusWrite(network, node string, e *samplecrd.NetworkNodeStatus) {
	n := f.networks[network]
	n.rev++
	if e == nil {
		delete(n.entries, node)
	} else {
		n.entries[node] = e
	}
}

// fixture: Network "net" with BlockAllocations of nodes n1 and n2, each with an entry.
func fixture() *fakeStore {
	f := newFakeStore()
	f.networks["net"] = &fakeNetwork{rev: 10, entries: map[string]*samplecrd.NetworkNodeStatus{
		"n1": {NodeName: "n1", Leases: ptr.To[int32](3)},
		"n2": {NodeName: "n2", Leases: ptr.To[int32](0)},
	}}
	f.objects["net.n1"] = &fakeObject{network: "net", node: "n1", rev: 5}
	f.objects["net.n2"] = &fakeObject{network: "net", node: "n2", rev: 6}
	return f
}

type fakeNodes struct {
	gone   map[string]bool
	labels map[string]labels.Set // nil entry: unknown
	err    error
}

func (n *fakeNodes) Gone(_ context.Context, name string) (bool, error) { return n.gone[name], n.err }

func (n *fakeNodes) Labels(name string) (labels.Set, bool) {
	set, ok := n.labels[name]
	return set, ok
}

const grace = 30 * time.Second

func newReleaser(f *fakeStore, nodes Nodes) (*Releaser, *testingclock.FakeClock) {
	clock := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	r := &Releaser{Store: f, Grace: grace, Clock: clock}
	if nodes != nil {
		r.Nodes = nodes
	}
	return r, clock
}

func pass(t *testing.T, r *Releaser) int {
	t.Helper()
	n, err := r.Pass(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStandaloneReleaseAfterGrace: an entry removed releases that node's blocks once a second
// observation a grace later finds the same revisions, and never the other node's.
func TestStandaloneReleaseAfterGrace(t *testing.T) {
	f := fixture()
	r, clock := newReleaser(f, nil)
	if got := pass(t, r); got != 0 || len(f.released) != 0 {
		t.Fatalf("released %v with every entry there", f.released)
	}
	f.statusWrite("net", "n2", nil)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v at the first observation", f.released)
	}
	clock.Step(grace - time.Second)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v before the grace", f.released)
	}
	clock.Step(time.Second)
	if got := pass(t, r); got != 1 || !slices.Equal(f.released, []string{"net.n2"}) {
		t.Fatalf("after the grace: released %d %v, want net.n2", got, f.released)
	}
	clock.Step(time.Hour)
	if pass(t, r); !slices.Equal(f.released, []string{"net.n2"}) {
		t.Fatalf("n1 (entry there) released too: %v", f.released)
	}
}

// TestStandaloneEntryWithZeroLeasesKept: in standalone mode only a missing entry releases; an
// entry reporting no leases is a live agent's.
func TestStandaloneEntryWithZeroLeasesKept(t *testing.T) {
	f := fixture()
	r, clock := newReleaser(f, nil)
	pass(t, r)
	clock.Step(2 * grace)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v", f.released)
	}
}

// TestEntryReappearsBetweenObservations: the entry is back at the second observation: nothing
// is released, and a later removal starts a whole new grace.
func TestEntryReappearsBetweenObservations(t *testing.T) {
	f := fixture()
	r, clock := newReleaser(f, nil)
	f.statusWrite("net", "n2", nil)
	pass(t, r)
	clock.Step(grace / 2)
	f.statusWrite("net", "n2", &samplecrd.NetworkNodeStatus{NodeName: "n2", Leases: ptr.To[int32](1)})
	clock.Step(grace)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v though the entry came back", f.released)
	}
	f.statusWrite("net", "n2", nil)
	pass(t, r)
	clock.Step(grace - time.Second)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v: the old first observation counted", f.released)
	}
	clock.Step(time.Second)
	if pass(t, r); !slices.Equal(f.released, []string{"net.n2"}) {
		t.Fatalf("released %v, want net.n2", f.released)
	}
}

// TestEntryFlickersBetweenObservations: the entry came back and went again between the two
// observations (both find it missing): the Network's revision moved, so the grace starts again.
func TestEntryFlickersBetweenObservations(t *testing.T) {
	f := fixture()
	r, clock := newReleaser(f, nil)
	f.statusWrite("net", "n2", nil)
	pass(t, r)
	clock.Step(grace / 2)
	f.statusWrite("net", "n2", &samplecrd.NetworkNodeStatus{NodeName: "n2", Leases: ptr.To[int32](1)})
	f.statusWrite("net", "n2", nil)
	clock.Step(grace)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v across writes it never saw", f.released)
	}
	clock.Step(grace)
	if pass(t, r); !slices.Equal(f.released, []string{"net.n2"}) {
		t.Fatalf("released %v, want net.n2", f.released)
	}
}

// TestClaimBetweenObservations: a claim (the object's revision moved) restarts the grace.
func TestClaimBetweenObservations(t *testing.T) {
	f := fixture()
	r, clock := newReleaser(f, nil)
	f.statusWrite("net", "n2", nil)
	pass(t, r)
	f.objects["net.n2"].rev = 40
	clock.Step(grace)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v after a claim", f.released)
	}
}

// TestStatusWriteRacesTheRelease: a status write between the second observation and the
// transaction fails its compare: nothing is released, and the next passes decide again.
func TestStatusWriteRacesTheRelease(t *testing.T) {
	f := fixture()
	r, clock := newReleaser(f, nil)
	f.statusWrite("net", "n2", nil)
	pass(t, r)
	clock.Step(grace)
	f.beforeRelease = func() {
		f.beforeRelease = nil
		f.statusWrite("net", "n2", &samplecrd.NetworkNodeStatus{NodeName: "n2", Leases: ptr.To[int32](2)})
	}
	if got := pass(t, r); got != 0 || len(f.released) != 0 {
		t.Fatalf("released %d %v though a status write raced the transaction", got, f.released)
	}
	clock.Step(grace)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v though the entry is back", f.released)
	}
}

// TestAttachedRule: attached, the Node must be gone and the entry missing or reporting zero
// leases explicitly; a missing leases field is unknown and keeps the blocks.
func TestAttachedRule(t *testing.T) {
	for _, tc := range []struct {
		name    string
		entry   *samplecrd.NetworkNodeStatus // n2's
		gone    bool
		release bool
	}{
		{"node deleted, entry gone", nil, true, true},
		{"node deleted, zero leases", &samplecrd.NetworkNodeStatus{NodeName: "n2", Leases: ptr.To[int32](0)}, true, true},
		{"node deleted, leases unknown", &samplecrd.NetworkNodeStatus{NodeName: "n2"}, true, false},
		{"node deleted, leases held", &samplecrd.NetworkNodeStatus{NodeName: "n2", Leases: ptr.To[int32](2)}, true, false},
		{"node there, entry gone", nil, false, false},
		{"node there, zero leases", &samplecrd.NetworkNodeStatus{NodeName: "n2", Leases: ptr.To[int32](0)}, false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fixture()
			f.statusWrite("net", "n2", tc.entry)
			r, clock := newReleaser(f, &fakeNodes{gone: map[string]bool{"n2": tc.gone, "n1": true}})
			pass(t, r)
			clock.Step(grace)
			pass(t, r)
			if got := slices.Contains(f.released, "net.n2"); got != tc.release {
				t.Errorf("released n2: %v, want %v", got, tc.release)
			}
			if slices.Contains(f.released, "net.n1") {
				t.Errorf("n1 (gone, 3 leases) released")
			}
		})
	}
}

// TestAttachedNodeComesBack: a Node created again between the observations keeps the blocks.
func TestAttachedNodeComesBack(t *testing.T) {
	f := fixture()
	f.statusWrite("net", "n2", nil)
	nodes := &fakeNodes{gone: map[string]bool{"n2": true}}
	r, clock := newReleaser(f, nodes)
	pass(t, r)
	nodes.gone["n2"] = false
	clock.Step(grace)
	pass(t, r)
	nodes.gone["n2"] = true
	clock.Step(grace / 2)
	if pass(t, r); len(f.released) != 0 {
		t.Fatalf("released %v", f.released)
	}
}

// TestAttachedNodeLookupFails: when the Node cannot be read, nothing is released.
func TestAttachedNodeLookupFails(t *testing.T) {
	f := fixture()
	f.statusWrite("net", "n2", nil)
	r, clock := newReleaser(f, &fakeNodes{gone: map[string]bool{"n2": true}, err: errors.New("no quorum")})
	pass := func() {
		if _, err := r.Pass(context.Background()); err == nil {
			t.Fatal("no error")
		}
	}
	pass()
	clock.Step(grace)
	pass()
	if len(f.released) != 0 {
		t.Fatalf("released %v without reading the Node", f.released)
	}
}

func TestInterval(t *testing.T) {
	for grace, want := range map[time.Duration]time.Duration{
		30 * time.Second: 15 * time.Second, time.Minute: 15 * time.Second, 2 * time.Second: time.Second, 100 * time.Millisecond: time.Second,
	} {
		if got := Interval(grace); got != want {
			t.Errorf("Interval(%v) = %v, want %v", grace, got, want)
		}
	}
}

// TestAttachedNotSelected: attached, a Node the Network's spec.nodeSelector no longer selects
// loses its blocks once its agent has withdrawn its entry (after draining); an entry still there
// (even reporting zero leases), a selected Node, or labels the server cannot tell keep them.
func TestAttachedNotSelected(t *testing.T) {
	zone := &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	for _, tc := range []struct {
		name     string
		entry    *samplecrd.NetworkNodeStatus // n2's
		selector *metav1.LabelSelector
		labels   labels.Set // n2's; nil: unknown
		release  bool
	}{
		{"deselected, entry withdrawn", nil, zone, labels.Set{"zone": "b"}, true},
		{"deselected, entry reports zero leases", &samplecrd.NetworkNodeStatus{NodeName: "n2", Leases: ptr.To[int32](0)}, zone, labels.Set{"zone": "b"}, false},
		{"deselected, draining", &samplecrd.NetworkNodeStatus{NodeName: "n2", Leases: ptr.To[int32](1), Reason: "NotSelected"}, zone, labels.Set{"zone": "b"}, false},
		{"selected, entry withdrawn", nil, zone, labels.Set{"zone": "a"}, false},
		{"no selector, entry withdrawn", nil, nil, labels.Set{"zone": "b"}, false},
		{"labels unknown, entry withdrawn", nil, zone, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fixture()
			f.networks["net"].selector = tc.selector
			f.statusWrite("net", "n2", tc.entry)
			nodes := &fakeNodes{gone: map[string]bool{}, labels: map[string]labels.Set{"n1": {"zone": "a"}}}
			if tc.labels != nil {
				nodes.labels["n2"] = tc.labels
			}
			r, clock := newReleaser(f, nodes)
			pass(t, r)
			clock.Step(grace)
			pass(t, r)
			if got := slices.Contains(f.released, "net.n2"); got != tc.release {
				t.Errorf("released n2: %v, want %v", got, tc.release)
			}
			if slices.Contains(f.released, "net.n1") {
				t.Errorf("n1 (selected, 3 leases) released")
			}
		})
	}
}
