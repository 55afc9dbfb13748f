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

package nodelifecycle

import (
	"context"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus/nodestatustest"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/fake"
)

var node = nodestatustest.Node

func entry(node string, attachments int32) v1.NetworkNodeStatus {
	return v1.NetworkNodeStatus{NodeName: node, Bridge: "nwweb", Ready: true, ObservedGeneration: 1,
		Message: "bridge and CNI configuration match the spec", Attachments: attachments}
}

type fixture struct {
	t      *testing.T
	client *fake.Clientset
	kube   *kubefake.Clientset
	loop   *Controller
}

// start runs the loop against fake clientsets holding nodes and networks, whose entries are
// applied the way each node's agent applies them (its own field manager).
func start(t *testing.T, nodes []*corev1.Node, networks map[*v1.Network][]v1.NetworkNodeStatus) *fixture {
	t.Helper()
	return startResync(t, time.Hour, nodes, networks)
}

func startResync(t *testing.T, resync time.Duration, nodes []*corev1.Node, networks map[*v1.Network][]v1.NetworkNodeStatus,
	configure ...func(*Controller, *kubefake.Clientset)) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	client := fake.NewClientset()
	kube := kubefake.NewClientset()
	for _, n := range nodes {
		if _, err := kube.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for n, entries := range networks {
		created, err := client.SamplecrdV1().Networks(n.Namespace).Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			if created, err = nodestatus.ApplyNodeEntry(ctx, client, created, e, ""); err != nil {
				t.Fatal(err)
			}
		}
	}
	nodeFactory := kubeinformers.NewSharedInformerFactory(kube, 0)
	loop, err := New(client, nodeFactory.Core().V1().Nodes(), resync)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range configure {
		c(loop, kube)
	}
	nodeFactory.Start(ctx.Done())
	done := make(chan error, 1)
	go func() { done <- loop.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		nodeFactory.Shutdown()
	})
	return &fixture{t: t, client: client, kube: kube, loop: loop}
}

// eventually polls until the Network name's entries satisfy ok.
func (f *fixture) eventually(what, name string, ok func(n *v1.Network) bool) *v1.Network {
	f.t.Helper()
	var last *v1.Network
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := f.client.SamplecrdV1().Networks("team").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = n
		return ok(n), nil
	})
	if err != nil {
		b, _ := json.Marshal(last)
		f.t.Fatalf("%s: %v; last: %s", what, err, b)
	}
	return last
}

func entries(n *v1.Network) map[string]v1.NetworkNodeStatus {
	m := map[string]v1.NetworkNodeStatus{}
	for _, e := range n.Status.Nodes {
		m[e.NodeName] = e
	}
	return m
}

func TestNotReadyMarkedAndDeletedRemoved(t *testing.T) {
	ctx := context.Background()
	web := &v1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: 1}}
	now := metav1.Now()
	// Being deleted, held only by node-2's pods.
	old := &v1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "old", Generation: 1,
		DeletionTimestamp: &now, Finalizers: []string{nodestatus.ProtectionFinalizer}}}
	// A marked entry of a Node deleted while no loop ran (its Node is gone, it was one).
	stale := &v1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "stale", Generation: 1}}
	f := start(t, []*corev1.Node{node("node-1", corev1.ConditionTrue, "KubeletReady"), node("node-2", corev1.ConditionTrue, "KubeletReady")},
		map[*v1.Network][]v1.NetworkNodeStatus{
			// "host" is no Node: a controller with a --node-name of its own. It is left alone.
			web:   {entry("node-1", 0), entry("node-2", 1), entry("host", 0)},
			old:   {entry("node-2", 1)},
			stale: {nodestatus.MarkNodeNotReady(entry("node-3", 1), "NodeStatusUnknown"), entry("host", 0)},
		})

	f.eventually("the stale entry of node-3 removed", "stale", func(n *v1.Network) bool {
		e := entries(n)
		_, has := e["node-3"]
		return !has && sameEntry(e["host"], entry("host", 0))
	})

	// node-2 stops being Ready.
	if _, err := f.kube.CoreV1().Nodes().UpdateStatus(ctx, node("node-2", corev1.ConditionUnknown, "NodeStatusUnknown"), metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := nodestatus.MarkNodeNotReady(entry("node-2", 1), "NodeStatusUnknown")
	n := f.eventually("node-2's entry marked", "web", func(n *v1.Network) bool { return sameEntry(entries(n)["node-2"], want) })
	if e := entries(n); !sameEntry(e["node-1"], entry("node-1", 0)) || !sameEntry(e["host"], entry("host", 0)) || len(e) != 3 {
		t.Errorf("other entries changed: %+v", n.Status.Nodes)
	}
	owned := false
	for _, mf := range n.ManagedFields {
		owned = owned || (mf.Manager == nodestatus.FieldManagerPrefix+"node-2" && mf.Operation == metav1.ManagedFieldsOperationApply)
		if mf.Manager != nodestatus.FieldManagerPrefix+"node-1" && mf.Manager != nodestatus.FieldManagerPrefix+"node-2" &&
			mf.Manager != nodestatus.FieldManagerPrefix+"host" && mf.Subresource == "status" {
			t.Errorf("status written under field manager %q", mf.Manager)
		}
	}
	if !owned {
		t.Errorf("node-2's entry is no longer applied by %s: %+v", nodestatus.FieldManagerPrefix+"node-2", n.ManagedFields)
	}
	o := f.eventually("old's entry marked", "old", func(n *v1.Network) bool { return sameEntry(entries(n)["node-2"], want) })
	if !slices.Contains(o.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatal("old released while node-2 reported pods")
	}

	// Once converged, a pass (another replica's, or a resync) writes nothing.
	f.client.ClearActions()
	if err := f.loop.passOver(ctx); err != nil {
		t.Fatal(err)
	}
	for _, a := range f.client.Actions() {
		if a.GetVerb() != "list" {
			t.Errorf("a pass over converged Networks did more than list: %v", a)
		}
	}

	// node-2 is deleted: its entries go. Releasing old, held by nothing else now, is the
	// server's, in the status write that removed the entry: the loop writes no finalizer.
	f.client.ClearActions()
	if err := f.kube.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n = f.eventually("node-2's entry removed", "web", func(n *v1.Network) bool { _, has := entries(n)["node-2"]; return !has })
	if e := entries(n); !sameEntry(e["node-1"], entry("node-1", 0)) || !sameEntry(e["host"], entry("host", 0)) || len(e) != 2 {
		t.Errorf("other entries changed: %+v", n.Status.Nodes)
	}
	f.eventually("old's entry removed", "old", func(n *v1.Network) bool { return len(n.Status.Nodes) == 0 })
	for _, a := range f.client.Actions() {
		if a.GetSubresource() == "" && a.GetVerb() != "list" && a.GetVerb() != "get" && a.GetVerb() != "watch" {
			t.Errorf("the loop wrote the Network itself, not only entries: %v", a)
		}
	}
}

// An agent that does not watch its Node writes its entry Ready again; while the Node is not
// Ready, the next resync marks it again.
func TestResyncMarksAgain(t *testing.T) {
	ctx := context.Background()
	web := &v1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: 1}}
	f := startResync(t, 50*time.Millisecond, []*corev1.Node{node("node-2", corev1.ConditionFalse, "KubeletNotReady")},
		map[*v1.Network][]v1.NetworkNodeStatus{web: {entry("node-2", 0)}})
	want := nodestatus.MarkNodeNotReady(entry("node-2", 0), "KubeletNotReady")
	n := f.eventually("node-2's entry marked", "web", func(n *v1.Network) bool { return sameEntry(entries(n)["node-2"], want) })
	if _, err := nodestatus.ApplyNodeEntry(ctx, f.client, n, entry("node-2", 0), ""); err != nil {
		t.Fatal(err)
	}
	f.eventually("node-2's entry marked again", "web", func(n *v1.Network) bool { return sameEntry(entries(n)["node-2"], want) })
}

// TestDeletedNodeKeptWhileAgentHoldsLease: a Node deleted while its agent holds its Lease keeps
// its entries that report leases (or do not say), marked NodeDeleted; an entry reporting no
// leases goes at once; once the Lease expires the kept entries go too.
func TestDeletedNodeKeptWhileAgentHoldsLease(t *testing.T) {
	ctx := context.Background()
	clock := testingclock.NewFakeClock(time.Now())
	web := &v1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", Generation: 1}}
	idle := &v1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "idle", Generation: 1}}
	unknown := &v1.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "unknown", Generation: 1}}
	withLeases := func(e v1.NetworkNodeStatus, n int32) v1.NetworkNodeStatus { e.Leases = &n; return e }
	f := startResync(t, time.Hour, []*corev1.Node{node("node-1", corev1.ConditionTrue, "KubeletReady"), node("node-2", corev1.ConditionTrue, "KubeletReady")},
		map[*v1.Network][]v1.NetworkNodeStatus{
			web:     {withLeases(entry("node-1", 0), 0), withLeases(entry("node-2", 1), 2)},
			idle:    {withLeases(entry("node-2", 0), 0)},
			unknown: {entry("node-2", 1)},
		},
		func(c *Controller, kube *kubefake.Clientset) {
			renewed := metav1.NewMicroTime(clock.Now())
			if _, err := kube.CoordinationV1().Leases("agents").Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Namespace: "agents", Name: nodestatus.LeaseName("node-2")},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-2"), LeaseDurationSeconds: ptr.To[int32](40), RenewTime: &renewed},
			}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			c.WithAgentLeases(kube, "agents", 20*time.Millisecond)
			c.clock = clock
		})
	// The informer must have seen node-2 to see its deletion.
	if !cache.WaitForCacheSync(ctx.Done(), f.loop.synced) {
		t.Fatal("the Node informer did not sync")
	}
	if err := f.kube.CoreV1().Nodes().Delete(ctx, "node-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.eventually("idle's node-2 entry (no leases) removed", "idle", func(n *v1.Network) bool { return len(n.Status.Nodes) == 0 })
	wantWeb := nodestatus.MarkNodeDeleted(withLeases(entry("node-2", 1), 2))
	n := f.eventually("web's node-2 entry marked NodeDeleted", "web", func(n *v1.Network) bool { return sameEntry(entries(n)["node-2"], wantWeb) })
	if e := entries(n); !sameEntry(e["node-1"], withLeases(entry("node-1", 0), 0)) || len(e) != 2 {
		t.Errorf("web's entries: %+v", n.Status.Nodes)
	}
	f.eventually("unknown's node-2 entry (leases not said) marked NodeDeleted", "unknown", func(n *v1.Network) bool {
		return sameEntry(entries(n)["node-2"], nodestatus.MarkNodeDeleted(entry("node-2", 1)))
	})
	// Still held: passes keep the entries.
	if err := f.loop.passOver(ctx); err != nil {
		t.Fatal(err)
	}
	if n, err := f.client.SamplecrdV1().Networks("team").Get(ctx, "web", metav1.GetOptions{}); err != nil || !sameEntry(entries(n)["node-2"], wantWeb) {
		t.Fatalf("web's node-2 entry while the Lease is held: %+v %v", n, err)
	}
	// The agent stops renewing: once the Lease has expired, the entries go.
	clock.Step(41 * time.Second)
	for _, name := range []string{"web", "unknown"} {
		f.eventually(name+"'s node-2 entry removed after the Lease expired", name, func(n *v1.Network) bool { _, has := entries(n)["node-2"]; return !has })
	}
}

// sameEntry compares node entries, which hold slices since issue 23 and so cannot be compared with ==.
func sameEntry(a, b v1.NetworkNodeStatus) bool { return reflect.DeepEqual(a, b) }
