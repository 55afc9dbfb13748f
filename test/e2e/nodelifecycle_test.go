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

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	samplecrdv1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodelifecycle"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// TestAggregatedNodeLifecycle: network-apiserver, attached to a real kube-apiserver, carries
// Nodes' readiness and deletion into status.nodes. No kubelet runs here: the Nodes are objects
// the test creates and whose Ready condition it sets, and the agents' entries are applied as the
// agents apply them (each under its node's field manager). A Node going NotReady marks its
// entries and the Networks' Ready names it, the other node's entries stay; deleting the Node
// removes its entries, and a Network being deleted that only its pods held goes.
func TestAggregatedNodeLifecycle(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	c := localCluster(t)
	ctx := context.Background()

	setReady := func(node, status, reason string) {
		t.Helper()
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":%q,"reason":%q,"message":"set by the test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`,
			status, reason, time.Now().UTC().Format(time.RFC3339), time.Now().UTC().Format(time.RFC3339))
		c.kubectl(t, "patch", "node", node, "--subresource", "status", "--type", "merge", "-p", patch)
	}
	for _, node := range []string{"ghost-1", "ghost-2"} {
		c.kubectl(t, "apply", "-f", writeManifest(t, node+".yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+node+"\n"))
		setReady(node, "True", "KubeletReady")
	}

	client := c.clientset(t)
	networks := client.SamplecrdV1().Networks("default")
	report := func(n *samplecrdv1.Network, node string, attachments int32) *samplecrdv1.Network {
		t.Helper()
		e := samplecrdv1.NetworkNodeStatus{NodeName: node, Bridge: "nwghost", Ready: true, ObservedGeneration: n.Generation,
			Message: "bridge and CNI configuration match the spec", Attachments: attachments}
		updated, err := nodestatus.ApplyNodeEntry(ctx, client, n, e, "")
		if err != nil || updated == nil {
			t.Fatalf("applying %s's entry as its agent would: %v", node, err)
		}
		return updated
	}
	create := func(name, cidr string, finalizers ...string) *samplecrdv1.Network {
		t.Helper()
		n, err := networks.Create(ctx, &samplecrdv1.Network{ObjectMeta: metav1.ObjectMeta{Name: name, Finalizers: finalizers},
			Spec: samplecrdv1.NetworkSpec{CIDR: cidr}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	web := create("web", "10.30.0.0/24")
	report(report(web, "ghost-1", 0), "ghost-2", 1)
	// Being deleted later: its pods on ghost-2 hold it (the server gave it the finalizer).
	old := create("old", "10.31.0.0/24")
	if !slices.Contains(old.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("old created with finalizers %v, want %s", old.Finalizers, nodestatus.ProtectionFinalizer)
	}
	report(report(old, "ghost-1", 0), "ghost-2", 1)
	entryOf := func(n *samplecrdv1.Network, node string) *samplecrdv1.NetworkNodeStatus {
		for i := range n.Status.Nodes {
			if n.Status.Nodes[i].NodeName == node {
				return &n.Status.Nodes[i]
			}
		}
		return nil
	}
	get := func(name string) (*samplecrdv1.Network, string) {
		n, err := networks.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err.Error()
		}
		b, _ := json.Marshal(n.Status)
		return n, string(b)
	}

	start := time.Now()
	setReady("ghost-2", "Unknown", "NodeStatusUnknown")
	want := "node ghost-2 is not Ready (NodeStatusUnknown); bridge, generation and attachments as its agent last reported"
	for _, name := range []string{"web", "old"} {
		eventually(t, 30*time.Second, name+": ghost-2's entry marked NodeNotReady", func() (bool, string) {
			n, s := get(name)
			if n == nil {
				return false, s
			}
			e := entryOf(n, "ghost-2")
			return e != nil && !e.Ready && e.Reason == nodestatus.ReasonNodeObjectNotReady && e.Message == want && e.Attachments == 1 && e.Bridge == "nwghost", s
		})
	}
	t.Logf("entries marked %s after the Node went NotReady", time.Since(start).Round(time.Millisecond))
	n, s := get("web")
	if e := entryOf(n, "ghost-1"); e == nil || !e.Ready || e.Message != "bridge and CNI configuration match the spec" {
		t.Errorf("ghost-1's entry changed: %s", s)
	}
	cond := meta.FindStatusCondition(n.Status.Conditions, "Ready")
	if cond == nil || cond.Status != metav1.ConditionFalse || cond.Reason != nodestatus.ReasonNodeObjectNotReady ||
		cond.Message != "not ready on 1 of 2 nodes: ghost-2: "+want {
		t.Errorf("web's Ready condition: %+v", cond)
	}
	owners := map[string]bool{}
	for _, mf := range n.ManagedFields {
		if mf.Subresource == "status" {
			owners[mf.Manager] = true
		}
	}
	if len(owners) != 2 || !owners["network-controller/ghost-1"] || !owners["network-controller/ghost-2"] {
		t.Errorf("status field managers: %v, want only the two nodes'", owners)
	}
	if out := c.kubectl(t, "get", "network", "web"); !regexpLine(out, `web\s+10\.30\.0\.0/24\s+10\.30\.0\.1\s+False\s+\S+\s+\S+\s+\S+`) {
		t.Errorf("kubectl get network web:\n%s", out)
	}

	// old is deleted while ghost-2 reports a pod on it: it stays.
	c.kubectl(t, "delete", "network", "old", "--wait=false")
	if n, s := get("old"); n == nil || n.DeletionTimestamp == nil || !slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("old after delete: %v %s", n, s)
	}

	// The Node is deleted: its entries go; old, held only by ghost-2's pod, goes with the status
	// write that removes ghost-2's entry (the server releases it: ghost-1 reports none).
	start = time.Now()
	c.kubectl(t, "delete", "node", "ghost-2")
	eventually(t, 30*time.Second, "web: ghost-2's entry removed, Ready again", func() (bool, string) {
		n, s := get("web")
		if n == nil {
			return false, s
		}
		cond := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return entryOf(n, "ghost-2") == nil && len(n.Status.Nodes) == 1 && cond != nil && cond.Status == metav1.ConditionTrue, s
	})
	t.Logf("entries removed %s after the Node was deleted", time.Since(start).Round(time.Millisecond))
	eventually(t, 30*time.Second, "old released and gone with ghost-2's entry", func() (bool, string) {
		_, err := networks.Get(ctx, "old", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	setReady("ghost-1", "False", "KubeletNotReady")
	eventually(t, 30*time.Second, "web: ghost-1's entry marked NodeNotReady", func() (bool, string) {
		n, s := get("web")
		e := entryOf(n, "ghost-1")
		return e != nil && !e.Ready, s
	})
	n, s = get("web")
	if e := entryOf(n, "ghost-1"); e == nil || e.Ready || !strings.Contains(e.Message, "node ghost-1 is not Ready (KubeletNotReady)") {
		t.Errorf("web's ghost-1 entry after ghost-1 went NotReady: %s", s)
	}
}

// TestAggregatedDeletedNodeKeepsBlocks: attached to a real kube-apiserver, a node whose agent
// runs (in a namespace of its own, with a pod ADDed from its configuration list) has a block of
// a Network. Its Node is deleted while the agent runs and the pod holds its address: the entry
// stays, marked NodeDeleted, and the blocks stay, while a block of a node that never reported is
// released meanwhile. The agent stops: its Lease expires, the node lifecycle loop removes the
// entry, and the blocks are released a grace later. The verifier reports no violation
// throughout.
func TestAggregatedDeletedNodeKeepsBlocks(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	pluginDir := filepath.Join(repoRoot, "_output", "bin", "cni")
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(pluginDir, p)); err != nil {
			t.Fatalf("CNI plugin %s: %v (make cni-plugins)", p, err)
		}
	}
	const grace = 3 * time.Second
	c := localCluster(t, "NETWORK_APISERVER_ARGS=--block-release-grace="+grace.String()+" --allocation-verify-interval=2s")
	ctx := context.Background()
	c.kubectl(t, "apply", "-f", writeManifest(t, "n3.yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: n3\n"))
	now := time.Now().UTC().Format(time.RFC3339)
	c.kubectl(t, "patch", "node", "n3", "--subresource", "status", "--type", "merge", "-p",
		fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"set by the test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now))

	client := c.clientset(t)
	networks := client.SamplecrdV1().Networks("default")
	blocks := client.SamplecrdV1().BlockAllocations("default")
	if _, err := networks.Create(ctx, &samplecrdv1.Network{ObjectMeta: metav1.ObjectMeta{Name: "keep"},
		Spec: samplecrdv1.NetworkSpec{CIDR: "10.33.0.0/24"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	node := newUnderlay(t).addNode(t, 3, pluginDir)
	node.startAgent(c.kubeconfig)
	entryOf := func() (*samplecrdv1.NetworkNodeStatus, string) {
		n, err := networks.Get(ctx, "keep", metav1.GetOptions{})
		if err != nil {
			return nil, err.Error()
		}
		b, _ := json.Marshal(n.Status.Nodes)
		return nodestatus.FindEntry(n, "n3"), string(b)
	}
	eventually(t, 60*time.Second, "n3 reports keep with a block", func() (bool, string) {
		e, s := entryOf()
		return e != nil && e.Ready && len(e.Blocks) > 0 && e.Leases != nil, s
	})
	kube, err := kubernetes.NewForConfig(c.restConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	lease, err := kube.CoordinationV1().Leases("network-agent").Get(ctx, "network-agent-n3", metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "n3" {
		t.Fatalf("the agent's Lease: %+v, %v", lease, err)
	}
	podNS := netnstest.New(t, "n3pod")
	node.waitConfList("default/keep")
	pod, err := node.add("default/keep", "n3-pod1", podNS)
	if err != nil {
		t.Fatalf("ADD on n3: %v\nagent log:\n%s", err, node.log.tail())
	}
	eventually(t, 60*time.Second, "n3 reports the pod's lease", func() (bool, string) {
		e, s := entryOf()
		return e != nil && e.Leases != nil && *e.Leases == 1, s
	})
	held, err := blocks.Get(ctx, "keep.n3", metav1.GetOptions{})
	if err != nil || len(held.Blocks) == 0 {
		t.Fatalf("n3's BlockAllocation: %+v, %v", held, err)
	}
	t.Logf("n3 holds %v; its pod has %s", held.Blocks, pod.ip)

	// The Node is deleted while the agent runs. A node that never reported claims a block at
	// the same time: its release, a grace and two passes later, shows the loop has looked at n3.
	deleted := time.Now()
	c.kubectl(t, "delete", "node", "n3")
	if _, err := networks.ClaimBlocks(ctx, "keep", &samplecrdv1.BlockClaim{NodeName: "never-reported"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "n3's entry marked NodeDeleted, its lease still counted", func() (bool, string) {
		e, s := entryOf()
		return e != nil && !e.Ready && e.Reason == nodestatus.ReasonNodeDeleted && e.Leases != nil && *e.Leases == 1, s
	})
	eventually(t, 60*time.Second, "never-reported's block released", func() (bool, string) {
		_, err := blocks.Get(ctx, "keep.never-reported", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("never-reported's block released %s after its claim (grace %s)", time.Since(deleted).Round(time.Millisecond), grace)
	// Another pass of the node lifecycle loop (it rechecks Leases every 10 s) and of the release.
	recheck := time.Now()
	eventually(t, 60*time.Second, "a lease recheck later, n3 still holds its entry and blocks", func() (bool, string) {
		e, s := entryOf()
		if e == nil || e.Reason != nodestatus.ReasonNodeDeleted {
			t.Fatalf("n3's entry went while its agent runs: %s", s)
		}
		if _, err := blocks.Get(ctx, "keep.n3", metav1.GetOptions{}); err != nil {
			t.Fatalf("n3's blocks went while its agent runs and its pod holds an address: %v", err)
		}
		return time.Since(recheck) > nodelifecycle.DefaultLeaseRecheck+grace, s
	})

	// The agent stops (the machine is gone): the Lease expires, the entry goes, the blocks go.
	node.stopAgent()
	stopped := time.Now()
	eventually(t, 120*time.Second, "n3's entry removed once its Lease expired", func() (bool, string) {
		e, s := entryOf()
		return e == nil, s
	})
	t.Logf("n3's entry removed %s after its agent stopped (Lease duration 40s)", time.Since(stopped).Round(time.Millisecond))
	removed := time.Now()
	eventually(t, 60*time.Second, "n3's blocks released", func() (bool, string) {
		_, err := blocks.Get(ctx, "keep.n3", metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	t.Logf("n3's blocks released %s after its entry was removed (grace %s)", time.Since(removed).Round(time.Millisecond), grace)

	for _, name := range []string{"network-apiserver.log"} {
		b, err := os.ReadFile(c.local.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), "Network allocation invariant violated") {
			t.Errorf("the verifier reported violations:\n%s", grepLines(string(b), "invariant violated"))
		}
		if !strings.Contains(string(b), "Released a node's blocks") {
			t.Errorf("%s does not log the releases", name)
		}
	}
}

// grepLines returns the lines of s that contain substr.
func grepLines(s, substr string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, substr) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
