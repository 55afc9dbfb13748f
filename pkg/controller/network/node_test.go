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
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus/nodestatustest"
)

var readyNode = nodestatustest.Node

// The agent reports the marked entry while its Node is not Ready, marks it NodeDeleted once the
// Node is deleted (it still runs; the lease count is unknown), and reports as usual again once the Node is Ready.
func TestAgentFollowsItsNode(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	ctx := context.Background()
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	normal := f.statusApplies()
	if len(normal) != 1 || !normal[0].Ready {
		t.Fatalf("first report: %+v", normal)
	}
	f.refresh("web")

	// Another node's Node changes nothing here.
	f.controller.nodeChanged(readyNode("node-b", corev1.ConditionUnknown, "NodeStatusUnknown"), false)
	if n := f.controller.queue.Len(); n != 0 {
		t.Fatalf("another node's Node queued %d Networks", n)
	}
	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionTrue, "KubeletReady"), false)
	if result, err := f.sync("team/web"); err != nil || result != "in_sync" || len(f.client.Actions()) != 0 {
		t.Fatalf("sync with the Node Ready: %s, %v, %v", result, err, f.client.Actions())
	}

	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionUnknown, "NodeStatusUnknown"), false)
	if n := f.controller.queue.Len(); n != 1 {
		t.Fatalf("the Node going NotReady queued %d Networks, want 1", n)
	}
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	marked := f.statusApplies()
	if len(marked) != 1 || !sameEntry(marked[0], nodestatus.MarkNodeNotReady(normal[0], "NodeStatusUnknown")) {
		t.Fatalf("report while NotReady: %+v", marked)
	}
	f.refresh("web")
	if _, err := f.sync("team/web"); err != nil || len(f.client.Actions()) != 0 {
		t.Fatalf("a resync while NotReady wrote again (%v): %v", err, f.client.Actions())
	}

	// Deleted: this agent still runs and holds its Lease, and without a lease count (no blocks
	// here) pods may hold addresses: the entry stays, marked NodeDeleted.
	leaseHeld := true
	f.controller.opts.LeaseHeld = func() bool { return leaseHeld }
	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionUnknown, "NodeStatusUnknown"), true)
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if deleted := f.statusApplies(); len(deleted) != 1 || !sameEntry(deleted[0], nodestatus.MarkNodeDeleted(normal[0])) {
		t.Fatalf("report once the Node is deleted: %+v", deleted)
	}
	n := f.refresh("web")
	if len(n.Status.Nodes) != 1 || n.Status.Nodes[0].Reason != nodestatus.ReasonNodeDeleted {
		t.Fatalf("entries after the Node was deleted: %+v", n.Status.Nodes)
	}
	if f.backend.Get("team/web") == nil {
		t.Fatal("the bridge went with the Node object")
	}
	if _, err := f.sync("team/web"); err != nil || len(f.client.Actions()) != 0 {
		t.Fatalf("a resync after the Node was deleted wrote again (%v): %v", err, f.client.Actions())
	}
	// Its Lease no longer held (renewals failing), the agent withdraws the entry, as the server
	// removes it.
	leaseHeld = false
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if n := f.refresh("web"); len(n.Status.Nodes) != 0 {
		t.Fatalf("entries of a deleted Node's agent without its Lease: %+v", n.Status.Nodes)
	}

	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionTrue, "KubeletReady"), false)
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if back := f.statusApplies(); len(back) != 1 || !sameEntry(back[0], normal[0]) {
		t.Fatalf("report once the Node is Ready again: %+v", back)
	}
	got, err := f.client.SamplecrdV1().Networks("team").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || len(got.Status.Nodes) != 1 || !strings.Contains(got.Status.Nodes[0].Message, "match the spec") {
		t.Fatalf("stored: %+v, %v", got, err)
	}
}

// sameEntry compares node entries, which hold slices since issue 23 and so cannot be compared with ==.
func sameEntry(a, b v1.NetworkNodeStatus) bool { return reflect.DeepEqual(a, b) }
