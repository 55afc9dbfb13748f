// Package nodestatustest builds Node objects for the tests of the packages that follow a Node's
// readiness.
package nodestatustest

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Node returns a Node called name whose Ready condition has status and reason (beside a
// condition of another type); with status "" it has no conditions at all.
func Node(name string, status corev1.ConditionStatus, reason string) *corev1.Node {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if status != "" {
		node.Status.Conditions = []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
			{Type: corev1.NodeReady, Status: status, Reason: reason, Message: "a message that may change on every update"},
		}
	}
	return node
}
