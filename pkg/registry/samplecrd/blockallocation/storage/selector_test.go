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

package storage

import (
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// TestClaimSelectorCheck: a claim for a node whose labels the server knows and the selector does
// not match is refused with 403 naming the node; unknown nodes (standalone, or not yet in the
// informer) and Networks without a selector go ahead.
func TestClaimSelectorCheck(t *testing.T) {
	nodes := map[string]labels.Set{"node1": {"zone": "a"}, "node3": {"zone": "b"}, "bare": nil}
	r := &ClaimREST{NodeLabels: func(node string) (labels.Set, bool) {
		set, ok := nodes[node]
		return set, ok
	}}
	n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "web"}}
	for _, node := range []string{"node1", "node3", "bare", "unknown"} {
		if err := r.checkSelected(n, node); err != nil {
			t.Errorf("no selector, %s: %v", node, err)
		}
	}
	n.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	for node, allowed := range map[string]bool{"node1": true, "node3": false, "bare": false, "unknown": true} {
		err := r.checkSelected(n, node)
		switch {
		case allowed && err != nil:
			t.Errorf("%s refused: %v", node, err)
		case !allowed && !apierrors.IsForbidden(err):
			t.Errorf("%s: %v, want 403", node, err)
		case !allowed && !strings.Contains(err.Error(), node+" is not selected by spec.nodeSelector"):
			t.Errorf("%s: message %q", node, err)
		}
	}
	// Standalone: no Node labels at all; the agent's rule stands alone.
	r.NodeLabels = nil
	if err := r.checkSelected(n, "node3"); err != nil {
		t.Errorf("standalone refused: %v", err)
	}
}
