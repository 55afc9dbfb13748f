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

package integration

import (
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

// TestProtectedNetworkKeepsItsPrefix: a Network with the controller's finalizer, deleted, stays
// (with a deletionTimestamp) and keeps its prefix, so no other Network can take the addresses
// its pods still hold; removing the finalizer deletes it and frees the prefix.
func TestProtectedNetworkKeepsItsPrefix(t *testing.T) {
	s := sharedServer(t)
	c := jsonClient(t, s)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := c.SamplecrdV1().Networks(ns)

	n := newNetwork("held", "10.211.0.0/24", "")
	n.Finalizers = []string{nodestatus.ProtectionFinalizer}
	if _, err := networks.Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := networks.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held, err := networks.Get(ctx, "held", metav1.GetOptions{})
	if err != nil || held.DeletionTimestamp == nil {
		t.Fatalf("a protected Network after delete: %+v, %v; want it kept with a deletionTimestamp", held, err)
	}
	if _, err := networks.Create(ctx, newNetwork("taker", "10.211.0.0/25", ""), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("creating a Network inside a terminating Network's prefix: %v, want 422", err)
	}

	patch := []byte(`{"metadata":{"finalizers":null}}`)
	if _, err := networks.Patch(ctx, "held", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := networks.Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the finalizer went: %v, want NotFound", err)
	}
	if _, err := networks.Create(ctx, newNetwork("taker", "10.211.0.0/25", ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the prefix was not freed with the Network: %v", err)
	}
}
