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
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clienttesting "k8s.io/client-go/testing"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// upgradeServer answers claims as a server during the upgrade would: a cover claim gets the
// blocks of coverAnswer (or coverErr), a fresh claim gets fresh (or freshErr).
type upgradeServer struct {
	covers      [][]string
	fresh       int
	coverErr    error
	coverAnswer []string
	freshErr    error
	freshAnswer string
	held        *v1.BlockAllocation
}

func (s *upgradeServer) install(f *blocksFixture, n *v1.Network) {
	s.held = &v1.BlockAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: n.Namespace, Name: n.Name + ".node-a"},
		Network: n.Name, NetworkUID: string(n.UID), NodeName: "node-a"}
	f.client.PrependReactor("create", "networks", func(action clienttesting.Action) (bool, runtime.Object, error) {
		if action.GetSubresource() != "blockclaims" {
			return false, nil, nil
		}
		claim := action.(clienttesting.CreateAction).GetObject().(*v1.BlockClaim)
		if len(claim.Cover) > 0 {
			s.covers = append(s.covers, slices.Clone(claim.Cover))
			if s.coverErr != nil {
				return true, nil, s.coverErr
			}
			s.held = s.held.DeepCopy()
			for _, b := range s.coverAnswer {
				s.held.Blocks = append(s.held.Blocks, v1.Block{CIDR: b, Origin: "CoversLeases"})
			}
			return true, s.held.DeepCopy(), nil
		}
		s.fresh++
		if s.freshErr != nil {
			return true, nil, s.freshErr
		}
		s.held = s.held.DeepCopy()
		s.held.Blocks = append(s.held.Blocks, v1.Block{CIDR: s.freshAnswer, Origin: "Claimed"})
		return true, s.held.DeepCopy(), nil
	})
}

// serveBlockAllocations makes the fake server list objs as the Network's BlockAllocations.
func serveBlockAllocations(f *blocksFixture, objs ...*v1.BlockAllocation) {
	f.client.PrependReactor("list", "blockallocations", func(clienttesting.Action) (bool, runtime.Object, error) {
		list := &v1.BlockAllocationList{}
		for _, o := range objs {
			list.Items = append(list.Items, *o.DeepCopy())
		}
		return true, list, nil
	})
}

var errWaiting = &apierrors.StatusError{ErrStatus: metav1.Status{Status: metav1.StatusFailure, Code: 409, Reason: "WaitingForUpgrade",
	Message: "10.66.0.0/24: no new block for node-a while nodes still hand out addresses from the whole prefix: node-b (no ipamMode: an agent from before blocks)"}}

// oldNode puts on the fake node what the agent from before blocks left: the whole-prefix
// configuration and host-local's leases.
func oldNode(t *testing.T, f *blocksFixture, leases ...string) {
	t.Helper()
	d := netbackend.Desired{Key: "team/web", Prefix: netip.MustParsePrefix("10.66.0.0/24"), Gateway: netip.MustParseAddr("10.66.0.1")}
	if _, _, err := f.backend.Ensure(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if !f.backend.SetLeases("team/web", leases...) {
		t.Fatal("no node state for the leases")
	}
}

func TestLeasesFromBeforeBlocksKeepTheWholePrefixUntilCovered(t *testing.T) {
	n := blockNetwork()
	f := newBlocksFixture(t, n)
	s := &upgradeServer{coverErr: apierrors.NewServiceUnavailable("etcd is down"), coverAnswer: []string{"10.66.0.2/31", "10.66.0.4/30"},
		freshErr: errWaiting}
	s.install(f, n)
	oldNode(t, f, "10.66.0.4", "10.66.0.2", "10.66.0.3")

	// The cover claim fails: the whole prefix stays, the entry says Legacy, no fresh claim.
	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("sync succeeded although the cover claim failed")
	}
	if len(s.covers) != 1 || !slices.Equal(s.covers[0], []string{"10.66.0.2", "10.66.0.3", "10.66.0.4"}) || s.fresh != 0 {
		t.Fatalf("claims: cover %v, fresh %d; want one cover of the three leases, sorted, and no fresh claim", s.covers, s.fresh)
	}
	if d, _ := f.backend.Desired("team/web"); d.Blocks != nil {
		t.Fatalf("desired blocks %v while the leases are not covered, want nil (the whole prefix)", d.Blocks)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].IPAMMode != "Legacy" || applied[0].Ready || applied[0].Reason != ReasonReconciling ||
		!strings.Contains(applied[0].Message, "etcd is down") || len(applied[0].Blocks) != 0 {
		t.Fatalf("entry while legacy: %+v", applied)
	}

	// The cover claim succeeds: the configuration holds the cover blocks only; the headroom
	// claim waits for the other node's upgrade and the entry says so.
	s.coverErr = nil
	f.refresh("web")
	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("sync succeeded although the headroom claim waits")
	}
	if d, _ := f.backend.Desired("team/web"); !slices.Equal(d.Blocks, prefixes("10.66.0.2/31", "10.66.0.4/30")) {
		t.Fatalf("desired blocks after the cover: %v", d.Blocks)
	}
	if len(s.covers) != 2 || s.fresh != 1 {
		t.Fatalf("claims after the cover: %d covers, %d fresh; want 2 and 1 (headroom: 6 usable, 3 leased)", len(s.covers), s.fresh)
	}
	applied = f.statusApplies()
	if len(applied) != 1 || applied[0].IPAMMode != "Blocks" || applied[0].Ready || applied[0].Reason != ReasonWaitingForUpgrade ||
		!strings.Contains(applied[0].Message, "node-b") || !slices.Equal(applied[0].Blocks, []string{"10.66.0.2/31", "10.66.0.4/30"}) {
		t.Fatalf("entry after the cover: %+v", applied)
	}

	// Covered leases are not sent again; once the wait ends the node has its headroom.
	s.freshErr, s.freshAnswer = nil, "10.66.0.16/28"
	f.refresh("web")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if len(s.covers) != 2 {
		t.Fatalf("covered leases claimed again: %v", s.covers)
	}
	if applied = f.statusApplies(); len(applied) != 1 || !applied[0].Ready || applied[0].IPAMMode != "Blocks" {
		t.Fatalf("entry once fresh claims proceed: %+v", applied)
	}
}

func TestLeaseInsideAnotherNodesBlockIsAConflict(t *testing.T) {
	n := blockNetwork()
	f := newBlocksFixture(t, n)
	// Headroom (15 of 16 free after the cover) waits for another node: the conflict leads.
	s := &upgradeServer{coverAnswer: []string{"10.66.0.16/28"}, freshAnswer: "10.66.0.32/28", freshErr: errWaiting}
	s.install(f, n)
	other := &v1.BlockAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web.node-b"}, Network: "web",
		NetworkUID: string(n.UID), NodeName: "node-b", Blocks: []v1.Block{{CIDR: "10.66.0.2/31", Origin: "CoversLeases"}}}
	stale := &v1.BlockAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web.node-c"}, Network: "web",
		NetworkUID: "uid-of-an-earlier-web", NodeName: "node-c", Blocks: []v1.Block{{CIDR: "10.66.0.20/30", Origin: "Claimed"}}}
	serveBlockAllocations(f, other, stale)
	oldNode(t, f, "10.66.0.2", "10.66.0.21")

	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("sync succeeded although a lease is inside another node's block")
	}
	if len(s.covers) != 1 || !slices.Equal(s.covers[0], []string{"10.66.0.21"}) {
		t.Fatalf("cover claims %v, want one of 10.66.0.21 only (10.66.0.2 is node-b's; node-c's block is of an earlier Network)", s.covers)
	}
	if d, _ := f.backend.Desired("team/web"); !slices.Equal(d.Blocks, prefixes("10.66.0.16/28")) {
		t.Fatalf("desired blocks %v, want the cover block", d.Blocks)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].Ready || applied[0].Reason != ReasonAddressConflict || applied[0].IPAMMode != "Blocks" {
		t.Fatalf("entry: %+v, want not ready, AddressConflict, Blocks", applied)
	}
	for _, want := range []string{"10.66.0.2 leased on node node-a", "inside node node-b's block 10.66.0.2/31", "; also WaitingForUpgrade: "} {
		if !strings.Contains(applied[0].Message, want) {
			t.Errorf("message %q lacks %q", applied[0].Message, want)
		}
	}

	// Only conflicts left: no cover claim at all; the conflict stays named until the lease goes.
	f.refresh("web")
	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("the conflict vanished while the lease remains")
	}
	if len(s.covers) != 1 {
		t.Fatalf("cover claimed again for a lease inside another node's block: %v", s.covers)
	}
	f.backend.SetLeases("team/web", "10.66.0.21")
	s.freshErr = nil
	f.refresh("web")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatalf("sync once the conflicting lease went: %v", err)
	}
	if applied = f.statusApplies(); len(applied) != 1 || !applied[0].Ready {
		t.Fatalf("entry once the conflicting lease went: %+v", applied)
	}
}

func TestOnlyConflictingLeasesGetAFreshBlock(t *testing.T) {
	n := blockNetwork()
	f := newBlocksFixture(t, n)
	s := &upgradeServer{freshAnswer: "10.66.0.32/28"}
	s.install(f, n)
	other := &v1.BlockAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web.node-b"}, Network: "web",
		NetworkUID: string(n.UID), NodeName: "node-b", Blocks: []v1.Block{{CIDR: "10.66.0.2/31", Origin: "CoversLeases"}}}
	serveBlockAllocations(f, other)
	oldNode(t, f, "10.66.0.2")
	if _, err := f.sync("team/web"); err == nil || netbackend.ReasonOf(err) != ReasonAddressConflict {
		t.Fatalf("sync: %v, want an AddressConflict", err)
	}
	if len(s.covers) != 0 || s.fresh != 1 {
		t.Fatalf("claims: covers %v, fresh %d; want a fresh block only", s.covers, s.fresh)
	}
	if d, _ := f.backend.Desired("team/web"); !slices.Equal(d.Blocks, prefixes("10.66.0.32/28")) {
		t.Fatalf("desired blocks %v, want the fresh block (the node leaves Legacy so others' claims go on)", d.Blocks)
	}
}
