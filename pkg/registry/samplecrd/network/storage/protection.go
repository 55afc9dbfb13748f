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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/storage"
	storeerr "k8s.io/apiserver/pkg/storage/errors"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
)

// protectionAttempts bounds how often the protection write is decided again after a conflict.
const protectionAttempts = 5

// protectionStore is what the protection write needs of the generic store of networks.
type protectionStore interface {
	Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error)
	Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
		updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error)
}

// protect applies the server's protection rule (network.Protection) to obj, a Network just
// written by a request, as the server itself: the rule is decided on that Network, and the write
// carries its resourceVersion, so the store refuses it (409) if anything was written in between —
// a node reporting attachments, say. Then the rule is decided again on the Network as it is now.
// A release of a Network with no other finalizer deletes it in the same write. protect returns
// the Network as the last write left it (with the finalizer gone when it was released).
func protect(ctx context.Context, store protectionStore, obj runtime.Object) (runtime.Object, error) {
	n, ok := obj.(*samplecrd.Network)
	if !ok {
		return obj, nil
	}
	ctx = genericapirequest.WithNamespace(ctx, n.Namespace)
	for attempt := 1; ; attempt++ {
		next := n.DeepCopy()
		change := network.Protection(next)
		if change == network.ProtectionKept {
			return n, nil
		}
		out, _, err := store.Update(ctx, n.Name, guardedUpdate{rest.DefaultUpdatedObjectInfo(next), n.UID, n.ResourceVersion},
			rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{})
		switch {
		case err == nil:
			if change == network.ProtectionReleased {
				klog.FromContext(ctx).V(2).Info("No node reports pods attached to the Network being deleted: released it",
					"network", klog.KObj(n))
			}
			return out, nil
		case apierrors.IsNotFound(err):
			return gone(next), nil
		case !apierrors.IsConflict(err) || attempt == protectionAttempts:
			return n, err
		}
		fresh, err := store.Get(ctx, n.Name, &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return gone(next), nil
		}
		if err != nil {
			return n, err
		}
		if n, ok = fresh.(*samplecrd.Network); !ok {
			return fresh, nil
		}
	}
}

// guardedUpdate is the protection write: its preconditions carry the resourceVersion the rule was
// decided on, besides the UID. The generic store compares the object's resourceVersion when it
// updates, but when the update removes the last finalizer it deletes the Network instead, with
// only the update's preconditions: without the resourceVersion among them, a report of a pod
// written between the decision and the delete would be deleted with the Network.
type guardedUpdate struct {
	rest.UpdatedObjectInfo
	uid             types.UID
	resourceVersion string
}

func (g guardedUpdate) Preconditions() *metav1.Preconditions {
	return &metav1.Preconditions{UID: &g.uid, ResourceVersion: &g.resourceVersion}
}

// gone is next for a Network found deleted meanwhile (by another release): released, with no
// resourceVersion, since no write of this one deleted it.
func gone(next *samplecrd.Network) *samplecrd.Network {
	next.ResourceVersion = ""
	if next.DeletionTimestamp == nil {
		now := metav1.Now()
		next.DeletionTimestamp = &now
	}
	next.Finalizers = nil
	return next
}

// released tells whether obj, as protect returned it, is a Network that the write deleted: being
// deleted, and no finalizer left.
func released(obj runtime.Object) bool {
	n, ok := obj.(*samplecrd.Network)
	return ok && n.DeletionTimestamp != nil && len(n.Finalizers) == 0
}

// releasingStore is the generic store of networks as the protection write uses it. A release that
// empties the finalizers of a Network being deleted deletes it in storage directly, under the same
// preconditions (UID and the resourceVersion the rule was decided on), and answers the Network as
// the delete left it: at the delete's revision. The generic store would delete it too, but answer
// the object of the update, at the revision before the delete, so a DELETE answered that way would
// name a revision at which the Network still existed.
type releasingStore struct {
	*genericregistry.Store
}

func (s releasingStore) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	g, ok := objInfo.(guardedUpdate)
	if !ok || (options != nil && len(options.DryRun) > 0) {
		return s.Store.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	}
	next, err := g.UpdatedObject(ctx, nil)
	n, isNetwork := next.(*samplecrd.Network)
	if err != nil || !isNetwork || n.DeletionTimestamp == nil || len(n.Finalizers) != 0 {
		return s.Store.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	}
	key, err := s.KeyFunc(ctx, name)
	if err != nil {
		return nil, false, err
	}
	out := s.NewFunc()
	if err := s.Storage.Delete(ctx, key, out, &storage.Preconditions{UID: &g.uid, ResourceVersion: &g.resourceVersion},
		rest.ValidateAllObjectFunc, false, nil, storage.DeleteOptions{}); err != nil {
		return nil, false, storeerr.InterpretDeleteError(err, samplecrd.Resource("networks"), name)
	}
	if deleted, ok := out.(*samplecrd.Network); ok {
		deleted.Finalizers = nil
	}
	return out, false, nil
}
