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
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/install"
)

func testScheme() *runtime.Scheme {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	return scheme
}

func readyCondition(status metav1.ConditionStatus, reason string) metav1.Condition {
	return metav1.Condition{
		Type:               samplecrd.ConditionReady,
		Status:             status,
		ObservedGeneration: 3,
		LastTransitionTime: metav1.NewTime(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)),
		Reason:             reason,
	}
}

// storedNetwork is a Network as it sits in storage: defaulted, generation 3, with a status.
func storedNetwork() *samplecrd.Network {
	return &samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{
			Name: "net1", Namespace: "default", ResourceVersion: "10", Generation: 3, UID: "uid-1",
			CreationTimestamp: metav1.NewTime(time.Date(2024, 1, 1, 0, 0, 0, 0, time.UTC)),
			Labels:            map[string]string{"team": "a"},
			Annotations:       map[string]string{"note": "x"},
		},
		Spec: samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
		Status: samplecrd.NetworkStatus{
			ObservedGeneration: 3,
			Conditions:         []metav1.Condition{readyCondition(metav1.ConditionTrue, "Realised")},
		},
	}
}

func TestStrategyBasics(t *testing.T) {
	ctx := context.Background()
	s := NewStrategy(testScheme())
	if !s.NamespaceScoped() {
		t.Error("NamespaceScoped() = false, want true")
	}
	if s.AllowCreateOnUpdate(ctx) {
		t.Error("AllowCreateOnUpdate() = true, want false")
	}
	if !s.AllowUnconditionalUpdate(ctx) {
		t.Error("AllowUnconditionalUpdate() = false, want true")
	}
	if !NewStatusStrategy(testScheme()).NamespaceScoped() {
		t.Error("status strategy NamespaceScoped() = false, want true")
	}
}

func TestPrepareForCreate(t *testing.T) {
	tests := []struct {
		name        string
		spec        samplecrd.NetworkSpec
		wantGateway string
	}{
		{"IPv4 gateway defaulted", samplecrd.NetworkSpec{CIDR: "10.0.0.0/24"}, "10.0.0.1"},
		{"IPv6 gateway defaulted", samplecrd.NetworkSpec{CIDR: "fd00:1::/64"}, "fd00:1::1"},
		{"explicit gateway kept", samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.254"}, "10.0.0.254"},
		{"no default for an invalid cidr", samplecrd.NetworkSpec{CIDR: "garbage"}, ""},
		{"no default without cidr", samplecrd.NetworkSpec{}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := &samplecrd.Network{
				ObjectMeta: metav1.ObjectMeta{Name: "net1", Namespace: "default", Generation: 9},
				Spec:       tc.spec,
				Status: samplecrd.NetworkStatus{
					ObservedGeneration: 9,
					Conditions:         []metav1.Condition{readyCondition(metav1.ConditionTrue, "Forged")},
				},
			}
			NewStrategy(testScheme()).PrepareForCreate(context.Background(), n)

			if !reflect.DeepEqual(n.Status, samplecrd.NetworkStatus{}) {
				t.Errorf("status = %+v, want it reset", n.Status)
			}
			if n.Generation != 1 {
				t.Errorf("generation = %d, want 1", n.Generation)
			}
			if n.Spec.CIDR != tc.spec.CIDR {
				t.Errorf("cidr = %q, want %q unchanged", n.Spec.CIDR, tc.spec.CIDR)
			}
			if n.Spec.Gateway != tc.wantGateway {
				t.Errorf("gateway = %q, want %q", n.Spec.Gateway, tc.wantGateway)
			}
		})
	}
}

func TestPrepareForUpdate(t *testing.T) {
	tests := []struct {
		name           string
		update         func(n *samplecrd.Network)
		wantSpec       samplecrd.NetworkSpec
		wantGeneration int64
	}{
		{
			name:           "no change",
			update:         func(*samplecrd.Network) {},
			wantSpec:       samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
			wantGeneration: 3,
		},
		{
			name:           "metadata change only",
			update:         func(n *samplecrd.Network) { n.Labels = map[string]string{"team": "b"} },
			wantSpec:       samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
			wantGeneration: 3,
		},
		{
			name:           "gateway changed",
			update:         func(n *samplecrd.Network) { n.Spec.Gateway = "10.0.0.254" },
			wantSpec:       samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.254"},
			wantGeneration: 4,
		},
		{
			name:           "cidr changed (validation rejects it later)",
			update:         func(n *samplecrd.Network) { n.Spec.CIDR = "10.0.1.0/24" },
			wantSpec:       samplecrd.NetworkSpec{CIDR: "10.0.1.0/24", Gateway: "10.0.0.1"},
			wantGeneration: 4,
		},
		{
			name:           "defaulted gateway emptied: re-defaulted to the same value",
			update:         func(n *samplecrd.Network) { n.Spec.Gateway = "" },
			wantSpec:       samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
			wantGeneration: 3,
		},
		{
			name: "status sent with the main resource is ignored",
			update: func(n *samplecrd.Network) {
				n.Status = samplecrd.NetworkStatus{ObservedGeneration: 42}
			},
			wantSpec:       samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
			wantGeneration: 3,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := storedNetwork()
			n := old.DeepCopy()
			tc.update(n)
			NewStrategy(testScheme()).PrepareForUpdate(context.Background(), n, old)

			if n.Spec != tc.wantSpec {
				t.Errorf("spec = %+v, want %+v", n.Spec, tc.wantSpec)
			}
			if n.Generation != tc.wantGeneration {
				t.Errorf("generation = %d, want %d", n.Generation, tc.wantGeneration)
			}
			if !reflect.DeepEqual(n.Status, storedNetwork().Status) {
				t.Errorf("status = %+v, want the stored status %+v", n.Status, storedNetwork().Status)
			}
			if !reflect.DeepEqual(old, storedNetwork()) {
				t.Errorf("PrepareForUpdate modified the old object: %+v", old)
			}
		})
	}
}

func TestPrepareForUpdateRedefaultsCustomGateway(t *testing.T) {
	old := storedNetwork()
	old.Spec.Gateway = "10.0.0.254"
	n := old.DeepCopy()
	n.Spec.Gateway = ""
	NewStrategy(testScheme()).PrepareForUpdate(context.Background(), n, old)
	if n.Spec.Gateway != "10.0.0.1" {
		t.Errorf("gateway = %q, want it defaulted to 10.0.0.1", n.Spec.Gateway)
	}
	if n.Generation != old.Generation+1 {
		t.Errorf("generation = %d, want %d: the effective spec changed", n.Generation, old.Generation+1)
	}
}

func TestStatusStrategyPrepareForUpdate(t *testing.T) {
	old := storedNetwork()
	n := old.DeepCopy()
	n.Spec = samplecrd.NetworkSpec{CIDR: "192.168.0.0/16", Gateway: "192.168.0.1"}
	n.Labels = map[string]string{"team": "b"}
	n.Annotations = nil
	n.Finalizers = []string{"example.com/keep"}
	n.Generation = 100
	newStatus := samplecrd.NetworkStatus{
		ObservedGeneration: 3,
		Conditions:         []metav1.Condition{readyCondition(metav1.ConditionFalse, "BridgeMissing")},
	}
	n.Status = newStatus

	NewStatusStrategy(testScheme()).PrepareForUpdate(context.Background(), n, old)

	if n.Spec != old.Spec {
		t.Errorf("spec = %+v, want the stored spec %+v", n.Spec, old.Spec)
	}
	if !reflect.DeepEqual(n.Labels, old.Labels) {
		t.Errorf("labels = %v, want the stored labels %v", n.Labels, old.Labels)
	}
	if !reflect.DeepEqual(n.Annotations, old.Annotations) {
		t.Errorf("annotations = %v, want the stored annotations %v", n.Annotations, old.Annotations)
	}
	if len(n.Finalizers) != 0 {
		t.Errorf("finalizers = %v, want the stored (none)", n.Finalizers)
	}
	if n.Generation != old.Generation {
		t.Errorf("generation = %d, want %d: a status write never bumps it", n.Generation, old.Generation)
	}
	if !reflect.DeepEqual(n.Status, newStatus) {
		t.Errorf("status = %+v, want the written status %+v", n.Status, newStatus)
	}
}

func TestGetResetFields(t *testing.T) {
	versions := []fieldpath.APIVersion{"samplecrd.k8s.io/v1", "samplecrd.k8s.io/v1beta1"}
	tests := []struct {
		name     string
		strategy rest.ResetFieldsStrategy
		want     *fieldpath.Set
	}{
		{"main resource resets status", NewStrategy(testScheme()).(rest.ResetFieldsStrategy), fieldpath.NewSet(fieldpath.MakePathOrDie("status"))},
		{"status subresource resets spec, the metadata it restores and the derived capacity", NewStatusStrategy(testScheme()).(rest.ResetFieldsStrategy), fieldpath.NewSet(
			fieldpath.MakePathOrDie("spec"),
			fieldpath.MakePathOrDie("status", "capacity"),
			fieldpath.MakePathOrDie("metadata", "labels"),
			fieldpath.MakePathOrDie("metadata", "annotations"),
			fieldpath.MakePathOrDie("metadata", "finalizers"),
			fieldpath.MakePathOrDie("metadata", "ownerReferences"),
			fieldpath.MakePathOrDie("metadata", "deletionTimestamp"),
			fieldpath.MakePathOrDie("metadata", "generation"),
		)},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.strategy.GetResetFields()
			if len(got) != len(versions) {
				t.Fatalf("reset fields for %d versions, want %d: %v", len(got), len(versions), got)
			}
			for _, v := range versions {
				set, ok := got[v]
				if !ok {
					t.Errorf("no reset fields for %s", v)
					continue
				}
				if !set.Equals(tc.want) {
					t.Errorf("reset fields for %s = %v, want %v", v, set, tc.want)
				}
			}
		})
	}
}

func TestStrategyValidation(t *testing.T) {
	ctx := context.Background()
	s := NewStrategy(testScheme())
	status := NewStatusStrategy(testScheme())

	bad := storedNetwork()
	bad.ResourceVersion = ""
	bad.Spec.Gateway = "10.0.0.255"
	if errs := s.Validate(ctx, bad); len(errs) != 1 || errs[0].Field != "spec.gateway" {
		t.Errorf("Validate = %v, want one error at spec.gateway", errs)
	}
	// A create must not carry a resourceVersion: a 422 naming it, not etcd's 500.
	withVersion := storedNetwork()
	if errs := s.Validate(ctx, withVersion); len(errs) != 1 || errs[0].Field != "metadata.resourceVersion" || errs[0].Type != field.ErrorTypeForbidden {
		t.Errorf("Validate of a create with a resourceVersion = %v, want one Forbidden error at metadata.resourceVersion", errs)
	}

	old := storedNetwork()
	changed := old.DeepCopy()
	changed.Spec = samplecrd.NetworkSpec{CIDR: "10.0.1.0/24", Gateway: "10.0.1.1"}
	if errs := s.ValidateUpdate(ctx, changed, old); len(errs) != 1 || errs[0].Field != "spec.cidr" || errs[0].Type != field.ErrorTypeInvalid {
		t.Errorf("ValidateUpdate = %v, want one Invalid error at spec.cidr", errs)
	}

	// The status strategy validates status, not spec (its PrepareForUpdate restores the stored spec).
	statusWrite := old.DeepCopy()
	statusWrite.Spec.CIDR = "garbage"
	statusWrite.Status.ObservedGeneration = -1
	if errs := status.ValidateUpdate(ctx, statusWrite, old); len(errs) != 1 || errs[0].Field != "status.observedGeneration" {
		t.Errorf("status ValidateUpdate = %v, want one error at status.observedGeneration", errs)
	}
}

// A status write is validated as the client sent it, and only then are observedGeneration and
// Ready derived from the node entries: a negative observedGeneration is refused even when the
// derivation would have replaced it.
func TestStatusWriteIsValidatedBeforeDerivation(t *testing.T) {
	ctx := genericapirequest.WithNamespace(genericapirequest.NewContext(), "default")
	old := storedNetwork()
	old.Status.Nodes = []samplecrd.NetworkNodeStatus{{NodeName: "node-a", Ready: true, ObservedGeneration: old.Generation}}
	status := NewStatusStrategy(testScheme())

	negative := old.DeepCopy()
	negative.Status.ObservedGeneration = -1
	err := rest.BeforeUpdate(status, ctx, negative, old)
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "status.observedGeneration") {
		t.Fatalf("status write with observedGeneration -1 and node entries: %v, want Invalid naming status.observedGeneration", err)
	}

	good := old.DeepCopy()
	good.Status.ObservedGeneration = 0
	if err := rest.BeforeUpdate(status, ctx, good, old); err != nil {
		t.Fatal(err)
	}
	if good.Status.ObservedGeneration != old.Generation || meta.FindStatusCondition(good.Status.Conditions, samplecrd.ConditionReady) == nil {
		t.Errorf("after a valid status write: observedGeneration %d, conditions %v; want %d and a derived Ready",
			good.Status.ObservedGeneration, good.Status.Conditions, old.Generation)
	}
}

func newCreateRequest() (context.Context, *samplecrd.Network) {
	ctx := genericapirequest.WithNamespace(genericapirequest.NewContext(), "default")
	n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "net1", Namespace: "default"}}
	rest.FillObjectMetaSystemFields(n)
	return ctx, n
}

// TestBeforeCreate drives the strategy through the generic create path the store uses.
func TestBeforeCreate(t *testing.T) {
	s := NewStrategy(testScheme())

	ctx, n := newCreateRequest()
	n.Spec.CIDR = "fd00:1::/64"
	if err := rest.BeforeCreate(s, ctx, n); err != nil {
		t.Fatalf("BeforeCreate: %v", err)
	}
	if n.Spec.Gateway != "fd00:1::1" || n.Generation != 1 {
		t.Errorf("created spec %+v generation %d, want gateway fd00:1::1 and generation 1", n.Spec, n.Generation)
	}

	// A prefix without room for a gateway is reported once, at spec.cidr: defaulting must not
	// invent a gateway (such as "invalid IP" after 255.255.255.255) that then fails validation too.
	for _, cidr := range []string{"10.0.0.0/32", "255.255.255.255/32", "fd00::/128", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128"} {
		ctx, n := newCreateRequest()
		n.Spec.CIDR = cidr
		err := rest.BeforeCreate(s, ctx, n)
		if !apierrors.IsInvalid(err) {
			t.Errorf("%s: BeforeCreate = %v, want an Invalid error", cidr, err)
			continue
		}
		causes := err.(apierrors.APIStatus).Status().Details.Causes
		if len(causes) != 1 || causes[0].Field != "spec.cidr" {
			t.Errorf("%s: causes = %+v, want exactly one at spec.cidr", cidr, causes)
		}
	}
}

// TestBeforeUpdate checks that the generic update path (which resets the generation to the stored
// one before PrepareForUpdate) bumps it only for a spec change.
func TestBeforeUpdate(t *testing.T) {
	s := NewStrategy(testScheme())
	ctx := genericapirequest.WithNamespace(genericapirequest.NewContext(), "default")

	old := storedNetwork()
	n := old.DeepCopy()
	n.Generation = 50 // clients cannot set the generation
	n.Labels = map[string]string{"team": "b"}
	if err := rest.BeforeUpdate(s, ctx, n, old); err != nil {
		t.Fatalf("BeforeUpdate: %v", err)
	}
	if n.Generation != 3 {
		t.Errorf("generation = %d after a label change, want 3", n.Generation)
	}

	n = old.DeepCopy()
	n.Spec.Gateway = "10.0.0.2"
	if err := rest.BeforeUpdate(s, ctx, n, old); err != nil {
		t.Fatalf("BeforeUpdate: %v", err)
	}
	if n.Generation != 4 {
		t.Errorf("generation = %d after a gateway change, want 4", n.Generation)
	}

	n = old.DeepCopy()
	n.Spec = samplecrd.NetworkSpec{CIDR: "10.0.1.0/24"}
	err := rest.BeforeUpdate(s, ctx, n, old)
	if !apierrors.IsInvalid(err) {
		t.Fatalf("BeforeUpdate with a new cidr = %v, want an Invalid error", err)
	}
	causes := err.(apierrors.APIStatus).Status().Details.Causes
	if len(causes) != 1 || causes[0].Field != "spec.cidr" {
		t.Errorf("causes = %+v, want exactly one at spec.cidr", causes)
	}
}

func TestSelectableFieldsAndGetAttrs(t *testing.T) {
	n := storedNetwork()
	want := fields.Set{
		"metadata.name":      "net1",
		"metadata.namespace": "default",
		"spec.cidr":          "10.0.0.0/24",
		"spec.gateway":       "10.0.0.1",
	}
	if got := SelectableFields(n); !reflect.DeepEqual(got, want) {
		t.Errorf("SelectableFields = %v, want %v", got, want)
	}

	ls, fs, err := GetAttrs(n)
	if err != nil {
		t.Fatalf("GetAttrs: %v", err)
	}
	if !reflect.DeepEqual(ls, labels.Set{"team": "a"}) {
		t.Errorf("labels = %v, want team=a", ls)
	}
	if !reflect.DeepEqual(fs, want) {
		t.Errorf("fields = %v, want %v", fs, want)
	}

	if _, _, err := GetAttrs(&samplecrd.NetworkList{}); err == nil {
		t.Error("GetAttrs(NetworkList) succeeded, want an error")
	}
}

func TestMatch(t *testing.T) {
	n := storedNetwork()
	tests := []struct {
		label, field string
		want         bool
	}{
		{"", "", true},
		{"team=a", "", true},
		{"team=b", "", false},
		{"", "spec.cidr=10.0.0.0/24", true},
		{"", "spec.cidr=10.0.1.0/24", false},
		{"", "spec.gateway=10.0.0.1,metadata.name=net1", true},
		{"team=a", "metadata.namespace=other", false},
	}
	for _, tc := range tests {
		ls, err := labels.Parse(tc.label)
		if err != nil {
			t.Fatal(err)
		}
		fs, err := fields.ParseSelector(tc.field)
		if err != nil {
			t.Fatal(err)
		}
		predicate := Match(ls, fs)
		got, err := predicate.Matches(n)
		if err != nil {
			t.Fatalf("Matches(%q, %q): %v", tc.label, tc.field, err)
		}
		if got != tc.want {
			t.Errorf("Matches(%q, %q) = %v, want %v", tc.label, tc.field, got, tc.want)
		}
	}
}

// TestVNIIsServerOwned: status.vni survives every client write (main resource and status) and
// only a write the server marks as its own changes it.
func TestVNIIsServerOwned(t *testing.T) {
	ctx := context.Background()
	scheme := testScheme()
	stored := storedNetwork()
	stored.Status.VNI = 1048577

	create := stored.DeepCopy()
	create.Status.VNI = 7
	NewStrategy(scheme).PrepareForCreate(ctx, create)
	if create.Status.VNI != 0 {
		t.Errorf("create kept a client's status.vni %d", create.Status.VNI)
	}

	update := stored.DeepCopy()
	update.Status.VNI = 7
	NewStrategy(scheme).PrepareForUpdate(ctx, update, stored)
	if update.Status.VNI != 1048577 {
		t.Errorf("update of the main resource: status.vni = %d, want the stored 1048577", update.Status.VNI)
	}

	for _, sent := range []int32{0, 7} {
		status := stored.DeepCopy()
		status.Status.VNI = sent
		NewStatusStrategy(scheme).PrepareForUpdate(ctx, status, stored)
		if status.Status.VNI != 1048577 {
			t.Errorf("client status write of vni %d: status.vni = %d, want the stored 1048577", sent, status.Status.VNI)
		}
	}

	server := stored.DeepCopy()
	server.Status.VNI = 1048600
	NewStatusStrategy(scheme).PrepareForUpdate(WithServerOwnedStatus(ctx), server, stored)
	if server.Status.VNI != 1048600 {
		t.Errorf("server status write: status.vni = %d, want 1048600", server.Status.VNI)
	}
}

// TestStatusStrategyKeepsSegmentFields: a status write keeps the new per-node fields it sends
// (they are the agent's), and a main-resource write keeps the stored ones.
func TestStatusStrategyKeepsSegmentFields(t *testing.T) {
	ctx := context.Background()
	scheme := testScheme()
	stored := storedNetwork()
	leases := int32(0)
	entry := samplecrd.NetworkNodeStatus{NodeName: "node1", Ready: true, ObservedGeneration: 3, UnderlayAddress: "192.168.77.2",
		VXLAN: "vx0123456789abc", Blocks: []string{"10.0.0.64/26"}, MTU: 1450, IPAMMode: samplecrd.IPAMModeBlocks, Leases: &leases}
	status := stored.DeepCopy()
	status.Status.Nodes = []samplecrd.NetworkNodeStatus{entry}
	s := NewStatusStrategy(scheme)
	s.PrepareForUpdate(ctx, status, stored)
	if errs := s.ValidateUpdate(ctx, status, stored); len(errs) != 0 {
		t.Fatalf("valid entry refused: %v", errs)
	}
	s.Canonicalize(status)
	// The entry as sent, plus the capacity the server derives from it.
	entry.Capacity = &samplecrd.NodeCapacity{Allocated: "64", Used: "0"}
	if got := status.Status.Nodes[0]; !reflect.DeepEqual(got, entry) {
		t.Errorf("entry after the status strategy:\n%+v\nwant\n%+v", got, entry)
	}
	update := status.DeepCopy()
	update.Status.Nodes = nil
	NewStrategy(scheme).PrepareForUpdate(ctx, update, status)
	if !reflect.DeepEqual(update.Status.Nodes, status.Status.Nodes) {
		t.Errorf("main-resource update changed the entries: %+v", update.Status.Nodes)
	}
}
