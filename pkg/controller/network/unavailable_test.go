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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/fake"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
)

func TestUnavailableNeedsReport(t *testing.T) {
	u := &Unavailable{node: "node-a", reason: "ControllerNeedsNetAdmin", message: "why"}
	said := metav1.Condition{Type: "Ready", Status: metav1.ConditionUnknown, Reason: u.reason, Message: u.message, ObservedGeneration: 2}
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
		{"already said", with(func(n *v1.Network) { n.Status.Conditions = []metav1.Condition{said} }), false},
		{"said for an older generation", with(func(n *v1.Network) {
			c := said
			c.ObservedGeneration = 1
			n.Status.Conditions = []metav1.Condition{c}
		}), true},
		{"another reason", with(func(n *v1.Network) {
			c := said
			c.Reason = "Other"
			n.Status.Conditions = []metav1.Condition{c}
		}), true},
		{"this node's earlier entry", with(func(n *v1.Network) {
			n.Status.Conditions = []metav1.Condition{said}
			n.Status.Nodes = []v1.NetworkNodeStatus{entry("node-a")}
		}), true},
		{"this node's and another's entries", with(func(n *v1.Network) {
			n.Status.Nodes = []v1.NetworkNodeStatus{entry("node-b"), entry("node-a")}
		}), true},
		{"only another node reports", with(func(n *v1.Network) {
			n.Status.Nodes = []v1.NetworkNodeStatus{entry("node-b")}
		}), false},
		{"being deleted", with(func(n *v1.Network) { now := metav1.Now(); n.DeletionTimestamp = &now }), false},
		{"being deleted, protected, no attachments reported", with(func(n *v1.Network) {
			now := metav1.Now()
			n.DeletionTimestamp, n.Finalizers = &now, []string{nodestatus.ProtectionFinalizer}
			n.Status.Nodes = []v1.NetworkNodeStatus{entry("node-b")}
		}), true},
		{"being deleted, protected, another node reports pods", with(func(n *v1.Network) {
			now := metav1.Now()
			n.DeletionTimestamp, n.Finalizers = &now, []string{nodestatus.ProtectionFinalizer}
			e := entry("node-b")
			e.Attachments = 2
			n.Status.Nodes = []v1.NetworkNodeStatus{e}
		}), false},
	} {
		if got := u.needsReport(tc.n); got != tc.want {
			t.Errorf("%s: needsReport %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestUnavailableReleasesProtectedNetworks: a node that cannot run its controller still lets a
// protected Network go once no node reports pods on it.
func TestUnavailableReleasesProtectedNetworks(t *testing.T) {
	n := network("n", "10.0.0.0/24", "10.0.0.1", 2)
	now := metav1.Now()
	n.DeletionTimestamp, n.Finalizers = &now, []string{"example.com/other", nodestatus.ProtectionFinalizer}
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
	got, err := client.SamplecrdV1().Networks("team").Get(context.Background(), "n", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Finalizers) != 1 || got.Finalizers[0] != "example.com/other" {
		t.Fatalf("finalizers %v, want only example.com/other", got.Finalizers)
	}
}
