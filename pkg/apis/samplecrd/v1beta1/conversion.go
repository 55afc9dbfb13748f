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

import (
	"regexp"

	"k8s.io/apimachinery/pkg/conversion"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// Convert_v1beta1_NetworkSpec_To_samplecrd_NetworkSpec maps the v1beta1 names onto the super version.
func Convert_v1beta1_NetworkSpec_To_samplecrd_NetworkSpec(in *NetworkSpec, out *samplecrd.NetworkSpec, s conversion.Scope) error {
	out.CIDR = in.Subnet
	out.Gateway = in.GatewayIP
	out.PrefixLength = in.PrefixLength
	out.NodeSelector = in.NodeSelector
	out.DefaultRoute = in.DefaultRoute
	return nil
}

// Convert_samplecrd_NetworkSpec_To_v1beta1_NetworkSpec maps the super version onto the v1beta1 names.
func Convert_samplecrd_NetworkSpec_To_v1beta1_NetworkSpec(in *samplecrd.NetworkSpec, out *NetworkSpec, s conversion.Scope) error {
	out.Subnet = in.CIDR
	out.GatewayIP = in.Gateway
	out.PrefixLength = in.PrefixLength
	out.NodeSelector = in.NodeSelector
	out.DefaultRoute = in.DefaultRoute
	return nil
}

// renamedSpecFields matches the super version's spec field paths whose v1beta1 names differ; a
// path in the middle of a longer name (spec.gatewayIP) does not match.
var renamedSpecFields = regexp.MustCompile(`\bspec\.(cidr|gateway)\b`)

// v1beta1SpecFields are the v1beta1 names of the renamed spec fields, as the conversions above map them.
var v1beta1SpecFields = map[string]string{"spec.cidr": "spec.subnet", "spec.gateway": "spec.gatewayIP"}

// FieldPathsToV1beta1 rewrites the super version's spec field paths in s, a field path or an
// error message, to their v1beta1 names, so that v1beta1 clients read errors about the fields
// they sent.
func FieldPathsToV1beta1(s string) string {
	return renamedSpecFields.ReplaceAllStringFunc(s, func(path string) string { return v1beta1SpecFields[path] })
}
