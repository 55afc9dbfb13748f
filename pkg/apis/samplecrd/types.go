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

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Network is an IP network that the controller realises on each node.
type Network struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	Spec   NetworkSpec
	Status NetworkStatus
}

// NetworkSpec is the desired state of a Network.
type NetworkSpec struct {
	// CIDR is the network prefix in canonical form (v1 spec.cidr, v1beta1 spec.subnet).
	CIDR string
	// Gateway is an address inside CIDR (v1 spec.gateway, v1beta1 spec.gatewayIP).
	Gateway string
	// PrefixLength asks for a free prefix of this length from the server's pools when CIDR is
	// empty; when CIDR is set it must match CIDR's length (v1 and v1beta1 spec.prefixLength).
	PrefixLength int32
	// NodeSelector selects the nodes the Network is realised on; nil selects every node.
	NodeSelector *metav1.LabelSelector
	// DefaultRoute makes the pods' default route go through the gateway (nil: false).
	DefaultRoute *bool
}

// NetworkStatus is the observed state of a Network.
type NetworkStatus struct {
	// ObservedGeneration and the Ready condition are derived by the server from Nodes when
	// there are node entries.
	ObservedGeneration int64
	Conditions         []metav1.Condition
	// Nodes holds one entry per node whose controller realises the Network, each written by
	// that node's controller alone (server-side apply, one field manager per node).
	Nodes []NetworkNodeStatus
	// VNI is the Network's VXLAN segment, assigned by the server (0: none yet). No client sets it.
	VNI int32
	// Capacity counts the Network's addresses; derived by the server from spec.cidr, spec.gateway
	// and Nodes on every status write. No client sets it.
	Capacity *NetworkCapacity
}

// NetworkCapacity counts a Network's addresses. Counts are decimal strings: exact for any prefix
// (an IPv6 /64 has 2^64-2 usable addresses, more than an int64 holds).
type NetworkCapacity struct {
	// Total is the number of usable addresses of spec.cidr: all but the network address, the
	// IPv4 broadcast address and the gateway.
	Total string
	// Allocated is the number of usable addresses inside the blocks the nodes report.
	Allocated string
	// Used is the number of addresses leased to pods: the sum of the entries' leases. Empty
	// (unknown) while an entry does not report its leases.
	Used string
	// Available is Total - Used; empty when Used is.
	Available string
	// NodesWithoutLeases is the number of node entries that do not report leases.
	NodesWithoutLeases int32
}

// NodeCapacity counts one node's addresses of a Network.
type NodeCapacity struct {
	// Allocated is the number of usable addresses inside the node's blocks.
	Allocated string
	// Used is the node's leases; empty when it reports none (unknown).
	Used string
}

// NetworkNodeStatus is one node's report on a Network.
type NetworkNodeStatus struct {
	NodeName           string
	Bridge             string
	Ready              bool
	Reason             string
	Message            string
	ObservedGeneration int64
	Attachments        int32
	// UnderlayAddress is the node's address on the underlay network (VXLAN peers).
	UnderlayAddress string
	// VXLAN is the name of the Network's VXLAN device on the node.
	VXLAN string
	// Blocks are the address blocks the node's CNI configuration holds: a subset of the node's
	// BlockAllocation.
	Blocks []string
	// MTU is the MTU of the Network's bridge, VXLAN device and pods on the node.
	MTU int32
	// IPAMMode says how the node's CNI configuration hands out addresses (IPAMModeBlocks or
	// IPAMModeLegacy).
	IPAMMode string
	// Leases is the number of addresses leased on the node; nil is unknown, never zero.
	Leases *int32
	// Capacity is derived by the server from Blocks and Leases; no client sets it.
	Capacity *NodeCapacity // LeaseReclaim says whether the node releases leaked leases: LeaseReclaimContainerRuntime,
	// or "Off: <why>" when it cannot ask its container runtime (it then releases nothing).
	LeaseReclaim string
}

// LeaseReclaimContainerRuntime: the node's agent asks its container runtime (CRI
// ListPodSandbox) which pod sandboxes exist and releases leases held by none of them.
const LeaseReclaimContainerRuntime = "ContainerRuntime"

// LeaseReclaimOffPrefix starts a node entry's leaseReclaim when its agent releases no leases,
// followed by why (for example "Off: no container runtime endpoint").
const LeaseReclaimOffPrefix = "Off: "

// IPAM modes of a node entry.
const (
	// IPAMModeBlocks: the node hands out addresses from its blocks only.
	IPAMModeBlocks = "Blocks"
	// IPAMModeLegacy: the node hands out addresses from the whole prefix (before blocks).
	IPAMModeLegacy = "Legacy"
)

// ConditionReady is the condition type that says whether the Network is realised.
const ConditionReady = "Ready"

// ConditionAddressesExhausted is the condition type that says whether some node needs an address
// block of the Network and none is left. The server derives it from the node entries: True when
// an entry's reason is ReasonAddressesExhausted (the reason an agent reports when its block claim
// answers 409 AddressesExhausted), False otherwise.
const ConditionAddressesExhausted = "AddressesExhausted"

// ReasonAddressesExhausted is a node entry's reason when the node needs a block (its first, or
// another because its free addresses ran low) and the Network has none left; it is also the
// reason of a block claim's 409 and of the True AddressesExhausted condition: one name for one fact.
const ReasonAddressesExhausted = "AddressesExhausted"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NetworkList is a list of Networks.
type NetworkList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Network
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BlockAllocation lists the address blocks of one Network held by one node. The server alone
// writes it (through networks/blockclaims); its name is <network>.<node>.
type BlockAllocation struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// Network is the name of the Network, in the same namespace.
	Network string
	// NetworkUID is the UID of the Network incarnation the blocks belong to.
	NetworkUID string
	// NodeName is the node that holds the blocks.
	NodeName string
	// Blocks are the node's blocks, in claim order.
	Blocks []Block
}

// Block is one address block of a node.
type Block struct {
	// CIDR is the block's prefix, inside the Network's.
	CIDR string
	// ClaimedAt is when the node claimed it.
	ClaimedAt metav1.Time
	// Origin says why the block was given (BlockOriginClaimed or BlockOriginCoversLeases).
	Origin string
}

// Origins of a block.
const (
	// BlockOriginClaimed: a fresh block picked by the server.
	BlockOriginClaimed = "Claimed"
	// BlockOriginCoversLeases: a block covering addresses the node leased before blocks existed.
	BlockOriginCoversLeases = "CoversLeases"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BlockAllocationList is a list of BlockAllocations.
type BlockAllocationList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []BlockAllocation
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BlockClaim asks the server for a block of a Network for a node (networks/blockclaims).
type BlockClaim struct {
	metav1.TypeMeta
	metav1.ObjectMeta

	// NodeName is the node that claims a block.
	NodeName string
	// Cover are addresses the node leased before it had blocks, which its blocks must cover.
	Cover []string
}
