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
	"context"
	_ "embed"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

//go:embed crd.yaml
var crdYAML []byte

var crdDefinitions = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// parseCRD returns the embedded CustomResourceDefinition.
func parseCRD() (*unstructured.Unstructured, error) {
	js, err := yaml.YAMLToJSON(crdYAML)
	if err != nil {
		return nil, fmt.Errorf("crd.yaml: %w", err)
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(js); err != nil {
		return nil, fmt.Errorf("crd.yaml: %w", err)
	}
	return u, nil
}

// installCRD creates the CRD and waits until it is established and its resource is served.
func installCRD(ctx context.Context, client dynamic.Interface) error {
	def, err := parseCRD()
	if err != nil {
		return err
	}
	if _, err := client.Resource(crdDefinitions).Create(ctx, def, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating the CRD: %w", err)
	}
	var last string
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := client.Resource(crdDefinitions).Get(ctx, def.GetName(), metav1.GetOptions{})
		if err != nil {
			last = err.Error()
			return false, nil
		}
		conditions, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions")
		established := false
		for _, c := range conditions {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				established = true
			}
		}
		if !established {
			last = fmt.Sprintf("conditions %v", conditions)
			return false, nil
		}
		if _, err := client.Resource(crdResource).Namespace(benchNamespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			last = err.Error()
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("CRD %s not served: %w (last: %s)", def.GetName(), err, last)
	}
	return nil
}
