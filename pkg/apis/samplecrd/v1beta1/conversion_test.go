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

package v1beta1

import "testing"

func TestFieldPathsToV1beta1(t *testing.T) {
	for in, want := range map[string]string{
		"spec.cidr":    "spec.subnet",
		"spec.gateway": "spec.gatewayIP",
		`spec.gateway: Invalid value: "10.0.1.1": must be inside spec.cidr 10.0.0.0/24`: `spec.gatewayIP: Invalid value: "10.0.1.1": must be inside spec.subnet 10.0.0.0/24`,
		".spec.cidr: expected string": ".spec.subnet: expected string",
		"spec.prefixLength":           "spec.prefixLength",
		"spec.gatewayIP":              "spec.gatewayIP", // already v1beta1
		"spec.cidrs":                  "spec.cidrs",     // another field
		"metadata.name":               "metadata.name",
	} {
		if got := FieldPathsToV1beta1(in); got != want {
			t.Errorf("FieldPathsToV1beta1(%q) = %q, want %q", in, got, want)
		}
	}
}
