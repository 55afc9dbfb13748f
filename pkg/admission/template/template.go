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

// Package template is the operator's network template: what a template may hold (Parse) and where
// it is read from (a file or a ConfigMap in the server's namespace). The NetworkTemplate admission
// plugin merges it into new Networks; the admission initializer hands the plugin its Source.
package template

import (
	"bytes"
	"encoding/json"
	"fmt"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// Template is a parsed network template: a partial v1 Network holding only labels, annotations
// and spec fields, kept as the JSON that is merged into new Networks.
type Template struct {
	// Identity names this version of the template; it is recorded on every Network it is applied to.
	Identity string
	// JSON is the partial Network: {"metadata":{"labels":…,"annotations":…},"spec":{…}}.
	JSON []byte
}

// templateDoc is what a template may contain. apiVersion and kind are optional.
type templateDoc struct {
	APIVersion string `json:"apiVersion,omitempty"`
	Kind       string `json:"kind,omitempty"`
	Metadata   struct {
		Labels      map[string]string `json:"labels,omitempty"`
		Annotations map[string]string `json:"annotations,omitempty"`
	} `json:"metadata,omitempty"`
	Spec *v1.NetworkSpec `json:"spec,omitempty"`
}

// Parse reads a template from YAML or JSON. Anything but labels, annotations and spec fields, and
// labels or annotations that would fail validation, make it an error.
func Parse(identity string, data []byte) (*Template, error) {
	raw, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("template %s is not YAML: %w", identity, err)
	}
	var doc templateDoc
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("template %s may hold only metadata.labels, metadata.annotations and spec: %w", identity, err)
	}
	if doc.APIVersion != "" && doc.APIVersion != v1.SchemeGroupVersion.String() {
		return nil, fmt.Errorf("template %s: apiVersion %q, want %s", identity, doc.APIVersion, v1.SchemeGroupVersion)
	}
	if doc.Kind != "" && doc.Kind != "Network" {
		return nil, fmt.Errorf("template %s: kind %q, want Network", identity, doc.Kind)
	}
	meta := field.NewPath("metadata")
	errs := metav1validation.ValidateLabels(doc.Metadata.Labels, meta.Child("labels"))
	errs = append(errs, apimachineryvalidation.ValidateAnnotations(doc.Metadata.Annotations, meta.Child("annotations"))...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("template %s: %w", identity, errs.ToAggregate())
	}
	doc.APIVersion, doc.Kind = "", ""
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	return &Template{Identity: identity, JSON: out}, nil
}
