package network

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// REST is the storage of networks.
type REST struct {
	*genericregistry.Store
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
		store.AfterDelete = allocations.afterDelete
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: GetAttrs}); err != nil {
		return nil, nil, err
	}

	statusStore := *store
	statusStrategy := NewStatusStrategy(scheme)
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy.(rest.ResetFieldsStrategy)
	return &REST{store}, &StatusREST{&statusStore}, nil
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
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields returns the fields a status write resets, for server-side apply.
func (r *StatusREST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints networks/status like networks.
func (r *StatusREST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
