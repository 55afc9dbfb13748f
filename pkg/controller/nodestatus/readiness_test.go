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
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus/nodestatustest"
)

var readyNode = nodestatustest.Node

func TestNodeReadiness(t *testing.T) {
	for _, tc := range []struct {
		node  *corev1.Node
		ready bool
		why   string
	}{
		{readyNode("a", corev1.ConditionTrue, "KubeletReady"), true, ""},
		{readyNode("a", corev1.ConditionUnknown, "NodeStatusUnknown"), false, "NodeStatusUnknown"},
		{readyNode("a", corev1.ConditionFalse, "KubeletNotReady"), false, "KubeletNotReady"},
		{readyNode("a", corev1.ConditionFalse, ""), false, "Ready=False"},
		{readyNode("a", "", ""), false, "no Ready condition"},
	} {
		if ready, why := NodeReadiness(tc.node); ready != tc.ready || why != tc.why {
			t.Errorf("NodeReadiness(%+v) = %v, %q; want %v, %q", tc.node.Status.Conditions, ready, why, tc.ready, tc.why)
		}
	}
}

func TestTrimNode(t *testing.T) {
	node := readyNode("n", corev1.ConditionTrue, "KubeletReady")
	node.ResourceVersion, node.Labels = "7", map[string]string{"a": "b"}
	node.Status.Images = []corev1.ContainerImage{{Names: []string{"big"}, SizeBytes: 1}}
	got, err := TrimNode(node)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := got.(*corev1.Node)
	if trimmed.Name != "n" || trimmed.ResourceVersion != "7" || trimmed.Labels["a"] != "b" || trimmed.Status.Images != nil ||
		len(trimmed.Status.Conditions) != 1 || trimmed.Status.Conditions[0].Type != corev1.NodeReady {
		t.Errorf("trimmed: %+v", trimmed)
	}
	if ready, _ := NodeReadiness(trimmed); !ready {
		t.Error("trimming lost readiness")
	}
}
