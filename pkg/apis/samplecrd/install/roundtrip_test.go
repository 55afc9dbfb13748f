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
	"math/rand"
	"testing"

	"k8s.io/apimachinery/pkg/api/apitesting/fuzzer"
	"k8s.io/apimachinery/pkg/api/apitesting/roundtrip"
	metafuzzer "k8s.io/apimachinery/pkg/apis/meta/fuzzer"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	samplecrdfuzzer "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/fuzzer"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
)

// servedVersions are the versions the server serves; each must round-trip through the internal version.
var servedVersions = []schema.GroupVersion{v1.SchemeGroupVersion, v1beta1.SchemeGroupVersion}

// TestInstallRegistersEveryVersion guards the round-trip tests below: they only test the kinds the
// installed scheme knows, so a version missing from Install would silently go untested.
func TestInstallRegistersEveryVersion(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)

	for _, gv := range append([]schema.GroupVersion{samplecrd.SchemeGroupVersion}, servedVersions...) {
		for _, kind := range []string{"Network", "NetworkList"} {
			if !scheme.Recognizes(gv.WithKind(kind)) {
				t.Errorf("scheme does not recognise %v", gv.WithKind(kind))
			}
		}
	}
	got := scheme.PrioritizedVersionsForGroup(samplecrd.GroupName)
	if len(got) != 2 || got[0] != v1.SchemeGroupVersion || got[1] != v1beta1.SchemeGroupVersion {
		t.Errorf("version priority = %v, want [%v %v]", got, v1.SchemeGroupVersion, v1beta1.SchemeGroupVersion)
	}
}

// TestRoundTripTypes fuzzes internal Networks and NetworkLists and checks that
// internal -> {v1, v1beta1} -> JSON -> {v1, v1beta1} -> internal loses nothing.
func TestRoundTripTypes(t *testing.T) {
	roundtrip.RoundTripTestForAPIGroup(t, Install, samplecrdfuzzer.Funcs)
}

// TestRoundTripTypesProtobuf is the same round trip through JSON and the generated protobuf.
func TestRoundTripTypesProtobuf(t *testing.T) {
	roundtrip.RoundTripProtobufTestForAPIGroup(t, Install, samplecrdfuzzer.Funcs)
}

// TestRoundTripExternalTypes checks that every versioned kind survives its own JSON and protobuf
// encoding (v1 -> bytes -> v1, v1beta1 -> bytes -> v1beta1).
func TestRoundTripExternalTypes(t *testing.T) {
	scheme := runtime.NewScheme()
	Install(scheme)
	codecs := runtimeserializer.NewCodecFactory(scheme)
	f := fuzzer.FuzzerFor(fuzzer.MergeFuzzerFuncs(metafuzzer.Funcs, samplecrdfuzzer.Funcs), rand.NewSource(rand.Int63()), codecs)
	for _, gv := range servedVersions {
		for _, kind := range []string{"Network", "NetworkList"} {
			gvk := gv.WithKind(kind)
			t.Run(gvk.String(), func(t *testing.T) {
				roundtrip.RoundTripSpecificKind(t, gvk, scheme, codecs, f, nil)
			})
		}
	}
}
