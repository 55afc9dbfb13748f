package network

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"
	"k8s.io/client-go/tools/cache"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
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
	allocations *Allocations
	// pathPrefix, codec, transformer and decoder encode and address objects exactly as the etcd3
	// store does, so that both read and write the same keys and values.
	pathPrefix     string
	resourcePrefix string
	codec          runtime.Codec
	transformer    value.Transformer
	decoder        etcd3.Decoder
	versioner      storage.Versioner
	newFunc        func() runtime.Object
}

// errCreateInstead stops an update that turned out to be a create (server-side apply of a new
// Network), so that the create goes through the allocating transaction.
var errCreateInstead = errors.New("the update creates the object")

// restOptionsWithAllocations wraps a RESTOptionsGetter so that the storage it builds is an
// allocatingStore around the usual one.
type restOptionsWithAllocations struct {
	generic.RESTOptionsGetter
	allocations *Allocations
}

func (g restOptionsWithAllocations) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := g.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	decorate := opts.Decorator
	opts.Decorator = func(config *storagebackend.ConfigForResource, resourcePrefix string, keyFunc func(runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, triggers storage.IndexerFuncs,
		indexers *cache.Indexers) (storage.Interface, factory.DestroyFunc, error) {
		inner, destroy, err := decorate(config, resourcePrefix, keyFunc, newFunc, newListFunc, getAttrs, triggers, indexers)
		if err != nil {
			return nil, destroy, err
		}
		return g.allocations.newStore(inner, config, resourcePrefix, newFunc), destroy, nil
	}
	return opts, nil
}

func (a *Allocations) newStore(inner storage.Interface, config *storagebackend.ConfigForResource, resourcePrefix string, newFunc func() runtime.Object) *allocatingStore {
	pathPrefix := path.Join("/", config.Prefix)
	if !strings.HasSuffix(pathPrefix, "/") {
		pathPrefix += "/"
	}
	transformer := config.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	a.store = &allocatingStore{
		Interface:      inner,
		allocations:    a,
		pathPrefix:     pathPrefix,
		resourcePrefix: resourcePrefix,
		codec:          config.Codec,
		transformer:    transformer,
		decoder:        etcd3.NewDefaultDecoder(config.Codec, versioner),
		versioner:      versioner,
		newFunc:        newFunc,
	}
	return a.store
}

// etcdKey is the etcd key of a storage key, as the etcd3 store computes it.
func (s *allocatingStore) etcdKey(key string) (string, error) {
	key, err := storage.PrepareKey(s.resourcePrefix, key, false)
	if err != nil {
		return "", err
	}
	return s.pathPrefix + strings.TrimPrefix(key, "/"), nil
}

// Create stores obj and its allocation in one transaction.
func (s *allocatingStore) Create(ctx context.Context, key string, obj, out runtime.Object, ttl uint64) error {
	n, ok := obj.(*samplecrd.Network)
	if !ok {
		return fmt.Errorf("allocating storage got a %T, not a Network", obj)
	}
	if ttl != 0 {
		return fmt.Errorf("networks have no time to live")
	}
	etcdKey, err := s.etcdKey(key)
	if err != nil {
		return err
	}
	if version, err := s.versioner.ObjectResourceVersion(obj); err != nil || version != 0 {
		return invalid(n, field.Forbidden(field.NewPath("metadata", "resourceVersion"), "must not be set when creating a Network"))
	}
	al, ok := s.allocations.allocationOf(n)
	if !ok {
		return invalid(n, field.Invalid(field.NewPath("spec", "cidr"), n.Spec.CIDR, "must be a canonical IPv4 or IPv6 prefix"))
	}
	if err := s.versioner.PrepareObjectForStorage(obj); err != nil {
		return err
	}
	data, err := runtime.Encode(s.codec, obj)
	if err != nil {
		return err
	}
	stored, err := s.transformer.TransformToStorage(ctx, data, value.DefaultContext(etcdKey))
	if err != nil {
		return storage.NewInternalError(err)
	}
	rev, err := s.allocations.Allocator.Create(ctx, etcdKey, string(stored), al)
	switch {
	case errors.Is(err, allocator.ErrObjectExists):
		return storage.NewKeyExistsError(etcdKey, 0)
	case err != nil:
		return allocationError(ctx, n, err)
	}
	if out != nil {
		return s.decoder.Decode(data, out, rev)
	}
	return nil
}

// Delete removes the object and its allocation in one transaction, after the preconditions and
// the deletion's validation held for the object as it is in etcd.
func (s *allocatingStore) Delete(ctx context.Context, key string, out runtime.Object, preconditions *storage.Preconditions,
	validateDeletion storage.ValidateObjectFunc, cachedExistingObject runtime.Object, opts storage.DeleteOptions) error {
	if opts.ExpectTransformOrDecodeError {
		// An object that cannot be decoded has no prefix we could know: delete it alone, and let
		// the verifier remove its allocation.
		return s.Interface.Delete(ctx, key, out, preconditions, validateDeletion, cachedExistingObject, opts)
	}
	etcdKey, err := s.etcdKey(key)
	if err != nil {
		return err
	}
	for {
		resp, err := s.allocations.Allocator.Get(ctx, etcdKey)
		if err != nil {
			return storageError(err)
		}
		if resp == nil {
			return storage.NewKeyNotFoundError(etcdKey, 0)
		}
		data, _, err := s.transformer.TransformFromStorage(ctx, resp.Value, value.DefaultContext(etcdKey))
		if err != nil {
			return storage.NewInternalError(err)
		}
		current := s.newFunc()
		if err := s.decoder.Decode(data, current, resp.ModRevision); err != nil {
			return err
		}
		if err := preconditions.Check(etcdKey, current); err != nil {
			return err
		}
		if err := validateDeletion(ctx, current); err != nil {
			return err
		}
		var al *allocator.Allocation
		if a, ok := s.allocations.allocationOf(current.(*samplecrd.Network)); ok {
			al = &a
		}
		deleted, rev, err := s.allocations.Allocator.Delete(ctx, etcdKey, resp.ModRevision, al)
		if err != nil {
			return storageError(err)
		}
		if deleted {
			return s.decoder.Decode(data, out, rev)
		}
		// Changed since it was read: check the new state.
	}
}

// GuaranteedUpdate updates through the generic storage, except when the update creates the
// object (server-side apply of a new Network): that create goes through Create, in one
// transaction with its allocation.
func (s *allocatingStore) GuaranteedUpdate(ctx context.Context, key string, destination runtime.Object, ignoreNotFound bool,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	if !ignoreNotFound {
		return storageError(s.Interface.GuaranteedUpdate(ctx, key, destination, ignoreNotFound, preconditions, tryUpdate, cachedExistingObject))
	}
	for attempt := 0; ; attempt++ {
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
		err = s.Create(ctx, key, created, destination, 0)
		switch {
		case storage.IsExist(err):
			// Created by someone else meanwhile: this is an update after all.
			cachedExistingObject = nil
		case lostPickRace(ctx, err) && attempt+1 < maxPickAttempts:
			// The automatic prefix was taken meanwhile: pick again.
		case lostPickRace(ctx, err):
			return pickRaceError(created.(*samplecrd.Network))
		default:
			return err
		}
	}
}

// Get reads through the generic storage; an unreachable etcd is a 503, not a 500.
func (s *allocatingStore) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	return storageError(s.Interface.Get(ctx, key, opts, objPtr))
}

// GetList lists through the generic storage; an unreachable etcd is a 503, not a 500.
func (s *allocatingStore) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	return storageError(s.Interface.GetList(ctx, key, opts, listObj))
}

// storageError gives etcd's unavailability the API's status for it (503, or 504 when a deadline
// passed), rather than the 500 a raw etcd client error becomes. The generic storage's errors
// that the registry interprets (not found, conflicts, ...) are storage.StorageErrors and pass
// through unchanged.
func storageError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewTimeoutError("etcd did not answer in time", 1)
	case errors.Is(err, context.Canceled):
		return err
	}
	// clientv3 turns gRPC errors into rpctypes.EtcdError ("etcdserver: request timed out",
	// "leader changed", ...), which carries the code but is no gRPC status.
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		if unavailable(etcdErr.Code()) {
			return apierrors.NewServiceUnavailable("etcd is unavailable: " + etcdErr.Error())
		}
		return err
	}
	if st, ok := status.FromError(err); ok && unavailable(st.Code()) {
		return apierrors.NewServiceUnavailable("etcd is unavailable: " + st.Message())
	}
	return err
}

func unavailable(code codes.Code) bool {
	return code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.ResourceExhausted
}
