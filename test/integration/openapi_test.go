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
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// findKindSchema returns the name and schema of the definition carrying the GVK extension for
// samplecrd.k8s.io/version Kind.
func findKindSchema(t *testing.T, schemas map[string]any, version, kind string) (string, map[string]any) {
	t.Helper()
	var foundName string
	var found map[string]any
	for name, raw := range schemas {
		schema, _ := raw.(map[string]any)
		gvks, _ := schema["x-kubernetes-group-version-kind"].([]any)
		for _, g := range gvks {
			gvk, _ := g.(map[string]any)
			if gvk["group"] == "samplecrd.k8s.io" && gvk["version"] == version && gvk["kind"] == kind {
				if found != nil {
					t.Fatalf("two schemas (%s, %s) claim samplecrd.k8s.io/%s %s", foundName, name, version, kind)
				}
				foundName, found = name, schema
			}
		}
	}
	if found == nil {
		t.Fatalf("no schema has x-kubernetes-group-version-kind samplecrd.k8s.io/%s %s", version, kind)
	}
	return foundName, found
}

// propertyRef returns the name of the schema a property refers to, directly or through allOf.
func propertyRef(t *testing.T, schema map[string]any, property, refPrefix string) string {
	t.Helper()
	props, _ := schema["properties"].(map[string]any)
	prop, _ := props[property].(map[string]any)
	if prop == nil {
		t.Fatalf("schema has no property %q: %v", property, schema)
	}
	ref, _ := prop["$ref"].(string)
	if ref == "" {
		if allOf, _ := prop["allOf"].([]any); len(allOf) == 1 {
			inner, _ := allOf[0].(map[string]any)
			ref, _ = inner["$ref"].(string)
		}
	}
	if !strings.HasPrefix(ref, refPrefix) {
		t.Fatalf("property %q refers to %q, want a reference under %s", property, ref, refPrefix)
	}
	return strings.TrimPrefix(ref, refPrefix)
}

func propertyDescription(t *testing.T, schema map[string]any, property string) string {
	t.Helper()
	props, _ := schema["properties"].(map[string]any)
	prop, _ := props[property].(map[string]any)
	desc, _ := prop["description"].(string)
	return desc
}

func getJSONMap(t *testing.T, client *http.Client, url string) map[string]any {
	t.Helper()
	resp := doRaw(t, client, http.MethodGet, url, "", contentTypeJSON, nil)
	if resp.Code != http.StatusOK {
		t.Fatalf("GET %s: %d %.300s", url, resp.Code, resp.Body)
	}
	var m map[string]any
	if err := json.Unmarshal(resp.Body, &m); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return m
}

const cidrDescription = "CIDR is the network prefix in canonical form"

func TestOpenAPIV2(t *testing.T) {
	s := sharedServer(t)
	doc := getJSONMap(t, httpClient(t, s), s.URL+"/openapi/v2")

	definitions, _ := doc["definitions"].(map[string]any)
	_, network := findKindSchema(t, definitions, "v1", "Network")
	specName := propertyRef(t, network, "spec", "#/definitions/")
	spec, _ := definitions[specName].(map[string]any)
	if desc := propertyDescription(t, spec, "cidr"); !strings.Contains(desc, cidrDescription) {
		t.Fatalf("v2 %s.cidr description %q, want it to contain %q", specName, desc, cidrDescription)
	}
	_, beta := findKindSchema(t, definitions, "v1beta1", "Network")
	betaSpec, _ := definitions[propertyRef(t, beta, "spec", "#/definitions/")].(map[string]any)
	if desc := propertyDescription(t, betaSpec, "subnet"); !strings.Contains(desc, "Subnet is the network prefix") {
		t.Fatalf("v2 v1beta1 subnet description %q", desc)
	}
	findKindSchema(t, definitions, "v1", "NetworkList")

	paths, _ := doc["paths"].(map[string]any)
	for _, p := range []string{
		"/apis/samplecrd.k8s.io/v1/namespaces/{namespace}/networks",
		"/apis/samplecrd.k8s.io/v1/namespaces/{namespace}/networks/{name}",
		"/apis/samplecrd.k8s.io/v1/namespaces/{namespace}/networks/{name}/status",
		"/apis/samplecrd.k8s.io/v1beta1/namespaces/{namespace}/networks",
	} {
		if _, ok := paths[p]; !ok {
			t.Errorf("openapi v2 has no path %s", p)
		}
	}
}

func TestOpenAPIV3(t *testing.T) {
	s := sharedServer(t)
	client := httpClient(t, s)
	index := getJSONMap(t, client, s.URL+"/openapi/v3")
	paths, _ := index["paths"].(map[string]any)
	for _, version := range []string{"v1", "v1beta1"} {
		t.Run(version, func(t *testing.T) {
			entry, _ := paths["apis/samplecrd.k8s.io/"+version].(map[string]any)
			relative, _ := entry["serverRelativeURL"].(string)
			if !strings.HasPrefix(relative, "/openapi/v3/apis/samplecrd.k8s.io/"+version) {
				t.Fatalf("openapi v3 index entry for %s: %v", version, entry)
			}
			// Both the hashed URL of the index and the plain one serve the group version.
			for _, url := range []string{s.URL + relative, s.URL + "/openapi/v3/apis/samplecrd.k8s.io/" + version} {
				doc := getJSONMap(t, client, url)
				components, _ := doc["components"].(map[string]any)
				schemas, _ := components["schemas"].(map[string]any)
				_, network := findKindSchema(t, schemas, version, "Network")
				specName := propertyRef(t, network, "spec", "#/components/schemas/")
				spec, _ := schemas[specName].(map[string]any)
				field, want := "cidr", cidrDescription
				if version == "v1beta1" {
					field, want = "subnet", "Subnet is the network prefix"
				}
				if desc := propertyDescription(t, spec, field); !strings.Contains(desc, want) {
					t.Fatalf("v3 %s %s.%s description %q, want it to contain %q", version, specName, field, desc, want)
				}
				if _, ok := doc["paths"].(map[string]any)["/apis/samplecrd.k8s.io/"+version+"/namespaces/{namespace}/networks/{name}/status"]; !ok {
					t.Fatalf("v3 %s document has no status path", version)
				}
			}
		})
	}
}
