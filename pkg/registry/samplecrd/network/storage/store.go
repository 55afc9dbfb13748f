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

package storage

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
)

// allocatingStore is the Network storage with the no-overlap guarantee built in. Creates and
// deletes go straight to etcd, each as one transaction that writes or removes the Network and
// its allocation together, so that at every etcd revision the allocations are exactly the stored
// Networks; a create that would overlap, or whose name is taken, commits nothing. Everything
// else (reads, watches, updates, which never change a prefix since spec.cidr is immutable) goes
// to the generic storage underneath, the watch cache around the etcd3 store, which sees the
// writes through its etcd watch like any other.
type allocatingStore struct {
	storage.Interface
	allocator allocator.Interface
	scoping   allocator.Scoping
	etcd      *EtcdCodec
	// blocks and blockObjects are Allocations.Blocks and .BlockObjects.
	blocks       *allocator.Allocator
	blockObjects string
	// vnis, when set, are the VNI keys: a create assigns the Network its VNI in its own
	// transaction, a delete removes its keys in its own.
	vnis *segment.VNIs
}

// errCreateInstead stops an update that turned out to be a create (server-side apply of a new
// Network), so that the create goes through the allocating transaction.
var errCreateInstead = errors.New("the update creates the object")

// maxVNIAttempts bounds how often a create picks a VNI again after concurrent creates took the
// ones it picked first.
const maxVNIAttempts = 16

// allocatingOptions wraps a RESTOptionsGetter so that the storage it builds is an allocatingStore
// around the usual one. built receives the store's codec once the generic store is complete.
type allocatingOptions struct {
	generic.RESTOptionsGetter
	allocations *Allocations
	built       func(*EtcdCodec)
}

func (g allocatingOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	decorate := opts.Decorator
	if g.allocations.Pages != nil {
		decorate = pagedBeneath(decorate, g.allocations.Pages)
	}
	opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs,
		indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		inner, destroy, err := decorate(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, triggers, indexers)
		if err != nil {
			return nil, destroy, err
		}
		codec := newEtcdCodec(config, resourcePrefix)
		g.built(codec)
		return &allocatingStore{Interface: inner, allocator: g.allocations.Allocator, scoping: g.allocations.Scoping, etcd: codec,
			blocks: g.allocations.Blocks, blockObjects: g.allocations.BlockObjects, vnis: g.allocations.VNIs}, destroy, nil
	}
	return opts, nil
}

// pagedBeneath returns a decorator that builds what decorate builds — the watch cache over the
// etcd3 store, or the etcd3 store alone when decorate is generic.UndecoratedStorage (the watch
// cache is off for Networks) — with a pagingStore around the etcd3 store, so that every continue
// page read from etcd, the watch cache's and its consistency checker's included, is read
// without counting the rest of the range. The watch cache is built as k8s.io/apiserver's
// StorageWithCacher builds it, over the pagingStore. Both decode with a sharingCodec, so the
// Networks the watch cache holds share their repeating parts.
func pagedBeneath(decorate generic.StorageDecorator, pages *etcdscan.Scanner) generic.StorageDecorator {
	cached := reflect.ValueOf(decorate).Pointer() != reflect.ValueOf(generic.UndecoratedStorage).Pointer()
	return func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs,
		indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		sharing := *config
		sharing.Codec = sharingCodec{Codec: config.Codec}
		raw, destroyRaw, err := generic.NewRawStorage(&sharing, newFunc, newListFunc, resourcePrefix)
		if err != nil {
			return nil, destroyRaw, err
		}
		paged := &pagingStore{Interface: raw, etcd: newEtcdCodec(&sharing, resourcePrefix), pages: pages}
		if !cached {
			return paged, destroyRaw, nil
		}
		cacher, err := cacherstorage.NewCacherFromConfig(cacherstorage.Config{
			Storage:             paged,
			Versioner:           storage.APIObjectVersioner{},
			GroupResource:       config.GroupResource,
			EventsHistoryWindow: config.EventsHistoryWindow,
			ResourcePrefix:      resourcePrefix,
			KeyFunc:             keyFunc,
			NewFunc:             newFunc,
			NewListFunc:         newListFunc,
			GetAttrsFunc:        getAttrs,
			IndexerFuncs:        triggers,
			Indexers:            indexers,
			Codec:               config.Codec,
		})
		if err != nil {
			destroyRaw()
			return nil, func() {}, err
		}
		delegator := cacherstorage.NewCacheDelegator(cacher, paged)
		var once sync.Once
		return delegator, func() {
			once.Do(func() {
				delegator.Stop()
				cacher.Stop()
				destroyRaw()
			})
		}, nil
	}
}

// Create stores obj and its allocation in one transaction. An overlap is returned as the
// allocator's *OverlapError, which the create's retry loop (alloc.go) answers.
func (s *allocatingStore) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	n, ok := obj.(*samplecrd.Network)
	if !ok {
		return fmt.Errorf("allocating storage got a %T, not a Network", obj)
	}
	if ttl != 0 {
		return fmt.Errorf("networks have no time to live")
	}
	etcdKey, err := s.etcd.key(key)
	if err != nil {
		return err
	}
	al, ok := s.scoping.AllocationOf(n)
	if !ok {
		return invalid(n.Name, field.Invalid(field.NewPath("spec", "cidr"), n.Spec.CIDR, "must be a canonical IPv4 or IPv6 prefix"))
	}
	var also []clientv3.Op
	if gw, ok := allocator.GatewayOf(n); ok && s.blocks != nil && s.blocks.WritesGatewayKeys() {
		// The UID is new: nothing is stored in its scope yet, so the gateway key needs no guard.
		also = append(also, clientv3.OpPut(s.blocks.Key(gw.Scope, gw.Prefix), allocator.Value(gw)))
	}
	var data []byte
	var rev int64
	for attempt := 0; ; attempt++ {
		var cmps []clientv3.Cmp
		var probes, puts []clientv3.Op
		check := func([]*etcdserverpb.ResponseOp) error { return nil }
		if s.vnis != nil && n.UID != "" {
			// The VNI is written with the Network: status.vni is in the object stored and
			// returned, and its two keys are in the same transaction, guarded to be free.
			if attempt == maxVNIAttempts {
				return apierrors.NewConflict(samplecrd.Resource("networks"), n.Name,
					fmt.Errorf("every VNI this server picked was taken by a concurrent create first (%d attempts); retry", attempt))
			}
			v, err := s.vnis.Pick(ctx, string(n.UID), attempt)
			var exhausted *segment.ExhaustedError
			if errors.As(err, &exhausted) {
				return apierrors.NewForbidden(samplecrd.Resource("networks"), n.Name, err)
			}
			if err != nil {
				return storageError(err)
			}
			n.Status.VNI = v
			cmps, probes, check, puts = s.vnis.Guard(string(n.UID), v)
		}
		var stored string
		data, stored, err = s.etcd.encode(ctx, etcdKey, obj)
		if err != nil {
			return err
		}
		rev, err = s.allocator.CreateGuarded(ctx, etcdKey, stored, al, cmps, probes, check, append(append([]clientv3.Op(nil), also...), puts...)...)
		switch {
		case errors.Is(err, segment.ErrTaken):
			continue // pick again
		case errors.Is(err, allocator.ErrObjectExists):
			return storage.NewKeyExistsError(etcdKey, 0)
		case errors.As(err, new(*allocator.OverlapError)):
			return err
		case err != nil:
			return storageError(err)
		}
		break
	}
	if out != nil {
		return s.etcd.decoder.Decode(data, out, rev)
	}
	return nil
}

// Delete removes the object and its allocation in one transaction, after the preconditions and
// the deletion's validation held for the object as it is in etcd.
func (s *allocatingStore) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	if opts.ExpectTransformOrDecodeError {
		// An object that cannot be decoded has no prefix we could know: delete it alone, and let
		// the repair remove its allocation.
		return s.Interface.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts)
	}
	etcdKey, err := s.etcd.key(key)
	if err != nil {
		return err
	}
	for {
		kv, err := s.allocator.Get(ctx, etcdKey)
		if err != nil {
			return storageError(err)
		}
		if kv == nil {
			return storage.NewKeyNotFoundError(etcdKey, 0)
		}
		data, err := s.etcd.read(ctx, kv)
		if err != nil {
			return err
		}
		current := &samplecrd.Network{}
		if err := s.etcd.decoder.Decode(data, current, kv.ModRevision); err != nil {
			return err
		}
		if err := preconditions.Check(etcdKey, current); err != nil {
			return err
		}
		if err := validateDeletion(ctx, current); err != nil {
			return err
		}
		var al *allocator.Allocation
		if a, ok := s.scoping.AllocationOf(current); ok {
			al = &a
		}
		var also []clientv3.Op
		if s.vnis != nil && current.UID != "" {
			// The Network's VNI keys go with it; the VNI key only if it still names this UID.
			v, _, err := s.vnis.Of(ctx, string(current.UID), current.Status.VNI)
			if err != nil {
				return storageError(err)
			}
			also = append(also, s.vnis.DeleteOps(string(current.UID), v)...)
		}
		if s.blocks != nil && current.UID != "" {
			// A Network's blocks go with it: its block keys (and gateway key) and every
			// BlockAllocation of it (<network>.<node>; Network names hold no dot).
			also = append(also,
				clientv3.OpDelete(s.blocks.ScopePrefix(string(current.UID)), clientv3.WithPrefix()),
				clientv3.OpDelete(s.blockObjects+current.Namespace+"/"+current.Name+".", clientv3.WithPrefix()))
		}
		deleted, rev, err := s.allocator.Delete(ctx, etcdKey, kv.ModRevision, al, also...)
		if err != nil {
			return storageError(err)
		}
		if deleted {
			return s.etcd.decoder.Decode(data, out, rev)
		}
		// Changed since it was read: check the new state.
	}
}

// GuaranteedUpdate updates through the generic storage, except when the update creates the
// object (server-side apply of a new Network): that create goes through Create, in one
// transaction with its allocation. A create that finds the name taken meanwhile is answered
// as one, and the create's retry loop (alloc.go) runs the update again.
func (s *allocatingStore) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	if !ignoreNotFound {
		return s.updateMovingGateway(ctx, key, destination, preconditions, tryUpdate, cachedExistingObject)
	}
	var created runtime.Object
	err := s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions,
		func(existing runtime.Object, meta storage.ResponseMeta) (runtime.Object, *uint64, error) {
			obj, ttl, err := tryUpdate(existing, meta)
			if err != nil || meta.ResourceVersion != 0 {
				return obj, ttl, err
			}
			created = obj
			return nil, nil, errCreateInstead
		}, cachedExistingObject)
	if created == nil || !errors.Is(err, errCreateInstead) {
		return storageError(err)
	}
	return s.Create(ctx, key, created, destination, 0)
}

// Get reads through the generic storage; an unreachable etcd is a 503, not a 500.
func (s *allocatingStore) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	return storageError(s.Interface.Get(ctx, key, opts, objPtr))
}

// GetList lists through the generic storage (continue pages that reach etcd are read by the
// pagingStore beneath the watch cache); an unreachable etcd is a 503, not a 500.
func (s *allocatingStore) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	return storageError(s.Interface.GetList(ctx, key, opts, listObj))
}
