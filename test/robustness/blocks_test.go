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
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apiserver"
)

// The block and segment invariant's self-checks: histories as the server writes them (create
// with gateway and VNI keys, claims, a gateway move, delete) pass; each made-up fault is caught.

var blockLayout = layout{Prefix: etcdPrefix, Blocks: true}

func encodeProto(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	info, ok := runtime.SerializerInfoForMediaType(apiserver.Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		t.Fatal("no protobuf serializer")
	}
	var buf bytes.Buffer
	if err := apiserver.Codecs.EncoderForVersion(info.Serializer, v1.SchemeGroupVersion).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// bnet is a Network of the block tests: its gateway and VNI.
type bnet struct {
	ns, name, uid, cidr, gateway string
	vni                          int64
}

func (n bnet) value(t *testing.T) []byte {
	return stored(t, n.ns, n.name, n.uid, n.cidr, func(o *v1.Network) {
		o.Spec.Gateway, o.Status.VNI = n.gateway, int32(n.vni)
	})
}

func recordValue(n bnet, cidr, node, role string) []byte {
	b, _ := json.Marshal(blockRecord{CIDR: cidr, Namespace: n.ns, Name: n.name, UID: n.uid, Node: node, Role: role})
	return b
}

func (n bnet) gatewayKey(gw string) string {
	a := netip.MustParseAddr(gw)
	return blockLayout.blockKey(n.uid, netip.PrefixFrom(a, a.BitLen()))
}

func (n bnet) blockKey(cidr string) string {
	return blockLayout.blockKey(n.uid, netip.MustParsePrefix(cidr))
}

func objKey(ns, network, node string) string {
	return etcdPrefix + "/blockallocations/" + ns + "/" + network + "." + node
}

// object is the BlockAllocation of node in n listing blocks.
func (n bnet) object(t *testing.T, node string, blocks ...string) []byte {
	b := &v1.BlockAllocation{TypeMeta: metav1.TypeMeta{APIVersion: "samplecrd.k8s.io/v1", Kind: "BlockAllocation"},
		ObjectMeta: metav1.ObjectMeta{Namespace: n.ns, Name: n.name + "." + node, UID: types.UID("obj-" + n.uid + "-" + node)},
		Network:    n.name, NetworkUID: n.uid, NodeName: node}
	for _, c := range blocks {
		b.Blocks = append(b.Blocks, v1.Block{CIDR: c})
	}
	return encodeProto(t, b)
}

// created is the create transaction: the Network, its allocation, gateway key and VNI keys.
func (n bnet) created(t *testing.T, rev int64) []kvEvent {
	l := blockLayout
	return []kvEvent{
		{Rev: rev, Key: netKey(n.ns, n.name), Value: n.value(t)},
		{Rev: rev, Key: allocKey(l, n.ns, n.cidr), Value: allocValue(n.ns, n.name, n.uid, n.cidr)},
		{Rev: rev, Key: n.gatewayKey(n.gateway), Value: recordValue(n, n.gateway+"/"+strconv.Itoa(netip.MustParseAddr(n.gateway).BitLen()), "", "gateway")},
		{Rev: rev, Key: l.vniKey(n.vni), Value: []byte(n.uid)},
		{Rev: rev, Key: l.vniUIDKey(n.uid), Value: []byte(strconv.FormatInt(n.vni, 10))},
	}
}

// createdSingle is the create transaction of the single VNI layout (--vni-keys=single): no uid key.
func (n bnet) createdSingle(t *testing.T, rev int64) []kvEvent {
	ev := n.created(t, rev)
	return ev[:len(ev)-1]
}

// claimed is a claim's transaction: the node's object (listing all its blocks) and the new key.
func (n bnet) claimed(t *testing.T, rev int64, node, newBlock string, blocks ...string) []kvEvent {
	return []kvEvent{
		{Rev: rev, Key: objKey(n.ns, n.name, node), Value: n.object(t, node, append(blocks, newBlock)...)},
		{Rev: rev, Key: n.blockKey(newBlock), Value: recordValue(n, newBlock, node, "block")},
	}
}

// deleted is the delete transaction: everything of n, with the keys of blocks and nodes.
func (n bnet) deleted(rev int64, blocks []string, nodes ...string) []kvEvent {
	l := blockLayout
	ev := []kvEvent{
		{Rev: rev, Key: netKey(n.ns, n.name), Delete: true},
		{Rev: rev, Key: allocKey(l, n.ns, n.cidr), Delete: true},
		{Rev: rev, Key: n.gatewayKey(n.gateway), Delete: true},
		{Rev: rev, Key: l.vniKey(n.vni), Delete: true},
		{Rev: rev, Key: l.vniUIDKey(n.uid), Delete: true},
	}
	for _, b := range blocks {
		ev = append(ev, kvEvent{Rev: rev, Key: n.blockKey(b), Delete: true})
	}
	for _, node := range nodes {
		ev = append(ev, kvEvent{Rev: rev, Key: objKey(n.ns, n.name, node), Delete: true})
	}
	return ev
}

// moved is a gateway move: the Network with its new gateway, the old key gone, the new one put.
func (n bnet) moved(t *testing.T, rev int64, gw string) ([]kvEvent, bnet) {
	old := n
	n.gateway = gw
	return []kvEvent{
		{Rev: rev, Key: netKey(n.ns, n.name), Value: n.value(t)},
		{Rev: rev, Key: old.gatewayKey(old.gateway), Delete: true},
		{Rev: rev, Key: n.gatewayKey(gw), Value: recordValue(n, gw+"/32", "", "gateway")},
	}, n
}

var (
	netX = bnet{ns: "a", name: "x", uid: "u1", cidr: "10.1.0.0/16", gateway: "10.1.0.1", vni: 1048577}
	netY = bnet{ns: "a", name: "y", uid: "u2", cidr: "fd01::/64", gateway: "fd01::1", vni: 1048578}
)

// wantKinds compares the invariant violations (kind@first..last), in any order.
func wantKinds(t *testing.T, r *replay, want ...string) {
	t.Helper()
	var got []string
	for _, v := range r.violations {
		got = append(got, invariantCheck(v.What)+"@"+itoa(v.FirstRev)+".."+itoa(v.LastRev))
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		var whats []string
		for _, v := range r.violations {
			whats = append(whats, v.What)
		}
		t.Errorf("violations %v, want %v\n%s", got, want, strings.Join(whats, "\n"))
	}
}

func TestBlockInvariantHolds(t *testing.T) {
	move, x2 := netX.moved(t, 7, "10.1.0.200")
	r := replayHistory(blockLayout, join(
		netX.created(t, 2),
		netY.created(t, 3),
		netX.claimed(t, 4, "n0", "10.1.0.64/26"),
		netX.claimed(t, 5, "n1", "10.1.0.128/26"),
		netX.claimed(t, 6, "n0", "10.1.1.0/26", "10.1.0.64/26"),
		netY.claimed(t, 6, "n0", "fd01::40/122"),
		move,
		x2.deleted(8, []string{"10.1.0.64/26", "10.1.0.128/26", "10.1.1.0/26"}, "n0", "n1"),
	))
	wantKinds(t, r)
	// The single VNI layout beside the pair: y's create wrote its vni key alone.
	wantKinds(t, replayHistory(blockLayout, join(netX.created(t, 2), netY.createdSingle(t, 3),
		netY.deleted(4, nil))))
	if got, ok := r.blockPuts[blockPut{6, "a/x.n0"}]; !ok || !slices.Equal(got.Blocks, []string{"10.1.0.64/26", "10.1.1.0/26"}) || got.NetworkUID != "u1" {
		t.Errorf("block allocation a/x.n0 at revision 6: %+v, %v", got, ok)
	}
	if st := r.final; len(st.blocks) != 2 || len(st.blockObjs) != 1 || len(st.segments) != 2 {
		t.Errorf("final state keeps %d block keys, %d block allocations, %d segment keys; want netY's 2 (gateway and block), 1, 2", len(st.blocks), len(st.blockObjs), len(st.segments))
	}
}

func TestBlockInvariantCatches(t *testing.T) {
	l := blockLayout
	netZ := bnet{ns: "a", name: "z", uid: "u3", cidr: "10.2.0.0/24", gateway: "10.2.0.1", vni: 1048577} // netX's VNI
	move, _ := netX.moved(t, 4, "10.1.0.70")
	cases := map[string]struct {
		events []kvEvent
		want   []string
	}{
		"two nodes' blocks overlap": {
			events: join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"), netX.claimed(t, 4, "n1", "10.1.0.96/27")),
			want:   []string{"invariant/block-overlap@4..4"},
		},
		"a node's block listed twice": {
			events: join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"),
				[]kvEvent{{Rev: 4, Key: objKey("a", "x", "n0"), Value: netX.object(t, "n0", "10.1.0.64/26", "10.1.0.64/26")}}),
			want: []string{"invariant/block-overlap@4..4"},
		},
		"a deleted Network leaves its block key (orphan)": {
			events: join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"), netX.deleted(4, nil, "n0")),
			want:   []string{"invariant/block-orphan@4..4"},
		},
		"a deleted Network leaves its block allocation": {
			events: join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"), netX.deleted(4, []string{"10.1.0.64/26"})),
			want:   []string{"invariant/block-orphan@4..4"},
		},
		"a block key no object lists": {
			events: join(netX.created(t, 2), []kvEvent{{Rev: 3, Key: netX.blockKey("10.1.0.64/26"), Value: recordValue(netX, "10.1.0.64/26", "n0", "block")}}),
			want:   []string{"invariant/block-orphan@3..3"},
		},
		"object and key in two revisions (claim not atomic)": {
			events: join(netX.created(t, 2),
				[]kvEvent{{Rev: 3, Key: objKey("a", "x", "n0"), Value: netX.object(t, "n0", "10.1.0.64/26")}},
				[]kvEvent{{Rev: 4, Key: netX.blockKey("10.1.0.64/26"), Value: recordValue(netX, "10.1.0.64/26", "n0", "block")}}),
			want: []string{"invariant/block-missing@3..3"},
		},
		"a block key of another node": {
			events: join(netX.created(t, 2), []kvEvent{
				{Rev: 3, Key: objKey("a", "x", "n0"), Value: netX.object(t, "n0", "10.1.0.64/26")},
				{Rev: 3, Key: netX.blockKey("10.1.0.64/26"), Value: recordValue(netX, "10.1.0.64/26", "n1", "block")}}),
			want: []string{"invariant/block-owner@3..3"},
		},
		"a block key of another incarnation": {
			events: join(netX.created(t, 2), []kvEvent{
				{Rev: 3, Key: objKey("a", "x", "n0"), Value: netX.object(t, "n0", "10.1.0.64/26")},
				{Rev: 3, Key: netX.blockKey("10.1.0.64/26"), Value: recordValue(bnet{ns: "a", name: "x", uid: "u0"}, "10.1.0.64/26", "n0", "block")}}),
			want: []string{"invariant/block-owner@3..3"},
		},
		"a block outside the prefix": {
			events: join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.2.0.0/26")),
			want:   []string{"invariant/block-outside@3..3"},
		},
		"a block over the gateway": {
			events: join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.1.0.0/26")),
			want:   []string{"invariant/gateway-in-block@3..3"},
		},
		"the gateway moved into a block": {
			events: join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"), move),
			want:   []string{"invariant/gateway-in-block@4..4"},
		},
		"a gateway move that keeps the old key": {
			events: join(netX.created(t, 2), []kvEvent{
				{Rev: 3, Key: netKey("a", "x"), Value: bnet{ns: "a", name: "x", uid: "u1", cidr: "10.1.0.0/16", gateway: "10.1.0.9", vni: netX.vni}.value(t)},
				{Rev: 3, Key: netX.gatewayKey("10.1.0.9"), Value: recordValue(netX, "10.1.0.9/32", "", "gateway")}}),
			want: []string{"invariant/gateway-key@3..3", "invariant/gateway-key@3..3"}, // the stale key, and two of them
		},
		"a Network without its gateway key": {
			events: join(netX.created(t, 2), []kvEvent{{Rev: 3, Key: netX.gatewayKey(netX.gateway), Delete: true}}),
			want:   []string{"invariant/gateway-key@3..3"},
		},
		"a VNI given twice": {
			events: join(netX.created(t, 2), netZ.created(t, 3)),
			// z's create overwrote x's VNI key: x's uid key is answered by z's name, and z's status agrees.
			want: []string{"invariant/segment@3..3"},
		},
		"a deleted Network leaves its VNI key": {
			events: join(netX.created(t, 2), []kvEvent{
				{Rev: 3, Key: netKey("a", "x"), Delete: true}, {Rev: 3, Key: allocKey(l, "a", netX.cidr), Delete: true},
				{Rev: 3, Key: netX.gatewayKey(netX.gateway), Delete: true}, {Rev: 3, Key: l.vniUIDKey("u1"), Delete: true}}),
			want: []string{"invariant/segment-orphan@3..3"},
		},
		"a Network without VNI keys": {
			events: join(netX.created(t, 2), []kvEvent{{Rev: 3, Key: l.vniKey(netX.vni), Delete: true}, {Rev: 3, Key: l.vniUIDKey("u1"), Delete: true}}),
			want:   []string{"invariant/segment@3..3"},
		},
		"the single layout: a VNI given twice": {
			events: join(netX.createdSingle(t, 2), netZ.createdSingle(t, 3)),
			// z's create overwrote x's VNI key: x has no key left.
			want: []string{"invariant/segment@3..3"},
		},
		"the single layout: status.vni other than the key": {
			events: join(netX.createdSingle(t, 2), []kvEvent{{Rev: 3, Key: netKey("a", "x"), Value: bnet{ns: "a", name: "x", uid: "u1", cidr: netX.cidr, gateway: netX.gateway, vni: 7}.value(t)}}),
			// the key names x, whose status.vni is not it; x has no key of its status.vni.
			want: []string{"invariant/segment@3..3", "invariant/segment@3..3"},
		},
		"the single layout: a deleted Network leaves its VNI key": {
			events: join(netX.createdSingle(t, 2), []kvEvent{
				{Rev: 3, Key: netKey("a", "x"), Delete: true}, {Rev: 3, Key: allocKey(l, "a", netX.cidr), Delete: true},
				{Rev: 3, Key: netX.gatewayKey(netX.gateway), Delete: true}}),
			want: []string{"invariant/segment-orphan@3..3"},
		},
		"status.vni other than the keys": {
			events: join(netX.created(t, 2), []kvEvent{{Rev: 3, Key: netKey("a", "x"), Value: bnet{ns: "a", name: "x", uid: "u1", cidr: netX.cidr, gateway: netX.gateway, vni: 7}.value(t)}}),
			want:   []string{"invariant/segment@3..3"},
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) { wantKinds(t, replayHistory(l, tc.events), tc.want...) })
	}
}

// createdNoGatewayKey is the create transaction with --gateway-keys=none (and single VNI keys).
func (n bnet) createdNoGatewayKey(t *testing.T, rev int64) []kvEvent {
	ev := n.createdSingle(t, rev)
	return append(ev[:2:2], ev[3:]...)
}

// TestBlockInvariantWithoutGatewayKeys: where the servers write no gateway keys, a Network
// without one is no violation, but a block holding its gateway still is, and so is a gateway
// key that is not its gateway's.
func TestBlockInvariantWithoutGatewayKeys(t *testing.T) {
	l := blockLayout
	l.NoGatewayKeys = true
	moveInto := []kvEvent{{Rev: 4, Key: netKey("a", "x"), Value: bnet{ns: "a", name: "x", uid: "u1", cidr: netX.cidr, gateway: "10.1.0.70", vni: netX.vni}.value(t)}}
	for name, tc := range map[string]struct {
		events []kvEvent
		want   []string
	}{
		"created and claimed without a gateway key": {events: join(netX.createdNoGatewayKey(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"))},
		"an older replica's gateway key":            {events: join(netX.createdSingle(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"))},
		"the gateway moved into a block": {
			events: join(netX.createdNoGatewayKey(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"), moveInto),
			want:   []string{"invariant/gateway-in-block@4..4"},
		},
		"a gateway key left by a move": {
			events: join(netX.createdSingle(t, 2), []kvEvent{moveInto[0]}),
			want:   []string{"invariant/gateway-key@4..4"},
		},
	} {
		t.Run(name, func(t *testing.T) { wantKinds(t, replayHistory(l, tc.events), tc.want...) })
	}
}

// TestClaimChecks: an acknowledged claim must be in the history as answered; a claim's answers
// are part of its Network name's linearizability.
func TestClaimChecks(t *testing.T) {
	l := blockLayout
	events := join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26"))
	r := replayHistory(l, events)
	ops := []op{
		{ID: "c0-1", Kind: "claim", Namespace: "a", Name: "x", Node: "n0", Start: ms(10), End: ms(20), Code: http.StatusCreated, UID: "u1", RV: 3, Blocks: []string{"10.1.0.64/26"}},
		// Answered, but nothing was written at its revision.
		{ID: "c1-1", Kind: "claim", Namespace: "a", Name: "x", Node: "n1", Start: ms(15), End: ms(40), Code: http.StatusCreated, UID: "u1", RV: 3, Blocks: []string{"10.1.0.128/26"}},
		// Answered other blocks than the history holds.
		{ID: "c2-1", Kind: "claim", Namespace: "a", Name: "x", Node: "n0", Start: ms(15), End: ms(60), Code: http.StatusCreated, UID: "u1", RV: 3, Blocks: []string{"10.1.0.0/26"}},
		// 404 while the Network was there all along.
		{ID: "c3-1", Kind: "claim", Namespace: "a", Name: "x", Node: "n2", Start: ms(70), End: ms(80), Code: http.StatusNotFound},
	}
	f := validate(l, r, ops, nil, nil)
	if got := len(f.byCheck[checkAcked]); got != 2 || !strings.Contains(f.byCheck[checkAcked][0], "c1-1") || !strings.Contains(f.byCheck[checkAcked][1], "c2-1") {
		t.Errorf("acknowledged: %v, want c1-1 and c2-1", f.byCheck[checkAcked])
	}
	if got := f.byCheck[checkExists]; len(got) != 1 || !strings.Contains(got[0], "c3-1") {
		t.Errorf("existence: %v, want c3-1", got)
	}
	if n := f.total(); n != 3 {
		t.Errorf("%d violations, want 3:\n%s", n, f.summary(10))
	}
	// Linearizability: a claim answered with the Network's uid after the Network was deleted.
	lin := []op{
		{ID: "c0-1", Kind: "create", Namespace: "a", Name: "x", Start: ms(0), End: ms(10), Code: http.StatusCreated, UID: "u1"},
		{ID: "c1-1", Kind: "delete", Namespace: "a", Name: "x", Start: ms(20), End: ms(30), Code: http.StatusOK, UID: "u1"},
		{ID: "c2-1", Kind: "claim", Namespace: "a", Name: "x", Node: "n0", Start: ms(40), End: ms(50), Code: http.StatusCreated, UID: "u1"},
	}
	f = &findings{}
	checkLinearizable(f, lin, linearizabilityTimeout)
	if len(f.byCheck[checkLinear]) != 1 {
		t.Errorf("a claim after the delete: %v, want one linearizability violation", f.byCheck)
	}
	f = &findings{}
	checkLinearizable(f, lin[:1], linearizabilityTimeout)
	checkLinearizable(f, append(lin[:1:1], lin[2]), linearizabilityTimeout)
	if f.total() != 0 {
		t.Errorf("a claim while present: %v", f.byCheck)
	}
}

// TestRefusedGatewayChecks: a gateway move refused with 422 must have met a block holding the
// address, or a prefix that does not allow it.
func TestRefusedGatewayChecks(t *testing.T) {
	l := blockLayout
	r := replayHistory(l, join(netX.created(t, 2), netX.claimed(t, 3, "n0", "10.1.0.64/26")))
	gw := func(id, addr string, start, end int) op {
		return op{ID: id, Kind: "gateway", Namespace: "a", Name: "x", Gateway: addr, Start: ms(start), End: ms(end), Code: http.StatusUnprocessableEntity}
	}
	ops := []op{
		{ID: "c0-1", Kind: "claim", Namespace: "a", Name: "x", Node: "n0", Start: ms(10), End: ms(20), Code: http.StatusCreated, UID: "u1", RV: 3, Blocks: []string{"10.1.0.64/26"}},
		gw("c1-1", "10.1.0.70", 30, 40),    // inside the block: explained
		gw("c1-2", "10.2.0.5", 50, 60),     // outside the prefix: explained
		gw("c1-3", "10.1.255.255", 70, 80), // the broadcast address: explained
		gw("c1-4", "10.1.0.200", 90, 100),  // free: a stale or wrong refusal
		gw("c1-5", "10.1.0.70", 0, 5),      // before the claim could be seen... but the claim may have been served meanwhile
	}
	f := validate(l, r, ops, nil, nil)
	if got := f.byCheck[checkRefusedGw]; len(got) != 2 || !strings.Contains(got[0], "c1-4") || !strings.Contains(got[1], "c1-5") {
		t.Errorf("refused-gateway: %v, want c1-4 and c1-5", got)
	}
}
