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

// Package network holds the rules of Networks for the registry: the strategies of every write
// (defaulting, generation, status/spec separation, validation), the Ready condition derived from
// the node entries, the selectable fields and the table `kubectl get` prints. The storage package
// beneath wires them to etcd.
package network

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/validation"
)

// servedVersions are the API versions whose reset fields the strategies declare.
var servedVersions = []fieldpath.APIVersion{"samplecrd.k8s.io/v1", "samplecrd.k8s.io/v1beta1"}

func resetFields(paths ...fieldpath.Path) map[fieldpath.APIVersion]*fieldpath.Set {
	m := make(map[fieldpath.APIVersion]*fieldpath.Set, len(servedVersions))
	for _, v := range servedVersions {
		m[v] = fieldpath.NewSet(paths...)
	}
	return m
}

// statusResetPaths are what a status write throws away: the spec, the metadata that
// metav1.ResetObjectMetaForStatus restores from the stored object, and status.capacity, which the
// server derives (the entries' capacity too, but a reset path cannot name every list entry).
var statusResetPaths = []fieldpath.Path{
	fieldpath.MakePathOrDie("spec"),
	fieldpath.MakePathOrDie("status", "capacity"),
	fieldpath.MakePathOrDie("metadata", "labels"),
	fieldpath.MakePathOrDie("metadata", "annotations"),
	fieldpath.MakePathOrDie("metadata", "finalizers"),
	fieldpath.MakePathOrDie("metadata", "ownerReferences"),
	fieldpath.MakePathOrDie("metadata", "deletionTimestamp"),
	fieldpath.MakePathOrDie("metadata", "generation"),
}

// networkStrategy holds the rules for writes to the main resource.
type networkStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

var (
	_ rest.RESTCreateStrategy  = networkStrategy{}
	_ rest.RESTUpdateStrategy  = networkStrategy{}
	_ rest.RESTDeleteStrategy  = networkStrategy{}
	_ rest.ResetFieldsStrategy = networkStrategy{}

	_ rest.RESTUpdateStrategy  = networkStatusStrategy{}
	_ rest.ResetFieldsStrategy = networkStatusStrategy{}
)

// NewStrategy returns the strategy for networks.
func NewStrategy(typer runtime.ObjectTyper) rest.CreateUpdateResetFieldsStrategy {
	return networkStrategy{typer, names.SimpleNameGenerator}
}

func (networkStrategy) NamespaceScoped() bool { return true }

// GetResetFields says that writes to the main resource never set status, for server-side apply.
func (networkStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields(fieldpath.MakePathOrDie("status"))
}

// PrepareForCreate drops any status the client sent, starts the generation and defaults the gateway.
func (networkStrategy) PrepareForCreate(_ context.Context, obj runtime.Object) {
	n := obj.(*samplecrd.Network)
	n.Status = samplecrd.NetworkStatus{}
	n.Generation = 1
	// Defaulted here rather than in the versioned defaulters, so that admission (which runs
	// between decoding and the strategy) can still tell a gateway the user chose from none.
	samplecrd.SetDefaultGateway(&n.Spec)
}

// PrepareForUpdate keeps the stored status and bumps the generation when the spec changes.
func (networkStrategy) PrepareForUpdate(_ context.Context, obj, old runtime.Object) {
	n, o := obj.(*samplecrd.Network), old.(*samplecrd.Network)
	n.Status = o.Status
	samplecrd.SetDefaultGateway(&n.Spec)
	if !apiequality.Semantic.DeepEqual(n.Spec, o.Spec) {
		n.Generation = o.Generation + 1
		// The nodes have not seen the new spec yet: Ready turns False until they have.
		deriveReadiness(n)
		deriveExhaustion(n)
	}
}

func (networkStrategy) Validate(_ context.Context, obj runtime.Object) field.ErrorList {
	n := obj.(*samplecrd.Network)
	errs := validation.ValidateNetwork(n)
	if n.ResourceVersion != "" {
		// The server assigns it; etcd would refuse the write with a 500 otherwise. Every create
		// (POST, dry run, server-side apply) is validated here, the allocating store never sees one.
		errs = append(errs, field.Forbidden(field.NewPath("metadata", "resourceVersion"), "must not be set when creating a Network"))
	}
	return errs
}

func (networkStrategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (networkStrategy) AllowCreateOnUpdate(context.Context) bool                  { return false }
func (networkStrategy) AllowUnconditionalUpdate(context.Context) bool             { return true }

// Canonicalize derives status.capacity from the spec and the stored node entries, on create (a
// new Network's total and available) and on every update (a gateway move changes allocated).
func (networkStrategy) Canonicalize(obj runtime.Object) {
	deriveCapacity(obj.(*samplecrd.Network))
}

func (networkStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNetworkUpdate(obj.(*samplecrd.Network), old.(*samplecrd.Network))
}

func (networkStrategy) WarningsOnUpdate(context.Context, runtime.Object, runtime.Object) []string {
	return nil
}

// networkStatusStrategy holds the rules for writes to networks/status.
type networkStatusStrategy struct {
	networkStrategy
}

// NewStatusStrategy returns the strategy for networks/status.
func NewStatusStrategy(typer runtime.ObjectTyper) rest.UpdateResetFieldsStrategy {
	return networkStatusStrategy{networkStrategy{typer, names.SimpleNameGenerator}}
}

// GetResetFields says that status writes never change spec or those metadata, for server-side
// apply: it then records no managed fields for what the write threw away.
func (networkStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return resetFields(statusResetPaths...)
}

// PrepareForUpdate keeps the stored spec and metadata: a status write changes status only. It
// keeps the stored status.vni too, which the server alone assigns (WithServerOwnedStatus).
func (networkStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	n, o := obj.(*samplecrd.Network), old.(*samplecrd.Network)
	n.Spec = o.Spec
	metav1.ResetObjectMetaForStatus(n, o)
	if !serverOwnedStatus(ctx) {
		n.Status.VNI = o.Status.VNI
	}
	keepExhaustion(n, o)
}

type serverOwnedStatusKey struct{}

// WithServerOwnedStatus marks ctx as a status write by the server itself (the segment controller,
// calling the status storage in process), which may set the server-owned status.vni. No request
// from a client carries the mark.
func WithServerOwnedStatus(ctx context.Context) context.Context {
	return context.WithValue(ctx, serverOwnedStatusKey{}, true)
}

func serverOwnedStatus(ctx context.Context) bool {
	v, _ := ctx.Value(serverOwnedStatusKey{}).(bool)
	return v
}

// Canonicalize derives observedGeneration, Ready, AddressesExhausted and the capacity from the
// node entries. It runs after ValidateUpdate, so that what the client sent is validated before the
// server replaces it.
func (networkStatusStrategy) Canonicalize(obj runtime.Object) {
	n := obj.(*samplecrd.Network)
	deriveReadiness(n)
	deriveExhaustion(n)
	deriveCapacity(n)
}

func (networkStatusStrategy) ValidateUpdate(_ context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNetworkStatusUpdate(obj.(*samplecrd.Network), old.(*samplecrd.Network))
}

// GetAttrs returns the labels and the selectable fields of a Network.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	n, ok := obj.(*samplecrd.Network)
	if !ok {
		return nil, nil, fmt.Errorf("not a Network: %T", obj)
	}
	return n.Labels, SelectableFields(n), nil
}

// SelectableFields are the fields a field selector can match: name, namespace, cidr and gateway.
func SelectableFields(n *samplecrd.Network) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		"spec.cidr":    n.Spec.CIDR,
		"spec.gateway": n.Spec.Gateway,
	}, &n.ObjectMeta, true)
}

// Match returns the storage predicate for a label and field selector.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
