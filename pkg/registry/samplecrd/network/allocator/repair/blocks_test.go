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
	"net/netip"
	"slices"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// fakeBlockKeys holds block keys in memory and records the fixes asked of it; a write of a
// prefix in overlapping answers an overlap.
type fakeBlockKeys struct {
	stored      []allocator.Stored
	overlapping map[netip.Prefix]bool
	removed     []string
	written     []string
	// streaming: an Each is under way; writesInStream counts the fixes made then.
	streaming      bool
	writesInStream int
	// trusted counts the keys EachTrusting handed out without values.
	trusted int
}

var _ BlockKeys = &fakeBlockKeys{}

func (f *fakeBlockKeys) Each(_ context.Context, rev int64, fn func(allocator.Stored) error) (int64, error) {
	return rev, stream(&f.streaming, f.stored, fn)
}

// EachTrusting hands out the keys trust accepts without their allocation, as the allocator does
// after a keys-only read, and counts them.
func (f *fakeBlockKeys) EachTrusting(_ context.Context, rev int64, trust func([]byte, int64) bool, fn func(allocator.Stored) error) (int64, error) {
	trusted, _, err := streamTrusting(&f.streaming, f.stored, trust, fn)
	f.trusted += trusted
	return rev, err
}

func (f *fakeBlockKeys) Root() string { return "/blocks/" }

func (f *fakeBlockKeys) Key(scope string, p netip.Prefix) string {
	return "/blocks/" + scope + "/" + p.String()
}

func (f *fakeBlockKeys) Remove(_ context.Context, key string, _ int64) (bool, error) {
	if f.streaming {
		f.writesInStream++
	}
	f.removed = append(f.removed, key)
	return true, nil
}

func (f *fakeBlockKeys) Write(_ context.Context, al allocator.Allocation, _ []clientv3.Cmp, _ []clientv3.Op,
	_ func([]*etcdserverpb.ResponseOp) error, _ ...clientv3.Op) (int64, error) {
	if f.streaming {
		f.writesInStream++
	}
	if f.overlapping[al.Prefix] {
		return 0, &allocator.OverlapError{Allocation: al}
	}
	f.written = append(f.written, al.Role+" "+al.Prefix.String()+" "+al.Node)
	return 8, nil
}

// block is a block key as the claims write it.
func block(uid, name, cidr, node, role string) allocator.Stored {
	p := netip.MustParsePrefix(cidr)
	return allocator.Stored{
		Allocation: allocator.Allocation{Scope: "uid-" + uid, Prefix: p, Owner: allocator.Owner{Namespace: "default", Name: name, UID: "uid-" + uid},
			Node: node, Role: role},
		Key: "/blocks/uid-" + uid + "/" + p.String(),
	}
}

// storesWithGateway is stores with a gateway.
func (f *fakeAllocations) storesWithGateway(t *testing.T, name, uid, cidr, gateway string) {
	n := samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + uid)},
		Spec: samplecrd.NetworkSpec{CIDR: cidr, Gateway: gateway}}
	data, err := json.Marshal(n)
	if err != nil {
		t.Fatal(err)
	}
	f.kvs = append(f.kvs, &mvccpb.KeyValue{Key: []byte("/networks/default/" + name), Value: data, CreateRevision: 1, ModRevision: 1})
}

// storesBlocks adds a BlockAllocation as JSON under /blockallocations/default/<network>.<node>.
func (f *fakeAllocations) storesBlocks(t *testing.T, network, uid, node string, cidrs ...string) {
	b := samplecrd.BlockAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: network + "." + node},
		Network: network, NetworkUID: "uid-" + uid, NodeName: node}
	for _, c := range cidrs {
		b.Blocks = append(b.Blocks, samplecrd.Block{CIDR: c, Origin: samplecrd.BlockOriginClaimed})
	}
	data, err := json.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	f.kvs = append(f.kvs, &mvccpb.KeyValue{Key: []byte("/blockallocations/default/" + b.Name), Value: data, CreateRevision: 2, ModRevision: 3})
}

func decodeBlocksJSON(_ context.Context, kv *mvccpb.KeyValue) (*samplecrd.BlockAllocation, error) {
	b := &samplecrd.BlockAllocation{}
	return b, json.Unmarshal(kv.Value, b)
}

// TestVerifyBlocks checks every block violation with explicit inputs, and what the verifier
// fixes (removals, restored keys, gateway keys) and only reports.
func TestVerifyBlocks(t *testing.T) {
	f := &fakeAllocations{}
	// ok: a gateway key and two nodes' blocks, all as they should be.
	f.storesWithGateway(t, "ok", "ok", "10.0.0.0/24", "10.0.0.1")
	f.storesBlocks(t, "ok", "ok", "n1", "10.0.0.64/26")
	f.storesBlocks(t, "ok", "ok", "n2", "10.0.0.128/26")
	// keys: an orphan block key, a missing key (restorable), a missing key that would overlap,
	// a key of another node, no gateway key.
	f.storesWithGateway(t, "keys", "keys", "10.1.0.0/24", "10.1.0.1")
	f.storesBlocks(t, "keys", "keys", "n1", "10.1.0.64/26", "10.1.0.128/26", "10.1.0.192/27")
	// bad: a block outside the prefix, two overlapping blocks, the gateway inside a block, a
	// stale gateway key.
	f.storesWithGateway(t, "bad", "bad", "10.2.0.0/24", "10.2.0.70")
	f.storesBlocks(t, "bad", "bad", "n1", "10.2.0.64/26", "10.3.0.0/26")
	f.storesBlocks(t, "bad", "bad", "n2", "10.2.0.96/27")
	// gone: an object and keys of a Network that is no longer stored.
	f.storesBlocks(t, "gone", "gone", "n1", "10.9.0.0/26")
	// bare: no block key at all, not even its gateway's.
	f.storesWithGateway(t, "bare", "bare", "10.4.0.0/24", "10.4.0.1")
	f.stored = []allocator.Stored{allocation("ok", "ok", "10.0.0.0/24"), allocation("keys", "keys", "10.1.0.0/24"), allocation("bad", "bad", "10.2.0.0/24"),
		allocation("bare", "bare", "10.4.0.0/24")}

	keys := &fakeBlockKeys{overlapping: map[netip.Prefix]bool{netip.MustParsePrefix("10.1.0.192/27"): true}, stored: []allocator.Stored{
		block("ok", "ok", "10.0.0.1/32", "", allocator.RoleGateway),
		block("ok", "ok", "10.0.0.64/26", "n1", allocator.RoleBlock),
		block("ok", "ok", "10.0.0.128/26", "n2", allocator.RoleBlock),
		block("keys", "keys", "10.1.0.0/28", "n9", allocator.RoleBlock),
		block("keys", "keys", "10.1.0.64/26", "n2", allocator.RoleBlock),
		block("bad", "bad", "10.2.0.1/32", "", allocator.RoleGateway),
		block("bad", "bad", "10.2.0.64/26", "n1", allocator.RoleBlock),
		block("bad", "bad", "10.2.0.96/27", "n2", allocator.RoleBlock),
		block("bad", "bad", "10.3.0.0/26", "n1", allocator.RoleBlock),
		block("gone", "gone", "10.9.0.0/26", "n1", allocator.RoleBlock),
	}}
	// ok's gateway key was written with its create (its CreateRevision, 1); bad's stale one
	// later. The second pass reads the block keys without values where it can trust them, and
	// must find and fix the same.
	keys.stored[0].ModRevision, keys.stored[5].ModRevision = 1, 5
	r := New(f, allocator.Scoping{}, "/networks/", decodeJSON).WithBlocks(keys, "/blockallocations/", decodeBlocksJSON)
	for pass := range 2 {
		keys.removed, keys.written, keys.trusted = nil, nil, 0
		verifyBlocksPass(t, r, keys)
		if want := pass; keys.trusted != want {
			t.Errorf("pass %d: %d block keys trusted, want %d (ok's gateway key in the second)", pass, keys.trusted, want)
		}
	}
}

func verifyBlocksPass(t *testing.T, r *Repair, keys *fakeBlockKeys) {
	t.Helper()
	v, err := r.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{
		ViolationBlockOrphan: 2, ViolationBlockMissing: 2, ViolationBlockOwner: 1,
		ViolationBlockOutside: 1, ViolationBlockOverlap: 1, ViolationGatewayInBlock: 1, ViolationBlockNetworkGone: 2,
	}
	for kind, n := range want {
		if got := v.Count(kind); got != n {
			t.Errorf("%d %s violations, want %d", got, kind, n)
		}
	}
	if t.Failed() {
		for _, x := range v.Violations {
			t.Logf("%s fixed=%v: %s", x.Kind, x.Fixed, x.Detail)
		}
	}
	slices.Sort(keys.removed)
	wantRemoved := []string{"/blockallocations/default/gone.n1", "/blocks/uid-bad/10.2.0.1/32", "/blocks/uid-gone/10.9.0.0/26", "/blocks/uid-keys/10.1.0.0/28"}
	if !slices.Equal(keys.removed, wantRemoved) {
		t.Errorf("removed %v, want %v", keys.removed, wantRemoved)
	}
	// Restored: keys' 10.1.0.128/26 (10.1.0.192/27 would overlap). No gateway key is written for
	// keys and bare, which have none (TestVerifyBlocksWithoutGatewayKeys).
	wantWritten := []string{"block 10.1.0.128/26 n1"}
	slices.Sort(keys.written)
	if !slices.Equal(keys.written, wantWritten) {
		t.Errorf("written %v, want %v", keys.written, wantWritten)
	}
	if keys.writesInStream != 0 {
		t.Errorf("%d fixes made while the block keys were streamed", keys.writesInStream)
	}
}

// A Network without a gateway key is no fault and gets none: with --gateway-keys=none it has
// none, and a build before that adds it itself when it claims. A gateway inside a block is still
// found (from spec.gateway), a gateway key still counts as the gateway's, and a stale one is
// still removed.
func TestVerifyBlocksWithoutGatewayKeys(t *testing.T) {
	f := &fakeAllocations{}
	f.storesWithGateway(t, "a", "a", "10.0.0.0/24", "10.0.0.1")
	f.storesBlocks(t, "a", "a", "n1", "10.0.0.64/26")
	f.storesWithGateway(t, "b", "b", "10.1.0.0/24", "10.1.0.70")
	f.storesBlocks(t, "b", "b", "n1", "10.1.0.64/26")
	f.storesWithGateway(t, "c", "c", "10.2.0.0/24", "10.2.0.1")
	f.storesWithGateway(t, "d", "d", "10.3.0.0/24", "10.3.0.1")
	f.stored = []allocator.Stored{allocation("a", "a", "10.0.0.0/24"), allocation("b", "b", "10.1.0.0/24"),
		allocation("c", "c", "10.2.0.0/24"), allocation("d", "d", "10.3.0.0/24")}
	keys := &fakeBlockKeys{stored: []allocator.Stored{
		block("a", "a", "10.0.0.64/26", "n1", allocator.RoleBlock),
		block("b", "b", "10.1.0.64/26", "n1", allocator.RoleBlock),
		block("c", "c", "10.2.0.1/32", "", allocator.RoleGateway),
		block("d", "d", "10.3.0.9/32", "", allocator.RoleGateway),
	}}
	r := New(f, allocator.Scoping{}, "/networks/", decodeJSON).WithBlocks(keys, "/blockallocations/", decodeBlocksJSON)
	v, err := r.Verify(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{ViolationGatewayInBlock: 1, ViolationBlockOrphan: 1}
	for kind, n := range want {
		if got := v.Count(kind); got != n {
			t.Errorf("%d %s violations, want %d", got, kind, n)
		}
	}
	if len(v.Violations) != 2 {
		for _, x := range v.Violations {
			t.Logf("%s fixed=%v: %s", x.Kind, x.Fixed, x.Detail)
		}
		t.Errorf("%d violations, want 2", len(v.Violations))
	}
	if len(keys.written) != 0 {
		t.Errorf("written %v, want nothing", keys.written)
	}
	if want := []string{"/blocks/uid-d/10.3.0.9/32"}; !slices.Equal(keys.removed, want) {
		t.Errorf("removed %v, want %v", keys.removed, want)
	}
}
