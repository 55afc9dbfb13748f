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
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func TestDeriveReadiness(t *testing.T) {
	node := func(name string, ready bool, gen int64, reason, msg string) samplecrd.NetworkNodeStatus {
		return samplecrd.NetworkNodeStatus{NodeName: name, Ready: ready, ObservedGeneration: gen, Reason: reason, Message: msg}
	}
	for name, tc := range map[string]struct {
		nodes        []samplecrd.NetworkNodeStatus
		status       metav1.ConditionStatus
		reason       string
		msgHas       string
		observedGen  int64
		noConditions bool
	}{
		"no nodes leaves status alone": {noConditions: true},
		"all ready and current":        {nodes: []samplecrd.NetworkNodeStatus{node("a", true, 3, "", ""), node("b", true, 3, "", "")}, status: metav1.ConditionTrue, reason: ReasonRealized, msgHas: "2 node", observedGen: 3},
		"one behind":                   {nodes: []samplecrd.NetworkNodeStatus{node("a", true, 3, "", ""), node("b", true, 2, "", "")}, status: metav1.ConditionFalse, reason: ReasonReconciling, msgHas: "on b", observedGen: 2},
		"different MTUs": {nodes: []samplecrd.NetworkNodeStatus{{NodeName: "a", Ready: true, ObservedGeneration: 3, MTU: 1450},
			{NodeName: "b", Ready: true, ObservedGeneration: 3, MTU: 1500}, {NodeName: "c", Ready: true, ObservedGeneration: 3}},
			status: metav1.ConditionFalse, reason: ReasonMTUMismatch, msgHas: "1450 on a; 1500 on b", observedGen: 3},
		"same MTU, one unknown": {nodes: []samplecrd.NetworkNodeStatus{{NodeName: "a", Ready: true, ObservedGeneration: 3, MTU: 1450},
			{NodeName: "b", Ready: true, ObservedGeneration: 3}}, status: metav1.ConditionTrue, reason: ReasonRealized, msgHas: "2 node", observedGen: 3},
		"a draining node is no failure": {nodes: []samplecrd.NetworkNodeStatus{node("a", true, 3, "", ""), node("c", false, 3, ReasonNotSelected, "not selected")},
			status: metav1.ConditionTrue, reason: ReasonRealized, msgHas: "realised on 1 node(s); draining on c", observedGen: 3},
		"only draining nodes": {nodes: []samplecrd.NetworkNodeStatus{node("c", false, 2, ReasonNotSelected, "not selected")},
			status: metav1.ConditionFalse, reason: ReasonNotSelected, msgHas: "draining on c", observedGen: 3},
		"a node without its controller is no failure": {nodes: []samplecrd.NetworkNodeStatus{node("a", true, 3, "", ""),
			node("d", false, 3, samplecrd.ReasonControllerNeedsNetAdmin, "needs CAP_NET_ADMIN")},
			status: metav1.ConditionTrue, reason: ReasonRealized, msgHas: "realised on 1 node(s); no controller running on 1 node(s): d: needs CAP_NET_ADMIN", observedGen: 3},
		"only nodes without their controller": {nodes: []samplecrd.NetworkNodeStatus{node("e", false, 3, samplecrd.ReasonControllerNeedsSysAdmin, "needs CAP_SYS_ADMIN"),
			node("d", false, 1, samplecrd.ReasonControllerNeedsNetAdmin, "needs CAP_NET_ADMIN")},
			status: metav1.ConditionUnknown, reason: samplecrd.ReasonControllerNeedsNetAdmin, msgHas: "d: needs CAP_NET_ADMIN; e: needs CAP_SYS_ADMIN", observedGen: 3},
		"a failed node still fails beside one without its controller": {nodes: []samplecrd.NetworkNodeStatus{node("a", false, 3, "InterfaceNotOurs", "dummy"),
			node("d", false, 3, samplecrd.ReasonControllerNeedsNetAdmin, "needs CAP_NET_ADMIN")},
			status: metav1.ConditionFalse, reason: "InterfaceNotOurs", msgHas: "not ready on 1 of 1 nodes: a: dummy; no controller running on 1 node(s)", observedGen: 3},
		"a ready node short of headroom is ready": {nodes: []samplecrd.NetworkNodeStatus{node("a", true, 3, samplecrd.ReasonAddressesExhausted, "below its headroom"), node("b", true, 3, "", "")},
			status: metav1.ConditionTrue, reason: ReasonRealized, msgHas: "realised on 2 node(s)", observedGen: 3},
		"one failed wins with its reason": {nodes: []samplecrd.NetworkNodeStatus{node("b", true, 2, "", ""), node("a", false, 3, "InterfaceNotOurs", "nwabc is a dummy")},
			status: metav1.ConditionFalse, reason: "InterfaceNotOurs", msgHas: "a: nwabc is a dummy", observedGen: 2},
	} {
		t.Run(name, func(t *testing.T) {
			n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Generation: 3}, Status: samplecrd.NetworkStatus{Nodes: tc.nodes}}
			deriveReadiness(n)
			c := meta.FindStatusCondition(n.Status.Conditions, samplecrd.ConditionReady)
			if tc.noConditions {
				if c != nil || n.Status.ObservedGeneration != 0 {
					t.Fatalf("status changed without nodes: %+v", n.Status)
				}
				return
			}
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || !strings.Contains(c.Message, tc.msgHas) || c.ObservedGeneration != 3 {
				t.Fatalf("Ready = %+v, want %s/%s with %q", c, tc.status, tc.reason, tc.msgHas)
			}
			if n.Status.ObservedGeneration != tc.observedGen {
				t.Errorf("observedGeneration %d, want %d", n.Status.ObservedGeneration, tc.observedGen)
			}
		})
	}
}

func TestSpecChangeMakesReadyFalseUntilNodesCatchUp(t *testing.T) {
	old := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Spec: samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"},
		Status: samplecrd.NetworkStatus{Nodes: []samplecrd.NetworkNodeStatus{{NodeName: "a", Ready: true, ObservedGeneration: 1}}}}
	deriveReadiness(old)
	n := old.DeepCopy()
	n.Spec.Gateway = "10.0.0.2"
	NewStrategy(nil).PrepareForUpdate(t.Context(), n, old)
	if c := meta.FindStatusCondition(n.Status.Conditions, samplecrd.ConditionReady); n.Generation != 2 || c == nil || c.Reason != ReasonReconciling {
		t.Fatalf("after a spec change: generation %d, Ready %+v; want 2 and Reconciling", n.Generation, c)
	}
}
