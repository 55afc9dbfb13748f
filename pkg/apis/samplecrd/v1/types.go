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
