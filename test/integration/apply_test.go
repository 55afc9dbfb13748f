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
	"maps"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/utils/ptr"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	applyv1 "github.com/samplecrd/network-apiserver/pkg/generated/applyconfiguration/samplecrd/v1"
)

// ownsSpecField says whether manager's Apply entry in managedFields owns spec.<field>.
func ownsSpecField(t *testing.T, n *v1.Network, manager, field string) bool {
	t.Helper()
	for _, e := range n.ManagedFields {
		if e.Manager != manager || e.Operation != metav1.ManagedFieldsOperationApply || e.FieldsV1 == nil {
			continue
		}
		var fields map[string]map[string]any
		if err := json.Unmarshal(e.FieldsV1.Raw, &fields); err != nil {
			t.Fatalf("managedFields of %s: %v", manager, err)
		}
		_, ok := fields["f:spec"]["f:"+field]
		return ok
	}
	return false
}

func applyBody(name, cidr, gateway string) []byte {
	return []byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network","metadata":{"name":"` + name +
		`"},"spec":{"cidr":"` + cidr + `","gateway":"` + gateway + `"}}`)
}

func TestServerSideApplyConflictAndForce(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	// Manager A creates the Network by applying it.
	a, err := networks.Patch(ctx, "net-ssa", types.ApplyPatchType, applyBody("net-ssa", "10.3.0.0/24", "10.3.0.1"),
		metav1.PatchOptions{FieldManager: "manager-a"})
	if err != nil {
		t.Fatal(err)
	}
	if a.Spec.Gateway != "10.3.0.1" || a.Generation != 1 {
		t.Fatalf("applied network: gateway %s generation %d", a.Spec.Gateway, a.Generation)
	}
	if !ownsSpecField(t, a, "manager-a", "gateway") || !ownsSpecField(t, a, "manager-a", "cidr") {
		t.Fatalf("manager-a does not own spec.gateway and spec.cidr: %+v", a.ManagedFields)
	}

	// Re-applying the same configuration is a no-op.
	again, err := networks.Patch(ctx, "net-ssa", types.ApplyPatchType, applyBody("net-ssa", "10.3.0.0/24", "10.3.0.1"),
		metav1.PatchOptions{FieldManager: "manager-a"})
	if err != nil {
		t.Fatal(err)
	}
	if again.ResourceVersion != a.ResourceVersion {
		t.Fatalf("an identical apply changed the resourceVersion from %s to %s", a.ResourceVersion, again.ResourceVersion)
	}

	// Manager B applies another gateway: a conflict on spec.gateway only (the cidr agrees).
	_, err = networks.Patch(ctx, "net-ssa", types.ApplyPatchType, applyBody("net-ssa", "10.3.0.0/24", "10.3.0.99"),
		metav1.PatchOptions{FieldManager: "manager-b"})
	if !apierrors.IsConflict(err) {
		t.Fatalf("manager-b's apply: %v, want a 409 conflict", err)
	}
	status := err.(apierrors.APIStatus).Status()
	if status.Code != 409 || !strings.Contains(status.Message, ".spec.gateway") || !strings.Contains(status.Message, "manager-a") {
		t.Fatalf("conflict code %d message %q, want 409 naming .spec.gateway and manager-a", status.Code, status.Message)
	}
	if status.Details == nil || len(status.Details.Causes) != 1 || status.Details.Causes[0].Field != ".spec.gateway" ||
		status.Details.Causes[0].Type != metav1.CauseTypeFieldManagerConflict {
		t.Fatalf("conflict details %+v, want one FieldManagerConflict cause on .spec.gateway", status.Details)
	}
	unchanged, err := networks.Get(ctx, "net-ssa", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if unchanged.ResourceVersion != a.ResourceVersion || unchanged.Spec.Gateway != "10.3.0.1" {
		t.Fatalf("the refused apply changed the network: rv %s gateway %s", unchanged.ResourceVersion, unchanged.Spec.Gateway)
	}

	// With force, B takes spec.gateway over; both still own spec.cidr, which they agree on.
	forced, err := networks.Patch(ctx, "net-ssa", types.ApplyPatchType, applyBody("net-ssa", "10.3.0.0/24", "10.3.0.99"),
		metav1.PatchOptions{FieldManager: "manager-b", Force: ptr.To(true)})
	if err != nil {
		t.Fatal(err)
	}
	if forced.Spec.Gateway != "10.3.0.99" || forced.Generation != 2 {
		t.Fatalf("forced apply: gateway %s generation %d, want 10.3.0.99 and 2", forced.Spec.Gateway, forced.Generation)
	}
	if !ownsSpecField(t, forced, "manager-b", "gateway") || ownsSpecField(t, forced, "manager-a", "gateway") {
		t.Fatalf("spec.gateway ownership did not move to manager-b: %+v", forced.ManagedFields)
	}
	if !ownsSpecField(t, forced, "manager-a", "cidr") || !ownsSpecField(t, forced, "manager-b", "cidr") {
		t.Fatalf("spec.cidr should be shared by both managers: %+v", forced.ManagedFields)
	}

	// Now A is the one in conflict, and the message names manager-b.
	_, err = networks.Patch(ctx, "net-ssa", types.ApplyPatchType, applyBody("net-ssa", "10.3.0.0/24", "10.3.0.1"),
		metav1.PatchOptions{FieldManager: "manager-a"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "manager-b") || !strings.Contains(err.Error(), ".spec.gateway") {
		t.Fatalf("manager-a's apply after the takeover: %v, want a conflict with manager-b on .spec.gateway", err)
	}
}

func TestServerSideApplyWithApplyConfigurations(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := protobufClient(t, s).SamplecrdV1().Networks(ns)

	cfg := applyv1.Network("net-ac", ns).
		WithLabels(map[string]string{"applied": "yes"}).
		WithSpec(applyv1.NetworkSpec().WithCIDR("fd00:3::/64").WithGateway("fd00:3::fe"))
	applied, err := networks.Apply(ctx, cfg, metav1.ApplyOptions{FieldManager: "typed-applier"})
	if err != nil {
		t.Fatal(err)
	}
	if applied.Spec.CIDR != "fd00:3::/64" || applied.Spec.Gateway != "fd00:3::fe" || applied.Labels["applied"] != "yes" {
		t.Fatalf("applied network %+v %v", applied.Spec, applied.Labels)
	}

	// What the manager owns extracts back to exactly what it applied.
	got, err := networks.Get(ctx, "net-ac", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	extracted, err := applyv1.ExtractNetwork(got, "typed-applier")
	if err != nil {
		t.Fatal(err)
	}
	if extracted.Spec == nil || ptr.Deref(extracted.Spec.CIDR, "") != "fd00:3::/64" || ptr.Deref(extracted.Spec.Gateway, "") != "fd00:3::fe" ||
		extracted.Spec.PrefixLength != nil || !maps.Equal(extracted.Labels, map[string]string{"applied": "yes"}) {
		t.Fatalf("extracted apply configuration %+v (spec %+v), want the applied fields only", extracted, extracted.Spec)
	}

	// Applying the extracted configuration with one field changed updates that field only, and
	// dropping the label from the configuration removes it.
	extracted.WithSpec(extracted.Spec.WithGateway("fd00:3::1"))
	extracted.Labels = nil
	reapplied, err := networks.Apply(ctx, extracted, metav1.ApplyOptions{FieldManager: "typed-applier"})
	if err != nil {
		t.Fatal(err)
	}
	if reapplied.Spec.Gateway != "fd00:3::1" || reapplied.Spec.CIDR != "fd00:3::/64" || len(reapplied.Labels) != 0 {
		t.Fatalf("re-applied network spec %+v labels %v, want gateway fd00:3::1 and no labels", reapplied.Spec, reapplied.Labels)
	}
}

// Client-side apply (kubectl apply without --server-side): the last-applied-configuration
// annotation is stored verbatim and a three-way strategic merge patch built from it behaves.
func TestClientSideApplyLastAppliedConfiguration(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	const annotation = "kubectl.kubernetes.io/last-applied-configuration"

	// withLastApplied returns the JSON of config and config carrying that JSON as its annotation,
	// which is what kubectl sends.
	withLastApplied := func(config *v1.Network) ([]byte, *v1.Network) {
		t.Helper()
		b, err := json.Marshal(config)
		if err != nil {
			t.Fatal(err)
		}
		annotated := config.DeepCopy()
		annotated.Annotations = map[string]string{annotation: string(b)}
		return b, annotated
	}

	original := &v1.Network{
		TypeMeta:   metav1.TypeMeta{APIVersion: "samplecrd.k8s.io/v1", Kind: "Network"},
		ObjectMeta: metav1.ObjectMeta{Name: "net-csa", Namespace: ns, Labels: map[string]string{"app": "web", "stage": "one"}},
		Spec:       v1.NetworkSpec{CIDR: "10.4.0.0/24", Gateway: "10.4.0.1"},
	}
	originalJSON, toCreate := withLastApplied(original)
	created, err := networks.Create(ctx, toCreate, metav1.CreateOptions{FieldManager: "kubectl-client-side-apply"})
	if err != nil {
		t.Fatal(err)
	}
	if created.Annotations[annotation] != string(originalJSON) {
		t.Fatalf("stored annotation %q, want %q", created.Annotations[annotation], originalJSON)
	}
	got, err := networks.Get(ctx, "net-csa", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Annotations[annotation] != string(originalJSON) {
		t.Fatalf("annotation read back as %q, want %q", got.Annotations[annotation], originalJSON)
	}

	// Someone else adds a label that the applier never managed: a three-way patch keeps it.
	if _, err := networks.Patch(ctx, "net-csa", types.MergePatchType, []byte(`{"metadata":{"labels":{"other":"kept"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}

	// The next configuration drops the "stage" label and moves the gateway.
	next := original.DeepCopy()
	next.Labels = map[string]string{"app": "web"}
	next.Spec.Gateway = "10.4.0.9"
	nextJSON, nextAnnotated := withLastApplied(next)
	modified, err := json.Marshal(nextAnnotated)
	if err != nil {
		t.Fatal(err)
	}
	current, err := networks.Get(ctx, "net-csa", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The typed client drops apiVersion and kind; kubectl's live object has them.
	current.TypeMeta = original.TypeMeta
	currentJSON, err := json.Marshal(current)
	if err != nil {
		t.Fatal(err)
	}
	schema, err := strategicpatch.NewPatchMetaFromStruct(&v1.Network{})
	if err != nil {
		t.Fatal(err)
	}
	lastApplied := []byte(current.Annotations[annotation])
	patch, err := strategicpatch.CreateThreeWayMergePatch(lastApplied, modified, currentJSON, schema, true)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := networks.Patch(ctx, "net-csa", types.StrategicMergePatchType, patch, metav1.PatchOptions{FieldManager: "kubectl-client-side-apply"}); err != nil {
		t.Fatalf("applying the three-way patch %s: %v", patch, err)
	}

	after, err := networks.Get(ctx, "net-csa", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"app": "web", "other": "kept"}; !maps.Equal(after.Labels, want) {
		t.Fatalf("labels after the three-way patch %v, want %v (stage removed, other kept)", after.Labels, want)
	}
	if after.Spec.Gateway != "10.4.0.9" || after.Spec.CIDR != "10.4.0.0/24" || after.Generation != 2 {
		t.Fatalf("spec after the three-way patch %+v generation %d", after.Spec, after.Generation)
	}
	if after.Annotations[annotation] != string(nextJSON) {
		t.Fatalf("annotation after the patch %q, want %q", after.Annotations[annotation], nextJSON)
	}
	var roundTrip v1.Network
	if err := json.Unmarshal([]byte(after.Annotations[annotation]), &roundTrip); err != nil {
		t.Fatal(err)
	}
	if roundTrip.Spec != next.Spec || !maps.Equal(roundTrip.Labels, next.Labels) {
		t.Fatalf("last-applied configuration decodes to %+v, want %+v", roundTrip, next)
	}

	// Applying the same configuration again computes an empty patch.
	after.TypeMeta = original.TypeMeta
	currentJSON, err = json.Marshal(after)
	if err != nil {
		t.Fatal(err)
	}
	patch, err = strategicpatch.CreateThreeWayMergePatch([]byte(after.Annotations[annotation]), modified, currentJSON, schema, true)
	if err != nil {
		t.Fatal(err)
	}
	if string(patch) != "{}" {
		t.Fatalf("re-applying the same configuration gives patch %s, want {}", patch)
	}
}
