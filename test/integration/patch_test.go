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
	"maps"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

func TestPatchTypes(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	n := newNetwork("net-p", "10.2.0.0/24", "")
	n.Labels = map[string]string{"keep": "me"}
	created, err := networks.Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name       string
		patchType  types.PatchType
		patch      string
		wantLabels map[string]string
		wantGW     string
	}{
		{
			name:       "json patch",
			patchType:  types.JSONPatchType,
			patch:      `[{"op":"add","path":"/metadata/labels/tier","value":"json"},{"op":"replace","path":"/spec/gateway","value":"10.2.0.10"}]`,
			wantLabels: map[string]string{"keep": "me", "tier": "json"},
			wantGW:     "10.2.0.10",
		},
		{
			name:       "merge patch",
			patchType:  types.MergePatchType,
			patch:      `{"metadata":{"labels":{"tier":null,"merge":"yes"}},"spec":{"gateway":"10.2.0.20"}}`,
			wantLabels: map[string]string{"keep": "me", "merge": "yes"},
			wantGW:     "10.2.0.20",
		},
		{
			name:       "strategic merge patch",
			patchType:  types.StrategicMergePatchType,
			patch:      `{"metadata":{"labels":{"smp":"yes"}},"spec":{"gateway":"10.2.0.30"}}`,
			wantLabels: map[string]string{"keep": "me", "merge": "yes", "smp": "yes"},
			wantGW:     "10.2.0.30",
		},
		{
			name:       "strategic merge patch deleting a label",
			patchType:  types.StrategicMergePatchType,
			patch:      `{"metadata":{"labels":{"merge":null}}}`,
			wantLabels: map[string]string{"keep": "me", "smp": "yes"},
			wantGW:     "10.2.0.30",
		},
	}
	lastRV := created.ResourceVersion
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			patched, err := networks.Patch(ctx, "net-p", tc.patchType, []byte(tc.patch), metav1.PatchOptions{})
			if err != nil {
				t.Fatalf("%s: %v", tc.patchType, err)
			}
			if patched.ResourceVersion == lastRV {
				t.Fatalf("patch did not change the resourceVersion")
			}
			lastRV = patched.ResourceVersion
			got, err := networks.Get(ctx, "net-p", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(got.Labels, tc.wantLabels) || got.Spec.Gateway != tc.wantGW {
				t.Fatalf("after %s: labels %v gateway %s, want %v and %s", tc.patchType, got.Labels, got.Spec.Gateway, tc.wantLabels, tc.wantGW)
			}
			if got.Spec.CIDR != "10.2.0.0/24" {
				t.Fatalf("patch changed the cidr to %s", got.Spec.CIDR)
			}
		})
	}
}

// A strategic merge patch merges status.conditions by type (patchMergeKey), where a merge patch
// replaces the whole list.
func TestStrategicMergePatchMergesConditionsByType(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	created, err := networks.Create(ctx, newNetwork("net-c", "10.2.1.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := metav1.NewTime(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	created.Status.Conditions = []metav1.Condition{
		{Type: "Ready", Status: metav1.ConditionFalse, Reason: "Pending", Message: "waiting", LastTransitionTime: ts},
		{Type: "Degraded", Status: metav1.ConditionFalse, Reason: "Fine", Message: "all good", LastTransitionTime: ts},
	}
	if _, err := networks.UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	smp := `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Realized","message":"done","lastTransitionTime":"2025-01-02T03:04:06Z"}]}}`
	if _, err := networks.Patch(ctx, "net-c", types.StrategicMergePatchType, []byte(smp), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	got, err := networks.Get(ctx, "net-c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 2 {
		t.Fatalf("after the strategic merge patch: %d conditions, want 2 (merged by type): %+v", len(got.Status.Conditions), got.Status.Conditions)
	}
	ready := meta.FindStatusCondition(got.Status.Conditions, "Ready")
	degraded := meta.FindStatusCondition(got.Status.Conditions, "Degraded")
	if ready == nil || ready.Status != metav1.ConditionTrue || ready.Reason != "Realized" {
		t.Fatalf("Ready condition %+v, want True/Realized", ready)
	}
	if degraded == nil || degraded.Reason != "Fine" {
		t.Fatalf("Degraded condition %+v, want it untouched", degraded)
	}

	merge := `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"Realized","message":"done","lastTransitionTime":"2025-01-02T03:04:06Z"}]}}`
	if _, err := networks.Patch(ctx, "net-c", types.MergePatchType, []byte(merge), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	got, err = networks.Get(ctx, "net-c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != "Ready" {
		t.Fatalf("after the merge patch: %+v, want the list replaced by the Ready condition alone", got.Status.Conditions)
	}
}
