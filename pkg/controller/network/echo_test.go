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
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// The node's own status write, coming back as an update, is not reconciled again; any other
// change is, and so is the node's entry when it is not the one the node wrote.
func TestOwnStatusWriteIsNotReconciledAgain(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	applied := f.statusApplies()
	if len(applied) != 1 {
		t.Fatalf("status applies: %+v", applied)
	}
	before := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	before.ResourceVersion = "1"
	echo := before.DeepCopy()
	echo.ResourceVersion = "2"
	echo.Status.Nodes = []v1.NetworkNodeStatus{applied[0]}
	meta.SetStatusCondition(&echo.Status.Conditions, metav1.Condition{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Realized"})
	echo.Status.ObservedGeneration = 1
	c := f.controller
	if !c.isEcho(before, echo) {
		t.Fatal("the node's own write (with the server's conditions) is not seen as an echo")
	}

	for name, change := range map[string]func(n *v1.Network){
		"spec":          func(n *v1.Network) { n.Spec.Gateway = "10.1.0.2" },
		"annotation":    func(n *v1.Network) { n.Annotations = map[string]string{"x": "y"} },
		"deletion":      func(n *v1.Network) { n.DeletionTimestamp = &metav1.Time{} },
		"vni":           func(n *v1.Network) { n.Status.VNI = 7 },
		"another node":  func(n *v1.Network) { n.Status.Nodes = append(n.Status.Nodes, v1.NetworkNodeStatus{NodeName: "node-b"}) },
		"entry changed": func(n *v1.Network) { n.Status.Nodes[0].Ready = false; n.Status.Nodes[0].Reason = "NodeNotReady" },
	} {
		cur := echo.DeepCopy()
		change(cur)
		if c.isEcho(before, cur) {
			t.Errorf("%s: the update is taken for the node's echo and not reconciled", name)
		}
	}
	c.forgetWritten("team/web")
	if c.isEcho(before, echo) {
		t.Error("an echo is recognised after the node forgot what it wrote")
	}
}

// The node's own claim coming back through the allocation informer is not reconciled again; an
// allocation that differs from the claim's answer (or another node's) is, as before.
func TestOwnClaimIsNotReconciledAgain(t *testing.T) {
	f := newFixture(t)
	c := f.controller
	answer := &v1.BlockAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web.node-a"},
		Network: "web", NetworkUID: "u1", NodeName: "node-a", Blocks: []v1.Block{{CIDR: "10.1.0.0/26"}}}
	c.claimed["team/web"] = answer
	c.enqueueAllocationChange(answer.DeepCopy())
	if n := c.queue.Len(); n != 0 {
		t.Fatalf("the node's own claim queued its Network (%d keys)", n)
	}
	grown := answer.DeepCopy()
	grown.Blocks = append(grown.Blocks, v1.Block{CIDR: "10.1.0.64/26"})
	c.enqueueAllocationChange(grown)
	if n := c.queue.Len(); n != 1 {
		t.Fatalf("an allocation other than the claim's answer queued %d keys; want 1", n)
	}
	other := answer.DeepCopy()
	other.NetworkUID = "u2"
	c.queue.Get()
	c.queue.Done("team/web")
	// While the node's claim is in flight its allocation's event (which may beat the answer)
	// is the claim's own.
	c.claiming["team/web"] = 1
	c.enqueueAllocationChange(grown)
	if n := c.queue.Len(); n != 0 {
		t.Fatalf("the allocation of a claim in flight queued %d keys", n)
	}
	delete(c.claiming, "team/web")
	c.enqueueAllocationChange(other)
	if n := c.queue.Len(); n != 1 {
		t.Fatalf("an allocation of a Network created again queued %d keys; want 1", n)
	}
}
