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

package apiserver

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
)

// protobufPrefix starts every Kubernetes protobuf message: "k8s" and a zero byte.
var protobufPrefix = []byte("k8s\x00")

func protobufSerializer(tb testing.TB) runtime.Serializer {
	tb.Helper()
	info, ok := runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), runtime.ContentTypeProtobuf)
	if !ok {
		tb.Fatalf("Codecs does not support %s", runtime.ContentTypeProtobuf)
	}
	return info.Serializer
}

// sampleNetwork is an internal Network with every field set.
func sampleNetwork(name string) *samplecrd.Network {
	return &samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", UID: "0b9e2a9c-0000-4000-8000-000000000001",
			ResourceVersion: "12", Generation: 3,
			CreationTimestamp: metav1.NewTime(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)),
			Labels:            map[string]string{"team": "net"},
			Annotations:       map[string]string{"note": "seed"},
			Finalizers:        []string{"samplecrd.k8s.io/cleanup"},
		},
		Spec: samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1", PrefixLength: 24},
		Status: samplecrd.NetworkStatus{
			ObservedGeneration: 3,
			Nodes: []samplecrd.NetworkNodeStatus{
				{NodeName: "node-a", Bridge: "nw0a1b2c", Ready: true, ObservedGeneration: 3},
				{NodeName: "node-b", Bridge: "nw0a1b2c", Reason: "BridgeMissing", Message: "no bridge", ObservedGeneration: 2},
			},
			Conditions: []metav1.Condition{{
				Type: samplecrd.ConditionReady, Status: metav1.ConditionTrue, ObservedGeneration: 3,
				LastTransitionTime: metav1.NewTime(time.Date(2024, 5, 6, 7, 9, 0, 0, time.UTC)),
				Reason:             "Realised", Message: "bridge up",
			}},
		},
	}
}

func sampleNetworkList() *samplecrd.NetworkList {
	v6 := sampleNetwork("v6")
	v6.Spec = samplecrd.NetworkSpec{CIDR: "fd00:1::/64", Gateway: "fd00:1::1"}
	v6.Status = samplecrd.NetworkStatus{}
	return &samplecrd.NetworkList{
		ListMeta: metav1.ListMeta{ResourceVersion: "40", Continue: "token"},
		Items:    []samplecrd.Network{*sampleNetwork("v4"), *v6},
	}
}

func encode(tb testing.TB, gv schema.GroupVersion, obj runtime.Object) []byte {
	tb.Helper()
	data, err := runtime.Encode(Codecs.EncoderForVersion(protobufSerializer(tb), gv), obj)
	if err != nil {
		tb.Fatalf("encode %T as %v protobuf: %v", obj, gv, err)
	}
	return data
}

// unknownTypeMeta reads the envelope of a protobuf message: its apiVersion and kind.
func unknownTypeMeta(tb testing.TB, data []byte) runtime.TypeMeta {
	tb.Helper()
	var unk runtime.Unknown
	if err := unk.Unmarshal(bytes.TrimPrefix(data, protobufPrefix)); err != nil {
		tb.Fatalf("unmarshal the runtime.Unknown envelope: %v", err)
	}
	return unk.TypeMeta
}

func TestCodecsSupportProtobuf(t *testing.T) {
	var mediaTypes []string
	for _, info := range Codecs.SupportedMediaTypes() {
		mediaTypes = append(mediaTypes, info.MediaType)
	}
	info, ok := runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), "application/vnd.kubernetes.protobuf")
	if !ok {
		t.Fatalf("supported media types %v do not include application/vnd.kubernetes.protobuf", mediaTypes)
	}
	if info.EncodesAsText {
		t.Error("protobuf claims to encode as text")
	}
	if info.StreamSerializer == nil {
		t.Error("protobuf has no stream serializer, watches could not use it")
	}
	if _, ok := runtime.SerializerInfoForMediaType(Codecs.SupportedMediaTypes(), runtime.ContentTypeJSON); !ok {
		t.Errorf("supported media types %v do not include JSON", mediaTypes)
	}
}

func TestProtobufRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		gv   schema.GroupVersion
		kind string
		obj  runtime.Object
		into func() runtime.Object
	}{
		{"v1 Network", v1.SchemeGroupVersion, "Network", sampleNetwork("net1"), func() runtime.Object { return &samplecrd.Network{} }},
		{"v1 NetworkList", v1.SchemeGroupVersion, "NetworkList", sampleNetworkList(), func() runtime.Object { return &samplecrd.NetworkList{} }},
		{"v1beta1 Network", v1beta1.SchemeGroupVersion, "Network", sampleNetwork("net1"), func() runtime.Object { return &samplecrd.Network{} }},
		{"v1beta1 NetworkList", v1beta1.SchemeGroupVersion, "NetworkList", sampleNetworkList(), func() runtime.Object { return &samplecrd.NetworkList{} }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := encode(t, tc.gv, tc.obj)
			if !bytes.HasPrefix(data, protobufPrefix) {
				t.Fatalf("encoded data starts with %q, want %q", data[:min(len(data), 4)], protobufPrefix)
			}
			if tm := unknownTypeMeta(t, data); tm.APIVersion != tc.gv.String() || tm.Kind != tc.kind {
				t.Errorf("envelope = %s/%s, want %s/%s", tm.APIVersion, tm.Kind, tc.gv, tc.kind)
			}

			// Decode into the internal version, as the server does for a request body.
			decoder := Codecs.DecoderToVersion(protobufSerializer(t), samplecrd.SchemeGroupVersion)
			got, _, err := decoder.Decode(data, nil, tc.into())
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			if !apiequality.Semantic.DeepEqual(tc.obj, got) {
				t.Errorf("round trip changed the object:\n%s", cmp.Diff(tc.obj, got))
			}
		})
	}
}

func TestProtobufWireFormatOfV1Network(t *testing.T) {
	// Decode without conversion: the bytes hold the v1 layout itself.
	data := encode(t, v1.SchemeGroupVersion, sampleNetwork("net1"))
	obj, gvk, err := protobufSerializer(t).Decode(data, nil, nil)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	if *gvk != v1.SchemeGroupVersion.WithKind("Network") {
		t.Errorf("gvk = %v, want samplecrd.k8s.io/v1 Network", gvk)
	}
	n, ok := obj.(*v1.Network)
	if !ok {
		t.Fatalf("decoded %T, want *v1.Network", obj)
	}
	if n.Spec.CIDR != "10.0.0.0/24" || n.Spec.Gateway != "10.0.0.1" || n.Spec.PrefixLength != 24 || n.Name != "net1" ||
		n.Status.ObservedGeneration != 3 || len(n.Status.Nodes) != 2 || n.Status.Nodes[1].Reason != "BridgeMissing" {
		t.Errorf("decoded v1 Network = %+v", n)
	}
}

// appendField appends a length-delimited protobuf field.
func appendField(b []byte, field uint64, payload []byte) []byte {
	b = binary.AppendUvarint(b, field<<3|2)
	b = binary.AppendUvarint(b, uint64(len(payload)))
	return append(b, payload...)
}

// envelope builds "k8s\x00" + runtime.Unknown{TypeMeta: {apiVersion, kind}, Raw: raw} by hand.
func envelope(apiVersion, kind string, raw []byte) []byte {
	var typeMeta []byte
	typeMeta = appendField(typeMeta, 1, []byte(apiVersion))
	typeMeta = appendField(typeMeta, 2, []byte(kind))
	b := append([]byte(nil), protobufPrefix...)
	b = appendField(b, 1, typeMeta)
	return appendField(b, 2, raw)
}

// hugeLength is a length-delimited field 1 whose declared length is far beyond the data.
func hugeLength(length uint64) []byte {
	b := binary.AppendUvarint(nil, 1<<3|2)
	b = binary.AppendUvarint(b, length)
	return append(b, "short"...)
}

type fuzzSeed struct {
	name    string
	data    []byte
	decodes bool // whether it decodes into a Network
}

func fuzzSeeds(tb testing.TB) []fuzzSeed {
	network := encode(tb, v1.SchemeGroupVersion, sampleNetwork("net1"))
	status := encode(tb, schema.GroupVersion{Version: "v1"}, &metav1.Status{Status: metav1.StatusFailure, Message: "not a Network", Code: 422})
	// An eleven-byte varint overflows uint64.
	overlong := bytes.Repeat([]byte{0xff}, 10)
	overlong = append(overlong, 0x01)
	prefixed := func(b []byte) []byte { return append(append([]byte(nil), protobufPrefix...), b...) }

	return []fuzzSeed{
		{"v1 Network", network, true},
		{"v1beta1 Network", encode(tb, v1beta1.SchemeGroupVersion, sampleNetwork("old")), true},
		{"empty v1 Network", encode(tb, v1.SchemeGroupVersion, &samplecrd.Network{}), true},
		// The kind of the object decoded into fills in a missing kind.
		{"envelope without kind", envelope("samplecrd.k8s.io/v1", "", nil), true},
		{"v1 NetworkList", encode(tb, v1.SchemeGroupVersion, sampleNetworkList()), false},
		{"truncated in half", network[:len(network)/2], false},
		{"one byte short", network[:len(network)-1], false},
		{"truncated envelope", network[:len(protobufPrefix)+3], false},
		{"k8s prefix, Status inside", status, false},
		{"k8s prefix, unregistered Pod", envelope("v1", "Pod", []byte{0x0a, 0x00}), false},
		{"Network envelope, raw not protobuf", envelope("samplecrd.k8s.io/v1", "Network", []byte("not protobuf at all")), false},
		{"internal version", envelope("samplecrd.k8s.io/__internal", "Network", nil), false},
		{"metadata length 2^62", envelope("samplecrd.k8s.io/v1", "Network", hugeLength(1<<62)), false},
		{"metadata length 2^63 (negative int)", envelope("samplecrd.k8s.io/v1", "Network", hugeLength(1<<63)), false},
		{"metadata length 2^31-1", envelope("samplecrd.k8s.io/v1", "Network", hugeLength(0x7fffffff)), false},
		{"metadata length overflows", envelope("samplecrd.k8s.io/v1", "Network", append([]byte{0x0a}, overlong...)), false},
		{"envelope length 2^40", prefixed(hugeLength(1 << 40)), false},
		{"envelope tag overflows", prefixed(overlong), false},
		{"prefix only", prefixed(nil), false},
		{"empty", []byte{}, false},
		{"JSON", []byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network"}`), false},
	}
}

// FuzzDecodeProtobufNetwork feeds arbitrary bytes to the protobuf decoder the server uses for
// request bodies, converting to the internal version. It must never panic, and must either fail or
// return a Network that encodes again and decodes to the same Network.
//
// In a normal `go test` only the seed corpus runs; fuzz with
//
//	go test -run='^$' -fuzz=FuzzDecodeProtobufNetwork -fuzztime=30s ./pkg/apiserver/
func FuzzDecodeProtobufNetwork(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed.data)
	}
	serializer := protobufSerializer(f)
	decoder := Codecs.DecoderToVersion(serializer, samplecrd.SchemeGroupVersion)
	encoder := Codecs.EncoderForVersion(serializer, v1.SchemeGroupVersion)

	f.Fuzz(func(t *testing.T, data []byte) {
		into := &samplecrd.Network{}
		obj, _, err := decoder.Decode(data, nil, into)
		if err != nil {
			return
		}
		n, ok := obj.(*samplecrd.Network)
		if !ok {
			t.Fatalf("decode returned %T without an error, want *samplecrd.Network", obj)
		}
		if n != into {
			t.Fatalf("decode returned a new object instead of filling the one given")
		}

		again, err := runtime.Encode(encoder, n)
		if err != nil {
			t.Fatalf("a decoded Network does not encode: %v", err)
		}
		if !bytes.HasPrefix(again, protobufPrefix) {
			t.Fatalf("re-encoded data starts with %q", again[:min(len(again), 4)])
		}
		n2 := &samplecrd.Network{}
		if _, _, err := decoder.Decode(again, nil, n2); err != nil {
			t.Fatalf("a re-encoded Network does not decode: %v", err)
		}
		if !apiequality.Semantic.DeepEqual(n, n2) {
			t.Fatalf("re-encoding changed the Network:\n%s", cmp.Diff(n, n2))
		}
	})
}

// TestFuzzSeedsCoverBothOutcomes keeps the seed corpus meaningful: the valid seeds must decode and
// the malformed ones must be rejected, so the fuzz target is exercised on both of its paths.
func TestFuzzSeedsCoverBothOutcomes(t *testing.T) {
	decoder := Codecs.DecoderToVersion(protobufSerializer(t), samplecrd.SchemeGroupVersion)
	for _, seed := range fuzzSeeds(t) {
		_, _, err := decoder.Decode(seed.data, nil, &samplecrd.Network{})
		if seed.decodes && err != nil {
			t.Errorf("%s: %v, want it to decode", seed.name, err)
		}
		if !seed.decodes && err == nil {
			t.Errorf("%s (%q) decoded into a Network, want an error", seed.name, seed.data)
		}
	}
}
