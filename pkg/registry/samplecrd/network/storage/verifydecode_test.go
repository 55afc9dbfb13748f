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
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/install"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// storageCodec is the codec the server stores Networks with: v1, in mediaType.
func storageCodec(t *testing.T, mediaType string) *EtcdCodec {
	t.Helper()
	scheme := runtime.NewScheme()
	install.Install(scheme)
	cf := serializer.NewCodecFactory(scheme)
	info, ok := runtime.SerializerInfoForMediaType(cf.SupportedMediaTypes(), mediaType)
	if !ok {
		t.Fatalf("no serializer for %s", mediaType)
	}
	codec := cf.CodecForVersions(info.Serializer, cf.UniversalDecoder(samplecrd.SchemeGroupVersion), v1.SchemeGroupVersion, samplecrd.SchemeGroupVersion)
	return newEtcdCodec(&storagebackend.ConfigForResource{Config: storagebackend.Config{Prefix: "/registry", Codec: codec}}, "/networks")
}

func verifyFields(n *samplecrd.Network) samplecrd.Network {
	return samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{Namespace: n.Namespace, Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion},
		Spec:       samplecrd.NetworkSpec{CIDR: n.Spec.CIDR, Gateway: n.Spec.Gateway},
		Status:     samplecrd.NetworkStatus{VNI: n.Status.VNI},
	}
}

// TestDecodeForVerifyReadsWhatDecodeReads: for Networks as the server stores them (protobuf,
// with managed fields, labels, conditions, nodes and capacity around the fields the verifier
// needs) and as JSON, DecodeForVerify gives the verifier's fields exactly as the full decode
// does; a protobuf value walks without the full decode, and a corrupt one fails as Decode fails.
func TestDecodeForVerifyReadsWhatDecodeReads(t *testing.T) {
	yes := true
	networks := []*samplecrd.Network{
		{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "uid-a"}, Spec: samplecrd.NetworkSpec{CIDR: "10.0.0.0/28"}},
		{
			ObjectMeta: metav1.ObjectMeta{Namespace: "team-b", Name: "b", UID: "4f0c2a6e-1111-2222-3333-444455556666",
				Labels: map[string]string{"x": "y"}, Finalizers: []string{"samplecrd.k8s.io/node-cleanup"}, Generation: 3,
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply,
					APIVersion: "samplecrd.k8s.io/v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:spec":{"f:cidr":{}}}`)}}}},
			Spec: samplecrd.NetworkSpec{CIDR: "fd00:10::/64", Gateway: "fd00:10::1", PrefixLength: 64, DefaultRoute: &yes,
				NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"pool": "a"}}},
			Status: samplecrd.NetworkStatus{ObservedGeneration: 3, VNI: 16777215,
				Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, Reason: "Converged", Message: "m"}},
				Nodes:      []samplecrd.NetworkNodeStatus{{NodeName: "node-1", Bridge: "br-x", Ready: true}},
				Capacity:   &samplecrd.NetworkCapacity{Total: "13", Allocated: "0"}},
		},
	}
	into := &samplecrd.Network{}
	for _, mediaType := range []string{runtime.ContentTypeProtobuf, runtime.ContentTypeJSON} {
		c := storageCodec(t, mediaType)
		for i, n := range append(networks, networks[0]) {
			_, stored, err := c.Encode(context.Background(), "/registry/networks/ns/x", n.DeepCopy())
			if err != nil {
				t.Fatal(err)
			}
			kv := &mvccpb.KeyValue{Key: []byte("/registry/networks/ns/x"), Value: []byte(stored), ModRevision: int64(40 + i)}
			full, err := c.Decode(context.Background(), kv)
			if err != nil {
				t.Fatal(err)
			}
			// into holds what the Network before this one left: DecodeForVerify clears it.
			if err := c.DecodeForVerify(context.Background(), kv, into); err != nil {
				t.Fatal(err)
			}
			if got, want := verifyFields(into), verifyFields(full); !equality.Semantic.DeepEqual(got, want) {
				t.Errorf("%s, network %d: DecodeForVerify read %+v, Decode %+v", mediaType, i, got, want)
			}
			if walked := walkNetwork([]byte(stored), &samplecrd.Network{}); walked != (mediaType == runtime.ContentTypeProtobuf) {
				t.Errorf("%s, network %d: walked %v", mediaType, i, walked)
			}
			// Cut short, the value is corrupt: both fail.
			kv.Value = kv.Value[:len(kv.Value)-7]
			if err := c.DecodeForVerify(context.Background(), kv, &samplecrd.Network{}); err == nil {
				t.Errorf("%s, network %d: DecodeForVerify of a truncated value did not fail", mediaType, i)
			}
		}
	}
}
