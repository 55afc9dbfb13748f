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
	"errors"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

// protected returns n with the protection finalizer, as the server creates every Network.
func protected(n *v1.Network) *v1.Network {
	n.Finalizers = append(n.Finalizers, nodestatus.ProtectionFinalizer)
	return n
}

// TestTerminateReportsAttachments: the controller reports the pods attached on the node in its
// status entry, and while a Network being deleted has pods attached keeps the bridge and
// configuration (so the runtime can still DEL them); once none are attached it reports zero.
// The finalizer is the server's: the controller never writes it, neither at create nor at the
// release, and writes nothing but its entry.
func TestTerminateReportsAttachments(t *testing.T) {
	f := newFixture(t, protected(network("web", "10.1.0.0/24", "10.1.0.1", 1)))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if w := f.metadataWrites(); len(w) != 0 {
		t.Fatalf("the controller wrote the Network itself, not only its entry: %v", w)
	}

	// Two pods attach: the node's entry counts them.
	f.backend.SetPorts("team/web", "veth1", "veth2")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].Attachments != 2 || !applied[0].Ready {
		t.Fatalf("status with two pods attached: %+v", applied)
	}

	// Deleted with pods attached: kept, bridge and configuration too, and the status says why.
	n := f.refresh("web")
	now := metav1.Now()
	n.DeletionTimestamp = &now
	if err := f.indexer.Update(n); err != nil {
		t.Fatal(err)
	}
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync of a Network being deleted with pods attached: %s, %v", result, err)
	}
	if a := f.backend.Get("team/web"); a == nil || a.Bridge == "" || a.CNIConfig == nil {
		t.Fatalf("the bridge or configuration went while pods are attached: %+v", a)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].Ready || applied[0].Reason != ReasonTerminating || applied[0].Attachments != 2 {
		t.Fatalf("status while deletion waits: %+v", applied)
	}
	if w := f.metadataWrites(); len(w) != 0 {
		t.Fatalf("the controller wrote the Network itself with pods attached: %v", w)
	}

	// Another node still has a pod: this node's pods leave, the finalizer stays.
	n = f.refresh("web")
	n.Status.Nodes = append(n.Status.Nodes, v1.NetworkNodeStatus{NodeName: "node-b", Ready: true, Attachments: 1})
	if _, err := f.client.SamplecrdV1().Networks("team").UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n = f.refresh("web")
	n.DeletionTimestamp = &now
	_ = f.indexer.Update(n)
	f.backend.SetPorts("team/web")
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync with pods on another node: %s, %v", result, err)
	}
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].Attachments != 0 || applied[0].Reason != ReasonTerminating {
		t.Fatalf("status once this node's pods left: %+v", applied)
	}
	if w := f.metadataWrites(); len(w) != 0 {
		t.Fatalf("the controller wrote the Network itself: %v", w)
	}

	// node-b's pod leaves too: the controller writes nothing more (the server releases).
	n = f.refresh("web")
	for i := range n.Status.Nodes {
		if n.Status.Nodes[i].NodeName == "node-b" {
			n.Status.Nodes[i].Attachments = 0
		}
	}
	if _, err := f.client.SamplecrdV1().Networks("team").UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n = f.refresh("web")
	n.DeletionTimestamp = &now
	_ = f.indexer.Update(n)
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync with no pods anywhere: %s, %v", result, err)
	}
	if w := f.metadataWrites(); len(w) != 0 {
		t.Fatalf("the controller wrote the Network itself with no pods anywhere: %v", w)
	}
	if a := f.backend.Get("team/web"); a == nil || a.Bridge == "" {
		t.Fatalf("the bridge went before the Network did: %+v", a)
	}
}

// TestUnreadableNodeKeepsTheFinalizer: a node that cannot tell whether pods are attached does not
// report zero for a Network being deleted (which would let the server release it).
func TestUnreadableNodeKeepsTheFinalizer(t *testing.T) {
	f := newFixture(t, protected(network("web", "10.1.0.0/24", "10.1.0.1", 1)))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	n := f.refresh("web")
	now := metav1.Now()
	n.DeletionTimestamp = &now
	if err := f.indexer.Update(n); err != nil {
		t.Fatal(err)
	}
	f.backend.SetFailure("team/web", errors.New("netlink: no buffer space"))
	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("sync succeeded although the node could not be read")
	}
	if applied := f.statusApplies(); len(applied) != 0 {
		t.Fatalf("reported without knowing the node's attachments: %+v", applied)
	}
	if w := f.metadataWrites(); len(w) != 0 {
		t.Fatalf("the controller wrote the Network itself: %v", w)
	}
}

// TestReleaseWaitsForLeases: a runtime's DEL removes the pod's veth before host-local releases
// its address; a Network being deleted whose last port went but whose addresses are still leased
// waits for the leases (up to LeaseGrace), so that its removal does not race the DEL and leave
// host-local's directory behind. Past the grace, leases that never go do not hold it forever.
func TestReleaseWaitsForLeases(t *testing.T) {
	f := newFixture(t, protected(network("web", "10.1.0.0/24", "10.1.0.1", 1)))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	f.backend.SetPorts("team/web", "veth1")
	f.backend.SetLeases("team/web", "10.1.0.2")
	n := f.refresh("web")
	now := metav1.Now()
	n.DeletionTimestamp = &now
	if err := f.indexer.Update(n); err != nil {
		t.Fatal(err)
	}
	deleting := func() {
		t.Helper()
		n := f.refresh("web")
		n.DeletionTimestamp = &now
		if err := f.indexer.Update(n); err != nil {
			t.Fatal(err)
		}
	}
	// The veth is gone, the lease not yet: kept, and the status names the lease.
	f.backend.SetPorts("team/web")
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync with a lease left: %s, %v", result, err)
	}
	// The entry reports the lease: the server keeps the Network while it does.
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].Attachments != 0 || !strings.Contains(applied[0].Message, "10.1.0.2") ||
		applied[0].Leases == nil || *applied[0].Leases != 1 {
		t.Fatalf("status while the lease is held: %+v", applied)
	}
	// Rechecks while the lease is held write nothing new.
	deleting()
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if applied := f.statusApplies(); len(applied) != 0 {
		t.Fatalf("a recheck with the same lease rewrote the status: %+v", applied)
	}
	// The DEL finishes: the node says it is done with the Network (no lease named).
	f.backend.SetLeases("team/web")
	deleting()
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync with no lease left: %s, %v", result, err)
	}
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].Attachments != 0 || strings.Contains(applied[0].Message, "leased") ||
		(applied[0].Leases != nil && *applied[0].Leases != 0) {
		t.Fatalf("status with no pods and no leases: %+v", applied)
	}

	// A lease that never goes (a DEL that never finished) holds the Network only for the grace.
	g := newFixture(t, protected(network("db", "10.2.0.0/24", "10.2.0.1", 1)))
	fakeClock := testingclock.NewFakePassiveClock(time.Now())
	g.controller.clock = fakeClock
	if _, err := g.sync("team/db"); err != nil {
		t.Fatal(err)
	}
	g.backend.SetLeases("team/db", "10.2.0.5")
	var last []v1.NetworkNodeStatus
	for i := range 2 { // the first sync waits, the second comes after the grace
		n := g.refresh("db")
		n.DeletionTimestamp = &now
		if err := g.indexer.Update(n); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			fakeClock.SetTime(fakeClock.Now().Add(g.controller.opts.LeaseGrace))
		}
		if _, err := g.sync("team/db"); err != nil {
			t.Fatal(err)
		}
		last = g.statusApplies()
	}
	if len(last) != 1 || strings.Contains(last[0].Message, "leased") || (last[0].Leases != nil && *last[0].Leases != 0) {
		t.Fatalf("a lease that never goes held the Network past the grace: %+v", last)
	}
}
