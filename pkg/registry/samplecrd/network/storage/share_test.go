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
	"fmt"
	"testing"
	"time"
	"unsafe"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fieldsel "k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
)

// sameData says whether two strings point at the same bytes.
func sameData(a, b string) bool { return unsafe.StringData(a) == unsafe.StringData(b) }

// sharingSample is a Network as a cluster writes it: i tells the Networks apart (name, UID,
// prefix, gateway); fields chooses the managed field set.
func sharingSample(i int, fields string) *samplecrd.Network {
	created := metav1.NewTime(time.Date(2026, 11, 28, 6, 0, 0, 0, time.UTC))
	leases := int32(2)
	return &samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-network", Name: fmt.Sprintf("net-%d", i),
			UID: types.UID(fmt.Sprintf("4f0c2a6e-1111-2222-3333-%012d", i)), Labels: map[string]string{"tier": "backend"},
			Finalizers: []string{"samplecrd.k8s.io/node-cleanup"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "network-bench", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "samplecrd.k8s.io/v1", Time: &created, FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}}}},
		Spec: samplecrd.NetworkSpec{CIDR: fmt.Sprintf("10.%d.0.0/24", i), Gateway: fmt.Sprintf("10.%d.0.1", i)},
		Status: samplecrd.NetworkStatus{VNI: int32(1048576 + i),
			Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "AllNodesReady", Message: "every selected node is ready"}},
			Nodes: []samplecrd.NetworkNodeStatus{{NodeName: "worker-node-1", Bridge: fmt.Sprintf("br-%d", i), Ready: true,
				Reason: "Converged", UnderlayAddress: "192.168.10.21", IPAMMode: samplecrd.IPAMModeBlocks, Leases: &leases,
				LeaseReclaim: samplecrd.LeaseReclaimContainerRuntime, Capacity: &samplecrd.NodeCapacity{Allocated: "61", Used: "2"}}},
			Capacity: &samplecrd.NetworkCapacity{Total: "253", Allocated: "61", Used: "2", Available: "251"}},
	}
}

// repeatedParts lists the strings of n that sharing points at one copy, by name.
func repeatedParts(n *samplecrd.Network) map[string]string {
	m, c, e := n.ManagedFields[0], n.Status.Conditions[0], n.Status.Nodes[0]
	return map[string]string{
		"namespace": n.Namespace, "finalizer": n.Finalizers[0], "label value": n.Labels["tier"],
		"manager": m.Manager, "operation": string(m.Operation), "apiVersion": m.APIVersion, "fieldsType": m.FieldsType,
		"condition type": c.Type, "condition status": string(c.Status), "condition reason": c.Reason, "condition message": c.Message,
		"node name": e.NodeName, "node reason": e.Reason, "underlay address": e.UnderlayAddress, "IPAM mode": e.IPAMMode,
		"lease reclaim": e.LeaseReclaim, "node allocated": e.Capacity.Allocated, "node used": e.Capacity.Used,
		"total": n.Status.Capacity.Total, "available": n.Status.Capacity.Available,
	}
}

// TestDecodedNetworksShareTheirRepeatingParts: Networks decoded through the sharing codec are what
// the codec alone decodes, and those of one client point at one copy of every part they have in
// common — the strings, the managed fields' time and field set; a different field set is not
// taken for the shared one. The codec alone shares nothing, which shows the test can see it.
func TestDecodedNetworksShareTheirRepeatingParts(t *testing.T) {
	const spec = `{"f:spec":{".":{},"f:cidr":{},"f:gateway":{}}}`
	for _, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		t.Run(mediaType, func(t *testing.T) {
			plain := storageCodec(t, mediaType)
			sharing := newEtcdCodec(&storagebackend.ConfigForResource{Config: storagebackend.Config{Prefix: "/registry",
				Codec: sharingCodec{Codec: plain.codec}}}, "/networks")
			decode := func(c *EtcdCodec, n *samplecrd.Network) *samplecrd.Network {
				t.Helper()
				key := "/registry/networks/team-network/" + n.Name
				_, stored, err := c.Encode(context.Background(), key, n.DeepCopy())
				if err != nil {
					t.Fatal(err)
				}
				obj, err := c.Decode(context.Background(), &mvccpb.KeyValue{Key: []byte(key), Value: []byte(stored), ModRevision: 7})
				if err != nil {
					t.Fatal(err)
				}
				return obj
			}
			a, b := decode(sharing, sharingSample(1, spec)), decode(sharing, sharingSample(2, spec))
			for i, got := range []*samplecrd.Network{a, b} {
				if want := decode(plain, sharingSample(i+1, spec)); !equality.Semantic.DeepEqual(got, want) {
					t.Errorf("network %d decoded with sharing differs from the codec's decode:\n%#v\nwant\n%#v", i+1, got, want)
				}
			}
			bParts := repeatedParts(b)
			for name, s := range repeatedParts(a) {
				if !sameData(s, bParts[name]) {
					t.Errorf("the %s %q is not shared", name, s)
				}
			}
			if a.ManagedFields[0].FieldsV1 != b.ManagedFields[0].FieldsV1 || a.ManagedFields[0].Time != b.ManagedFields[0].Time {
				t.Error("the managed fields' field set or time is not shared")
			}
			if a.Status.Capacity != b.Status.Capacity {
				t.Error("status.capacity, the same in both, is not shared")
			}
			if sameData(a.Name, b.Name) || sameData(a.Status.Nodes[0].Bridge, b.Status.Nodes[0].Bridge) {
				t.Error("parts that differ point at one copy")
			}
			third := sharingSample(3, `{"f:spec":{".":{},"f:cidr":{}}}`)
			third.Status.Capacity.Used, third.Status.Capacity.Available = "3", "250"
			other := decode(sharing, third)
			if f := other.ManagedFields[0].FieldsV1; f == a.ManagedFields[0].FieldsV1 || string(f.Raw) != `{"f:spec":{".":{},"f:cidr":{}}}` {
				t.Errorf("a different field set decoded as %s", f.Raw)
			}
			if c := other.Status.Capacity; c == a.Status.Capacity || c.Used != "3" || c.Available != "250" || c.Total != "253" {
				t.Errorf("a different status.capacity decoded as %+v (shared with the others: %v)", *c, c == a.Status.Capacity)
			}

			x, y := decode(plain, sharingSample(1, spec)), decode(plain, sharingSample(2, spec))
			if sameData(x.Finalizers[0], y.Finalizers[0]) || x.ManagedFields[0].FieldsV1 == y.ManagedFields[0].FieldsV1 || x.Status.Capacity == y.Status.Capacity {
				t.Error("the codec alone shares parts: this test cannot tell sharing apart")
			}
		})
	}
}

// TestWatchCacheNetworksShareTheirRepeatingParts: the Networks the watch cache holds, built as
// the server builds the storage, point at one copy of their namespace; the etcd3 store's own
// decode gives each its own.
func TestWatchCacheNetworksShareTheirRepeatingParts(t *testing.T) {
	f := newPagesFixture(t)
	for i := range 3 {
		f.put(t, "team-network", fmt.Sprintf("n%d", i), nil)
	}
	everything := storage.SelectionPredicate{Label: labels.Everything(), Field: fieldsel.Everything(), GetAttrs: network.GetAttrs}
	namespaces := func(s storage.Interface, rv string) []string {
		t.Helper()
		out := &samplecrd.NetworkList{}
		if err := s.GetList(context.Background(), "/networks", storage.ListOptions{Recursive: true, Predicate: everything, ResourceVersion: rv}, out); err != nil {
			t.Fatal(err)
		}
		if len(out.Items) != 3 {
			t.Fatalf("listed %d Networks, want 3", len(out.Items))
		}
		var ns []string
		for _, n := range out.Items {
			ns = append(ns, n.Namespace)
		}
		return ns
	}
	cached := namespaces(f.beneath(t, genericregistry.StorageWithCacher()), "0")
	if !sameData(cached[0], cached[1]) || !sameData(cached[1], cached[2]) {
		t.Error("the watch cache's Networks do not share their namespace")
	}
	if own := namespaces(f.generic, ""); sameData(own[0], own[1]) {
		t.Error("the etcd3 store's decode shares the namespace: this test cannot tell sharing apart")
	}
}
