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

package template

import (
	"encoding/json"
	"strings"
	"testing"
)

// tmplDecode unmarshals a parsed template's JSON for inspection.
func tmplDecode(t *testing.T, tmpl *Template) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(tmpl.JSON, &doc); err != nil {
		t.Fatalf("template JSON %s: %v", tmpl.JSON, err)
	}
	return doc
}

func TestParseAcceptsLabelsAnnotationsAndSpec(t *testing.T) {
	for name, data := range map[string]string{
		"yaml": `
metadata:
  labels:
    team: platform
  annotations:
    example.com/owner: netops
spec:
  gateway: 10.9.0.254
  prefixLength: 24
`,
		"yaml with apiVersion and kind": `
apiVersion: samplecrd.k8s.io/v1
kind: Network
metadata:
  labels:
    team: platform
  annotations:
    example.com/owner: netops
spec:
  gateway: 10.9.0.254
  prefixLength: 24
`,
		"json": `{"metadata":{"labels":{"team":"platform"},"annotations":{"example.com/owner":"netops"}},` +
			`"spec":{"gateway":"10.9.0.254","prefixLength":24}}`,
	} {
		t.Run(name, func(t *testing.T) {
			tmpl, err := Parse("test@1", []byte(data))
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			if tmpl.Identity != "test@1" {
				t.Errorf("identity %q, want test@1", tmpl.Identity)
			}
			doc := tmplDecode(t, tmpl)
			if _, ok := doc["apiVersion"]; ok {
				t.Errorf("apiVersion kept in the merged JSON: %s", tmpl.JSON)
			}
			if _, ok := doc["kind"]; ok {
				t.Errorf("kind kept in the merged JSON: %s", tmpl.JSON)
			}
			meta, _ := doc["metadata"].(map[string]any)
			labels, _ := meta["labels"].(map[string]any)
			annotations, _ := meta["annotations"].(map[string]any)
			spec, _ := doc["spec"].(map[string]any)
			if labels["team"] != "platform" || len(labels) != 1 {
				t.Errorf("labels %v, want team=platform", labels)
			}
			if annotations["example.com/owner"] != "netops" || len(annotations) != 1 {
				t.Errorf("annotations %v, want example.com/owner=netops", annotations)
			}
			if spec["gateway"] != "10.9.0.254" || spec["prefixLength"] != float64(24) || len(spec) != 2 {
				t.Errorf("spec %v, want gateway 10.9.0.254 and prefixLength 24", spec)
			}
		})
	}
}

func TestParseRejects(t *testing.T) {
	for name, tc := range map[string]struct {
		data string
		want string // part of the error
	}{
		"not yaml":                {"spec: [unclosed", "is not YAML"},
		"status":                  {"status:\n  observedGeneration: 3\n", `unknown field "status"`},
		"metadata.name":           {"metadata:\n  name: fixed\n", `unknown field "name"`},
		"metadata.namespace":      {"metadata:\n  namespace: other\n", `unknown field "namespace"`},
		"unknown spec field":      {"spec:\n  gatewayIP: 10.0.0.1\n", `unknown field "gatewayIP"`},
		"wrong type":              {"spec:\n  prefixLength: wide\n", "may hold only"},
		"v1beta1 apiVersion":      {"apiVersion: samplecrd.k8s.io/v1beta1\nspec:\n  prefixLength: 24\n", `apiVersion "samplecrd.k8s.io/v1beta1"`},
		"core apiVersion":         {"apiVersion: v1\n", `apiVersion "v1"`},
		"wrong kind":              {"kind: ConfigMap\n", `kind "ConfigMap"`},
		"invalid label key":       {"metadata:\n  labels:\n    \"bad key!\": x\n", "metadata.labels"},
		"invalid label value":     {"metadata:\n  labels:\n    team: \"" + strings.Repeat("x", 64) + "\"\n", "metadata.labels"},
		"invalid annotation key":  {"metadata:\n  annotations:\n    \"/nope\": x\n", "metadata.annotations"},
		"list instead of mapping": {"- spec\n", "may hold only"},
	} {
		t.Run(name, func(t *testing.T) {
			tmpl, err := Parse("bad@1", []byte(tc.data))
			if err == nil {
				t.Fatalf("Parse accepted %q: %s", tc.data, tmpl.JSON)
			}
			if !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "bad@1") {
				t.Fatalf("error %q, want it to contain %q and the identity", err, tc.want)
			}
		})
	}
}
