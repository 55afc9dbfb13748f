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

package integration

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	applyv1 "github.com/samplecrd/network-apiserver/pkg/generated/applyconfiguration/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// protReport applies node's entry of name with attachments, as that node's agent does, and
// returns the answer (nil when the write released and so deleted the Network).
func protReport(ctx context.Context, t *testing.T, c versioned.Interface, ns, name, node string, attachments int32) *v1.Network {
	t.Helper()
	apply := applyv1.Network(name, ns).WithStatus(applyv1.NetworkStatus().WithNodes(applyv1.NetworkNodeStatus().
		WithNodeName(node).WithReady(true).WithObservedGeneration(1).WithAttachments(attachments)))
	n, err := nodestatus.ApplyAsNode(ctx, c, ns, apply, node)
	if err != nil {
		t.Fatalf("%s reports %d attachments on %s: %v", node, attachments, name, err)
	}
	return n
}

func protProtected(n *v1.Network) bool {
	return slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer)
}

// TestProtectedNetworkKeepsItsPrefix: the server puts the protection finalizer on a Network in
// its create (one write: the create's answer carries it and a watch sees no second write), keeps a
// deleted Network (and its prefix, so no other Network takes the addresses its pods hold) while a
// node's entry reports attachments, and releases it in the status write that leaves no entry
// reporting any: the Network and its prefix go with that write.
func TestProtectedNetworkKeepsItsPrefix(t *testing.T) {
	s := sharedServer(t)
	c := jsonClient(t, s)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := c.SamplecrdV1().Networks(ns)

	start, err := networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := networks.Watch(ctx, metav1.ListOptions{ResourceVersion: start.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	created, err := networks.Create(ctx, newNetwork("held", "10.211.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !protProtected(created) {
		t.Fatalf("the create's answer has finalizers %v, want %s", created.Finalizers, nodestatus.ProtectionFinalizer)
	}
	if ev := nextEvent(t, w); ev.Type != watch.Added || ev.Object.(*v1.Network).ResourceVersion != created.ResourceVersion {
		t.Fatalf("first event %s, want the create itself", ev.Type)
	}

	// node-a reports two pods, node-b none; the first report is the next event: no write between.
	protReport(ctx, t, c, ns, "held", "node-a", 2)
	protReport(ctx, t, c, ns, "held", "node-b", 0)
	if ev := nextEvent(t, w); ev.Type != watch.Modified || len(ev.Object.(*v1.Network).Status.Nodes) != 1 {
		t.Fatalf("second event %s %+v, want node-a's report", ev.Type, ev.Object)
	}
	if err := networks.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	held, err := networks.Get(ctx, "held", metav1.GetOptions{})
	if err != nil || held.DeletionTimestamp == nil || !protProtected(held) {
		t.Fatalf("a Network deleted while node-a reports pods: %+v, %v; want it kept with a deletionTimestamp and the finalizer", held, err)
	}
	if _, err := networks.Create(ctx, newNetwork("taker", "10.211.0.0/25", ""), metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("creating a Network inside a terminating Network's prefix: %v, want 422", err)
	}
	// node-b's report changes nothing: still held.
	if n := protReport(ctx, t, c, ns, "held", "node-b", 0); n == nil || !protProtected(n) {
		t.Fatalf("released by a report of none while node-a still reports pods: %+v", n)
	}
	// node-a's pods go: its report releases the Network, in that write.
	protReport(ctx, t, c, ns, "held", "node-a", 0)
	if _, err := networks.Get(ctx, "held", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the last attachment went: %v, want NotFound", err)
	}
	if _, err := networks.Create(ctx, newNetwork("taker", "10.211.0.0/25", ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("the prefix was not freed with the Network: %v", err)
	}
}

// TestProtectionReleasesAtDelete: a Network no node reports pods on goes in its delete, whether no
// node reports on it or every entry reports none, one at a time and by collection (a namespace
// going); another finalizer still holds it, without ours.
func TestProtectionReleasesAtDelete(t *testing.T) {
	s := sharedServer(t)
	c := jsonClient(t, s)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := c.SamplecrdV1().Networks(ns)
	for i, name := range []string{"idle", "quiet", "other", "many-1", "many-2"} {
		n := newNetwork(name, "10.212."+string(rune('0'+i))+".0/24", "")
		if name == "other" {
			n.Finalizers = []string{"example.com/other"}
		}
		if _, err := networks.Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	protReport(ctx, t, c, ns, "quiet", "node-a", 0)
	protReport(ctx, t, c, ns, "many-2", "node-a", 0)
	for _, name := range []string{"idle", "quiet"} {
		if err := networks.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := networks.Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Fatalf("%s after its delete: %v, want NotFound", name, err)
		}
	}
	if err := networks.Delete(ctx, "other", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := networks.Get(ctx, "other", metav1.GetOptions{}); err != nil || !slices.Equal(n.Finalizers, []string{"example.com/other"}) {
		t.Fatalf("other after its delete: %+v, %v; want it held by example.com/other alone", n, err)
	}
	if err := networks.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}
	list, err := networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Name != "other" {
		t.Fatalf("after deleting the collection: %d Networks left, want only other", len(list.Items))
	}
}

// TestProtectionAdminOverride: a Network held by attachments that will never go (a node that
// invents them, or is gone without its Node object) is let go by an administrator removing the
// finalizer; the server does not put it back on a Network being deleted. A live Network whose
// finalizer was removed gets it back in that write.
func TestProtectionAdminOverride(t *testing.T) {
	s := sharedServer(t)
	c := jsonClient(t, s)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := c.SamplecrdV1().Networks(ns)
	if _, err := networks.Create(ctx, newNetwork("stuck", "10.213.0.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	strip := []byte(`{"metadata":{"finalizers":null}}`)
	live, err := networks.Patch(ctx, "stuck", types.MergePatchType, strip, metav1.PatchOptions{})
	if err != nil || !protProtected(live) {
		t.Fatalf("a live Network stripped of its finalizer: %+v, %v; want the finalizer back", live, err)
	}
	protReport(ctx, t, c, ns, "stuck", "liar", 9)
	if err := networks.Delete(ctx, "stuck", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := networks.Get(ctx, "stuck", metav1.GetOptions{}); err != nil || !protProtected(n) {
		t.Fatalf("held by liar's attachments: %+v, %v", n, err)
	}
	if _, err := networks.Patch(ctx, "stuck", types.MergePatchType, strip, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := networks.Get(ctx, "stuck", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("after the administrator removed the finalizer: %v, want NotFound", err)
	}
}

// TestProtectionWithoutThePlugin: with NetworkProtection off (or for a Network created by an
// older server), the Network gets the finalizer in the first write after its create — the agent's
// first report, which comes before any pod can attach there.
func TestProtectionWithoutThePlugin(t *testing.T) {
	s := framework.StartForTest(t, "--disable-admission-plugins=NetworkProtection")
	c := jsonClient(t, s)
	ctx := testContext(t)
	networks := c.SamplecrdV1().Networks("prot")
	created, err := networks.Create(ctx, newNetwork("old", "10.214.0.0/24", ""), metav1.CreateOptions{})
	if err != nil || protProtected(created) {
		t.Fatalf("created with the plugin off: %+v, %v; want no finalizer", created, err)
	}
	if n := protReport(ctx, t, c, "prot", "old", "node-a", 1); n == nil || !protProtected(n) {
		t.Fatalf("after the first report: %+v, want the finalizer", n)
	}
}

// TestProtectionRacesReports: a node's report of a pod that the server accepted is never lost to
// a release decided before it: the delete of an idle Network, and a node's report of none on a
// Network being deleted, each race a report of one pod from another node, many times. Whenever
// that report was accepted (the server answered it with the Network), the Network is still there
// after both, held by the finalizer.
func TestProtectionRacesReports(t *testing.T) {
	s := sharedServer(t)
	c := jsonClient(t, s)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := c.SamplecrdV1().Networks(ns)
	race := func(name string, release func() error) (reportWon bool) {
		t.Helper()
		var wg sync.WaitGroup
		var releaseErr error
		var reported *v1.Network
		var reportErr error
		wg.Add(2)
		go func() { defer wg.Done(); releaseErr = release() }()
		go func() {
			defer wg.Done()
			apply := applyv1.Network(name, ns).WithStatus(applyv1.NetworkStatus().WithNodes(applyv1.NetworkNodeStatus().
				WithNodeName("node-late").WithReady(true).WithObservedGeneration(1).WithAttachments(1)))
			reported, reportErr = nodestatus.ApplyAsNode(ctx, c, ns, apply, "node-late")
		}()
		wg.Wait()
		if releaseErr != nil && !apierrors.IsNotFound(releaseErr) {
			t.Fatalf("%s: the releasing write: %v", name, releaseErr)
		}
		if reportErr != nil {
			t.Fatalf("%s: node-late's report: %v", name, reportErr)
		}
		if reported == nil {
			return false // the Network was gone before the report: nothing was lost
		}
		n, err := networks.Get(ctx, name, metav1.GetOptions{})
		if err != nil || !protProtected(n) {
			t.Fatalf("%s: node-late's report of a pod was accepted, then the Network was released: %+v, %v", name, n, err)
		}
		return true
	}
	counts := map[string]int{}
	for i := range 40 {
		idle := fmt.Sprintf("idle-%d", i)
		if _, err := networks.Create(ctx, newNetwork(idle, fmt.Sprintf("10.215.%d.0/24", i), ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if race(idle, func() error { return networks.Delete(ctx, idle, metav1.DeleteOptions{}) }) {
			counts["delete: report first, kept"]++
		} else {
			counts["delete: released first"]++
		}

		held := fmt.Sprintf("held-%d", i)
		if _, err := networks.Create(ctx, newNetwork(held, fmt.Sprintf("10.216.%d.0/24", i), ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		protReport(ctx, t, c, ns, held, "node-b", 1)
		if err := networks.Delete(ctx, held, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if race(held, func() error {
			apply := applyv1.Network(held, ns).WithStatus(applyv1.NetworkStatus().WithNodes(applyv1.NetworkNodeStatus().
				WithNodeName("node-b").WithReady(true).WithObservedGeneration(1).WithAttachments(0)))
			_, err := nodestatus.ApplyAsNode(ctx, c, ns, apply, "node-b")
			return err
		}) {
			counts["status: report first, kept"]++
		} else {
			counts["status: released first"]++
		}
	}
	t.Logf("orderings seen: %v", counts)
}
