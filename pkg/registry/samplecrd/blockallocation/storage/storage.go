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

// Package storage serves BlockAllocations read-only (get, list, watch, table) from the generic
// store and its watch cache, and networks/{name}/blockclaims, which writes a node's
// BlockAllocation and the key of its new block in one etcd transaction.
package storage

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/blockallocation"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/storage"
)

// REST is the storage of blockallocations. It implements only reads: without Creater, Updater,
// Patcher or GracefulDeleter the API answers every write 405 Method Not Allowed, for every
// user, so no client can forge or overwrite a node's blocks.
type REST struct {
	store *genericregistry.Store
	// Etcd addresses and encodes BlockAllocations as the store does, for the claims.
	Etcd *networkstorage.EtcdCodec
}

var (
	_ rest.Getter             = &REST{}
	_ rest.Lister             = &REST{}
	_ rest.Watcher            = &REST{}
	_ rest.TableConvertor     = &REST{}
	_ rest.ShortNamesProvider = &REST{}
	_ rest.Scoper             = &REST{}
	_ rest.Storage            = &REST{}
)

// NewREST returns the read-only storage of blockallocations.
func NewREST(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (*REST, error) {
	r := &REST{}
	strategy := blockallocation.NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &samplecrd.BlockAllocation{} },
		NewListFunc:               func() runtime.Object { return &samplecrd.BlockAllocationList{} },
		PredicateFunc:             blockallocation.Match,
		DefaultQualifiedResource:  samplecrd.Resource("blockallocations"),
		SingularQualifiedResource: samplecrd.Resource("blockallocation"),
		CreateStrategy:            strategy,
		DeleteStrategy:            strategy,
		TableConvertor:            blockallocation.TableConvertor{},
	}
	opts := codecCapture{RESTOptionsGetter: optsGetter, built: func(c *networkstorage.EtcdCodec) { r.Etcd = c }}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: opts, AttrFunc: blockallocation.GetAttrs}); err != nil {
		return nil, err
	}
	r.store = store
	return r, nil
}

// codecCapture hands the codec of the store it builds to built.
type codecCapture struct {
	generic.RESTOptionsGetter
	built func(*networkstorage.EtcdCodec)
}

func (g codecCapture) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	decorate := opts.Decorator
	opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs,
		indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		g.built(networkstorage.NewEtcdCodec(config, resourcePrefix))
		return decorate(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, triggers, indexers)
	}
	return opts, nil
}

// New returns an empty BlockAllocation.
func (r *REST) New() runtime.Object { return &samplecrd.BlockAllocation{} }

// NewList returns an empty BlockAllocationList.
func (r *REST) NewList() runtime.Object { return &samplecrd.BlockAllocationList{} }

// Destroy releases the store.
func (r *REST) Destroy() { r.store.Destroy() }

// NamespaceScoped: BlockAllocations live in their Network's namespace.
func (r *REST) NamespaceScoped() bool { return true }

// GetSingularName is "blockallocation".
func (r *REST) GetSingularName() string { return "blockallocation" }

// ShortNames lets `kubectl get blk` work.
func (r *REST) ShortNames() []string { return []string{"blk"} }

// Get reads one BlockAllocation.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// List lists BlockAllocations (field selectors network and nodeName).
func (r *REST) List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error) {
	return r.store.List(ctx, options)
}

// Watch watches BlockAllocations.
func (r *REST) Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error) {
	return r.store.Watch(ctx, options)
}

// ConvertToTable prints BlockAllocations for kubectl.
func (r *REST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}

// NodeBlocks reads the BlockAllocation of node for the Network namespace/network from etcd (a
// status write that lists a block just claimed must see it), nil when there is none.
func (r *REST) NodeBlocks(ctx context.Context, namespace, network, node string) (*samplecrd.BlockAllocation, error) {
	obj, err := r.store.Get(genericapirequest.WithNamespace(ctx, namespace), blockallocation.Name(network, node), &metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return obj.(*samplecrd.BlockAllocation), nil
}
