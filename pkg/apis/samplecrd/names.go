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

import (
	"crypto/sha256"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/util/validation"
)

// BlockAllocationName is the name of the BlockAllocation of network on node: "<network>.<node>".
// Network names are DNS labels, so the first dot splits them. When that is longer than a name
// may be, the node part is the first 16 hex digits of the node name's SHA-256 (the object's
// nodeName stays authoritative). The server names every BlockAllocation so (they are created
// only by claims), which lets a reader get the one of a node by name.
func BlockAllocationName(network, node string) string {
	name := network + "." + node
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(node))
	return network + "." + hex.EncodeToString(sum[:])[:16]
}
