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
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/cmd/agent"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// TestProtectionWritesPerNode counts the writes of a Network from its create to Ready on every
// node of three agents (each in a network namespace of its own), from a watch: each write is one
// event. No agent writes the Network itself (its finalizers): the create carries the finalizer
// and the nodes write only their entries. The counts are logged (issue 25 item 5 compares them).
func TestProtectionWritesPerNode(t *testing.T) {
	netnstest.RequireRoot(t)
	s := framework.StartForTest(t)
	client := versioned.NewForConfigOrDie(s.Config)
	nodes := []string{"node-w1", "node-w2", "node-w3"}
	for _, node := range nodes {
		ns := netnstest.New(t, node)
		o := agent.NewControllerOptions()
		o.NodeName, o.BackendNetNS, o.CNIConfDir = node, ns.Path, t.TempDir()
		o.ResyncPeriod, o.GCInterval = time.Hour, time.Hour
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- o.Run(ctx, s.Config, agent.Core{}) }()
		t.Cleanup(func() { cancel(); <-done })
	}
	ctx := testContext(t)
	networks := client.SamplecrdV1().Networks("ctrl")
	start, err := networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w, err := networks.Watch(ctx, metav1.ListOptions{ResourceVersion: start.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if _, err := networks.Create(ctx, &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: "counted"},
		Spec: v1.NetworkSpec{CIDR: "10.78.0.0/24"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var writes, finalizerWrites, statusWrites int
	var last *v1.Network
	for {
		ev := nextEvent(t, w)
		n, ok := ev.Object.(*v1.Network)
		if !ok || (ev.Type != watch.Added && ev.Type != watch.Modified) {
			t.Fatalf("event %s %T", ev.Type, ev.Object)
		}
		writes++
		if last != nil {
			if !slices.Equal(last.Finalizers, n.Finalizers) {
				finalizerWrites++
			} else {
				statusWrites++
			}
		}
		last = n
		c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		if c != nil && c.Status == metav1.ConditionTrue && len(n.Status.Nodes) == len(nodes) && n.Status.ObservedGeneration == n.Generation {
			break
		}
	}
	t.Logf("create → Ready on %d nodes: %d writes of the Network (the create, %d finalizer writes, %d status writes: %.2f per node)",
		len(nodes), writes, finalizerWrites, statusWrites, float64(writes-1)/float64(len(nodes)))
	// The requests behind them, refused ones (409) included, from the server's metrics (which
	// count from the start of this test binary).
	before := writeRequests(t, client)
	t.Logf("write requests on networks until Ready: %s", before)
	if finalizerWrites != 0 {
		t.Errorf("%d writes changed the finalizers after the create, want none (the create carries it)", finalizerWrites)
	}

	// Deleted with no pod attached anywhere: the writes until it is gone.
	if err := networks.Delete(ctx, "counted", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deleteWrites := 0
	for {
		ev := nextEvent(t, w)
		deleteWrites++
		if ev.Type == watch.Deleted {
			break
		}
	}
	t.Logf("delete → gone: %d writes of the Network; write requests on networks until now: %s", deleteWrites, writeRequests(t, client))
}

// writeRequests sums the server's apiserver_request_total for writes on networks by verb,
// subresource and code.
func writeRequests(t *testing.T, client *versioned.Clientset) string {
	t.Helper()
	requests := map[string]float64{}
	for sample, v := range admMetrics(t, client) {
		if !strings.HasPrefix(sample, "apiserver_request_total{") || !strings.Contains(sample, `resource="networks"`) {
			continue
		}
		verb, sub, code := label(sample, "verb"), label(sample, "subresource"), label(sample, "code")
		if verb == "GET" || verb == "LIST" || verb == "WATCH" {
			continue
		}
		requests[fmt.Sprintf("%s %s %s", verb, "networks/"+sub, code)] += v
	}
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(requests)) {
		parts = append(parts, fmt.Sprintf("%s: %v", k, requests[k]))
	}
	return strings.Join(parts, "; ")
}

// label returns the value of name in a metric sample's labels.
func label(sample, name string) string {
	_, rest, ok := strings.Cut(sample, name+`="`)
	if !ok {
		return ""
	}
	value, _, _ := strings.Cut(rest, `"`)
	return value
}
