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
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

func TestStatusSubresourceAndGeneration(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	ts := metav1.NewTime(time.Date(2025, 2, 3, 4, 5, 6, 0, time.UTC))

	// Status sent with a create is dropped; the generation starts at 1.
	n := newNetwork("net-st", "10.7.0.0/24", "")
	n.Status = v1.NetworkStatus{ObservedGeneration: 7, Conditions: []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Lie", LastTransitionTime: ts},
	}}
	created, err := networks.Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Generation != 1 || created.Status.ObservedGeneration != 0 || len(created.Status.Conditions) != 0 {
		t.Fatalf("created generation %d status %+v, want generation 1 and an empty status", created.Generation, created.Status)
	}

	// A write to /status changes status only: the spec and labels it carries are ignored and the
	// generation stays.
	toStatus := created.DeepCopy()
	toStatus.Spec.Gateway = "10.7.0.99"
	toStatus.Labels = map[string]string{"from": "status"}
	toStatus.Status = v1.NetworkStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Realized", Message: "ok", ObservedGeneration: 1, LastTransitionTime: ts},
	}}
	afterStatus, err := networks.UpdateStatus(ctx, toStatus, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := networks.Get(ctx, "net-st", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != afterStatus.ResourceVersion {
		t.Fatalf("get rv %s, want the status write's %s", got.ResourceVersion, afterStatus.ResourceVersion)
	}
	if got.Spec.Gateway != "10.7.0.1" || len(got.Labels) != 0 {
		t.Fatalf("a status write changed spec or labels: gateway %s labels %v", got.Spec.Gateway, got.Labels)
	}
	if got.Status.ObservedGeneration != 1 || meta.FindStatusCondition(got.Status.Conditions, "Ready") == nil || got.Generation != 1 {
		t.Fatalf("after the status write: generation %d status %+v, want generation 1, observedGeneration 1 and Ready", got.Generation, got.Status)
	}

	// A write to the main resource ignores status; a label change does not bump the generation.
	main := got.DeepCopy()
	main.Labels = map[string]string{"from": "main"}
	main.Status = v1.NetworkStatus{ObservedGeneration: 42}
	afterMain, err := networks.Update(ctx, main, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if afterMain.Labels["from"] != "main" || afterMain.Generation != 1 || afterMain.Status.ObservedGeneration != 1 || len(afterMain.Status.Conditions) != 1 {
		t.Fatalf("after a metadata-only update with a status: generation %d labels %v status %+v", afterMain.Generation, afterMain.Labels, afterMain.Status)
	}

	// A status patch is ignored on the main resource as well.
	patched, err := networks.Patch(ctx, "net-st", types.MergePatchType, []byte(`{"status":{"observedGeneration":9}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if patched.Status.ObservedGeneration != 1 || patched.Generation != 1 {
		t.Fatalf("a status patch to the main resource took effect: %+v generation %d", patched.Status, patched.Generation)
	}

	// A spec change bumps the generation; status stays as the controller left it.
	specChange := afterMain.DeepCopy()
	specChange.Spec.Gateway = "10.7.0.254"
	afterSpec, err := networks.Update(ctx, specChange, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if afterSpec.Generation != 2 || afterSpec.Spec.Gateway != "10.7.0.254" || afterSpec.Status.ObservedGeneration != 1 {
		t.Fatalf("after a spec change: generation %d gateway %s observedGeneration %d, want 2, 10.7.0.254, 1",
			afterSpec.Generation, afterSpec.Spec.Gateway, afterSpec.Status.ObservedGeneration)
	}

	// Updating with an identical spec does not bump it again.
	same, err := networks.Update(ctx, afterSpec.DeepCopy(), metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if same.Generation != 2 {
		t.Fatalf("a no-op update moved the generation to %d", same.Generation)
	}

	// A status patch (on /status) sets observedGeneration and ignores the spec it carries.
	afterStatusPatch, err := networks.Patch(ctx, "net-st", types.MergePatchType,
		[]byte(`{"spec":{"gateway":"10.7.0.5"},"status":{"observedGeneration":2}}`), metav1.PatchOptions{}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if afterStatusPatch.Status.ObservedGeneration != 2 || afterStatusPatch.Spec.Gateway != "10.7.0.254" || afterStatusPatch.Generation != 2 {
		t.Fatalf("after the status patch: %+v gateway %s generation %d", afterStatusPatch.Status, afterStatusPatch.Spec.Gateway, afterStatusPatch.Generation)
	}

	// GET on /status returns the whole object.
	var fromStatus v1.Network
	if err := jsonClient(t, s).SamplecrdV1().RESTClient().Get().Namespace(ns).Resource("networks").Name("net-st").
		SubResource("status").Do(ctx).Into(&fromStatus); err != nil {
		t.Fatal(err)
	}
	if fromStatus.Spec.Gateway != "10.7.0.254" || fromStatus.Status.ObservedGeneration != 2 || fromStatus.ResourceVersion != afterStatusPatch.ResourceVersion {
		t.Fatalf("GET networks/status returned %+v", fromStatus)
	}
}

// With node entries, the server derives observedGeneration and the Ready condition, and a spec
// change turns Ready False until every node has caught up.
func TestStatusNodesDeriveReadiness(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	created, err := networks.Create(ctx, newNetwork("net-nodes", "10.7.1.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Nodes = []v1.NetworkNodeStatus{
		{NodeName: "node-a", Ready: true, ObservedGeneration: 1},
		{NodeName: "node-b", Ready: true, ObservedGeneration: 1},
	}
	st, err := networks.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := meta.FindStatusCondition(st.Status.Conditions, "Ready")
	if st.Status.ObservedGeneration != 1 || ready == nil || ready.Status != metav1.ConditionTrue {
		t.Fatalf("two ready nodes at generation 1: status %+v", st.Status)
	}

	st.Spec.Gateway = "10.7.1.9"
	upd, err := networks.Update(ctx, st, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready = meta.FindStatusCondition(upd.Status.Conditions, "Ready")
	if upd.Generation != 2 || ready == nil || ready.Status != metav1.ConditionFalse || ready.ObservedGeneration != 2 {
		t.Fatalf("after a spec change: generation %d Ready %+v, want 2 and False", upd.Generation, ready)
	}
}

// Once a node has reported, the server derives status.observedGeneration; a write carrying a
// negative one is still refused, because what the client sent is validated before the derivation.
func TestStatusWriteWithNodesIsValidatedBeforeDerivation(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	created, err := networks.Create(ctx, newNetwork("net-neg", "10.7.2.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Nodes = []v1.NetworkNodeStatus{{NodeName: "node-a", Ready: true, ObservedGeneration: 1}}
	reported, err := networks.UpdateStatus(ctx, created, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	negative := reported.DeepCopy()
	negative.Status.ObservedGeneration = -1
	_, err = networks.UpdateStatus(ctx, negative, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("status write with observedGeneration -1 after a node reported: %v, want 422", err)
	}
	if !slices.ContainsFunc(err.(apierrors.APIStatus).Status().Details.Causes, func(c metav1.StatusCause) bool { return c.Field == "status.observedGeneration" }) {
		t.Fatalf("error %v does not name status.observedGeneration", err)
	}
	got, err := networks.Get(ctx, "net-neg", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != reported.ResourceVersion {
		t.Fatalf("the refused status write was stored: resourceVersion %s, want %s", got.ResourceVersion, reported.ResourceVersion)
	}
}

// Server-side apply on /status records no managed fields for the metadata a status write throws
// away (labels here), as kube's status strategies do.
func TestStatusApplyOwnsNoResetMetadata(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	if _, err := networks.Create(ctx, newNetwork("net-ssa-status", "10.7.3.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network","metadata":{"name":"net-ssa-status","labels":{"from":"status"}},` +
		`"status":{"nodes":[{"nodeName":"node-a","ready":true,"observedGeneration":1}]}}`)
	applied, err := networks.Patch(ctx, "net-ssa-status", types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "node-a"}, "status")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := applied.Labels["from"]; ok {
		t.Fatalf("a status apply set labels: %v", applied.Labels)
	}
	var owned string
	for _, m := range applied.ManagedFields {
		if m.Manager == "node-a" && m.Subresource == "status" && m.FieldsV1 != nil {
			owned = string(m.FieldsV1.Raw)
		}
	}
	if !strings.Contains(owned, `"f:nodes"`) {
		t.Fatalf("node-a's managed fields %s do not hold its status.nodes entry", owned)
	}
	if strings.Contains(owned, `"f:labels"`) {
		t.Errorf("node-a's managed fields %s hold metadata.labels, which the status write threw away", owned)
	}
}
