package network

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	applyv1 "github.com/samplecrd/network-apiserver/pkg/generated/applyconfiguration/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
)

// ReasonNodeNotReady is a node's reason in status.nodes while its Node is not Ready.
const ReasonNodeNotReady = "NodeNotReady"

// NodeReadiness says whether node is Ready and, when it is not, why in one word: the Ready
// condition's reason (NodeStatusUnknown once the kubelet stopped posting, say), else its status.
// Only the reason is used, not the condition's message: a kubelet may rewrite its message on every
// status update (durations), and each change would be written to every Network on the node.
func NodeReadiness(node *corev1.Node) (ready bool, why string) {
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return true, ""
		}
		if c.Reason != "" {
			return false, c.Reason
		}
		return false, "Ready=" + string(c.Status)
	}
	return false, "no Ready condition"
}

// MarkNodeNotReady returns entry as it reads while its node is not Ready for the reason why: not
// ready, reason NodeNotReady, a message naming the node; the bridge, the generation and the
// attachments stay as the node's agent last reported them. It depends only on those and on why,
// so every writer (the agent, each server replica) writes the same entry, and marking a marked
// entry changes nothing.
func MarkNodeNotReady(entry v1.NetworkNodeStatus, why string) v1.NetworkNodeStatus {
	entry.Ready = false
	entry.Reason = ReasonNodeNotReady
	entry.Message = fmt.Sprintf("node %s is not Ready (%s); bridge, generation and attachments as its agent last reported", entry.NodeName, why)
	return entry
}

// ApplyNodeEntry applies entry as status.nodes' entry of its node under that node's field manager
// (forcing, so the entry stays owned by the node whoever writes it) and returns the Network
// afterwards, nil when it is gone. With resourceVersion set, the apply fails with a conflict
// when the Network has changed since.
func ApplyNodeEntry(ctx context.Context, client versioned.Interface, n *v1.Network, entry v1.NetworkNodeStatus, resourceVersion string) (*v1.Network, error) {
	apply := applyv1.Network(n.Name, n.Namespace).WithStatus(applyv1.NetworkStatus().WithNodes(
		applyv1.NetworkNodeStatus().
			WithNodeName(entry.NodeName).
			WithBridge(entry.Bridge).
			WithReady(entry.Ready).
			WithReason(entry.Reason).
			WithMessage(entry.Message).
			WithObservedGeneration(entry.ObservedGeneration).
			WithAttachments(entry.Attachments)))
	if resourceVersion != "" {
		apply.WithResourceVersion(resourceVersion)
	}
	return applyStatus(ctx, client, n.Namespace, apply, entry.NodeName)
}

// WithdrawNodeEntry removes node's entry from status.nodes: it applies nothing under the node's
// field manager, so what that manager owned goes. It returns the Network afterwards (n itself
// when there was no entry, nil when the Network is gone).
func WithdrawNodeEntry(ctx context.Context, client versioned.Interface, n *v1.Network, node, resourceVersion string) (*v1.Network, error) {
	if findEntry(n, node) == nil {
		return n, nil
	}
	apply := applyv1.Network(n.Name, n.Namespace)
	if resourceVersion != "" {
		apply.WithResourceVersion(resourceVersion)
	}
	return applyStatus(ctx, client, n.Namespace, apply, node)
}

func applyStatus(ctx context.Context, client versioned.Interface, namespace string, apply *applyv1.NetworkApplyConfiguration, node string) (*v1.Network, error) {
	updated, err := client.SamplecrdV1().Networks(namespace).ApplyStatus(ctx, apply,
		metav1.ApplyOptions{FieldManager: FieldManagerPrefix + node, Force: true})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return updated, err
}

// findEntry returns node's entry in n's status.nodes, or nil.
func findEntry(n *v1.Network, node string) *v1.NetworkNodeStatus {
	for i := range n.Status.Nodes {
		if n.Status.Nodes[i].NodeName == node {
			return &n.Status.Nodes[i]
		}
	}
	return nil
}

// Releasable tells whether n, being deleted, carries ProtectionFinalizer and no node's entry
// reports attachments.
func Releasable(n *v1.Network) bool {
	return n.DeletionTimestamp != nil && releasable(n)
}

// Release removes ProtectionFinalizer from n with a patch conditional on n's resourceVersion.
func Release(ctx context.Context, client versioned.Interface, n *v1.Network) error {
	_, err := setFinalizer(ctx, client, n, false)
	return err
}

// nodeState is what the controller knows of its own Node.
type nodeState struct {
	// known is false until the Node has been seen (or when no Node is watched): report as usual.
	known bool
	// deleted: the Node was seen and then deleted; the node's entries are withdrawn.
	deleted bool
	// why the Node is not Ready; empty when it is Ready.
	why string
}

// TrimNode is an informer transform that keeps of a Node only what readiness needs: its name,
// identity and Ready condition. Nodes are large (images, addresses, capacity), and every
// network-apiserver replica holds all of them.
func TrimNode(obj interface{}) (interface{}, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion,
		CreationTimestamp: node.CreationTimestamp, DeletionTimestamp: node.DeletionTimestamp,
	}}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			trimmed.Status.Conditions = []corev1.NodeCondition{c}
		}
	}
	return trimmed, nil
}
