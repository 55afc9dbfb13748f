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

// +k8s:deepcopy-gen=package
// +groupName=samplecrd.k8s.io

// Package samplecrd holds the internal "super version" of the samplecrd.k8s.io API: the union of
// the fields of every served version. Requests decode into it; defaulting in the strategy,
// validation and admission all work on it; storage encodes it as v1.
package samplecrd
