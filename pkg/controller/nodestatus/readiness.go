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

package nodestatus

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

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

// TrimNode is an informer transform that keeps of a Node only what readiness and Networks'
// spec.nodeSelector need: its name, identity, labels and Ready condition. Nodes are large
// (images, addresses, capacity), and every network-apiserver replica holds all of them.
func TrimNode(obj interface{}) (interface{}, error) {
	node, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	trimmed := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name: node.Name, UID: node.UID, ResourceVersion: node.ResourceVersion,
		CreationTimestamp: node.CreationTimestamp, DeletionTimestamp: node.DeletionTimestamp,
		Labels: node.Labels,
	}}
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			trimmed.Status.Conditions = []corev1.NodeCondition{c}
		}
	}
	return trimmed, nil
}
