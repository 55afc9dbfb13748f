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
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// NodeLabelsFunc returns the labels of the Node named node; known is false when the server cannot
// tell (standalone mode has no Nodes; in attached mode, a Node not (yet) in its informer).
type NodeLabelsFunc func(node string) (set labels.Set, known bool)

// checkSelected refuses a claim of n's blocks for a node n's spec.nodeSelector does not select
// (403), when r.NodeLabels knows the node's labels. When it does not, the claim goes ahead: the
// agent, which matches the selector itself before it claims, is then the only check.
func (r *ClaimREST) checkSelected(n *samplecrd.Network, node string) error {
	if n.Spec.NodeSelector == nil || r.NodeLabels == nil {
		return nil
	}
	selector, err := metav1.LabelSelectorAsSelector(n.Spec.NodeSelector)
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("stored network %s has an invalid spec.nodeSelector: %w", n.Name, err))
	}
	set, known := r.NodeLabels(node)
	if !known || selector.Matches(set) {
		return nil
	}
	return apierrors.NewForbidden(samplecrd.Resource("networks/blockclaims"), n.Name,
		fmt.Errorf("%s is not selected by spec.nodeSelector (%s)", node, selector))
}
