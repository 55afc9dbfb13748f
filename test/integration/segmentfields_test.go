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
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// TestV1beta1StatusWritesKeepSegmentFields writes status through v1beta1 with a PUT, a merge
// patch and a server-side apply, and checks after each that none of the issue-23 fields (spec
// and status, the entry's segment fields) was lost on the way through v1beta1.
func TestV1beta1StatusWritesKeepSegmentFields(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	beta := dynamicClient(t, s).Resource(v1beta1GVR).Namespace(ns)

	n := newNetwork("seg", "10.23.0.0/24", "")
	n.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	n.Spec.DefaultRoute = ptr.To(true)
	created, err := networks.Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Read through v1beta1: the spec fields are there under the same names.
	obj, err := beta.Get(ctx, "seg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if zone, _, _ := unstructured.NestedString(obj.Object, "spec", "nodeSelector", "matchLabels", "zone"); zone != "a" {
		t.Fatalf("v1beta1 spec.nodeSelector: %v", obj.Object["spec"])
	}
	if dr, _, _ := unstructured.NestedBool(obj.Object, "spec", "defaultRoute"); !dr {
		t.Fatalf("v1beta1 spec.defaultRoute: %v", obj.Object["spec"])
	}

	// status.nodes[].blocks must be blocks the node holds: claim them first.
	claim := func(node string, count int) []string {
		var b *v1.BlockAllocation
		for range count {
			var err error
			if b, err = networks.ClaimBlocks(ctx, "seg", &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for _, blk := range b.Blocks {
			out = append(out, blk.CIDR)
		}
		return out
	}
	n1Blocks, n2Blocks := claim("n1", 1), claim("n2", 2)

	entry := func(node, underlay string, blocks []string, leases int32) map[string]any {
		bl := make([]any, len(blocks))
		for i, b := range blocks {
			bl[i] = b
		}
		return map[string]any{"nodeName": node, "ready": true, "observedGeneration": int64(1), "underlayAddress": underlay,
			"vxlan": "vx" + node, "blocks": bl, "mtu": int64(1450), "ipamMode": "Blocks", "leases": int64(leases)}
	}
	check := func(step string, want map[string]v1.NetworkNodeStatus) {
		t.Helper()
		got, err := networks.Get(ctx, "seg", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Spec.NodeSelector == nil || got.Spec.NodeSelector.MatchLabels["zone"] != "a" || !ptr.Deref(got.Spec.DefaultRoute, false) {
			t.Errorf("%s: spec lost nodeSelector/defaultRoute: %+v", step, got.Spec)
		}
		have := map[string]v1.NetworkNodeStatus{}
		for _, e := range got.Status.Nodes {
			have[e.NodeName] = e
		}
		for name, w := range want {
			g := have[name]
			// The server-derived capacity is checked by TestCapacityDerivedFromEntries.
			g.Message, g.Reason, g.Capacity = "", "", nil
			if !reflect.DeepEqual(g, w) {
				t.Errorf("%s: entry %s =\n%+v\nwant\n%+v", step, name, g, w)
			}
		}
	}
	v1Entry := func(node, underlay string, blocks []string, leases int32) v1.NetworkNodeStatus {
		return v1.NetworkNodeStatus{NodeName: node, Ready: true, ObservedGeneration: 1, UnderlayAddress: underlay, VXLAN: "vx" + node,
			Blocks: blocks, MTU: 1450, IPAMMode: "Blocks", Leases: ptr.To(leases)}
	}

	// PUT of the whole object to networks/status through v1beta1.
	obj.Object["status"] = map[string]any{"vni": int64(99), "nodes": []any{entry("n1", "192.168.77.1", n1Blocks, 0)}}
	if _, err := beta.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("v1beta1 status PUT: %v", err)
	}
	check("PUT", map[string]v1.NetworkNodeStatus{"n1": v1Entry("n1", "192.168.77.1", n1Blocks, 0)})

	// A merge patch that changes only the lease count keeps the rest of the entry.
	patch, _ := json.Marshal(map[string]any{"status": map[string]any{"nodes": []any{entry("n1", "192.168.77.1", n1Blocks, 3)}}})
	if _, err := beta.Patch(ctx, "seg", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("v1beta1 status merge patch: %v", err)
	}
	check("merge patch", map[string]v1.NetworkNodeStatus{"n1": v1Entry("n1", "192.168.77.1", n1Blocks, 3)})

	// A server-side apply of a second node's entry, as that node's field manager.
	apply, _ := json.Marshal(map[string]any{"apiVersion": "samplecrd.k8s.io/v1beta1", "kind": "Network",
		"metadata": map[string]any{"name": "seg"},
		"status":   map[string]any{"nodes": []any{entry("n2", "fd00:77::2", n2Blocks, 0)}}})
	_, err = beta.Patch(ctx, "seg", types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "network-segment/n2"}, "status")
	if err != nil {
		t.Fatalf("v1beta1 status apply: %v", err)
	}
	check("apply", map[string]v1.NetworkNodeStatus{
		"n1": v1Entry("n1", "192.168.77.1", n1Blocks, 3),
		"n2": v1Entry("n2", "fd00:77::2", n2Blocks, 0),
	})

	// No client sets status.vni, through either version: it stays what the create assigned.
	got, err := networks.Get(ctx, "seg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Status.VNI != created.Status.VNI || got.Status.VNI == 99 {
		t.Errorf("a client's status write set status.vni to %d (assigned at create: %d)", got.Status.VNI, created.Status.VNI)
	}

	// A block the node does not hold is refused, naming the entry's field.
	notHeld, _ := json.Marshal(map[string]any{"status": map[string]any{"nodes": []any{entry("n1", "192.168.77.1", n2Blocks[:1], 0)}}})
	_, err = beta.Patch(ctx, "seg", types.MergePatchType, notHeld, metav1.PatchOptions{}, "status")
	if err == nil || !strings.Contains(err.Error(), "status.nodes[0].blocks[0]") || !strings.Contains(err.Error(), "is not a block of node n1") {
		t.Errorf("block of another node: %v", err)
	}

	// A block outside spec.cidr is refused with the field path.
	bad, _ := json.Marshal(map[string]any{"status": map[string]any{"nodes": []any{entry("n1", "192.168.77.1", []string{"10.24.0.0/26"}, 0)}}})
	_, err = beta.Patch(ctx, "seg", types.MergePatchType, bad, metav1.PatchOptions{}, "status")
	if err == nil || !strings.Contains(err.Error(), "status.nodes[0].blocks[0]") {
		t.Errorf("block outside spec.cidr: %v", err)
	}
}
