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

package network

import (
	"slices"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// ProtectionChange is what the server's protection rule does to a Network's finalizers.
type ProtectionChange int

const (
	// ProtectionKept: nothing to change.
	ProtectionKept ProtectionChange = iota
	// ProtectionAdded: a Network that is not being deleted lacks the finalizer (one created
	// before the server added it at create, or with the admission plugin off, or one an
	// administrator stripped while it was live): it gets it.
	ProtectionAdded
	// ProtectionReleased: the Network is being deleted, carries the finalizer, and no node's
	// entry reports attachments: the finalizer goes.
	ProtectionReleased
)

// Protection applies the server's rule for samplecrd.ProtectionFinalizer to n and says what it
// changed. A Network being deleted never gets the finalizer back: removing it by hand then is
// how an administrator lets go of a Network held by attachments that will never go.
func Protection(n *samplecrd.Network) ProtectionChange {
	has := slices.Contains(n.Finalizers, samplecrd.ProtectionFinalizer)
	switch {
	case n.DeletionTimestamp == nil && !has:
		n.Finalizers = append(slices.Clone(n.Finalizers), samplecrd.ProtectionFinalizer)
		return ProtectionAdded
	case n.DeletionTimestamp != nil && has && !Attached(n):
		n.Finalizers = slices.DeleteFunc(slices.Clone(n.Finalizers), func(f string) bool { return f == samplecrd.ProtectionFinalizer })
		return ProtectionReleased
	}
	return ProtectionKept
}

// Attached tells whether any node's entry reports pods attached to n.
func Attached(n *samplecrd.Network) bool {
	return slices.ContainsFunc(n.Status.Nodes, func(e samplecrd.NetworkNodeStatus) bool { return e.Attachments > 0 })
}
