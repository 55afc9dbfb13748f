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

package nodestatus

import "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"

// ProtectionFinalizer keeps a Network that is being deleted while any node reports pods
// attached to it (samplecrd.ProtectionFinalizer). The server adds it at create and removes it
// once no node's entry reports attachments; agents only report their own attachments.
const ProtectionFinalizer = samplecrd.ProtectionFinalizer
