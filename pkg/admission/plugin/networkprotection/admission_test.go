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

package networkprotection

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func attributes(obj runtime.Object, resource, subresource string, op admission.Operation) admission.Attributes {
	return admission.NewAttributesRecord(obj, nil, samplecrd.Kind("Network").WithVersion("v1"), "team", "web",
		schema.GroupVersionResource{Group: samplecrd.GroupName, Version: "v1", Resource: resource}, subresource, op,
		&metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "someone"})
}

func TestAdmitAddsTheFinalizerOnce(t *testing.T) {
	p := New()
	for _, tc := range []struct {
		name  string
		given []string
		want  []string
	}{
		{"none", nil, []string{samplecrd.ProtectionFinalizer}},
		{"another", []string{"example.com/other"}, []string{"example.com/other", samplecrd.ProtectionFinalizer}},
		{"already there", []string{samplecrd.ProtectionFinalizer, "example.com/other"}, []string{samplecrd.ProtectionFinalizer, "example.com/other"}},
	} {
		n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Finalizers: slices.Clone(tc.given)}}
		if err := p.Admit(context.Background(), attributes(n, "networks", "", admission.Create), nil); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !slices.Equal(n.Finalizers, tc.want) {
			t.Errorf("%s: finalizers %v, want %v", tc.name, n.Finalizers, tc.want)
		}
	}
}

func TestAdmitLeavesOthersAlone(t *testing.T) {
	p := New()
	if p.Handles(admission.Update) || p.Handles(admission.Delete) || !p.Handles(admission.Create) {
		t.Fatal("the plugin handles more or less than creates")
	}
	// A block claim is created on networks/blockclaims; something else named networks in
	// another group is not ours.
	n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}}
	if err := p.Admit(context.Background(), attributes(n, "networks", "blockclaims", admission.Create), nil); err != nil || len(n.Finalizers) != 0 {
		t.Fatalf("a subresource create: %v, finalizers %v", err, n.Finalizers)
	}
	other := admission.NewAttributesRecord(n, nil, schema.GroupVersionKind{Group: "other.io", Version: "v1", Kind: "Network"}, "team", "web",
		schema.GroupVersionResource{Group: "other.io", Version: "v1", Resource: "networks"}, "", admission.Create,
		&metav1.CreateOptions{}, false, &user.DefaultInfo{Name: "someone"})
	if err := p.Admit(context.Background(), other, nil); err != nil || len(n.Finalizers) != 0 {
		t.Fatalf("another group's networks: %v, finalizers %v", err, n.Finalizers)
	}
}
