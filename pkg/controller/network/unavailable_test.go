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
	"encoding/json"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/fake"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
)

func TestUnavailableNeedsReport(t *testing.T) {
	u := &Unavailable{node: "node-a", reason: "ControllerNeedsNetAdmin", message: "why"}
	said := v1.NetworkNodeStatus{NodeName: "node-a", Reason: u.reason, Message: u.message, ObservedGeneration: 2}
	entry := func(node string) v1.NetworkNodeStatus {
		return v1.NetworkNodeStatus{NodeName: node, Ready: true, ObservedGeneration: 2}
	}
	with := func(f func(n *v1.Network)) *v1.Network {
		n := network("n", "10.0.0.0/24", "10.0.0.1", 2)
		f(n)
		return n
	}
	for _, tc := range []struct {
		name string
		n    *v1.Network
		want bool
	}{
		{"new, no status", with(func(*v1.Network) {}), true},
		{"already said", with(func(n *v1.Network) { n.Status.Nodes = []v1.NetworkNodeStatus{entry("node-b"), said} }), false},
		{"said for an older generation", with(func(n *v1.Network) {
			e := said
			e.ObservedGeneration = 1
			n.Status.Nodes = []v1.NetworkNodeStatus{e}
		}), true},
		{"another reason", with(func(n *v1.Network) {
			e := said
			e.Reason = "Other"
			n.Status.Nodes = []v1.NetworkNodeStatus{e}
		}), true},
		{"this node's entry from a running controller", with(func(n *v1.Network) {
			n.Status.Nodes = []v1.NetworkNodeStatus{entry("node-a")}
		}), true},
		{"said, but with attachments left from a running controller", with(func(n *v1.Network) {
			e := said
			e.Attachments = 3
			n.Status.Nodes = []v1.NetworkNodeStatus{e}
		}), true},
		{"only another node reports", with(func(n *v1.Network) {
			n.Status.Nodes = []v1.NetworkNodeStatus{entry("node-b")}
		}), true},
		{"being deleted, already said", with(func(n *v1.Network) {
			now := metav1.Now()
			n.DeletionTimestamp, n.Finalizers = &now, []string{nodestatus.ProtectionFinalizer}
			n.Status.Nodes = []v1.NetworkNodeStatus{said}
		}), false},
	} {
		if got := u.needsReport(tc.n); got != tc.want {
			t.Errorf("%s: needsReport %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestUnavailableSaysSoInItsEntry: a node that cannot run its controller writes its own entry
// (not ready, its reason and message) and nothing else: no Network-level condition, no
// finalizer, not even on a Network being deleted (the server releases it).
func TestUnavailableSaysSoInItsEntry(t *testing.T) {
	for _, deleting := range []bool{false, true} {
		n := network("n", "10.0.0.0/24", "10.0.0.1", 2)
		if deleting {
			now := metav1.Now()
			n.DeletionTimestamp, n.Finalizers = &now, []string{"example.com/other", nodestatus.ProtectionFinalizer}
		}
		client := fake.NewClientset(n)
		informer := externalversions.NewSharedInformerFactory(client, 0).Samplecrd().V1().Networks()
		if err := informer.Informer().GetIndexer().Add(n); err != nil {
			t.Fatal(err)
		}
		u, err := NewUnavailable(client, informer, "node-a", "ControllerNeedsNetAdmin", "why")
		if err != nil {
			t.Fatal(err)
		}
		if err := u.sync(context.Background(), "team/n"); err != nil {
			t.Fatal(err)
		}
		var applied []string
		for _, a := range client.Actions() {
			if a.GetVerb() == "list" || a.GetVerb() == "watch" || a.GetVerb() == "get" {
				continue
			}
			patch, ok := a.(clienttesting.PatchAction)
			if !ok || a.GetSubresource() != "status" || patch.GetPatchType() != types.ApplyPatchType {
				t.Fatalf("deleting %v: a write other than an apply of the status: %s %s", deleting, a.GetVerb(), a.GetSubresource())
			}
			applied = append(applied, string(patch.GetPatch()))
		}
		if len(applied) != 1 {
			t.Fatalf("deleting %v: applies %v, want one", deleting, applied)
		}
		var body v1.Network
		if err := json.Unmarshal([]byte(applied[0]), &body); err != nil {
			t.Fatal(err)
		}
		want := []v1.NetworkNodeStatus{{NodeName: "node-a", Reason: "ControllerNeedsNetAdmin", Message: "why", ObservedGeneration: 2}}
		if !apiequality.Semantic.DeepEqual(body.Status.Nodes, want) || len(body.Status.Conditions) != 0 || len(body.Finalizers) != 0 {
			t.Fatalf("deleting %v: applied %s, want only the entry %+v", deleting, applied[0], want)
		}
	}
}
