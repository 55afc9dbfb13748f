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
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/cmd/agent"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	applyv1 "github.com/samplecrd/network-apiserver/pkg/generated/applyconfiguration/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// reportNode applies node's status entry the way its controller does.
func reportNode(t *testing.T, client versioned.Interface, ns, name, node string, generation int64) {
	t.Helper()
	apply := applyv1.Network(name, ns).WithStatus(applyv1.NetworkStatus().WithNodes(
		applyv1.NetworkNodeStatus().WithNodeName(node).WithBridge("nwtest").WithReady(true).
			WithMessage("bridge and CNI configuration match the spec").WithObservedGeneration(generation)))
	if _, err := client.SamplecrdV1().Networks(ns).ApplyStatus(context.Background(), apply,
		metav1.ApplyOptions{FieldManager: nodestatus.FieldManagerPrefix + node, Force: true}); err != nil {
		t.Fatal(err)
	}
}

// waitNetwork polls a Network until ok says so.
func waitNetwork(t *testing.T, client versioned.Interface, ns, name, what string, ok func(*v1.Network) bool) *v1.Network {
	t.Helper()
	var n *v1.Network
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		n, err = client.SamplecrdV1().Networks(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && ok(n), err
	})
	if err != nil {
		t.Fatalf("network %s/%s never %s: %v; status %+v", ns, name, what, err, n.Status)
	}
	return n
}

func nodeNames(n *v1.Network) []string {
	var names []string
	for _, e := range n.Status.Nodes {
		names = append(names, e.NodeName)
	}
	return names
}

// A bundled controller that lacks CAP_NET_ADMIN runs a stand-in instead: it writes this node's own
// entry of every Network (not ready, the reason, a message that says why; what this node reported
// earlier as root, its bridge, is dropped) and no Network-level condition; the server derives
// Ready=Unknown with that reason where no other node reports, and from the other nodes' entries
// where they do; a controller of this node that reports again takes over its entry.
func TestUnavailableControllerMarksNetworksUnknown(t *testing.T) {
	s := framework.StartForTest(t)
	client := versioned.NewForConfigOrDie(s.Config)
	ctx := context.Background()
	const ns = "unavailable"
	for _, n := range []*v1.Network{newNetwork("stale", "10.81.0.0/24", ""), newNetwork("shared", "10.82.0.0/24", "")} {
		if _, err := client.SamplecrdV1().Networks(ns).Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// What an earlier run as root on this node reported, and another node's report.
	reportNode(t, client, ns, "stale", "node-it", 1)
	reportNode(t, client, ns, "shared", "node-it", 1)
	reportNode(t, client, ns, "shared", "node-other", 1)
	ctrlWaitReadyIn(t, client, ns, "stale")

	o := agent.NewControllerOptions()
	o.NodeName = "node-it"
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- o.RunUnavailable(runCtx, s.Config, []string{"CAP_NET_ADMIN"}) }()
	stopped := false
	stopStandIn := func() {
		if !stopped {
			stopped = true
			stop()
			if err := <-done; err != nil {
				t.Errorf("RunUnavailable: %v", err)
			}
		}
	}
	t.Cleanup(stopStandIn)

	unknown := func(generation int64) func(*v1.Network) bool {
		return func(n *v1.Network) bool {
			c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
			e := n.Status.Nodes
			return len(e) == 1 && e[0].NodeName == "node-it" && !e[0].Ready && e[0].Bridge == "" &&
				e[0].Reason == agent.ReasonNeedsNetAdmin && e[0].ObservedGeneration == generation &&
				c != nil && c.Status == metav1.ConditionUnknown && c.Reason == agent.ReasonNeedsNetAdmin && c.ObservedGeneration == generation
		}
	}
	n := waitNetwork(t, client, ns, "stale", "turned Ready=Unknown from this node's entry", unknown(1))
	if msg := meta.FindStatusCondition(n.Status.Conditions, "Ready").Message; !strings.Contains(msg, "node-it is not running: it needs CAP_NET_ADMIN") {
		t.Errorf("the Ready message does not say why: %q", msg)
	}
	waitNetwork(t, client, ns, "shared", "Ready from node-other's entry, naming node-it", func(n *v1.Network) bool {
		c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return len(n.Status.Nodes) == 2 && c != nil && c.Status == metav1.ConditionTrue &&
			strings.Contains(c.Message, "no controller running on 1 node(s): node-it: ")
	})
	for _, name := range []string{"stale", "shared"} {
		n := waitNetwork(t, client, ns, name, "read", func(*v1.Network) bool { return true })
		for _, c := range n.Status.Conditions {
			for _, mf := range n.ManagedFields {
				if mf.Manager == nodestatus.FieldManagerPrefix+"node-it" && mf.FieldsV1 != nil && strings.Contains(string(mf.FieldsV1.Raw), "f:conditions") {
					t.Errorf("%s: node-it's field manager owns status.conditions (%s)", name, c.Type)
				}
			}
		}
	}

	// New Networks, and a new generation of one.
	if _, err := client.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("fresh", "10.83.0.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	fresh := waitNetwork(t, client, ns, "fresh", "turned Ready=Unknown", unknown(1))
	fresh.Spec.Gateway = "10.83.0.254"
	if _, err := client.SamplecrdV1().Networks(ns).Update(ctx, fresh, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitNetwork(t, client, ns, "fresh", "said Unknown for generation 2", unknown(2))

	// The controller of this node can run again (as root): its report decides Ready.
	stopStandIn()
	reportNode(t, client, ns, "fresh", "node-it", 2)
	n = waitNetwork(t, client, ns, "fresh", "turned Ready=True from the node's report", func(n *v1.Network) bool {
		c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == 2
	})
	if got := nodeNames(n); len(got) != 1 || got[0] != "node-it" {
		t.Errorf("status.nodes %v", got)
	}
}

// ctrlWaitReadyIn waits for Ready=True on a Network in namespace ns.
func ctrlWaitReadyIn(t *testing.T, client versioned.Interface, ns, name string) {
	t.Helper()
	waitNetwork(t, client, ns, name, "turned Ready=True", func(n *v1.Network) bool {
		c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return c != nil && c.Status == metav1.ConditionTrue
	})
}
