package network

import (
	"context"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// REST is the storage of networks.
type REST struct {
	*genericregistry.Store
	allocations *Allocations
}

// ShortNames lets `kubectl get net` work.
func (*REST) ShortNames() []string { return []string{"net"} }

// StatusREST is the storage of networks/status.
type StatusREST struct {
	store *genericregistry.Store
}

// NewStorage returns the storage of networks and of networks/status. With allocations, creates
// and deletes keep the no-overlap guarantee; without (unit tests only) overlaps go unchecked.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, allocations *Allocations) (*REST, *StatusREST, error) {
	if allocations != nil {
		optsGetter = restOptionsWithAllocations{RESTOptionsGetter: optsGetter, allocations: allocations}
	}
	strategy := NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &samplecrd.Network{} },
		NewListFunc:               func() runtime.Object { return &samplecrd.NetworkList{} },
		PredicateFunc:             Match,
		DefaultQualifiedResource:  samplecrd.Resource("networks"),
		SingularQualifiedResource: samplecrd.Resource("network"),
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
		ResetFieldsStrategy:       strategy.(rest.ResetFieldsStrategy),
		TableConvertor:            tableConvertor{},
	}
	if allocations != nil {
		store.BeginCreate = allocations.beginCreate
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, nil, err
	}

	statusStore := *store
	statusStrategy := NewStatusStrategy(scheme)
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy.(rest.ResetFieldsStrategy)
	return &REST{Store: store, allocations: allocations}, &StatusREST{&statusStore}, nil
}

// Create creates a Network. One that asks for a prefix length and loses its pick to a concurrent
// create (its transaction finds the prefix taken) is created again from the start with another
// pick, so that admission and validation see the prefix it is stored with.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	n, ok := obj.(*samplecrd.Network)
	if !ok || r.allocations == nil || n.Spec.CIDR != "" || n.Spec.PrefixLength <= 0 {
		return r.Store.Create(ctx, obj, createValidation, options)
	}
	request := n.DeepCopy()
	ctx, _ = withPickState(ctx)
	for attempt := 1; ; attempt++ {
		out, err := r.Store.Create(ctx, obj, createValidation, options)
		if !lostPickRace(ctx, err) {
			return out, err
		}
		if attempt == maxPickAttempts {
			return nil, pickRaceError(request)
		}
		obj = request.DeepCopy()
	}
}

// Update updates a Network, or creates one (server-side apply).
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	ctx, _ = withPickState(ctx)
	return r.Store.Update(ctx, name, checkResourceVersion(objInfo), createValidation, updateValidation, forceAllowCreate, options)
}

// New returns an empty Network.
func (r *StatusREST) New() runtime.Object { return &samplecrd.Network{} }

// Destroy does nothing: the main storage owns the shared etcd client.
func (r *StatusREST) Destroy() {}

// Get returns the whole Network, so that clients can read status from networks/status.
func (r *StatusREST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes status only; the status strategy keeps the stored spec.
func (r *StatusREST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, _ bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// Status writes never create the object.
	return r.store.Update(ctx, name, checkResourceVersion(objInfo), createValidation, updateValidation, false, options)
}

// GetResetFields returns the fields a status write resets, for server-side apply.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints networks/status like networks.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// checkResourceVersion makes an update whose metadata.resourceVersion is not one the server could
// have given a 422 naming the field, rather than the generic store's 500 on parsing it.
func checkResourceVersion(objInfo rest.UpdatedObjectInfo) rest.UpdatedObjectInfo {
	return resourceVersionChecker{objInfo}
}

type resourceVersionChecker struct {
	rest.UpdatedObjectInfo
}

func (c resourceVersionChecker) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	obj, err := c.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
	if err != nil {
		return obj, applySchemaError(err)
	}
	n, ok := obj.(*samplecrd.Network)
	if !ok || n.ResourceVersion == "" {
		return obj, nil
	}
	if _, err := strconv.ParseUint(n.ResourceVersion, 10, 64); err != nil {
		return nil, invalid(n, field.Invalid(field.NewPath("metadata", "resourceVersion"), n.ResourceVersion,
			"must be a resourceVersion this server returned (a decimal number), or empty"))
	}
	return obj, nil
}
