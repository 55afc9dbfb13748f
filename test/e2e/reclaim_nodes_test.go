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
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	samplecrdv1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	typedv1 "github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/typed/samplecrd/v1"
)

// deployReclaimGrace is the agents' --lease-reclaim-grace in TestDeployOnNodes' overlay: short,
// so that a leak goes within the test, and every other step runs with the reclaim active.
const deployReclaimGrace = 15 * time.Second

// leakedContainer is the container id of the leaked lease: no sandbox of containerd's has it.
const leakedContainer = "00dead00beef00dead00beef00dead00beef00dead00beef00dead00beef0000"

// leaseReclaim is TestDeployOnNodes' step for leaked leases on the real nodes: with the agents
// asking each node's containerd (ListPodSandbox on /run/containerd/containerd.sock), a lease file
// for a container containerd does not have (as a node that crashed before a DEL leaves) is
// released after the grace, with a LeaseReclaimed Event and the agent's counter, while two live
// pods (RuntimeClass samplecrd, one per node) keep their leases and their addresses.
func leaseReclaim(t *testing.T, c *nodeCluster, networks typedv1.NetworkInterface) {
	ctx := context.Background()
	entries := map[string]samplecrdv1.NetworkNodeStatus{}
	eventually(t, 60*time.Second, "backend's entries on node1 and node2 say leaseReclaim ContainerRuntime", func() (bool, string) {
		n, err := networks.Get(ctx, "backend", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		clear(entries)
		var says []string
		for _, e := range n.Status.Nodes {
			says = append(says, e.NodeName+": "+e.LeaseReclaim)
			if e.LeaseReclaim == samplecrd.LeaseReclaimContainerRuntime && len(e.Blocks) > 0 {
				entries[e.NodeName] = e
			}
		}
		return len(entries) == 2, strings.Join(says, "; ")
	})

	leaseDir := func(node string) string {
		return filepath.Join(c.state, "nodes", node, "var", "lib", "cni", "networks", "samplecrd_default_backend")
	}
	pods := ""
	for _, node := range []string{"node1", "node2"} {
		pods += fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: keep-%[1]s, namespace: default}
spec:
  runtimeClassName: samplecrd
  nodeName: %[1]s
  terminationGracePeriodSeconds: 5
  containers:
  - name: serve
    image: local/test:1
    imagePullPolicy: Never
    env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
`, node)
	}
	c.kubectl(t, "apply", "-f", writeManifest(t, "keep.yaml", pods))
	defer c.kubectl(t, "delete", "pod", "keep-node1", "keep-node2", "--wait=true", "--timeout=120s")
	c.kubectl(t, "wait", "--for=condition=Ready", "pod/keep-node1", "pod/keep-node2", "--timeout=120s")
	created := time.Now()

	// Each live pod: its eth1 address, and host-local's record of it naming its sandbox.
	type live struct {
		pid     int
		addr    netip.Prefix
		sandbox string
	}
	pods2 := map[string]live{}
	for _, node := range []string{"node1", "node2"} {
		pid, _ := c.podPID(t, "default", "keep-"+node)
		addr := podInterfaces(t, pid)["eth1"].addr
		record, err := os.ReadFile(filepath.Join(leaseDir(node), addr.Addr().String()))
		if !addr.IsValid() || err != nil {
			t.Fatalf("keep-%s: eth1 %v, lease record: %v", node, addr, err)
		}
		sandbox, _, _ := strings.Cut(string(record), "\r\n")
		pods2[node] = live{pid: pid, addr: addr, sandbox: sandbox}
		t.Logf("keep-%s: eth1 %s, sandbox %s", node, addr, sandbox)
	}

	// The leak: a record, written an hour ago, for an address of node1's block that nobody holds.
	block := netip.MustParsePrefix(entries["node1"].Blocks[0])
	leaked := netip.Addr{}
	for a := block.Addr().Next().Next(); block.Contains(a); a = a.Next() {
		if _, err := os.Stat(filepath.Join(leaseDir("node1"), a.String())); os.IsNotExist(err) {
			leaked = a
		}
	}
	if !leaked.IsValid() {
		t.Fatalf("no free address in node1's block %s", block)
	}
	leakPath := filepath.Join(leaseDir("node1"), leaked.String())
	if err := os.WriteFile(leakPath, []byte(leakedContainer+"\r\neth1"), 0o600); err != nil {
		t.Fatal(err)
	}
	hourAgo := time.Now().Add(-time.Hour)
	if err := os.Chtimes(leakPath, hourAgo, hourAgo); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	t.Logf("leaked lease %s for container %s on node1", leaked, leakedContainer)

	eventually(t, deployReclaimGrace+60*time.Second, "the leaked lease released", func() (bool, string) {
		_, err := os.Stat(leakPath)
		return os.IsNotExist(err), fmt.Sprint(err)
	})
	took := time.Since(written)
	t.Logf("leaked lease released %s after it was written (grace %s)", took.Round(time.Millisecond), deployReclaimGrace)
	if took < deployReclaimGrace {
		t.Errorf("the leaked lease went %s after it was written, before the grace of %s", took, deployReclaimGrace)
	}

	// Its Event, naming node, address and container.
	eventually(t, 30*time.Second, "a LeaseReclaimed Event on backend", func() (bool, string) {
		out := c.kubectl(t, "-n", "default", "get", "events", "--field-selector", "reason=LeaseReclaimed,involvedObject.name=backend",
			"-o", `jsonpath={range .items[*]}{.involvedObject.kind} {.type} {.message}{"\n"}{end}`)
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "Network Normal ") && strings.Contains(line, "node1") &&
				strings.Contains(line, " "+leaked.String()+":") && strings.Contains(line, leakedContainer) {
				return true, line
			}
		}
		return false, out
	})
	// The agent's counter on node1.
	metrics, err := httpGetIn(c.pid(t, "node1-holder"), "http://127.0.0.1:9469/metrics")
	m := regexp.MustCompile(`(?m)^network_agent_leases_reclaimed_total (\d+)$`).FindStringSubmatch(metrics)
	if err != nil || m == nil {
		t.Errorf("node1's agent metrics: no network_agent_leases_reclaimed_total (%v)", err)
	} else if n, _ := strconv.Atoi(m[1]); n < 1 {
		t.Errorf("node1's network_agent_leases_reclaimed_total = %d, want at least 1", n)
	}

	// The live pods' leases stay past the grace (their records are older than it by now, and
	// each pass has looked at them), and the pods keep their addresses.
	if wait := 2*deployReclaimGrace - time.Since(created); wait > 0 {
		time.Sleep(wait) // the reclaim must have had its chance at the live leases: no condition to wait for
	}
	for node, p := range pods2 {
		record, err := os.ReadFile(filepath.Join(leaseDir(node), p.addr.Addr().String()))
		if sandbox, _, _ := strings.Cut(string(record), "\r\n"); err != nil || sandbox != p.sandbox {
			t.Errorf("keep-%s: lease of %s is %q (%v), want its sandbox %s", node, p.addr, record, err, p.sandbox)
		}
		if got := podInterfaces(t, p.pid)["eth1"].addr; got != p.addr {
			t.Errorf("keep-%s: eth1 %s, was %s", node, got, p.addr)
		}
	}
	pingOnceNS(t, "keep-node1 -> keep-node2", fmt.Sprintf("/proc/%d/ns/net", pods2["node1"].pid), pods2["node2"].addr.Addr())

	// node1's entry counts the live pod's lease only.
	eventually(t, 60*time.Second, "node1's entry reports 1 lease", func() (bool, string) {
		n, err := networks.Get(ctx, "backend", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, e := range n.Status.Nodes {
			if e.NodeName == "node1" {
				return e.Leases != nil && *e.Leases == 1, fmt.Sprintf("leases %v", e.Leases)
			}
		}
		return false, "no entry"
	})
}
