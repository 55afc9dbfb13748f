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
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

func zoneSelector(zone string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{"zone": zone}}
}

// TestSelectorMatching: nil and empty selectors select every node, a node without labels
// (standalone, no --node-labels) only those requiring none; the Node's labels count once the
// Node is seen, and a change of them requeues every Network.
func TestSelectorMatching(t *testing.T) {
	f := newFixture(t)
	c := f.controller
	for _, tc := range []struct {
		name     string
		selector *metav1.LabelSelector
		labels   labels.Set
		want     bool
	}{
		{"nil selects a node without labels", nil, nil, true},
		{"empty selects a node without labels", &metav1.LabelSelector{}, nil, true},
		{"matchLabels, no labels", zoneSelector("a"), nil, false},
		{"matchLabels, matching", zoneSelector("a"), labels.Set{"zone": "a", "rack": "1"}, true},
		{"matchLabels, other value", zoneSelector("a"), labels.Set{"zone": "b"}, false},
		{"NotIn, no labels", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "zone", Operator: metav1.LabelSelectorOpNotIn, Values: []string{"a"}}}}, nil, true},
		{"Exists, present", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "gpu", Operator: metav1.LabelSelectorOpExists}}}, labels.Set{"gpu": ""}, true},
		{"DoesNotExist, present", &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "gpu", Operator: metav1.LabelSelectorOpDoesNotExist}}}, labels.Set{"gpu": "x"}, false},
	} {
		c.opts.NodeLabels = tc.labels
		n := network("web", "10.1.0.0/24", "10.1.0.1", 1)
		n.Spec.NodeSelector = tc.selector
		if got, err := c.selected(n); err != nil || got != tc.want {
			t.Errorf("%s: selected = %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	bad := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	bad.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: "Near"}}}
	if _, err := c.selected(bad); err == nil || !strings.Contains(err.Error(), "spec.nodeSelector") {
		t.Errorf("an invalid selector: %v", err)
	}

	// Attached: the Node's labels replace --node-labels once it is seen.
	c.opts.NodeLabels = labels.Set{"zone": "a"}
	if err := f.indexer.Add(network("web", "10.1.0.0/24", "10.1.0.1", 1)); err != nil {
		t.Fatal(err)
	}
	n := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	n.Spec.NodeSelector = zoneSelector("a")
	node := readyNode("node-a", corev1.ConditionTrue, "KubeletReady")
	node.Labels = map[string]string{"zone": "b"}
	c.nodeChanged(node, false)
	if got, _ := c.selected(n); got {
		t.Error("--node-labels zone=a counted although the Node says zone=b")
	}
	if c.queue.Len() != 1 {
		t.Fatalf("the Node seen queued %d Networks, want 1", c.queue.Len())
	}
	drain(c)
	c.nodeChanged(node.DeepCopy(), false)
	if c.queue.Len() != 0 {
		t.Fatalf("the same Node again queued %d Networks", c.queue.Len())
	}
	relabelled := node.DeepCopy()
	relabelled.Labels["zone"] = "a"
	c.nodeChanged(relabelled, false)
	if c.queue.Len() != 1 {
		t.Fatalf("a relabelled Node queued %d Networks, want 1", c.queue.Len())
	}
	if got, _ := c.selected(n); !got {
		t.Error("the relabelled Node (zone=a) is not selected by zone=a")
	}
}

// drain empties c's queue.
func drain(c *Controller) {
	for c.queue.Len() > 0 {
		key, _ := c.queue.Get()
		c.queue.Done(key)
		c.queue.Forget(key)
	}
}

// TestUnselectedNodeTakesNothing: a node the selector leaves out claims no block, makes no
// bridge or configuration, and writes no entry.
func TestUnselectedNodeTakesNothing(t *testing.T) {
	n := blockNetwork()
	n.Spec.NodeSelector = zoneSelector("a")
	f := newBlocksFixture(t, n, "10.66.0.16/28")
	f.controller.opts.NodeLabels = labels.Set{"zone": "b"}
	if result, err := f.sync("team/web"); err != nil || result != "not_selected" {
		t.Fatalf("sync on an unselected node: %s, %v", result, err)
	}
	if f.claims != 0 {
		t.Fatalf("an unselected node claimed %d blocks", f.claims)
	}
	if a := f.backend.Get("team/web"); a != nil {
		t.Fatalf("an unselected node has the Network: %+v", a)
	}
	if len(f.client.Actions()) != 0 {
		t.Fatalf("an unselected node wrote: %v", f.client.Actions())
	}
}

// TestDeselectedNodeDrains: a node the selector stops selecting keeps its bridge, configuration
// and blocks while pods are attached and while their addresses are leased, says NotSelected,
// claims nothing; then removes everything and withdraws its entry. Selected again, it realises
// the Network as before.
func TestDeselectedNodeDrains(t *testing.T) {
	n := blockNetwork()
	n.Spec.NodeSelector = zoneSelector("a")
	f := newBlocksFixture(t, n, "10.66.0.16/28", "10.66.0.32/28", "10.66.0.48/28")
	f.controller.opts.NodeLabels = labels.Set{"zone": "a"}
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if f.backend.Get("team/web") == nil || f.claims != 1 {
		t.Fatalf("a selected node did not realise the Network (claims %d)", f.claims)
	}
	f.backend.SetPorts("team/web", "veth1")
	f.backend.SetLeases("team/web", "10.66.0.17")
	for range 2 { // the second sync realises the block the first claimed for headroom
		f.refresh("web")
		if _, err := f.sync("team/web"); err != nil {
			t.Fatal(err)
		}
	}
	claims := f.claims
	held, _ := f.backend.Desired("team/web")
	heldBlocks := []string{}
	for _, b := range held.Blocks {
		heldBlocks = append(heldBlocks, b.String())
	}

	deselect := func(zone string) {
		t.Helper()
		n := f.refresh("web")
		n.Spec.NodeSelector = zoneSelector(zone)
		n.Generation++
		if err := f.indexer.Update(n); err != nil {
			t.Fatal(err)
		}
	}
	deselect("b")
	if result, err := f.sync("team/web"); err != nil || result != "draining" {
		t.Fatalf("sync of a deselected node with a pod: %s, %v", result, err)
	}
	if a := f.backend.Get("team/web"); a == nil || a.Bridge == "" || a.CNIConfig == nil {
		t.Fatalf("the bridge or configuration went while a pod is attached: %+v", a)
	}
	if d, _ := f.backend.Desired("team/web"); len(d.Blocks) == 0 || !slices.Equal(d.Blocks, held.Blocks) {
		t.Fatalf("the draining configuration's blocks: %v, want the node's %v", d.Blocks, held.Blocks)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].Ready || applied[0].Reason != ReasonNotSelected || applied[0].Attachments != 1 ||
		!slices.Equal(applied[0].Blocks, heldBlocks) || applied[0].Leases == nil || *applied[0].Leases != 1 {
		t.Fatalf("entry while draining: %+v", applied)
	}

	// The pod's veth goes, its lease not yet: still kept, and the entry names the lease.
	f.backend.SetPorts("team/web")
	deselect("b")
	if result, err := f.sync("team/web"); err != nil || result != "draining" {
		t.Fatalf("sync with a lease left: %s, %v", result, err)
	}
	if f.backend.Get("team/web") == nil {
		t.Fatal("removed while host-local still leases 10.66.0.17")
	}
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].Reason != ReasonNotSelected || !strings.Contains(applied[0].Message, "10.66.0.17") {
		t.Fatalf("entry while the lease is held: %+v", applied)
	}

	// The DEL finishes: removed, entry withdrawn, no claim meanwhile.
	f.backend.SetLeases("team/web")
	deselect("b")
	if result, err := f.sync("team/web"); err != nil || result != "not_selected" {
		t.Fatalf("sync with nothing left: %s, %v", result, err)
	}
	if a := f.backend.Get("team/web"); a != nil {
		t.Fatalf("the drained node keeps the Network: %+v", a)
	}
	if got := nodestatus.FindEntry(f.refresh("web"), "node-a"); got != nil {
		t.Fatalf("the drained node's entry stays: %+v", got)
	}
	if f.claims != claims {
		t.Fatalf("claims while deselected: %d, want %d", f.claims-claims, 0)
	}
	deselect("b")
	if result, err := f.sync("team/web"); err != nil || result != "not_selected" || len(f.client.Actions()) != 0 {
		t.Fatalf("a resync of the drained node: %s, %v, %v", result, err, f.client.Actions())
	}

	// Selected again: realised as before.
	deselect("a")
	if result, err := f.sync("team/web"); err != nil || result != "changed" {
		t.Fatalf("sync once selected again: %s, %v", result, err)
	}
	if a := f.backend.Get("team/web"); a == nil || a.CNIConfig == nil {
		t.Fatalf("not realised once selected again: %+v", a)
	}
	if applied := f.statusApplies(); len(applied) != 1 || !applied[0].Ready || len(applied[0].Blocks) == 0 {
		t.Fatalf("entry once selected again: %+v", applied)
	}
}

// TestDeletedNetworkSelectingNoNodeLeftAlone: a node that a Network being deleted does not
// select, and that has nothing of it, neither reports nor writes anything: the server releases
// the Network once no entry reports pods, whatever the nodes that report.
func TestDeletedNetworkSelectingNoNodeLeftAlone(t *testing.T) {
	n := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	n.Spec.NodeSelector = zoneSelector("a")
	n.Finalizers = []string{nodestatus.ProtectionFinalizer}
	f := newFixture(t, n)
	now := metav1.Now()
	deleting := f.refresh("web")
	deleting.DeletionTimestamp = &now
	if err := f.indexer.Update(deleting); err != nil {
		t.Fatal(err)
	}
	for _, nodes := range [][]v1.NetworkNodeStatus{{{NodeName: "node-b", Attachments: 1}}, nil} {
		current := deleting.DeepCopy()
		current.Status.Nodes = nodes
		if err := f.indexer.Update(current); err != nil {
			t.Fatal(err)
		}
		if result, err := f.sync("team/web"); err != nil || result != "not_selected" {
			t.Fatalf("sync with entries %+v: %s, %v", nodes, result, err)
		}
		if w := f.metadataWrites(); len(w) != 0 {
			t.Fatalf("entries %+v: the unselected node wrote the Network: %v", nodes, w)
		}
		if f.backend.Get("team/web") != nil || len(f.statusApplies()) != 0 {
			t.Fatal("the unselected node made or reported something")
		}
	}
}

// TestSelectionWaitsForTheNodeInformer: while the Node informer has not synced and the Node has
// not been seen, a Network with a selector is left as it is (neither realised on a guess nor
// removed); once synced without the Node, --node-labels count; once seen, the Node's labels.
func TestSelectionWaitsForTheNodeInformer(t *testing.T) {
	n := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	n.Spec.NodeSelector = zoneSelector("a")
	f := newFixture(t, n)
	c := f.controller
	synced := false
	c.nodeSynced = func() bool { return synced }
	c.opts.NodeLabels = labels.Set{"zone": "a"}
	if result, err := f.sync("team/web"); err != nil || result != "waiting_for_node" {
		t.Fatalf("sync before the Node informer synced: %s, %v", result, err)
	}
	if f.backend.Get("team/web") != nil || len(f.client.Actions()) != 0 {
		t.Fatalf("acted before the node's labels were known: %+v, %v", f.backend.Get("team/web"), f.client.Actions())
	}
	// A Network without a selector does not wait.
	plain := network("db", "10.2.0.0/24", "10.2.0.1", 1)
	if err := f.client.Tracker().Add(plain); err != nil {
		t.Fatal(err)
	}
	if err := f.indexer.Add(plain); err != nil {
		t.Fatal(err)
	}
	if result, err := f.sync("team/db"); err != nil || result != "changed" {
		t.Fatalf("sync of a Network without a selector: %s, %v", result, err)
	}
	// Synced, no Node of this node: --node-labels (zone=a) select it.
	synced = true
	if result, err := f.sync("team/web"); err != nil || result != "changed" || f.backend.Get("team/web") == nil {
		t.Fatalf("sync once synced without a Node: %s, %v", result, err)
	}
	// The Node appears with zone=b: it counts, and the node drains (nothing attached: removed).
	node := readyNode("node-a", corev1.ConditionTrue, "KubeletReady")
	node.Labels = map[string]string{"zone": "b"}
	c.nodeChanged(node, false)
	f.refresh("web")
	if result, err := f.sync("team/web"); err != nil || result != "not_selected" || f.backend.Get("team/web") != nil {
		t.Fatalf("sync once the Node says zone=b: %s, %v, %+v", result, err, f.backend.Get("team/web"))
	}
}
