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

package noderestriction

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func agentOn(node string) user.Info {
	u := &user.DefaultInfo{Name: nodeidentity.DefaultAgentServiceAccount, Groups: []string{"system:serviceaccounts", "system:authenticated"}}
	if node != "" {
		u.Extra = map[string][]string{nodeidentity.NodeNameExtra: {node}}
	}
	return u
}

func network() *samplecrd.Network {
	leases := int32(3)
	return &samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default", ResourceVersion: "7", Generation: 2,
			Labels: map[string]string{"a": "b"}, Finalizers: []string{"samplecrd.k8s.io/network-protection"}},
		Spec: samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
		Status: samplecrd.NetworkStatus{ObservedGeneration: 2, VNI: 5,
			Conditions: []metav1.Condition{{Type: samplecrd.ConditionReady, Status: metav1.ConditionTrue, Reason: "Realized"}},
			Nodes: []samplecrd.NetworkNodeStatus{
				{NodeName: "node1", Ready: true, ObservedGeneration: 2, Attachments: 1, Leases: &leases},
				{NodeName: "node2", Ready: true, ObservedGeneration: 2},
			}},
	}
}

func TestValidate(t *testing.T) {
	networks := samplecrd.Resource("networks").WithVersion("")
	blockallocations := samplecrd.Resource("blockallocations").WithVersion("")
	kind := samplecrd.Kind("Network").WithVersion("")
	edit := func(f func(n *samplecrd.Network)) *samplecrd.Network {
		n := network()
		f(n)
		return n
	}
	cases := []struct {
		name        string
		user        user.Info
		op          admission.Operation
		resource    string // networks or blockallocations
		subresource string
		obj, old    runtime.Object
		want        string // "" admitted, else a substring of the 403
	}{
		{name: "admin changes the spec", user: &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}, op: admission.Update,
			obj: edit(func(n *samplecrd.Network) { n.Spec.CIDR = "10.1.0.0/24" }), old: network()},
		{name: "other service account writes node2's entry", user: &user.DefaultInfo{Name: "system:serviceaccount:x:y",
			Extra: map[string][]string{nodeidentity.NodeNameExtra: {"node1"}}}, op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes[1].Ready = false }), old: network()},

		{name: "own entry via status", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes[0].Attachments = 4; n.Status.Nodes[0].Message = "x" }), old: network()},
		{name: "own entry and the derived Ready", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) {
				n.Status.Nodes[0].Ready = false
				n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = metav1.ConditionFalse, "NodeNotReady"
				n.Status.ObservedGeneration = 1
				n.ResourceVersion, n.ManagedFields = "8", []metav1.ManagedFieldsEntry{{Manager: "node1"}}
			}), old: network()},
		{name: "own entry says AddressesExhausted and the derived condition turns True", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) {
				n.Status.Nodes[0].Ready, n.Status.Nodes[0].Reason = false, samplecrd.ReasonAddressesExhausted
				n.Status.Conditions[0].Status, n.Status.Conditions[0].Reason = metav1.ConditionFalse, samplecrd.ReasonAddressesExhausted
				n.Status.Conditions = append(n.Status.Conditions, metav1.Condition{Type: samplecrd.ConditionAddressesExhausted,
					Status: metav1.ConditionTrue, Reason: samplecrd.ReasonAddressesExhausted})
			}), old: network()},
		{name: "last entry withdrawn drops the derived AddressesExhausted", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil }),
			old: edit(func(n *samplecrd.Network) {
				n.Status.Nodes = n.Status.Nodes[:1]
				n.Status.Conditions = append(n.Status.Conditions, metav1.Condition{Type: samplecrd.ConditionAddressesExhausted,
					Status: metav1.ConditionFalse, Reason: "AddressesAvailable"})
			})},
		{name: "own entry added", user: agentOn("node3"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) {
				n.Status.Nodes = append(n.Status.Nodes, samplecrd.NetworkNodeStatus{NodeName: "node3"})
			}), old: network()},
		{name: "own entry withdrawn", user: agentOn("node2"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes = n.Status.Nodes[:1] }), old: network()},
		{name: "own entry via the main resource (no-op apply)", user: agentOn("node1"), op: admission.Update,
			obj: network(), old: network()},
		{name: "per-node credential, own entry", user: &user.DefaultInfo{Name: nodeidentity.UserPrefix + "node1", Groups: []string{nodeidentity.Group}},
			op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes[0].Bridge = "nw1" }), old: network()},
		{name: "own claim", user: agentOn("node1"), op: admission.Create, subresource: "blockclaims",
			obj: &samplecrd.BlockClaim{NodeName: "node1"}},

		{name: "other node's entry", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes[1].Ready = false }), old: network(),
			want: "node node1 may not change status.nodes[node2] of network default/web"},
		{name: "other node's entry removed", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes = n.Status.Nodes[:1] }), old: network(),
			want: "node node1 may not change status.nodes[node2]"},
		{name: "entry for another node added", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) {
				n.Status.Nodes = append(n.Status.Nodes, samplecrd.NetworkNodeStatus{NodeName: "node9"})
			}), old: network(), want: "node node1 may not change status.nodes[node9]"},
		{name: "two entries of its own", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) {
				n.Status.Nodes = append(n.Status.Nodes, samplecrd.NetworkNodeStatus{NodeName: "node1"})
			}), old: network(), want: "two entries of one node"},
		{name: "a Network condition", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) {
				n.Status.Conditions = append(n.Status.Conditions, metav1.Condition{Type: "Unavailable", Status: metav1.ConditionTrue})
			}), old: network(), want: "node node1 may not change status.conditions of network default/web"},
		{name: "Ready dropped without node entries", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil; n.Status.Conditions = nil }),
			old: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil })},
		{name: "withdrawn last entry drops the Ready an older agent owned", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil; n.Status.Conditions = nil }),
			old: edit(func(n *samplecrd.Network) { n.Status.Nodes = n.Status.Nodes[:1] })},
		{name: "Ready set without node entries", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil }),
			old: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil; n.Status.Conditions = nil }), want: "status.conditions"},
		{name: "Ready changed without node entries", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) {
				n.Status.Nodes = nil
				n.Status.Conditions[0].Status = metav1.ConditionFalse
			}),
			old: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil }), want: "status.conditions"},
		{name: "another condition dropped without node entries", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil; n.Status.Conditions = nil }),
			old: edit(func(n *samplecrd.Network) {
				n.Status.Nodes = nil
				n.Status.Conditions = append(n.Status.Conditions, metav1.Condition{Type: "Degraded", Status: metav1.ConditionTrue})
			}), want: "status.conditions"},
		{name: "observedGeneration without node entries", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil; n.Status.ObservedGeneration = 9 }),
			old: edit(func(n *samplecrd.Network) { n.Status.Nodes = nil }), want: "status.observedGeneration"},
		{name: "the VNI", user: agentOn("node1"), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.VNI = 6 }), old: network(), want: "status.vni"},
		{name: "the spec", user: agentOn("node1"), op: admission.Update,
			obj: edit(func(n *samplecrd.Network) { n.Spec.Gateway = "10.0.0.2" }), old: network(),
			want: "node node1 may not change spec of network default/web"},
		{name: "a label", user: agentOn("node1"), op: admission.Update,
			obj: edit(func(n *samplecrd.Network) { n.Labels["x"] = "y" }), old: network(), want: "change metadata.labels of"},
		{name: "an annotation", user: agentOn("node1"), op: admission.Update,
			obj: edit(func(n *samplecrd.Network) { n.Annotations = map[string]string{"x": "y"} }), old: network(), want: "change metadata.annotations of"},
		{name: "the finalizer removed", user: agentOn("node1"), op: admission.Update,
			obj: edit(func(n *samplecrd.Network) { n.Finalizers = nil }), old: network(), want: "change metadata.finalizers of"},
		{name: "the finalizer added", user: agentOn("node1"), op: admission.Update,
			obj: network(), old: edit(func(n *samplecrd.Network) { n.Finalizers = nil }), want: "change metadata.finalizers of"},
		{name: "owner references", user: agentOn("node1"), op: admission.Update,
			obj: edit(func(n *samplecrd.Network) { n.OwnerReferences = []metav1.OwnerReference{{Name: "x"}} }), old: network(),
			want: "metadata.ownerReferences"},
		{name: "spec, labels and an entry at once", user: agentOn("node1"), op: admission.Update,
			obj: edit(func(n *samplecrd.Network) {
				n.Spec.Gateway = "10.0.0.2"
				n.Labels = nil
				n.Status.Nodes[1].Bridge = "x"
			}), old: network(),
			want: "change spec, metadata.labels and status.nodes[node2] of network default/web"},
		{name: "create a Network", user: agentOn("node1"), op: admission.Create, obj: network(),
			want: "node node1 may not create networks default/web"},
		{name: "delete a Network", user: agentOn("node1"), op: admission.Delete,
			want: "node node1 may not delete networks default/web"},
		{name: "delete networks/status", user: agentOn("node1"), op: admission.Delete, subresource: "status",
			want: "node node1 may not delete networks/status default/web"},
		{name: "connect", user: agentOn("node1"), op: admission.Connect, subresource: "proxy",
			want: "node node1 may not connect to networks/proxy default/web"},
		{name: "create networks/status", user: agentOn("node1"), op: admission.Create, subresource: "status", obj: network(),
			want: "node node1 may not create networks/status default/web"},
		{name: "update networks/blockclaims", user: agentOn("node1"), op: admission.Update, subresource: "blockclaims",
			obj: &samplecrd.BlockClaim{NodeName: "node1"}, old: &samplecrd.BlockClaim{NodeName: "node1"},
			want: "node node1 may not update networks/blockclaims default/web"},
		{name: "delete networks/blockclaims", user: agentOn("node1"), op: admission.Delete, subresource: "blockclaims",
			want: "node node1 may not delete networks/blockclaims default/web"},
		{name: "claim with another object", user: agentOn("node1"), op: admission.Create, subresource: "blockclaims",
			obj: network(), want: "node node1 may not create networks/blockclaims default/web"},
		{name: "create a blockallocation", user: agentOn("node1"), op: admission.Create, resource: "blockallocations",
			obj: &samplecrd.BlockAllocation{}, want: "node node1 may not create blockallocations default/web"},
		{name: "claim for another node", user: agentOn("node1"), op: admission.Create, subresource: "blockclaims",
			obj: &samplecrd.BlockClaim{NodeName: "node2"}, want: "node node1 may not claim blocks of network default/web for node node2"},
		{name: "a write to blockallocations", user: agentOn("node1"), op: admission.Update, resource: "blockallocations",
			obj: &samplecrd.BlockAllocation{}, old: &samplecrd.BlockAllocation{},
			want: "node node1 may not update blockallocations default/web"},
		{name: "a blockallocations delete", user: agentOn("node1"), op: admission.Delete, resource: "blockallocations",
			want: "node node1 may not delete blockallocations default/web"},

		{name: "agent without a node: own-looking entry", user: agentOn(""), op: admission.Update, subresource: "status",
			obj: edit(func(n *samplecrd.Network) { n.Status.Nodes[0].Attachments = 4 }), old: network(),
			want: "is a node agent but its credential names no node"},
		{name: "agent without a node: claim", user: agentOn(""), op: admission.Create, subresource: "blockclaims",
			obj: &samplecrd.BlockClaim{NodeName: "node1"}, want: "credential names no node (user extra authentication.kubernetes.io/node-name): it may not create networks/blockclaims default/web"},
		{name: "two node names", user: &user.DefaultInfo{Name: nodeidentity.DefaultAgentServiceAccount,
			Extra: map[string][]string{nodeidentity.NodeNameExtra: {"node1", "node2"}}}, op: admission.Update, subresource: "status",
			obj: network(), old: network(), want: "credential names no node"},
		{name: "group member without a node", user: &user.DefaultInfo{Name: "someone", Groups: []string{nodeidentity.Group}},
			op: admission.Create, subresource: "blockclaims", obj: &samplecrd.BlockClaim{NodeName: "node1"}, want: "credential names no node"},
	}
	p := New()
	p.SetAgentIdentity(nodeidentity.Identity{Agents: nodeidentity.DefaultAgents})
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resource := networks
			if tc.resource == "blockallocations" {
				resource = blockallocations
			}
			a := admission.NewAttributesRecord(tc.obj, tc.old, kind, "default", "web", resource, tc.subresource, tc.op, nil, false, tc.user)
			if !p.Handles(tc.op) {
				t.Fatalf("the plugin does not handle %s", tc.op)
			}
			err := p.Validate(context.Background(), a, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && err == nil:
				t.Fatalf("admitted, want a refusal with %q", tc.want)
			case tc.want != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v (forbidden %v), want 403 with %q", err, apierrors.IsForbidden(err), tc.want)
			}
		})
	}
}

func TestValidateInitialization(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil {
		t.Error("a plugin without an identity passed initialization")
	}
}
