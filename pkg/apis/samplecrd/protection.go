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

package samplecrd

// ProtectionFinalizer keeps a Network that is being deleted while any node reports pods
// attached to it, the way Kubernetes protects a PersistentVolumeClaim in use: the nodes keep the
// bridge and the CNI configuration, so the runtime can still DEL its pods (and host-local
// release their addresses), and the Network goes once no node reports any. The server adds it
// when a Network is created (admission plugin NetworkProtection) and removes it; node agents
// only report their attachments.
const ProtectionFinalizer = "samplecrd.k8s.io/network-protection"

// Reasons of a node entry (and of the Ready condition when only such entries exist) whose node's
// controller cannot run, so that nothing is realised there.
const (
	ReasonControllerNeedsNetAdmin = "ControllerNeedsNetAdmin"
	ReasonControllerNeedsSysAdmin = "ControllerNeedsSysAdmin"
)

// ControllerUnavailable tells whether reason is a node entry's reason for a controller that cannot
// run on its node.
func ControllerUnavailable(reason string) bool {
	return reason == ReasonControllerNeedsNetAdmin || reason == ReasonControllerNeedsSysAdmin
}
