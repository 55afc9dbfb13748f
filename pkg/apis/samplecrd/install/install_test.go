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

package install

import (
	"encoding/json"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
)

func newCodecs() (*runtime.Scheme, runtimeserializer.CodecFactory) {
	scheme := runtime.NewScheme()
	Install(scheme)
	return scheme, runtimeserializer.NewCodecFactory(scheme)
}

// The round trip cannot tell a symmetric mix-up of fields (subnet <-> gatewayIP both ways) from a
// correct conversion; these tests pin the mapping of each field name.
func TestV1beta1FieldNamesMapToInternal(t *testing.T) {
	_, codecs := newCodecs()
	in := []byte(`{"apiVersion":"samplecrd.k8s.io/v1beta1","kind":"Network","metadata":{"name":"n","namespace":"ns"},` +
		`"spec":{"subnet":"10.0.0.0/24","gatewayIP":"10.0.0.254","prefixLength":24}}`)

	obj, err := runtime.Decode(codecs.UniversalDecoder(samplecrd.SchemeGroupVersion), in)
	if err != nil {
		t.Fatalf("decode v1beta1: %v", err)
	}
	n, ok := obj.(*samplecrd.Network)
	if !ok {
		t.Fatalf("decoded %T, want *samplecrd.Network", obj)
	}
	want := samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.254", PrefixLength: 24}
	if n.Spec != want {
		t.Errorf("internal spec = %+v, want %+v", n.Spec, want)
	}

	for _, tc := range []struct {
		gv   schema.GroupVersion
		spec map[string]interface{}
	}{
		{v1.SchemeGroupVersion, map[string]interface{}{"cidr": "10.0.0.0/24", "gateway": "10.0.0.254", "prefixLength": float64(24)}},
		{v1beta1.SchemeGroupVersion, map[string]interface{}{"subnet": "10.0.0.0/24", "gatewayIP": "10.0.0.254", "prefixLength": float64(24)}},
	} {
		t.Run(tc.gv.Version, func(t *testing.T) {
			data, err := runtime.Encode(codecs.LegacyCodec(tc.gv), n)
			if err != nil {
				t.Fatalf("encode: %v", err)
			}
			var out struct {
				APIVersion string                 `json:"apiVersion"`
				Kind       string                 `json:"kind"`
				Spec       map[string]interface{} `json:"spec"`
			}
			if err := json.Unmarshal(data, &out); err != nil {
				t.Fatalf("unmarshal %s: %v", data, err)
			}
			if out.APIVersion != tc.gv.String() || out.Kind != "Network" {
				t.Errorf("apiVersion/kind = %s/%s, want %s/Network", out.APIVersion, out.Kind, tc.gv)
			}
			if !reflect.DeepEqual(out.Spec, tc.spec) {
				t.Errorf("spec = %v, want %v (%s)", out.Spec, tc.spec, data)
			}
		})
	}
}

func TestFieldLabelConversions(t *testing.T) {
	scheme, _ := newCodecs()
	for _, tc := range []struct {
		gv        schema.GroupVersion
		label     string
		wantLabel string
		wantErr   bool
	}{
		{v1.SchemeGroupVersion, "metadata.name", "metadata.name", false},
		{v1.SchemeGroupVersion, "metadata.namespace", "metadata.namespace", false},
		{v1.SchemeGroupVersion, "spec.cidr", "spec.cidr", false},
		{v1.SchemeGroupVersion, "spec.gateway", "spec.gateway", false},
		{v1.SchemeGroupVersion, "spec.subnet", "", true},
		{v1.SchemeGroupVersion, "status.observedGeneration", "", true},
		{v1beta1.SchemeGroupVersion, "metadata.name", "metadata.name", false},
		{v1beta1.SchemeGroupVersion, "metadata.namespace", "metadata.namespace", false},
		{v1beta1.SchemeGroupVersion, "spec.subnet", "spec.cidr", false},
		{v1beta1.SchemeGroupVersion, "spec.gatewayIP", "spec.gateway", false},
		{v1beta1.SchemeGroupVersion, "spec.cidr", "", true},
		{v1beta1.SchemeGroupVersion, "spec.gateway", "", true},
	} {
		t.Run(tc.gv.Version+"/"+tc.label, func(t *testing.T) {
			label, value, err := scheme.ConvertFieldLabel(tc.gv.WithKind("Network"), tc.label, "10.0.0.0/24")
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ConvertFieldLabel(%q) = %q, want an error", tc.label, label)
				}
				return
			}
			if err != nil {
				t.Fatalf("ConvertFieldLabel(%q): %v", tc.label, err)
			}
			if label != tc.wantLabel || value != "10.0.0.0/24" {
				t.Errorf("ConvertFieldLabel(%q) = %q=%q, want %q=%q", tc.label, label, value, tc.wantLabel, "10.0.0.0/24")
			}
		})
	}
}
