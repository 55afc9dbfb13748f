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

// Package nodestatus is what the network controller, the node agent and the server's node
// lifecycle loop share about a Network's status.nodes: each node's entry (marked while its Node
// is not Ready, applied and withdrawn under the node's own field manager), the Node readiness that
// marks it, and the name of the protection finalizer that the entries' attachments hold (the
// server adds and removes it).
package nodestatus

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	applyv1 "github.com/samplecrd/network-apiserver/pkg/generated/applyconfiguration/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
)

// FieldManagerPrefix is the prefix of each node's field manager for status.nodes.
const FieldManagerPrefix = "network-controller/"

// ReasonNodeObjectNotReady is a node's reason in status.nodes while its Node object is not Ready.
const ReasonNodeObjectNotReady = "NodeNotReady"

// MarkNodeNotReady returns entry as it reads while its node is not Ready for the reason why: not
// ready, reason NodeNotReady, a message naming the node; the bridge, the generation and the
// attachments stay as the node's agent last reported them. It depends only on those and on why,
// so every writer (the agent, each server replica) writes the same entry, and marking a marked
// entry changes nothing.
func MarkNodeNotReady(entry v1.NetworkNodeStatus, why string) v1.NetworkNodeStatus {
	entry.Ready = false
	entry.Reason = ReasonNodeObjectNotReady
	entry.Message = fmt.Sprintf("node %s is not Ready (%s); bridge, generation and attachments as its agent last reported", entry.NodeName, why)
	return entry
}

// ApplyNodeEntry applies entry as status.nodes' entry of its node under that node's field manager
// (forcing, so the entry stays owned by the node whoever writes it) and returns the Network
// afterwards, nil when it is gone. With resourceVersion set, the apply fails with a conflict
// when the Network has changed since.
func ApplyNodeEntry(ctx context.Context, client versioned.Interface, n *v1.Network, entry v1.NetworkNodeStatus, resourceVersion string) (*v1.Network, error) {
	node := applyv1.NetworkNodeStatus().
		WithNodeName(entry.NodeName).
		WithBridge(entry.Bridge).
		WithReady(entry.Ready).
		WithReason(entry.Reason).
		WithMessage(entry.Message).
		WithObservedGeneration(entry.ObservedGeneration).
		WithAttachments(entry.Attachments)
	if entry.UnderlayAddress != "" {
		node.WithUnderlayAddress(entry.UnderlayAddress)
	}
	if entry.VXLAN != "" {
		node.WithVXLAN(entry.VXLAN)
	}
	if len(entry.Blocks) > 0 {
		node.WithBlocks(entry.Blocks...)
	}
	if entry.MTU != 0 {
		node.WithMTU(entry.MTU)
	}
	if entry.IPAMMode != "" {
		node.WithIPAMMode(entry.IPAMMode)
	}
	if entry.Leases != nil {
		node.WithLeases(*entry.Leases)
	}
	if entry.LeaseReclaim != "" {
		node.WithLeaseReclaim(entry.LeaseReclaim)
	}
	apply := applyv1.Network(n.Name, n.Namespace).WithStatus(applyv1.NetworkStatus().WithNodes(node))
	if resourceVersion != "" {
		apply.WithResourceVersion(resourceVersion)
	}
	return ApplyAsNode(ctx, client, n.Namespace, apply, entry.NodeName)
}

// WithdrawNodeEntry removes node's entry from status.nodes: it applies nothing under the node's
// field manager, so what that manager owned goes. It returns the Network afterwards (n itself
// when there was no entry, nil when the Network is gone).
func WithdrawNodeEntry(ctx context.Context, client versioned.Interface, n *v1.Network, node, resourceVersion string) (*v1.Network, error) {
	if FindEntry(n, node) == nil {
		return n, nil
	}
	apply := applyv1.Network(n.Name, n.Namespace)
	if resourceVersion != "" {
		apply.WithResourceVersion(resourceVersion)
	}
	return ApplyAsNode(ctx, client, n.Namespace, apply, node)
}

// ApplyAsNode applies apply to the status of a Network in namespace under node's field manager,
// forcing, and returns the Network afterwards, nil when it is gone.
func ApplyAsNode(ctx context.Context, client versioned.Interface, namespace string, apply *applyv1.NetworkApplyConfiguration, node string) (*v1.Network, error) {
	updated, err := client.SamplecrdV1().Networks(namespace).ApplyStatus(ctx, apply,
		metav1.ApplyOptions{FieldManager: FieldManagerPrefix + node, Force: true})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return updated, err
}

// FindEntry returns node's entry in n's status.nodes, or nil.
func FindEntry(n *v1.Network, node string) *v1.NetworkNodeStatus {
	for i := range n.Status.Nodes {
		if n.Status.Nodes[i].NodeName == node {
			return &n.Status.Nodes[i]
		}
	}
	return nil
}

// SameReport says whether a node's entry already says what it would report: every field but the
// capacity, which the server derives from the entry and no node writes.
func SameReport(current, report v1.NetworkNodeStatus) bool {
	current.Capacity, report.Capacity = nil, nil
	return apiequality.Semantic.DeepEqual(current, report)
}
