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

package v1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// +genclient
// +genclient:method=ClaimBlocks,verb=create,subresource=blockclaims,input=BlockClaim,result=BlockAllocation
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Network is an IP network (a prefix and its gateway) that the bundled controller realises as a
// bridge and a CNI configuration on every node.
type Network struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Spec is the desired network.
	// +optional
	Spec NetworkSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// Status is the network as last observed by the controllers. Read-only for clients.
	// +optional
	Status NetworkStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// NetworkSpec is the desired state of a Network.
type NetworkSpec struct {
	// CIDR is the network prefix in canonical form, IPv4 ("10.0.0.0/24") or IPv6
	// ("fd00:1::/64"). The host bits must be zero and the prefix must leave room for a gateway
	// (at most /30 for IPv4, /126 for IPv6). No two Networks may overlap. Required unless
	// prefixLength is set, in which case the server allocates a free prefix from its pools.
	// Immutable once set.
	// +optional
	CIDR string `json:"cidr,omitempty" protobuf:"bytes,1,opt,name=cidr"`
	// Gateway is the address of the network's gateway: an address of the same family inside
	// CIDR, neither the network address nor the IPv4 broadcast address. Defaults to the first
	// usable address of CIDR.
	// +optional
	Gateway string `json:"gateway,omitempty" protobuf:"bytes,2,opt,name=gateway"`
	// PrefixLength asks the server to allocate a free prefix of this length (for example 24)
	// from its pools when cidr is empty. When cidr is set, it must equal cidr's prefix length.
	// +optional
	PrefixLength int32 `json:"prefixLength,omitempty" protobuf:"varint,3,opt,name=prefixLength"`
	// NodeSelector selects the nodes the Network is realised on, by their labels; nil or empty
	// selects every node. Mutable: a node that stops being selected drains and gives back its
	// blocks once its pods are gone.
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty" protobuf:"bytes,4,opt,name=nodeSelector"`
	// DefaultRoute, when true, gives pods a default route through the gateway. Defaults to false:
	// pods reach only the Network's prefix through it.
	// +optional
	DefaultRoute *bool `json:"defaultRoute,omitempty" protobuf:"varint,5,opt,name=defaultRoute"`
}

// NetworkStatus is the observed state of a Network.
type NetworkStatus struct {
	// ObservedGeneration is the metadata.generation the status was computed for; with entries in
	// nodes, the lowest generation a node has acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,1,opt,name=observedGeneration"`
	// Conditions describe the network's state. The "Ready" condition is true when the network
	// is realised at the current generation on every node in nodes.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +patchMergeKey=type
	// +patchStrategy=merge
	Conditions []metav1.Condition `json:"conditions,omitempty" patchStrategy:"merge" patchMergeKey:"type" protobuf:"bytes,2,rep,name=conditions"`
	// Nodes holds one entry per node whose controller realises the Network; each node's
	// controller owns its own entry (server-side apply with a field manager per node). When
	// there are entries, the server derives observedGeneration and the Ready condition from them.
	// +optional
	// +listType=map
	// +listMapKey=nodeName
	// +patchMergeKey=nodeName
	// +patchStrategy=merge
	Nodes []NetworkNodeStatus `json:"nodes,omitempty" patchStrategy:"merge" patchMergeKey:"nodeName" protobuf:"bytes,3,rep,name=nodes"`
	// VNI is the VXLAN network identifier of the Network's segment, unique in the cluster and
	// assigned by the server (0: not yet). Clients cannot set it.
	// +optional
	VNI int32 `json:"vni,omitempty" protobuf:"varint,4,opt,name=vni"`
	// Capacity counts the Network's addresses. The server derives it from spec.cidr,
	// spec.gateway and nodes on every status write; a value a client sends is replaced.
	// +optional
	Capacity *NetworkCapacity `json:"capacity,omitempty" protobuf:"bytes,5,opt,name=capacity"`
}

// NetworkCapacity counts the addresses of a Network's family. Each count is a base-10 integer in
// a string, exact for any prefix: an IPv6 /64 has 2^64-2 usable addresses, more than an int64
// (or a resource.Quantity, whose exactness stops at 2^63-1) holds.
type NetworkCapacity struct {
	// Total is the number of usable addresses of spec.cidr: every address but the network
	// address, the IPv4 broadcast address and the gateway.
	// +optional
	Total string `json:"total,omitempty" protobuf:"bytes,1,opt,name=total"`
	// Allocated is the number of usable addresses inside the blocks the nodes report
	// (nodes[].blocks, each address counted once).
	// +optional
	Allocated string `json:"allocated,omitempty" protobuf:"bytes,2,opt,name=allocated"`
	// Used is the number of addresses leased to pods: the sum of nodes[].leases. Absent
	// (unknown) while any node entry does not report its leases, see nodesWithoutLeases.
	// +optional
	Used string `json:"used,omitempty" protobuf:"bytes,3,opt,name=used"`
	// Available is total - used: the addresses pods could still get, taking blocks as needed.
	// Absent when used is.
	// +optional
	Available string `json:"available,omitempty" protobuf:"bytes,4,opt,name=available"`
	// NodesWithoutLeases is the number of node entries that do not report leases; while it is
	// not zero, used and available are unknown and absent.
	// +optional
	NodesWithoutLeases int32 `json:"nodesWithoutLeases,omitempty" protobuf:"varint,5,opt,name=nodesWithoutLeases"`
}

// NodeCapacity counts one node's addresses of a Network, as base-10 integers in strings.
type NodeCapacity struct {
	// Allocated is the number of usable addresses of spec.cidr inside the node's blocks.
	// +optional
	Allocated string `json:"allocated,omitempty" protobuf:"bytes,1,opt,name=allocated"`
	// Used is the number of addresses leased to pods on the node (its leases); absent when the
	// node does not report leases.
	// +optional
	Used string `json:"used,omitempty" protobuf:"bytes,2,opt,name=used"`
}

// NetworkNodeStatus is one node's report on a Network.
type NetworkNodeStatus struct {
	// NodeName is the node this entry is about.
	// +required
	NodeName string `json:"nodeName" protobuf:"bytes,1,opt,name=nodeName"`
	// Bridge is the name of the Network's bridge on the node.
	// +optional
	Bridge string `json:"bridge,omitempty" protobuf:"bytes,2,opt,name=bridge"`
	// Ready is true when the bridge and the CNI configuration match the spec.
	Ready bool `json:"ready" protobuf:"varint,3,opt,name=ready"`
	// Reason is a CamelCase word saying why the Network is not ready on the node.
	// +optional
	Reason string `json:"reason,omitempty" protobuf:"bytes,4,opt,name=reason"`
	// Message says in words what the node's controller found.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,5,opt,name=message"`
	// ObservedGeneration is the metadata.generation the node last acted on.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,6,opt,name=observedGeneration"`
	// Attachments is the number of pods attached to the Network on the node (ports of its
	// bridge). A Network being deleted keeps its finalizer samplecrd.k8s.io/network-protection,
	// and the node its bridge and CNI configuration, while any node reports attachments.
	// +optional
	Attachments int32 `json:"attachments,omitempty" protobuf:"varint,7,opt,name=attachments"`
	// UnderlayAddress is the node's address on the network between nodes, where its VXLAN peers
	// send the Network's segment.
	// +optional
	UnderlayAddress string `json:"underlayAddress,omitempty" protobuf:"bytes,8,opt,name=underlayAddress"`
	// VXLAN is the name of the Network's VXLAN device on the node.
	// +optional
	VXLAN string `json:"vxlan,omitempty" protobuf:"bytes,9,opt,name=vxlan"`
	// Blocks are the address blocks the node's CNI configuration hands out addresses from: a
	// subset of the blocks of the node's BlockAllocation, inside spec.cidr.
	// +optional
	// +listType=set
	Blocks []string `json:"blocks,omitempty" protobuf:"bytes,10,rep,name=blocks"`
	// MTU is the MTU of the Network's bridge, VXLAN device and pods on the node.
	// +optional
	MTU int32 `json:"mtu,omitempty" protobuf:"varint,11,opt,name=mtu"`
	// IPAMMode is how the node hands out addresses: "Blocks" (from its blocks only) or "Legacy"
	// (from the whole prefix, before the node had blocks).
	// +optional
	IPAMMode string `json:"ipamMode,omitempty" protobuf:"bytes,12,opt,name=ipamMode"`
	// Leases is the number of addresses leased to pods on the node. Absent means unknown, never zero.
	// +optional
	Leases *int32 `json:"leases,omitempty" protobuf:"varint,13,opt,name=leases"`
	// Capacity counts the node's addresses. The server derives it from blocks and leases on every
	// status write; a value a client sends is replaced.
	// +optional
	Capacity *NodeCapacity `json:"capacity,omitempty" protobuf:"bytes,14,opt,name=capacity"`
	// LeaseReclaim says whether the node's agent releases leases whose pod sandbox no longer
	// exists: "ContainerRuntime" (it asks the node's container runtime which sandboxes exist),
	// or "Off: <why>" (it cannot ask, so it releases nothing). Absent: the agent does not say.
	// +optional
	LeaseReclaim string `json:"leaseReclaim,omitempty" protobuf:"bytes,15,opt,name=leaseReclaim"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NetworkList is a list of Networks.
type NetworkList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Items is the list of Networks.
	Items []Network `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +genclient:onlyVerbs=get,list,watch
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BlockAllocation lists the address blocks of one Network that one node holds; the node hands
// out pod addresses from them. There is one per Network and node, named <network>.<node>. Only
// the server writes it: a node claims blocks through networks/{name}/blockclaims, and the server
// releases them. Create, update, patch and delete answer 405 Method Not Allowed.
type BlockAllocation struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Network is the name of the Network (in the same namespace) the blocks belong to.
	Network string `json:"network" protobuf:"bytes,2,opt,name=network"`
	// NetworkUID is the UID of that Network: a Network deleted and created again is another one.
	NetworkUID string `json:"networkUID" protobuf:"bytes,3,opt,name=networkUID"`
	// NodeName is the node holding the blocks.
	NodeName string `json:"nodeName" protobuf:"bytes,4,opt,name=nodeName"`
	// Blocks are the node's blocks, in the order they were claimed. No two blocks of a Network
	// overlap, and none contains the Network's gateway.
	// +optional
	// +listType=atomic
	Blocks []Block `json:"blocks,omitempty" protobuf:"bytes,5,rep,name=blocks"`
}

// Block is one address block of a node.
type Block struct {
	// CIDR is the block, a prefix inside the Network's spec.cidr.
	CIDR string `json:"cidr" protobuf:"bytes,1,opt,name=cidr"`
	// ClaimedAt is when the block was given to the node.
	// +optional
	ClaimedAt metav1.Time `json:"claimedAt,omitempty" protobuf:"bytes,2,opt,name=claimedAt"`
	// Origin is why the block was given: "Claimed" (a free block the server picked) or
	// "CoversLeases" (a block around addresses the node leased before it had blocks).
	// +optional
	Origin string `json:"origin,omitempty" protobuf:"bytes,3,opt,name=origin"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BlockAllocationList is a list of BlockAllocations.
type BlockAllocationList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// Items is the list of BlockAllocations.
	Items []BlockAllocation `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BlockClaim is what a node posts to networks/{name}/blockclaims to be given a block of the
// Network; the answer is the node's BlockAllocation after the claim.
type BlockClaim struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata; metadata.name, when set, must be the Network's name.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// NodeName is the node that claims a block.
	NodeName string `json:"nodeName" protobuf:"bytes,2,opt,name=nodeName"`
	// Cover are addresses the node leased before it had blocks; its blocks are chosen to
	// contain them. Used once, when a node moves from the whole prefix to blocks.
	// +optional
	// +listType=atomic
	Cover []string `json:"cover,omitempty" protobuf:"bytes,3,rep,name=cover"`
}
