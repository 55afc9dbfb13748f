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
}

// ConditionReady is the condition type that says whether the Network is realised.
const ConditionReady = "Ready"

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NetworkList is a list of Networks.
type NetworkList struct {
	metav1.TypeMeta
	metav1.ListMeta

	Items []Network
}
