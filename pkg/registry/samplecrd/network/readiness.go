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

package network

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// Reasons of the derived Ready condition.
const (
	ReasonRealized    = "Realized"
	ReasonReconciling = "Reconciling"
	// ReasonNodesNotReady: some node entry is not ready and gave no reason of its own.
	ReasonNodesNotReady = "NodeNotReady"
	// ReasonMTUMismatch: the nodes report different MTUs for the Network's segment (derived by
	// the server from the entries' mtu).
	ReasonMTUMismatch = "MTUMismatch"
	// ReasonNotSelected is a node entry's reason while the node drains a Network whose
	// spec.nodeSelector no longer selects it (and the condition's when only such nodes report).
	ReasonNotSelected = "NotSelected"
)

// deriveReadiness sets status.observedGeneration and the Ready condition from the node entries,
// so that clients see one truthful Ready whatever the number of nodes. Without node entries it
// leaves status as the client wrote it.
func deriveReadiness(n *samplecrd.Network) {
	nodes := n.Status.Nodes
	if len(nodes) == 0 {
		return
	}
	// A node draining the Network because spec.nodeSelector no longer selects it says
	// ready: false, but that is no failure of the Network: it is counted apart.
	// A node whose controller cannot run (no CAP_NET_ADMIN) says so in its entry; it realises
	// nothing, so it is counted apart too: Ready says Unknown when only such nodes report.
	var draining, unavailable []string
	var unavailableReason string
	nodes = slices.DeleteFunc(slices.Clone(nodes), func(node samplecrd.NetworkNodeStatus) bool {
		switch {
		case node.Reason == ReasonNotSelected:
			draining = append(draining, node.NodeName)
			return true
		case samplecrd.ControllerUnavailable(node.Reason):
			unavailable = append(unavailable, fmt.Sprintf("%s: %s", node.NodeName, node.Message))
			if unavailableReason == "" || node.Reason < unavailableReason {
				unavailableReason = node.Reason
			}
			return true
		}
		return false
	})
	slices.Sort(draining)
	slices.Sort(unavailable)
	if len(nodes) == 0 && len(draining) == 0 {
		n.Status.ObservedGeneration = n.Generation
		meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{Type: samplecrd.ConditionReady,
			ObservedGeneration: n.Generation, Status: metav1.ConditionUnknown, Reason: unavailableReason,
			Message: strings.Join(unavailable, "; ")})
		return
	}
	if len(nodes) == 0 {
		n.Status.ObservedGeneration = n.Generation
		meta.SetStatusCondition(&n.Status.Conditions, metav1.Condition{Type: samplecrd.ConditionReady,
			ObservedGeneration: n.Generation, Status: metav1.ConditionFalse, Reason: ReasonNotSelected,
			Message: "spec.nodeSelector selects none of the nodes reporting; draining on " + strings.Join(draining, ", ")})
		return
	}
	observed := nodes[0].ObservedGeneration
	var failed, behind []string
	reason := ""
	for _, node := range nodes {
		observed = min(observed, node.ObservedGeneration)
		switch {
		case !node.Ready:
			failed = append(failed, fmt.Sprintf("%s: %s", node.NodeName, node.Message))
			if reason == "" && node.Reason != "" {
				reason = node.Reason
			}
		case node.ObservedGeneration < n.Generation:
			behind = append(behind, node.NodeName)
		}
	}
	slices.Sort(failed)
	slices.Sort(behind)
	mtus := map[int32][]string{}
	for _, node := range nodes {
		if node.MTU != 0 {
			mtus[node.MTU] = append(mtus[node.MTU], node.NodeName)
		}
	}
	n.Status.ObservedGeneration = observed
	cond := metav1.Condition{Type: samplecrd.ConditionReady, ObservedGeneration: n.Generation}
	switch {
	case len(failed) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonNodesNotReady
		if reason != "" {
			cond.Reason = reason
		}
		cond.Message = fmt.Sprintf("not ready on %d of %d nodes: %s", len(failed), len(nodes), strings.Join(failed, "; "))
	case len(mtus) > 1:
		var parts []string
		for mtu, names := range mtus {
			slices.Sort(names)
			parts = append(parts, fmt.Sprintf("%d on %s", mtu, strings.Join(names, ", ")))
		}
		slices.Sort(parts)
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonMTUMismatch
		cond.Message = "the nodes' MTUs differ: " + strings.Join(parts, "; ")
	case len(behind) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonReconciling
		cond.Message = fmt.Sprintf("generation %d not yet realised on %s", n.Generation, strings.Join(behind, ", "))
	default:
		cond.Status, cond.Reason = metav1.ConditionTrue, ReasonRealized
		cond.Message = fmt.Sprintf("realised on %d node(s)", len(nodes))
	}
	if len(draining) > 0 {
		cond.Message += fmt.Sprintf("; draining on %s (not selected by spec.nodeSelector)", strings.Join(draining, ", "))
	}
	if len(unavailable) > 0 {
		cond.Message += fmt.Sprintf("; no controller running on %d node(s): %s", len(unavailable), strings.Join(unavailable, "; "))
	}
	meta.SetStatusCondition(&n.Status.Conditions, cond)
}
