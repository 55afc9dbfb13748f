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
	"k8s.io/apiserver/pkg/registry/rest"
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
			return next, nil // gone meanwhile
		case !apierrors.IsConflict(err) || attempt == protectionAttempts:
			return n, err
		}
		fresh, err := store.Get(ctx, n.Name, &metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return next, nil
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

// released tells whether obj, as protect returned it, is a Network that the write deleted: being
// deleted, and no finalizer left.
func released(obj runtime.Object) bool {
	n, ok := obj.(*samplecrd.Network)
	return ok && n.DeletionTimestamp != nil && len(n.Finalizers) == 0
}
