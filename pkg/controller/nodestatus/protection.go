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

package nodestatus

import (
	"context"
	"encoding/json"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
)

// ProtectionFinalizer keeps a Network that is being deleted while any node reports pods
// attached to it, the way Kubernetes protects a PersistentVolumeClaim in use: the node keeps the
// bridge and the CNI configuration, so the runtime can still DEL its pods (and host-local
// release their addresses), and the Network goes once every node reports none.
const ProtectionFinalizer = "samplecrd.k8s.io/network-protection"

// Releasable tells whether n, being deleted, carries ProtectionFinalizer and no node's entry
// reports attachments.
func Releasable(n *v1.Network) bool {
	return n.DeletionTimestamp != nil && Unattached(n)
}

// Unattached tells whether n carries ProtectionFinalizer and no node's entry reports
// attachments; for a caller that already knows n is being deleted.
func Unattached(n *v1.Network) bool {
	if !slices.Contains(n.Finalizers, ProtectionFinalizer) {
		return false
	}
	for _, entry := range n.Status.Nodes {
		if entry.Attachments > 0 {
			return false
		}
	}
	return true
}

// Protect adds ProtectionFinalizer to n with a patch conditional on n's resourceVersion and
// returns the patched Network (n itself when it is gone).
func Protect(ctx context.Context, client versioned.Interface, n *v1.Network) (*v1.Network, error) {
	return setFinalizer(ctx, client, n, true)
}

// Release removes ProtectionFinalizer from n with a patch conditional on n's resourceVersion.
func Release(ctx context.Context, client versioned.Interface, n *v1.Network) error {
	_, err := setFinalizer(ctx, client, n, false)
	return err
}

// setFinalizer adds (add) or removes ProtectionFinalizer with a merge patch conditional on the
// Network's resourceVersion, and returns the patched Network.
func setFinalizer(ctx context.Context, client versioned.Interface, n *v1.Network, add bool) (*v1.Network, error) {
	finalizers := slices.DeleteFunc(slices.Clone(n.Finalizers), func(f string) bool { return f == ProtectionFinalizer })
	if add {
		finalizers = append(finalizers, ProtectionFinalizer)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "resourceVersion": n.ResourceVersion,
	}})
	if err != nil {
		return nil, err
	}
	patched, err := client.SamplecrdV1().Networks(n.Namespace).Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return n, nil
	}
	return patched, err
}
