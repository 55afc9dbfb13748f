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

package allocator

import (
	"net/netip"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// ClusterScope is the scope of allocations when overlap is forbidden across all namespaces.
// Namespace names cannot start with "_", so it never collides with a namespace scope.
const ClusterScope = "_cluster"

// Scoping says which Networks must not overlap one another, and so what each one allocates.
type Scoping struct {
	// PerNamespace limits the guarantee to Networks of the same namespace.
	PerNamespace bool
}

// Scope is the scope of the allocations of the Networks of namespace.
func (s Scoping) Scope(namespace string) string {
	if s.PerNamespace {
		return namespace
	}
	return ClusterScope
}

// AllocationOf is the allocation n needs; false when its cidr is not a canonical prefix
// (validation rejects such Networks, so only data written around the API can have one).
func (s Scoping) AllocationOf(n *samplecrd.Network) (Allocation, bool) {
	return s.AllocationFor(OwnerOf(n), n.Spec.CIDR)
}

// AllocationFor is AllocationOf for the Network owner with spec.cidr cidr.
func (s Scoping) AllocationFor(owner Owner, cidr string) (Allocation, bool) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || p.Masked() != p {
		return Allocation{}, false
	}
	return Allocation{Scope: s.Scope(owner.Namespace), Prefix: p, Owner: owner}, true
}

// OwnerOf is n as the owner of its allocations.
func OwnerOf(n *samplecrd.Network) Owner {
	return Owner{Namespace: n.Namespace, Name: n.Name, UID: string(n.UID)}
}

// GatewayOf is the key of n's gateway in n's block scope (the Network's UID): a single address
// with role gateway, which keeps every block of n off the gateway. False when n has no valid
// prefix or gateway.
func GatewayOf(n *samplecrd.Network) (Allocation, bool) {
	return GatewayFor(OwnerOf(n), n.Spec.CIDR, n.Spec.Gateway)
}

// GatewayFor is GatewayOf for the Network owner with spec.cidr cidr and spec.gateway gateway.
func GatewayFor(owner Owner, cidr, gateway string) (Allocation, bool) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || p.Masked() != p {
		return Allocation{}, false
	}
	gw, err := netip.ParseAddr(gateway)
	if err != nil || !p.Contains(gw) {
		return Allocation{}, false
	}
	return Allocation{Scope: owner.UID, Prefix: netip.PrefixFrom(gw, gw.BitLen()), Owner: owner, Role: RoleGateway, Within: p}, true
}
