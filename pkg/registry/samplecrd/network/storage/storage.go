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

// Package storage is the storage of Networks: the REST of networks and networks/status on the
// generic store, around an allocating storage that writes each Network together with its
// allocation, so that no two Networks overlap.
package storage

import (
	"context"
	"errors"
	"slices"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
)

// NetworkStorage is the storage of networks and of networks/status, and how it keeps Networks
// in etcd (for the repair, which reads them there).
type NetworkStorage struct {
	Network *REST
	Status  *StatusREST
	Etcd    *EtcdCodec
}

// REST is the storage of networks.
type REST struct {
	*genericregistry.Store
	allocations *Allocations
}

// StatusREST is the storage of networks/status.
type StatusREST struct {
	store *genericregistry.Store
	// main is the store of networks, which the protection write goes through.
	main *genericregistry.Store
	// nodeBlocks, when set, reads a node's BlockAllocation of a Network, so that an entry's
	// status.nodes[].blocks is checked to be a subset of it.
	nodeBlocks NodeBlocksFunc
	// observe, when set, is told of every status write that succeeded (not a dry run): the Network
	// the write was based on and the one it stored.
	observe ObserveFunc
}

// ObserveFunc is told of a status write that succeeded: before is the stored Network the write
// was computed from (the last the generic store's retries read), after what it stored. Exactly one
// write succeeds from a given resourceVersion, so whatever it decides from the two is decided
// once, however many replicas serve the same etcd.
type ObserveFunc func(ctx context.Context, before, after *samplecrd.Network)

// Observe sets the function told of every successful status write (at most one; set before serving).
func (r *StatusREST) Observe(f ObserveFunc) { r.observe = f }

var (
	_ rest.StandardStorage     = &REST{}
	_ rest.Creater             = &REST{}
	_ rest.Updater             = &REST{}
	_ rest.ShortNamesProvider  = &REST{}
	_ rest.ResetFieldsStrategy = &REST{}

	_ rest.Getter              = &StatusREST{}
	_ rest.Updater             = &StatusREST{}
	_ rest.TableConvertor      = &StatusREST{}
	_ rest.ResetFieldsStrategy = &StatusREST{}
)

// NewStorage returns the storage of networks and of networks/status, whose creates and deletes
// keep the no-overlap guarantee with allocations.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, allocations *Allocations) (NetworkStorage, error) {
	if allocations == nil {
		return NetworkStorage{}, errors.New("the network storage needs allocations")
	}
	var s NetworkStorage
	optsGetter = allocatingOptions{RESTOptionsGetter: optsGetter, allocations: allocations, built: func(c *EtcdCodec) { s.Etcd = c }}
	strategy := network.NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &samplecrd.Network{} },
		NewListFunc:               func() runtime.Object { return &samplecrd.NetworkList{} },
		PredicateFunc:             network.Match,
		DefaultQualifiedResource:  samplecrd.Resource("networks"),
		SingularQualifiedResource: samplecrd.Resource("network"),
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		DeleteStrategy:            strategy,
		ResetFieldsStrategy:       strategy,
		TableConvertor:            network.TableConvertor{},
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: network.GetAttrs}); err != nil {
		return NetworkStorage{}, err
	}

	statusStore := *store
	statusStrategy := network.NewStatusStrategy(scheme)
	statusStore.UpdateStrategy = statusStrategy
	statusStore.ResetFieldsStrategy = statusStrategy
	s.Network = &REST{Store: store, allocations: allocations}
	s.Status = &StatusREST{store: &statusStore, main: store, nodeBlocks: allocations.NodeBlocks}
	return s, nil
}

// ShortNames lets `kubectl get net` work.
func (*REST) ShortNames() []string { return []string{"net"} }

// Create creates a Network. One that asks for a prefix length is given a prefix before the
// generic store runs, so that admission and validation see the prefix it is stored with.
func (r *REST) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	n, ok := obj.(*samplecrd.Network)
	if !ok {
		return r.Store.Create(ctx, obj, createValidation, options)
	}
	// A create by generateName has no name yet here: its errors name one, as the generic store's do.
	name := n.Name
	if name == "" && n.GenerateName != "" {
		name = r.CreateStrategy.GenerateName(n.GenerateName)
	}
	var request *samplecrd.Network
	if n.Spec.CIDR == "" && n.Spec.PrefixLength > 0 {
		request = n.DeepCopy() // what each pick starts again from
	}
	dryRun := dryrun.IsDryRun(options.DryRun)
	return r.allocations.retry(ctx, false, func(attempt int) (runtime.Object, *samplecrd.Network, error) {
		if attempt > 0 {
			n = request.DeepCopy()
		}
		picked, err := r.allocations.prepare(ctx, n, name, attempt, dryRun)
		if err != nil {
			return nil, nil, err
		}
		out, err := r.Store.Create(ctx, n, createValidation, options)
		if !picked {
			return out, nil, err
		}
		return out, n, err
	})
}

// Update updates a Network, or creates one (server-side apply).
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	created := false
	out, err := r.allocations.retry(ctx, true, func(attempt int) (runtime.Object, *samplecrd.Network, error) {
		info := &creatingObjectInfo{UpdatedObjectInfo: checkResourceVersion(objInfo), allocations: r.allocations,
			attempt: attempt, dryRun: dryrun.IsDryRun(options.DryRun)}
		var out runtime.Object
		var err error
		out, created, err = r.Store.Update(ctx, name, info, createValidation, updateValidation, forceAllowCreate, options)
		return out, info.picked, err
	})
	if err != nil || dryrun.IsDryRun(options.DryRun) {
		return out, created, err
	}
	protected, err := protect(ctx, releasingStore{r.Store}, out)
	if released(protected) {
		// The write itself is the answer; the server deleted the Network after it.
		return out, created, err
	}
	return protected, created, err
}

// Delete deletes a Network. One that carries the protection finalizer and that no node reports
// pods attached to is released in the delete itself, one write: the delete is made conditional on
// the resourceVersion the Network was read unattached at, so a node reporting a pod in between
// makes it conflict, and it is decided again (then the finalizer holds the Network).
func (r *REST) Delete(ctx context.Context, name string, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	for attempt := 1; ; attempt++ {
		opts := &metav1.DeleteOptions{}
		if options != nil {
			opts = options.DeepCopy()
		}
		deleteCtx, guarded := ctx, false
		current, err := r.Store.Get(ctx, name, &metav1.GetOptions{})
		if err != nil {
			// Not there when this delete read it (a create racing the delete is ordered after it),
			// or unreadable: answered as the store would answer the delete.
			return nil, false, err
		}
		if n, ok := current.(*samplecrd.Network); ok && slices.Contains(n.Finalizers, samplecrd.ProtectionFinalizer) &&
			!network.Attached(n) && !dryrun.IsDryRun(opts.DryRun) && opts.Preconditions == nil {
			if n.DeletionTimestamp != nil {
				// Already being deleted (another delete is releasing it): release it here, or
				// find it gone.
				out, err := protect(ctx, releasingStore{r.Store}, n)
				if err == nil && released(out) && out.(*samplecrd.Network).ResourceVersion == "" {
					return nil, false, apierrors.NewNotFound(samplecrd.Resource("networks"), name)
				}
				return out, released(out), err
			}
			rv := n.ResourceVersion
			opts.Preconditions = &metav1.Preconditions{ResourceVersion: &rv}
			guarded = true
			deleteCtx = network.WithReleaseInDelete(ctx)
		}
		out, deleted, err := r.Store.Delete(deleteCtx, name, deleteValidation, opts)
		if guarded && apierrors.IsConflict(err) && attempt < protectionAttempts {
			continue // written meanwhile: decide again
		}
		if err != nil || deleted || dryrun.IsDryRun(opts.DryRun) {
			return out, deleted, err
		}
		out, err = protect(ctx, releasingStore{r.Store}, out)
		if err == nil && released(out) && out.(*samplecrd.Network).ResourceVersion == "" {
			return nil, false, apierrors.NewNotFound(samplecrd.Resource("networks"), name)
		}
		return out, released(out), err
	}
}

// DeleteCollection deletes Networks (a namespace going, say), releasing each as Delete does.
func (r *REST) DeleteCollection(ctx context.Context, deleteValidation rest.ValidateObjectFunc, options *metav1.DeleteOptions,
	listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	out, err := r.Store.DeleteCollection(ctx, deleteValidation, options, listOptions)
	if err != nil || (options != nil && dryrun.IsDryRun(options.DryRun)) {
		return out, err
	}
	list, ok := out.(*samplecrd.NetworkList)
	if !ok {
		return out, nil
	}
	// The list is what was listed before the deletes: each Network is read again as its delete
	// left it.
	var errs []error
	for i := range list.Items {
		item := &list.Items[i]
		current, err := r.Store.Get(genericapirequest.WithNamespace(ctx, item.Namespace), item.Name, &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if n, ok := current.(*samplecrd.Network); !ok || n.UID != item.UID || n.DeletionTimestamp == nil {
			continue
		}
		if _, err := protect(ctx, releasingStore{r.Store}, current); err != nil {
			errs = append(errs, err)
		}
	}
	return list, utilerrors.NewAggregate(errs)
}

// creatingObjectInfo is the object an update writes. When the update creates the Network
// (server-side apply), it does what a create allocates (prepare) before the generic store goes on.
type creatingObjectInfo struct {
	rest.UpdatedObjectInfo
	allocations *Allocations
	attempt     int
	dryRun      bool
	// picked is the Network whose prefix the last call picked, if it picked one.
	picked *samplecrd.Network
}

func (i *creatingObjectInfo) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	i.picked = nil
	obj, err := i.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
	if err != nil {
		return obj, err
	}
	n, ok := obj.(*samplecrd.Network)
	if old, isNetwork := oldObj.(*samplecrd.Network); !ok || !isNetwork || old.ResourceVersion != "" {
		// An update: spec.cidr is immutable, nothing to allocate. A dry run never reaches the
		// transaction that moves the gateway key, so it checks the new gateway against the blocks.
		if ok && isNetwork && i.dryRun && n.Spec.Gateway != old.Spec.Gateway {
			return obj, i.allocations.checkGateway(ctx, n)
		}
		return obj, nil
	}
	picked, err := i.allocations.prepare(ctx, n, n.Name, i.attempt, i.dryRun)
	if err != nil {
		return nil, err
	}
	if picked {
		i.picked = n
	}
	return obj, nil
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
	objInfo = checkResourceVersion(objInfo)
	if r.nodeBlocks != nil {
		objInfo = blocksChecker{UpdatedObjectInfo: objInfo, nodeBlocks: r.nodeBlocks}
	}
	var seen *baseRecorder
	if r.observe != nil && !dryrun.IsDryRun(options.DryRun) {
		seen = &baseRecorder{UpdatedObjectInfo: objInfo}
		objInfo = seen
	}
	out, created, err := r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
	if err != nil || dryrun.IsDryRun(options.DryRun) {
		return out, created, err
	}
	if seen != nil {
		if after, ok := out.(*samplecrd.Network); ok && seen.base != nil {
			r.observe(ctx, seen.base, after)
		}
	}
	// A node's report of no attachments is what releases a Network being deleted.
	protected, err := protect(ctx, releasingStore{r.main}, out)
	if released(protected) {
		// The status write itself is the answer; the server deleted the Network after it.
		return out, created, err
	}
	return protected, created, err
}

// baseRecorder remembers the stored Network each attempt of an update starts from: after the
// update succeeded, the last one is the one the stored write was computed from (the generic
// store calls UpdatedObject again on every retry after a conflict).
type baseRecorder struct {
	rest.UpdatedObjectInfo
	base *samplecrd.Network
}

func (b *baseRecorder) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	b.base, _ = oldObj.(*samplecrd.Network)
	if b.base != nil {
		// What an observer compares (identity and capacity), copied: the stored object is shared.
		b.base = &samplecrd.Network{ObjectMeta: b.base.ObjectMeta, Status: samplecrd.NetworkStatus{Capacity: b.base.Status.Capacity.DeepCopy()}}
	}
	return b.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
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
		return nil, invalid(n.Name, field.Invalid(field.NewPath("metadata", "resourceVersion"), n.ResourceVersion,
			"must be a resourceVersion this server returned (a decimal number), or empty"))
	}
	return obj, nil
}
