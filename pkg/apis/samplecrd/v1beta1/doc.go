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

// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:conversion-gen=github.com/samplecrd/network-apiserver/pkg/apis/samplecrd
// +k8s:defaulter-gen=TypeMeta
// +k8s:prerelease-lifecycle-gen=true
// +groupName=samplecrd.k8s.io
// +k8s:openapi-model-package=com.github.samplecrd.network-apiserver.pkg.apis.samplecrd.v1beta1

// Package v1beta1 is the first version of samplecrd.k8s.io, kept served for old clients and
// deprecated: its clients get a Warning header naming samplecrd.k8s.io/v1 (the lifecycle tags on
// its types). Its spec names the prefix "subnet" and the gateway "gatewayIP"; hand-written
// conversions map them, and validation errors name them (FieldPathsToV1beta1).
package v1beta1
