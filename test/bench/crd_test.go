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

package main

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// The CRD must serve the same API as ours in another group; kube-apiserver checks the rest
// (structural schema, CEL costs) when the bench installs it.
func TestCRDMatchesOurAPI(t *testing.T) {
	crd, err := parseCRD()
	if err != nil {
		t.Fatal(err)
	}
	str := func(path ...string) string {
		s, _, _ := unstructured.NestedString(crd.Object, path...)
		return s
	}
	if got := str("spec", "group"); got != crdResource.Group || got == "samplecrd.k8s.io" {
		t.Errorf("group %q, want %q", got, crdResource.Group)
	}
	if got := str("spec", "names", "plural"); got != crdResource.Resource {
		t.Errorf("plural %q", got)
	}
	if got := str("spec", "scope"); got != "Namespaced" {
		t.Errorf("scope %q", got)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if len(versions) != 1 {
		t.Fatalf("%d versions, want 1", len(versions))
	}
	v := versions[0].(map[string]any)
	if v["name"] != "v1" || v["served"] != true || v["storage"] != true {
		t.Errorf("version %v %v %v", v["name"], v["served"], v["storage"])
	}
	var selectable, columns []string
	for _, f := range v["selectableFields"].([]any) {
		selectable = append(selectable, f.(map[string]any)["jsonPath"].(string))
	}
	if strings.Join(selectable, ",") != ".spec.cidr,.spec.gateway" {
		t.Errorf("selectable fields %v", selectable)
	}
	for _, c := range v["additionalPrinterColumns"].([]any) {
		if c.(map[string]any)["priority"] == nil {
			columns = append(columns, c.(map[string]any)["name"].(string))
		}
	}
	if strings.Join(columns, ",") != "CIDR,Gateway,Ready,Age" {
		t.Errorf("columns %v, want our table's", columns)
	}
	if _, ok, _ := unstructured.NestedMap(v, "subresources", "status"); !ok {
		t.Error("no status subresource")
	}
	schema, _, _ := unstructured.NestedMap(v, "schema", "openAPIV3Schema")
	spec, _, _ := unstructured.NestedMap(schema, "properties", "spec")
	for _, field := range []string{"cidr", "gateway", "prefixLength"} {
		if _, ok, _ := unstructured.NestedMap(spec, "properties", field); !ok {
			t.Errorf("spec.%s missing", field)
		}
	}
	if req, _, _ := unstructured.NestedStringSlice(spec, "required"); strings.Join(req, ",") != "cidr" {
		t.Errorf("spec.required %v", req)
	}
	rules, _, _ := unstructured.NestedSlice(spec, "x-kubernetes-validations")
	if len(rules) == 0 {
		t.Fatal("no validation rules on spec")
	}
	for i, r := range rules {
		m := r.(map[string]any)
		if m["rule"] == "" || m["fieldPath"] == nil || m["reason"] == nil || m["message"] == nil {
			t.Errorf("spec rule %d lacks rule, fieldPath, reason or message: %v", i, m)
		}
	}
	cidrRules, _, _ := unstructured.NestedSlice(spec, "properties", "cidr", "x-kubernetes-validations")
	if len(cidrRules) != 1 || cidrRules[0].(map[string]any)["rule"] != "self == oldSelf" {
		t.Errorf("spec.cidr is not immutable: %v", cidrRules)
	}
	conditions, _, _ := unstructured.NestedMap(schema, "properties", "status", "properties", "conditions")
	if conditions["x-kubernetes-list-type"] != "map" || strings.Join(toStrings(conditions["x-kubernetes-list-map-keys"]), ",") != "type" {
		t.Errorf("status.conditions is not a map list keyed by type: %v", conditions)
	}
}

func toStrings(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, s := range l {
		out = append(out, s.(string))
	}
	return out
}
