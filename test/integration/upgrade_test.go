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

package integration

import (
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// TestBlockClaimCover: the upgrade's claims (docs/design/cross-node.md §6). A cover claim takes,
// for each lease, the largest aligned block around it that is free (down to the address), all
// of origin CoversLeases; a repeated cover changes nothing; a lease inside another node's block
// gets none. Fresh claims answer 409 WaitingForUpgrade while another node's entry is not on
// blocks, naming it, and go on once that entry goes.
func TestBlockClaimCover(t *testing.T) {
	s := sharedServer(t)
	ns, ctx, c, etcd := blkSetup(t, s)
	networks := c.SamplecrdV1().Networks(ns)
	n, err := networks.Create(ctx, newNetwork("cover", "10.45.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocks := func(a *v1.BlockAllocation) []string {
		var out []string
		for _, b := range a.Blocks {
			out = append(out, b.CIDR+" "+b.Origin)
		}
		return out
	}

	// n1's leases from the whole-prefix configuration: .2 .3 .4 (and .20 after a gap). The /28
	// around .2 holds the gateway .1, so .2 gets .2/31; .4 gets .4/30; .20 its whole /28.
	a1, err := networks.ClaimBlocks(ctx, "cover", &v1.BlockClaim{NodeName: "n1", Cover: []string{"10.45.0.4", "10.45.0.2", "10.45.0.20", "10.45.0.3"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"10.45.0.2/31 CoversLeases", "10.45.0.4/30 CoversLeases", "10.45.0.16/28 CoversLeases"}
	if got := blocks(a1); !slices.Equal(got, want) {
		t.Fatalf("n1's cover blocks %v, want %v", got, want)
	}
	again, err := networks.ClaimBlocks(ctx, "cover", &v1.BlockClaim{NodeName: "n1", Cover: []string{"10.45.0.2", "10.45.0.21"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != a1.ResourceVersion || !slices.Equal(blocks(again), want) {
		t.Errorf("a cover of covered leases changed n1's blocks: %v (rv %s, was %s)", blocks(again), again.ResourceVersion, a1.ResourceVersion)
	}

	// n2 leased .2 too (both nodes' host-local started at the prefix's start): no block for it;
	// .40 gets its /28.
	a2, err := networks.ClaimBlocks(ctx, "cover", &v1.BlockClaim{NodeName: "n2", Cover: []string{"10.45.0.2", "10.45.0.40"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := blocks(a2); !slices.Equal(got, []string{"10.45.0.32/28 CoversLeases"}) {
		t.Fatalf("n2's cover blocks %v, want 10.45.0.32/28 only (10.45.0.2 is inside n1's block)", got)
	}
	if got := blkCheck(t, c, etcd, ns, n); got != 4 {
		t.Fatalf("%d blocks, want 4", got)
	}

	// Entries: n1 and n2 on blocks, n3 from an old agent (no ipamMode), n4 a new agent still
	// covering (Legacy).
	n, err = networks.Get(ctx, "cover", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Status.Nodes = []v1.NetworkNodeStatus{
		{NodeName: "n1", Bridge: "nwa", Ready: true, IPAMMode: "Blocks"},
		{NodeName: "n2", Bridge: "nwa", Ready: true, IPAMMode: "Blocks"},
		{NodeName: "n3", Bridge: "nwa", Ready: true},
		{NodeName: "n4", Bridge: "nwa", Ready: false, Reason: "Reconciling", IPAMMode: "Legacy"},
	}
	if n, err = networks.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err = networks.ClaimBlocks(ctx, "cover", &v1.BlockClaim{NodeName: "n2"}, metav1.CreateOptions{})
	if status, ok := err.(apierrors.APIStatus); !ok || status.Status().Code != 409 || status.Status().Reason != "WaitingForUpgrade" {
		t.Fatalf("a fresh claim while n3 and n4 are not on blocks: %v, want 409 WaitingForUpgrade", err)
	}
	for _, name := range []string{"n3 (no ipamMode: an agent from before blocks)", "n4 (ipamMode Legacy, Reconciling)"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("WaitingForUpgrade message %q does not name %s", err.Error(), name)
		}
	}
	// Cover claims go on meanwhile (that is how n4 gets there).
	if _, err := networks.ClaimBlocks(ctx, "cover", &v1.BlockClaim{NodeName: "n4", Cover: []string{"10.45.0.70"}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("a cover claim while others wait: %v", err)
	}
	// n3's entry goes (its node left), n4 reports Blocks: fresh claims proceed.
	n.Status.Nodes = []v1.NetworkNodeStatus{n.Status.Nodes[0], n.Status.Nodes[1], n.Status.Nodes[3]}
	n.Status.Nodes[2].IPAMMode, n.Status.Nodes[2].Ready, n.Status.Nodes[2].Reason = "Blocks", true, ""
	if _, err = networks.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh, err := networks.ClaimBlocks(ctx, "cover", &v1.BlockClaim{NodeName: "n2"}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a fresh claim once every entry is on blocks: %v", err)
	}
	if last := fresh.Blocks[len(fresh.Blocks)-1]; last.Origin != "Claimed" {
		t.Errorf("fresh block %+v, want origin Claimed", last)
	}
	if got := blkCheck(t, c, etcd, ns, n); got != 6 {
		t.Fatalf("%d blocks, want 6", got)
	}
	t.Logf("n2's blocks: %v", blocks(fresh))
}
