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
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

var _ rest.RESTGracefulDeleteStrategy = networkStrategy{}

// ProtectionChange is what the server's protection rule does to a Network's finalizers.
type ProtectionChange int

const (
	// ProtectionKept: nothing to change.
	ProtectionKept ProtectionChange = iota
	// ProtectionAdded: a Network that is not being deleted lacks the finalizer (one created
	// before the server added it at create, or with the admission plugin off, or one an
	// administrator stripped while it was live): it gets it.
	ProtectionAdded
	// ProtectionReleased: the Network is being deleted, carries the finalizer, and no node's
	// entry reports attachments or leases (Attached): the finalizer goes.
	ProtectionReleased
)

// Protection applies the server's rule for samplecrd.ProtectionFinalizer to n and says what it
// changed. A Network being deleted never gets the finalizer back: removing it by hand then is
// how an administrator lets go of a Network held by attachments that will never go.
func Protection(n *samplecrd.Network) ProtectionChange {
	has := slices.Contains(n.Finalizers, samplecrd.ProtectionFinalizer)
	switch {
	case n.DeletionTimestamp == nil && !has:
		n.Finalizers = append(slices.Clone(n.Finalizers), samplecrd.ProtectionFinalizer)
		return ProtectionAdded
	case n.DeletionTimestamp != nil && has && !Attached(n):
		n.Finalizers = slices.DeleteFunc(slices.Clone(n.Finalizers), func(f string) bool { return f == samplecrd.ProtectionFinalizer })
		return ProtectionReleased
	}
	return ProtectionKept
}

type releaseInDeleteKey struct{}

// WithReleaseInDelete marks ctx for a delete in which a Network that no node reports pods on drops
// samplecrd.ProtectionFinalizer, so that the delete removes it at once (one write). The caller
// makes the delete conditional on the resourceVersion it saw the Network unattached at.
func WithReleaseInDelete(ctx context.Context) context.Context {
	return context.WithValue(ctx, releaseInDeleteKey{}, true)
}

// CheckGracefulDelete is called by the generic store's delete on the Network it is about to delete
// or mark as being deleted (inside the storage's guarded update too). Networks are never deleted
// gracefully, so it returns false; in a delete marked WithReleaseInDelete it drops the protection
// finalizer from a Network that no node reports pods on, so that the delete goes through at once
// when no other finalizer is left.
func (networkStrategy) CheckGracefulDelete(ctx context.Context, obj runtime.Object, _ *metav1.DeleteOptions) bool {
	if n, ok := obj.(*samplecrd.Network); ok && ctx.Value(releaseInDeleteKey{}) != nil && n.DeletionTimestamp == nil && !Attached(n) {
		n.Finalizers = slices.DeleteFunc(slices.Clone(n.Finalizers), func(f string) bool { return f == samplecrd.ProtectionFinalizer })
	}
	return false
}

// Attached tells whether any node's entry reports pods attached to n, or addresses still leased
// there (a runtime's DEL removes the pod's veth before host-local releases its address: a node
// whose last port went reports its leases while it waits for them, at most its lease grace). An
// entry that does not report leases holds nothing by them.
func Attached(n *samplecrd.Network) bool {
	return slices.ContainsFunc(n.Status.Nodes, func(e samplecrd.NetworkNodeStatus) bool {
		return e.Attachments > 0 || (e.Leases != nil && *e.Leases > 0)
	})
}
