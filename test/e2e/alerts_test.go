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
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// fillNetwork creates the /28 "nearly" (13 usable addresses) and reports one node's leases through
// networks/status as used goes 5, 10, 11, 13 (80% of 13 is 10.4: the threshold is crossed once,
// between 10 and 11), checking after each write the USED and AVAILABLE columns kubectl prints.
func fillNetwork(t *testing.T, c *standalone) {
	t.Helper()
	c.kubectl(t, "create", "-f", writeManifest(t, "nearly.yaml", networkYAML("nearly", "10.88.0.0/28", "  gateway: 10.88.0.1")))
	for _, used := range []int{5, 10, 11, 13} {
		patch := fmt.Sprintf(`{"status":{"nodes":[{"nodeName":"n1","ready":true,"observedGeneration":1,"leases":%d}]}}`, used)
		c.kubectl(t, "patch", "network", "nearly", "--subresource=status", "--type=merge", "-p", patch)
		row := fmt.Sprintf(`nearly\s+10\.88\.0\.0/28\s+10\.88\.0\.1\s+True\s+%d\s+%d\s+\S+`, used, 13-used)
		if out := c.kubectl(t, "get", "networks", "nearly"); !regexpLine(out, row) {
			t.Fatalf("used %d: kubectl get networks, want USED %d AVAILABLE %d:\n%s", used, used, 13-used, out)
		}
		wide := fmt.Sprintf(`nearly\s+10\.88\.0\.0/28\s+10\.88\.0\.1\s+True\s+%d\s+%d\s+\S+\s+Realized\s+1\s+13\s+0\b`, used, 13-used)
		if out := c.kubectl(t, "get", "networks", "nearly", "-o", "wide"); !regexpLine(out, wide) {
			t.Errorf("used %d: kubectl get networks -o wide, want TOTAL 13 ALLOCATED 0:\n%s", used, out)
		}
	}
}

// TestCapacityAlertsStandalone: the columns through kubectl, and a crossing of 80% used is no
// error without an Events API (the status writes succeed; no Event is recorded anywhere).
func TestCapacityAlertsStandalone(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	s := startStandalone(t, "--controllers=false")
	fillNetwork(t, s)
	// The gauges follow the watch cache: the last status write shows within moments.
	eventually(t, time.Minute, "the gauges of the last status write on /metrics", func() (bool, string) {
		out := s.kubectl(t, "get", "--raw", "/metrics")
		var lacking []string
		for _, want := range []string{
			`network_apiserver_network_addresses{name="nearly",namespace="default",state="used"} 13`,
			`network_apiserver_network_addresses{name="nearly",namespace="default",state="available"} 0`,
		} {
			if !strings.Contains(out, want+"\n") {
				lacking = append(lacking, want)
			}
		}
		return len(lacking) == 0, "/metrics lacks " + strings.Join(lacking, ", ")
	})
}

// TestCapacityAlertsAggregated: behind kube-apiserver, the columns through kubectl, and the
// crossing of 80% gives one Warning Event on the Network (kubectl get events); the fall back
// below gives one Normal Event, after which no second Warning can still be on its way (one
// broadcaster sends them in order).
func TestCapacityAlertsAggregated(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	c := localCluster(t)
	fillNetwork(t, c)
	c.kubectl(t, "patch", "network", "nearly", "--subresource=status", "--type=merge", "-p",
		`{"status":{"nodes":[{"nodeName":"n1","ready":true,"observedGeneration":1,"leases":2}]}}`)

	events := func() string {
		out, _ := c.kubectlErr("get", "events", "--field-selector", "involvedObject.kind=Network,involvedObject.name=nearly",
			"-o", `jsonpath={range .items[*]}{.type} {.reason} {.count} {.involvedObject.apiVersion} {.source.component}: {.message}{"\n"}{end}`)
		return out
	}
	eventually(t, time.Minute, "the Event of the fall below 80%", func() (bool, string) {
		out := events()
		return strings.Contains(out, "AddressesBelowThreshold"), out
	})
	out := events()
	want := []string{
		"Warning AddressesNearlyExhausted 1 samplecrd.k8s.io/v1 network-apiserver: 11 of 13 usable addresses used (84%), at or above 80%; 2 available",
		"Normal AddressesBelowThreshold 1 samplecrd.k8s.io/v1 network-apiserver: 2 of 13 usable addresses used (15%), below 80% again; 11 available",
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.Contains(out, want[0]+"\n") || !strings.Contains(out, want[1]+"\n") {
		t.Errorf("events of the Network:\n%s\nwant exactly:\n%s", out, strings.Join(want, "\n"))
	}
	t.Logf("kubectl get events:\n%s", c.kubectl(t, "get", "events", "--field-selector", "involvedObject.name=nearly"))
}

// TestCapacityEventOnceWithTwoReplicas: two replicas on one etcd, each node's entry applied as its
// agent does but through a different replica, both at once. Every round takes used from 10 to 12
// of 13 in two concurrent writes (whichever lands first crosses 80%): one Warning per round,
// never two, although both replicas saw a write take the Network above 80%. The rounds' resets
// (12 back to 10) alternate between the replicas, and the last event each replica sends is a
// Normal one, so once every Normal has arrived no Warning is still on its way.
func TestCapacityEventOnceWithTwoReplicas(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	c := localCluster(t, "REPLICAS=2")
	c.kubectl(t, "create", "-f", writeManifest(t, "nearly.yaml", networkYAML("nearly", "10.89.0.0/28", "  gateway: 10.89.0.1")))
	var replicas [2]versioned.Interface
	for i := range replicas {
		cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		cfg.Host = fmt.Sprintf("https://127.0.0.1:%d", c.local.NetworkPort+i)
		cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = nil, c.local.Path("pki/serving-ca.crt")
		if replicas[i], err = versioned.NewForConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	apply := func(replica int, node string, leases int32) {
		n, err := replicas[replica].SamplecrdV1().Networks("default").Get(ctx, "nearly", metav1.GetOptions{})
		if err != nil {
			t.Error(err)
			return
		}
		entry := v1.NetworkNodeStatus{NodeName: node, Ready: true, ObservedGeneration: n.Generation, Leases: ptr.To(leases)}
		if _, err := nodestatus.ApplyNodeEntry(ctx, replicas[replica], n, entry, ""); err != nil {
			t.Errorf("replica %d, %s leases %d: %v", replica, node, leases, err)
		}
	}
	const rounds = 6
	apply(0, "n1", 5)
	apply(1, "n2", 5) // used 10 of 13: below 80%
	for round := range rounds {
		var both sync.WaitGroup
		both.Go(func() { apply(0, "n1", 6) })
		both.Go(func() { apply(1, "n2", 6) })
		both.Wait() // used 12
		// Back to 10, through one replica then the other.
		apply(round%2, "n1", 5)
		apply(round%2, "n2", 5)
		if t.Failed() {
			t.FailNow()
		}
	}
	// The last round's reset went through replica 1; one more crossing up and down through
	// replica 0 makes its last event a Normal one too.
	apply(0, "n1", 6)
	apply(0, "n1", 5)

	sums := func() (map[string]int, string) {
		out, _ := c.kubectlErr("get", "events", "--field-selector", "involvedObject.kind=Network,involvedObject.name=nearly",
			"-o", `jsonpath={range .items[*]}{.reason} {.count}{"\n"}{end}`)
		got := map[string]int{}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 {
				n, _ := strconv.Atoi(f[1])
				got[f[0]] += n
			}
		}
		return got, out
	}
	eventually(t, 2*time.Minute, "every Normal event", func() (bool, string) {
		got, out := sums()
		return got["AddressesBelowThreshold"] >= rounds+1, out
	})
	got, out := sums()
	if got["AddressesNearlyExhausted"] != rounds+1 || got["AddressesBelowThreshold"] != rounds+1 {
		t.Errorf("events (reason count):\n%s\nwant %d crossings up and %d down", out, rounds+1, rounds+1)
	}
	t.Logf("events (reason count):\n%s", out)
}
