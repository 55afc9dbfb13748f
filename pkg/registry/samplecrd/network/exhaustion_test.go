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
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func TestDeriveExhaustion(t *testing.T) {
	node := func(name, reason string) samplecrd.NetworkNodeStatus {
		return samplecrd.NetworkNodeStatus{NodeName: name, Ready: reason == "", ObservedGeneration: 2, Reason: reason, Message: "m"}
	}
	for name, tc := range map[string]struct {
		nodes  []samplecrd.NetworkNodeStatus
		status metav1.ConditionStatus // "" = no condition
		reason string
		msg    string
	}{
		"no entries: no condition": {},
		"none exhausted": {nodes: []samplecrd.NetworkNodeStatus{node("a", ""), node("b", "Reconciling")},
			status: metav1.ConditionFalse, reason: ReasonAddressesAvailable, msg: "none of the 2 node(s) reporting lacks an address block"},
		"two exhausted, named in order": {nodes: []samplecrd.NetworkNodeStatus{node("z", samplecrd.ReasonAddressesExhausted), node("a", ""),
			node("m", samplecrd.ReasonAddressesExhausted)},
			status: metav1.ConditionTrue, reason: samplecrd.ReasonAddressesExhausted, msg: "no address block is left for 2 node(s) that need one: m, z"},
		// A node short of its headroom, with addresses still free: ready, and still warned of.
		"a ready entry with the reason": {nodes: []samplecrd.NetworkNodeStatus{{NodeName: "a", Ready: true, ObservedGeneration: 2,
			Reason: samplecrd.ReasonAddressesExhausted, Message: "below its headroom"}},
			status: metav1.ConditionTrue, reason: samplecrd.ReasonAddressesExhausted, msg: "no address block is left for 1 node(s) that need one: a"},
	} {
		t.Run(name, func(t *testing.T) {
			n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Generation: 2}, Status: samplecrd.NetworkStatus{Nodes: tc.nodes,
				// What a client sent: replaced, or removed without entries.
				Conditions: []metav1.Condition{{Type: samplecrd.ConditionAddressesExhausted, Status: metav1.ConditionTrue, Reason: "Client"}}}}
			deriveExhaustion(n)
			c := meta.FindStatusCondition(n.Status.Conditions, samplecrd.ConditionAddressesExhausted)
			if tc.status == "" {
				if c != nil {
					t.Fatalf("condition %+v, want none", c)
				}
				return
			}
			if c == nil || c.Status != tc.status || c.Reason != tc.reason || c.Message != tc.msg || c.ObservedGeneration != 2 {
				t.Fatalf("condition %+v, want %s %s %q", c, tc.status, tc.reason, tc.msg)
			}
		})
	}
}

// TestStatusWriteCannotSetExhaustion: a status write's AddressesExhausted condition is the
// server's, whatever the client sends; its lastTransitionTime stays while its status holds.
func TestStatusWriteCannotSetExhaustion(t *testing.T) {
	s := NewStatusStrategy(testScheme())
	since := metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	stored := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "n", Generation: 1}, Spec: samplecrd.NetworkSpec{CIDR: "10.0.0.0/28", Gateway: "10.0.0.1"},
		Status: samplecrd.NetworkStatus{
			Nodes: []samplecrd.NetworkNodeStatus{{NodeName: "a", ObservedGeneration: 1, Reason: samplecrd.ReasonAddressesExhausted}},
			Conditions: []metav1.Condition{{Type: samplecrd.ConditionAddressesExhausted, Status: metav1.ConditionTrue,
				Reason: samplecrd.ReasonAddressesExhausted, LastTransitionTime: since}}}}

	// The client says False and keeps the exhausted entry: True stays, from the same time.
	update := stored.DeepCopy()
	update.Status.Conditions[0] = metav1.Condition{Type: samplecrd.ConditionAddressesExhausted, Status: metav1.ConditionFalse, Reason: "Fine",
		LastTransitionTime: metav1.Now()}
	s.PrepareForUpdate(context.Background(), update, stored)
	s.Canonicalize(update)
	c := meta.FindStatusCondition(update.Status.Conditions, samplecrd.ConditionAddressesExhausted)
	if c == nil || c.Status != metav1.ConditionTrue || !c.LastTransitionTime.Equal(&since) {
		t.Fatalf("after a client's False: %+v, want True since %v", c, since)
	}

	// The client drops the condition and the entry's reason clears: False, a new transition.
	update = stored.DeepCopy()
	update.Status.Conditions = nil
	update.Status.Nodes[0].Reason, update.Status.Nodes[0].Ready = "", true
	s.PrepareForUpdate(context.Background(), update, stored)
	s.Canonicalize(update)
	c = meta.FindStatusCondition(update.Status.Conditions, samplecrd.ConditionAddressesExhausted)
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonAddressesAvailable || c.LastTransitionTime.Equal(&since) {
		t.Fatalf("after the entry cleared: %+v, want False (AddressesAvailable) with a new transition time", c)
	}
}

func TestUsedCrossing(t *testing.T) {
	net := func(uid, total, used string) *samplecrd.Network {
		n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{UID: types.UID("uid" + uid)}}
		if total != "" {
			n.Status.Capacity = &samplecrd.NetworkCapacity{Total: total, Used: used}
		}
		return n
	}
	for name, tc := range map[string]struct {
		before, after *samplecrd.Network
		want          Crossing
	}{
		// 80% of 13 is 10.4: 10 is below, 11 above.
		"below to below":             {net("", "13", "9"), net("", "13", "10"), NoCrossing},
		"below to above":             {net("", "13", "10"), net("", "13", "11"), CrossedUp},
		"above to above":             {net("", "13", "11"), net("", "13", "13"), NoCrossing},
		"above to below":             {net("", "13", "11"), net("", "13", "3"), CrossedDown},
		"exactly 80% is above":       {net("", "10", "7"), net("", "10", "8"), CrossedUp},
		"unknown before":             {net("", "13", ""), net("", "13", "12"), NoCrossing},
		"unknown after":              {net("", "13", "12"), net("", "13", ""), NoCrossing},
		"no capacity":                {net("", "", ""), net("", "13", "12"), NoCrossing},
		"total 0":                    {net("", "0", "0"), net("", "0", "1"), NoCrossing},
		"another Network, same name": {net("1", "13", "1"), net("2", "13", "12"), NoCrossing},
		// Exact beyond float64: a /64's 2^64-2 addresses, 80% is 14757395258967641291.2.
		"IPv6 below by one": {net("", "18446744073709551614", "1"), net("", "18446744073709551614", "14757395258967641291"), NoCrossing},
		"IPv6 at threshold": {net("", "18446744073709551614", "1"), net("", "18446744073709551614", "14757395258967641292"), CrossedUp},
	} {
		t.Run(name, func(t *testing.T) {
			if got := UsedCrossing(tc.before, tc.after); got != tc.want {
				t.Errorf("UsedCrossing = %v, want %v", got, tc.want)
			}
		})
	}
}
