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

package network

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// blocksFixture is a fixture whose controller claims blocks, against a fake server that hands
// out the blocks of free in order (an empty free list answers AddressesExhausted).
type blocksFixture struct {
	*fixture
	free   []string
	claims int
}

func newBlocksFixture(t *testing.T, n *v1.Network, free ...string) *blocksFixture {
	t.Helper()
	f := newFixture(t, n)
	bf := &blocksFixture{fixture: f, free: free}
	factory := externalversions.NewSharedInformerFactory(f.client, 0)
	blocks := factory.Samplecrd().V1().BlockAllocations()
	c, err := New(f.client, externalversions.NewSharedInformerFactory(f.client, 0).Samplecrd().V1().Networks(), f.backend,
		Options{NodeName: "node-a", MaxRetries: 2, Blocks: blocks})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	c.lister = f.controller.lister // the fixture's indexer
	f.controller = c
	held := &v1.BlockAllocation{
		ObjectMeta: metav1.ObjectMeta{Namespace: n.Namespace, Name: n.Name + ".node-a"},
		Network:    n.Name, NetworkUID: string(n.UID), NodeName: "node-a",
	}
	f.client.PrependReactor("create", "networks", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "blockclaims" {
			return false, nil, nil
		}
		bf.claims++
		if len(bf.free) == 0 {
			return true, nil, &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 409,
				Reason: "AddressesExhausted", Message: "10.66.0.0/24: no free address block for node-a (16 blocks held by 3 nodes)"}}
		}
		held = held.DeepCopy()
		held.Blocks = append(held.Blocks, v1.Block{CIDR: bf.free[0], Origin: "Claimed"})
		bf.free = bf.free[1:]
		return true, held.DeepCopy(), nil
	})
	return bf
}

func blockNetwork() *v1.Network {
	n := network("web", "10.66.0.0/24", "10.66.0.1", 1)
	n.UID = types.UID("uid-web")
	return n
}

func prefixes(ss ...string) []netip.Prefix {
	out := []netip.Prefix{}
	for _, s := range ss {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

func TestFirstBlockIsClaimedOnceAndConfigured(t *testing.T) {
	f := newBlocksFixture(t, blockNetwork(), "10.66.0.16/28", "10.66.0.32/28")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if f.claims != 1 {
		t.Fatalf("claims on realisation: %d, want 1", f.claims)
	}
	d, ok := f.backend.Desired("team/web")
	if !ok || !slices.Equal(d.Blocks, prefixes("10.66.0.16/28")) {
		t.Fatalf("desired blocks: %v, want [10.66.0.16/28]", d.Blocks)
	}
	if f.backend.Get("team/web").CNIConfig == nil {
		t.Fatal("no CNI configuration although the node holds a block")
	}
	applied := f.statusApplies()
	if len(applied) != 1 {
		t.Fatalf("status applies: %+v", applied)
	}
	e := applied[0]
	if !e.Ready || e.IPAMMode != "Blocks" || !slices.Equal(e.Blocks, []string{"10.66.0.16/28"}) || e.Leases == nil || *e.Leases != 0 || e.MTU != 1500 {
		t.Fatalf("entry: %+v", e)
	}
	// The informer has not seen the claim: the next syncs must not claim again (16 free of 16,
	// not below the threshold either).
	f.refresh("web")
	for range 3 {
		if _, err := f.sync("team/web"); err != nil {
			t.Fatal(err)
		}
	}
	if f.claims != 1 {
		t.Fatalf("claims after resyncs: %d, want 1", f.claims)
	}
}

func TestAnotherBlockIsClaimedBeforeTheBlocksRunOut(t *testing.T) {
	f := newBlocksFixture(t, blockNetwork(), "10.66.0.16/28", "10.66.0.32/28")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	f.refresh("web")
	var leases []string
	for i := range 3 {
		leases = append(leases, fmt.Sprintf("10.66.0.%d", 16+i))
	}
	f.backend.SetLeases("team/web", leases...)
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if f.claims != 2 {
		t.Fatalf("claims with 13 of 16 free (threshold 16): %d, want 2", f.claims)
	}
	if f.controller.queue.Len() != 1 {
		t.Fatalf("the new block is not queued for realisation: queue length %d", f.controller.queue.Len())
	}
	f.refresh("web")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if d, _ := f.backend.Desired("team/web"); !slices.Equal(d.Blocks, prefixes("10.66.0.16/28", "10.66.0.32/28")) {
		t.Fatalf("desired blocks after the second claim: %v", d.Blocks)
	}
	if f.claims != 2 {
		t.Fatalf("claims with 29 of 32 free: %d, want 2", f.claims)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || len(applied[0].Blocks) != 2 || applied[0].Leases == nil || *applied[0].Leases != 3 {
		t.Fatalf("entry after the second block: %+v", applied)
	}
}

func TestPortsCountBeforeLeases(t *testing.T) {
	f := newBlocksFixture(t, blockNetwork(), "10.66.0.16/28", "10.66.0.32/28")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	f.refresh("web")
	f.backend.SetPorts("team/web", "veth1") // attached, address not yet leased
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if f.claims != 2 {
		t.Fatalf("claims with a port attached and 16 addresses: %d, want 2", f.claims)
	}
}

func TestAddressesExhaustedIsReported(t *testing.T) {
	f := newBlocksFixture(t, blockNetwork())
	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("sync without any block succeeded; want an error (retried)")
	}
	applied := f.statusApplies()
	if len(applied) != 1 {
		t.Fatalf("status applies: %+v", applied)
	}
	e := applied[0]
	if e.Ready || e.Reason != ReasonAddressesExhausted || e.Message != "10.66.0.0/24: no free address block for node-a (16 blocks held by 3 nodes)" || len(e.Blocks) != 0 {
		t.Fatalf("entry without a block: %+v", e)
	}
	if a := f.backend.Get("team/web"); a == nil || a.CNIConfig != nil {
		t.Fatalf("the node without a block has a CNI configuration (or no bridge): %+v", a)
	}
	if d, _ := f.backend.Desired("team/web"); d.Blocks == nil || len(d.Blocks) != 0 {
		t.Fatalf("desired blocks without a block: %#v, want empty and not nil", d.Blocks)
	}
}

// TestExhaustedWhenRunningLow: a node below its headroom that the server refuses another block
// still has free addresses: its entry stays ready, says AddressesExhausted, and the sync succeeds
// (no retry loop).
func TestExhaustedWhenRunningLow(t *testing.T) {
	f := newBlocksFixture(t, blockNetwork(), "10.66.0.16/28")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	f.refresh("web")
	f.backend.SetLeases("team/web", "10.66.0.16", "10.66.0.17")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatalf("sync with free addresses but no block left for headroom: %v", err)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || !applied[0].Ready || applied[0].Reason != ReasonAddressesExhausted || !slices.Equal(applied[0].Blocks, []string{"10.66.0.16/28"}) {
		t.Fatalf("entry: %+v", applied)
	}
	if f.backend.Get("team/web").CNIConfig == nil {
		t.Fatal("the node's configuration went although its block still has free addresses")
	}
}

// smallNetwork is a /28: 13 usable addresses, fewer than the default headroom of 16.
func smallNetwork() *v1.Network {
	n := network("tiny", "10.1.0.0/28", "10.1.0.1", 1)
	n.UID = types.UID("uid-tiny")
	return n
}

// leasesFrom returns count addresses of the /28 from 10.1.0.2 on (the gateway is .1).
func leasesFrom(count int) []string {
	var out []string
	for i := range count {
		out = append(out, fmt.Sprintf("10.1.0.%d", 2+i))
	}
	return out
}

// TestSmallNetworkIsReadyOnItsFirstNode: a Network smaller than the headroom, on one node, is
// realised and ready; the refused headroom claim leaves the reason AddressesExhausted on the
// ready entry and is not repeated while nothing changes.
func TestSmallNetworkIsReadyOnItsFirstNode(t *testing.T) {
	f := newBlocksFixture(t, smallNetwork(), "10.1.0.0/28")
	recorder := record.NewFakeRecorder(10)
	f.controller.opts.Recorder = recorder
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatalf("sync of a /28 on its first node: %v", err)
	}
	if f.claims != 2 {
		t.Fatalf("claims: %d, want 2 (the block, then one refused for headroom)", f.claims)
	}
	applied := f.statusApplies()
	if len(applied) != 1 {
		t.Fatalf("status applies: %+v", applied)
	}
	e := applied[0]
	want := "10.1.0.0/28: node node-a has fewer free addresses than its headroom of 16 (--min-free-addresses) and no address block is left to claim; " +
		"it stays ready while its blocks' 13 usable addresses are not all in use"
	if !e.Ready || e.Reason != ReasonAddressesExhausted || e.Message != want || !slices.Equal(e.Blocks, []string{"10.1.0.0/28"}) {
		t.Fatalf("entry of the /28: %+v", e)
	}
	if f.backend.Get("team/tiny").CNIConfig == nil {
		t.Fatal("no CNI configuration: pods cannot attach")
	}
	if d, _ := f.backend.Desired("team/tiny"); !slices.Equal(d.Blocks, prefixes("10.1.0.0/28")) {
		t.Fatalf("desired blocks: %v", d.Blocks)
	}
	if f.controller.queue.Len() != 0 {
		t.Fatalf("the sync queued the Network again (queue length %d)", f.controller.queue.Len())
	}

	// Nothing changed: neither a claim nor a write, however often it reconciles.
	f.refresh("tiny")
	for range 3 {
		if _, err := f.sync("team/tiny"); err != nil {
			t.Fatal(err)
		}
		if got := f.statusApplies(); len(got) != 0 {
			t.Fatalf("status writes while nothing changed: %+v", got)
		}
	}
	if f.claims != 2 {
		t.Fatalf("claims while nothing changed: %d, want 2", f.claims)
	}

	// A pod takes an address: the counts changed, so one claim is tried again, and refused.
	f.backend.SetLeases("team/tiny", leasesFrom(1)...)
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatal(err)
	}
	if f.claims != 3 {
		t.Fatalf("claims after a lease: %d, want 3", f.claims)
	}
	f.refresh("tiny")
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatal(err)
	}
	if f.claims != 3 {
		t.Fatalf("claims after a lease and a resync: %d, want 3", f.claims)
	}
	n := f.refresh("tiny")
	if e := nodestatus.FindEntry(n, "node-a"); e == nil || !e.Ready || e.Reason != ReasonAddressesExhausted || e.Leases == nil || *e.Leases != 1 {
		t.Fatalf("entry with one lease: %+v", e)
	}
	// One Warning (beside the Normal Created), when the entry started saying so.
	close(recorder.Events)
	var events []string
	for e := range recorder.Events {
		if strings.HasPrefix(e, "Warning ") {
			events = append(events, e)
		}
	}
	if len(events) != 1 || !strings.HasPrefix(events[0], "Warning AddressesExhausted node node-a: 10.1.0.0/28: ") {
		t.Fatalf("events: %q", events)
	}
}

// TestSmallNetworkFullIsNotReady: with no address free the refusal is a failure, as before:
// not ready, AddressesExhausted, the sync fails (retried).
func TestSmallNetworkFullIsNotReady(t *testing.T) {
	f := newBlocksFixture(t, smallNetwork(), "10.1.0.0/28")
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatal(err)
	}
	f.refresh("tiny")
	f.backend.SetLeases("team/tiny", leasesFrom(13)...)
	if _, err := f.sync("team/tiny"); err == nil {
		t.Fatal("sync with every address in use and no block left succeeded")
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].Ready || applied[0].Reason != ReasonAddressesExhausted ||
		applied[0].Message != "10.66.0.0/24: no free address block for node-a (16 blocks held by 3 nodes)" {
		t.Fatalf("entry of the full /28: %+v", applied)
	}
	claims := f.claims
	f.refresh("tiny")
	if _, err := f.sync("team/tiny"); err == nil {
		t.Fatal("second sync of the full /28 succeeded")
	}
	if f.claims != claims+1 {
		t.Fatalf("claims on the retry of a full node: %d, want %d (a real failure is retried)", f.claims, claims+1)
	}
	// A pod goes: free again, ready again with the reason.
	f.backend.SetLeases("team/tiny", leasesFrom(12)...)
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatal(err)
	}
	if applied := f.statusApplies(); len(applied) != 1 || !applied[0].Ready || applied[0].Reason != ReasonAddressesExhausted {
		t.Fatalf("entry with one address free again: %+v", applied)
	}
}

// TestRefusedHeadroomClaimIsTriedAgain: the claim is tried again once another node's blocks
// change (it may have released one), and a block then claimed clears the reason.
func TestRefusedHeadroomClaimIsTriedAgain(t *testing.T) {
	n := smallNetwork()
	n.Spec.CIDR = "10.1.0.0/27"
	n.Status.Nodes = []v1.NetworkNodeStatus{{NodeName: "node-b", Ready: true, Blocks: []string{"10.1.0.16/28"}}}
	f := newBlocksFixture(t, n, "10.1.0.0/28")
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatal(err)
	}
	if applied := f.statusApplies(); len(applied) != 1 || !applied[0].Ready || applied[0].Reason != ReasonAddressesExhausted {
		t.Fatalf("entry: %+v", applied)
	}
	f.refresh("tiny")
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatal(err)
	}
	if f.claims != 2 {
		t.Fatalf("claims while nothing changed: %d, want 2", f.claims)
	}
	// node-b releases its block: its entry changes, and this node gets it.
	cur := f.refresh("tiny")
	for i := range cur.Status.Nodes {
		if cur.Status.Nodes[i].NodeName == "node-b" {
			cur.Status.Nodes[i].Blocks = nil
		}
	}
	if err := f.indexer.Update(cur); err != nil {
		t.Fatal(err)
	}
	f.free = []string{"10.1.0.16/28"}
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatal(err)
	}
	if f.claims != 3 {
		t.Fatalf("claims after another node's blocks changed: %d, want 3", f.claims)
	}
	if _, err := f.sync("team/tiny"); err != nil {
		t.Fatal(err)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || !applied[0].Ready || applied[0].Reason != "" || len(applied[0].Blocks) != 2 {
		t.Fatalf("entry with the second block: %+v", applied)
	}
}

func TestUsable(t *testing.T) {
	p := netip.MustParsePrefix("10.66.0.0/24")
	gw := netip.MustParseAddr("10.66.0.1")
	for _, tc := range []struct {
		block string
		want  int64
	}{
		{"10.66.0.16/28", 16}, {"10.66.0.0/30", 2}, {"10.66.0.240/28", 15}, {"10.66.0.2/31", 2},
	} {
		if got := usable(netip.MustParsePrefix(tc.block), p, gw); got != tc.want {
			t.Errorf("usable(%s) = %d, want %d", tc.block, got, tc.want)
		}
	}
	if got := usable(netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("fd00::/48"), netip.MustParseAddr("fd00::1")); got != 1<<40 {
		t.Errorf("usable of a /64 block: %d", got)
	}
}

func TestSegmentFromVNIAndPeers(t *testing.T) {
	n := blockNetwork()
	n.Status.VNI = 1048577
	n.Status.Nodes = []v1.NetworkNodeStatus{
		{NodeName: "node-b", UnderlayAddress: "192.168.77.2"},
		{NodeName: "node-c", UnderlayAddress: "192.168.77.3"},
		{NodeName: "node-d", UnderlayAddress: "192.168.77.4", Reason: ReasonNodeDeleted},
		{NodeName: "node-e", UnderlayAddress: "fd00::5"},
		{NodeName: "node-f"},
	}
	f := newBlocksFixture(t, n, "10.66.0.16/28")
	f.controller.opts.Underlay = netip.MustParseAddr("192.168.77.1")
	f.controller.opts.UnderlayLink = "eth0"
	f.controller.opts.OverlayMTU = 1450
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	d, _ := f.backend.Desired("team/web")
	if d.Segment == nil || d.Segment.VNI != 1048577 || d.Segment.UnderlayAddress != f.controller.opts.Underlay || d.Segment.UnderlayLink != "eth0" ||
		!slices.Equal(d.Segment.Peers, []netip.Addr{netip.MustParseAddr("192.168.77.2"), netip.MustParseAddr("192.168.77.3")}) || d.EffectiveMTU() != 1450 {
		t.Fatalf("desired segment: %+v (MTU %d)", d.Segment, d.EffectiveMTU())
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].UnderlayAddress != "192.168.77.1" || applied[0].VXLAN == "" || applied[0].MTU != 1450 || !applied[0].Ready {
		t.Fatalf("entry with a segment: %+v", applied)
	}
}

func TestNoVNIMeansNoSegmentButOverlayMTU(t *testing.T) {
	f := newBlocksFixture(t, blockNetwork(), "10.66.0.16/28")
	f.controller.opts.Underlay = netip.MustParseAddr("192.168.77.1")
	f.controller.opts.OverlayMTU = 1450
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	d, _ := f.backend.Desired("team/web")
	if d.Segment != nil || d.EffectiveMTU() != 1450 {
		t.Fatalf("desired without a VNI: segment %+v, MTU %d", d.Segment, d.EffectiveMTU())
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].UnderlayAddress != "192.168.77.1" || applied[0].VXLAN != "" || applied[0].MTU != 1450 {
		t.Fatalf("entry without a VNI: %+v", applied)
	}
}

// TestDeletedNodeWithdrawsAfterItsLastLease: once its Node is deleted, a node with blocks reports
// NodeDeleted while it holds leases and withdraws its entry once it reports none.
func TestDeletedNodeWithdrawsAfterItsLastLease(t *testing.T) {
	f := newBlocksFixture(t, blockNetwork(), "10.66.0.16/28", "10.66.0.32/28", "10.66.0.48/28")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	f.statusApplies()
	f.refresh("web")
	f.backend.SetLeases("team/web", "10.66.0.17")
	f.controller.opts.LeaseHeld = func() bool { return true }
	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionTrue, "KubeletReady"), true)
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].Reason != nodestatus.ReasonNodeDeleted || applied[0].Ready ||
		applied[0].Leases == nil || *applied[0].Leases != 1 || !slices.Contains(applied[0].Blocks, "10.66.0.16/28") {
		t.Fatalf("entry while a lease is held on a deleted Node: %+v", applied)
	}
	claims := f.claims
	f.refresh("web")
	f.backend.SetLeases("team/web", "10.66.0.17", "10.66.0.18", "10.66.0.19", "10.66.0.20")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if f.claims != claims {
		t.Fatalf("a node whose Node is deleted claimed %d more blocks", f.claims-claims)
	}
	f.statusApplies()
	f.refresh("web")
	f.backend.SetLeases("team/web")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if n := f.refresh("web"); nodestatus.FindEntry(n, "node-a") != nil {
		t.Fatalf("entry after the last lease went: %+v", n.Status.Nodes)
	}
}

// TestSegmentWaitsForTheBridgeOnAttach: with the bridge left to a pod's first ADD, a Network
// with a segment is Ready on a node that has its list alone (no bridge, so no VXLAN device is
// due); once the first ADD made the bridge and its VXLAN device, the entry names the device and
// counts the pod.
func TestSegmentWaitsForTheBridgeOnAttach(t *testing.T) {
	n := blockNetwork()
	n.Status.VNI = 1048577
	n.Status.Nodes = []v1.NetworkNodeStatus{{NodeName: "node-b", UnderlayAddress: "192.168.77.2"}}
	f := newBlocksFixture(t, n, "10.66.0.16/28")
	f.backend.BridgeOnAttach = true
	f.controller.opts.Underlay = netip.MustParseAddr("192.168.77.1")
	f.controller.opts.OverlayMTU = 1450
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if a := f.backend.Get("team/web"); a == nil || a.Bridge != "" || a.CNIConfig == nil {
		t.Fatalf("node state %+v; want the list alone", a)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || !applied[0].Ready || applied[0].VXLAN != "" || applied[0].MTU != 1450 || applied[0].Message != messageAwaitsAttach {
		t.Fatalf("entry with the list alone: %+v; want Ready, no VXLAN device, the message %q", applied, messageAwaitsAttach)
	}
	f.refresh("web")
	if !f.backend.Attach("team/web", "veth-pod1") {
		t.Fatal("no list to attach with")
	}
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	applied = f.statusApplies()
	if len(applied) != 1 || !applied[0].Ready || applied[0].VXLAN == "" || applied[0].Attachments != 1 || applied[0].Message == messageAwaitsAttach {
		t.Fatalf("entry after the first ADD: %+v; want Ready with the VXLAN device and one attachment, no longer awaiting it", applied)
	}
}

// A new Network reaches a node whose Node is deleted (its agent still runs and holds its Lease):
// the node claims no block, so it writes no list and, with bridges made on attach, nothing at
// all. It then holds no leases of the Network, and reports no entry: an entry kept "while pods
// may hold addresses" would never go.
func TestDeletedNodeReportsNothingOfANewNetwork(t *testing.T) {
	for _, onAttach := range []bool{false, true} {
		t.Run(fmt.Sprintf("bridgeOnAttach=%t", onAttach), func(t *testing.T) {
			n := blockNetwork()
			n.Status.VNI = 1048577
			f := newBlocksFixture(t, n, "10.66.0.16/28")
			f.backend.BridgeOnAttach = onAttach
			f.controller.opts.Underlay = netip.MustParseAddr("192.168.77.1")
			f.controller.opts.LeaseHeld = func() bool { return true }
			f.controller.nodeChanged(readyNode("node-a", corev1.ConditionUnknown, "NodeStatusUnknown"), true)
			if _, err := f.sync("team/web"); netbackend.ReasonOf(err) != ReasonNodeDeleted {
				t.Fatalf("sync: %v; want the refused claim (%s)", err, ReasonNodeDeleted)
			}
			if f.claims != 0 {
				t.Errorf("%d claims of a node whose Node is deleted", f.claims)
			}
			if a := f.backend.Get("team/web"); a != nil && a.CNIConfig != nil {
				t.Errorf("a list without a block: %s", a.CNIConfig)
			}
			if got := f.refresh("web"); len(got.Status.Nodes) != 0 {
				t.Errorf("entries: %+v; want none from a deleted Node's agent with nothing of the Network", got.Status.Nodes)
			}
		})
	}
}
