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
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	samplecrdv1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	typedv1 "github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/typed/samplecrd/v1"
)

// runtimeClassDir is, inside every local node, the CNI directory of containerd's runtime handler
// samplecrd (hack/local-up-nodes.sh), which the deployed agents write their configuration lists to.
const runtimeClassDir = "/etc/cni/samplecrd.d"

// podPID returns the pid of the first container of pod (namespace ns), read from the containerd
// of the node it runs on.
func (c *nodeCluster) podPID(t *testing.T, ns, pod string) (int, string) {
	t.Helper()
	out := c.kubectl(t, "-n", ns, "get", "pod", pod, "-o", `jsonpath={.spec.nodeName} {.status.containerStatuses[0].containerID}`)
	f := strings.Fields(out)
	if len(f) != 2 || !strings.HasPrefix(f[1], "containerd://") {
		t.Fatalf("pod %s/%s: node and container: %q", ns, pod, out)
	}
	node, id := f[0], strings.TrimPrefix(f[1], "containerd://")
	sock := filepath.Join(c.state, "nodes", node, "run", "containerd", "containerd.sock")
	b, err := exec.Command("ctr", "--address", sock, "-n", "k8s.io", "tasks", "ls").CombinedOutput()
	if err != nil {
		t.Fatalf("ctr tasks ls on %s: %v\n%s", node, err, b)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err != nil {
				t.Fatalf("ctr tasks ls on %s: %q", node, line)
			}
			return pid, node
		}
	}
	t.Fatalf("pod %s/%s: no task %s on %s:\n%s", ns, pod, id, node, b)
	return 0, ""
}

// podInterfaces lists the interfaces of the network namespace of pid: name to its IPv4
// address with prefix length (empty without one) and MTU.
type podInterface struct {
	addr netip.Prefix
	mtu  int
	mac  string
}

func (i podInterface) String() string {
	return fmt.Sprintf("%s mtu %d mac %s", i.addr, i.mtu, i.mac)
}

func podInterfaces(t *testing.T, pid int) map[string]podInterface {
	t.Helper()
	nsenter := func(args ...string) []map[string]any {
		out, err := exec.Command("nsenter", append([]string{"--net=" + fmt.Sprintf("/proc/%d/ns/net", pid), "ip", "-j"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("ip %s in pid %d's namespace: %v\n%s", strings.Join(args, " "), pid, err, out)
		}
		var v []map[string]any
		if err := json.Unmarshal(out, &v); err != nil {
			t.Fatalf("ip -j %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return v
	}
	ifs := map[string]podInterface{}
	for _, l := range nsenter("-4", "addr", "show") {
		name, _ := l["ifname"].(string)
		mtu, _ := l["mtu"].(float64)
		pi := podInterface{mtu: int(mtu)}
		infos, _ := l["addr_info"].([]any)
		for _, a := range infos {
			m, _ := a.(map[string]any)
			local, _ := m["local"].(string)
			plen, _ := m["prefixlen"].(float64)
			if p, err := netip.ParsePrefix(fmt.Sprintf("%s/%d", local, int(plen))); err == nil && m["scope"] == "global" {
				pi.addr = p
			}
		}
		ifs[name] = pi
	}
	// Every link, also those without an IPv4 address (missing from "ip -4 addr"), and its MAC.
	for _, l := range nsenter("link", "show") {
		name, _ := l["ifname"].(string)
		pi, ok := ifs[name]
		if !ok {
			mtu, _ := l["mtu"].(float64)
			pi = podInterface{mtu: int(mtu)}
		}
		pi.mac, _ = l["address"].(string)
		ifs[name] = pi
	}
	return ifs
}

// runtimeClassPods is TestDeployOnNodes' step for pods that join a Network as a second
// interface through the runtime handler samplecrd: one pod on each node, each reaching the
// other on the Network (across the nodes' VXLAN segment) while the control plane's pods keep
// the default handler and one interface. The agents write their configuration lists to the
// handler's directory (the deploy overlay's hostPath), and backend is the only Network then.
func runtimeClassPods(t *testing.T, c *nodeCluster, networks typedv1.NetworkInterface) {
	ctx := context.Background()
	// Both nodes are ready for backend's segment: each entry with its InternalIP as underlay
	// address, blocks and the segment's MTU, and a VNI from the server. The VXLAN devices, like
	// the bridges, wait for the first pod on each node (the agents' default, --bridge-on-attach).
	want := map[string]string{"node1": "10.200.0.11", "node2": "10.200.0.12"}
	entries := map[string]samplecrdv1.NetworkNodeStatus{}
	var network *samplecrdv1.Network
	segment := func(withDevice bool) func() (bool, string) {
		return func() (bool, string) {
			n, err := networks.Get(ctx, "backend", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			network = n
			clear(entries)
			for _, e := range n.Status.Nodes {
				if e.Ready && e.UnderlayAddress == want[e.NodeName] && (e.VXLAN != "") == withDevice && len(e.Blocks) > 0 && e.MTU == 1450 {
					entries[e.NodeName] = e
				}
			}
			b, _ := json.Marshal(n.Status)
			return len(entries) == 2 && n.Status.VNI != 0, string(b)
		}
	}
	eventually(t, 90*time.Second, "backend ready on node1 and node2, no VXLAN device before a pod", segment(false))
	t.Logf("backend: VNI %d; node1 blocks %v, node2 blocks %v", network.Status.VNI, entries["node1"].Blocks, entries["node2"].Blocks)

	// The handler's directory on each node: the primary configuration and backend's, nothing
	// else (it takes the first two); the node's primary directory has none of ours.
	for node, e := range entries {
		dir := c.nodeRuntimeClassDir(node)
		var names []string
		eventually(t, 30*time.Second, node+": "+runtimeClassDir+" holds the primary and backend's configuration", func() (bool, string) {
			des, err := os.ReadDir(dir)
			if err != nil {
				return false, err.Error()
			}
			names = names[:0]
			for _, de := range des {
				names = append(names, de.Name())
			}
			return slices.Equal(names, []string{"10-nodes.conflist", "90-samplecrd-" + e.Bridge + ".conflist"}), strings.Join(names, " ")
		})
		if ours, _ := filepath.Glob(filepath.Join(c.state, "nodes", node, "etc", "upper", "cni", "net.d", "90-samplecrd-*")); len(ours) > 0 {
			t.Errorf("%s: the agent wrote to the primary directory: %v", node, ours)
		}
	}

	pods := ""
	for _, node := range []string{"node1", "node2"} {
		pods += fmt.Sprintf(`---
apiVersion: v1
kind: Pod
metadata: {name: across-%[1]s, namespace: default}
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
	start := time.Now()
	c.kubectl(t, "apply", "-f", writeManifest(t, "across.yaml", pods))
	c.kubectl(t, "wait", "--for=condition=Ready", "pod/across-node1", "pod/across-node2", "--timeout=120s")
	t.Logf("two pods with RuntimeClass samplecrd Ready in %s", time.Since(start).Round(time.Millisecond))
	// Each pod's ADD made the node's bridge (with the gateway) and VXLAN device; the agents
	// report the devices.
	eventually(t, 60*time.Second, "backend's segment on node1 and node2, with VXLAN devices", segment(true))
	for node, e := range entries {
		if out, err := c.nodeExec(t, node, "ip", "-o", "addr", "show", "dev", e.Bridge); err != nil || !strings.Contains(out, "10.10.0.1/24") {
			t.Errorf("%s: bridge %s after a pod attached: %v\n%s", node, e.Bridge, err, out)
		}
	}

	type pod struct {
		pid        int
		eth0, net1 netip.Prefix
		mac1       string
	}
	got := map[string]pod{}
	for _, node := range []string{"node1", "node2"} {
		name := "across-" + node
		pid, runsOn := c.podPID(t, "default", name)
		if runsOn != node {
			t.Fatalf("%s runs on %s", name, runsOn)
		}
		ifs := podInterfaces(t, pid)
		t.Logf("%s: %v", name, ifs)
		names := make([]string, 0, len(ifs))
		for n := range ifs {
			names = append(names, n)
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"eth0", "eth1", "lo"}) {
			t.Fatalf("%s: interfaces %v, want lo, eth0 (the node's primary network) and eth1 (backend)", name, names)
		}
		// eth0 is the primary network's and the pod's address; eth1 is backend's, from this
		// node's blocks, with the prefix's length and the segment's MTU.
		podIP := strings.TrimSpace(c.kubectl(t, "get", "pod", name, "-o", "jsonpath={.status.podIP}"))
		if ifs["eth0"].addr.Addr().String() != podIP || !netip.MustParsePrefix("10.201.0.0/16").Contains(ifs["eth0"].addr.Addr()) {
			t.Errorf("%s: eth0 %s, pod IP %s: want the pod IP from the primary network's 10.201.0.0/16", name, ifs["eth0"].addr, podIP)
		}
		eth1 := ifs["eth1"]
		inBlock := false
		for _, b := range entries[node].Blocks {
			inBlock = inBlock || netip.MustParsePrefix(b).Contains(eth1.addr.Addr())
		}
		if eth1.addr.Bits() != 24 || !inBlock || eth1.mtu != 1450 {
			t.Errorf("%s: eth1 %s MTU %d: want an address of %s's blocks %v with length 24, MTU 1450", name, eth1.addr, eth1.mtu, node, entries[node].Blocks)
		}
		got[node] = pod{pid: pid, eth0: ifs["eth0"].addr, net1: eth1.addr, mac1: eth1.mac}
	}
	if got["node1"].net1.Addr() == got["node2"].net1.Addr() {
		t.Fatalf("both pods have %s on backend", got["node1"].net1.Addr())
	}

	// Each pod reaches the other on backend: the route is eth1's, ICMP echo is answered, and the
	// other pod's server answers with its name and node.
	for src, dst := range map[string]string{"node1": "node2", "node2": "node1"} {
		from, to := got[src], got[dst]
		out, err := exec.Command("nsenter", "--net="+fmt.Sprintf("/proc/%d/ns/net", from.pid), "ip", "route", "get", to.net1.Addr().String()).CombinedOutput()
		if err != nil || !strings.Contains(string(out), " dev eth1 ") {
			t.Errorf("across-%s: route to %s: %v\n%s (want dev eth1)", src, to.net1.Addr(), err, out)
		}
		pingOnceNS(t, "across-"+src+" -> across-"+dst, fmt.Sprintf("/proc/%d/ns/net", from.pid), to.net1.Addr())
		answer, err := httpGetIn(from.pid, "http://"+to.net1.Addr().String()+":8080/")
		if err != nil || answer != "across-"+dst+" "+dst+"\n" {
			t.Errorf("across-%s -> http://%s:8080/: %q, %v", src, to.net1.Addr(), answer, err)
		}
	}
	// The frames crossed the segment: node1's VXLAN device learnt across-node2's eth1 MAC
	// behind node2's underlay address.
	mac := got["node2"].mac1
	fdb, err := c.nodeExec(t, "node1", "bridge", "fdb", "show", "dev", entries["node1"].VXLAN)
	if err != nil || mac == "" || !regexpLine(fdb, regexp.QuoteMeta(mac)+` .*dst 10\.200\.0\.12\b.*`) {
		t.Errorf("node1's %s: no learnt entry for across-node2's eth1 (%s) behind 10.200.0.12: %v\n%s", entries["node1"].VXLAN, mac, err, fdb)
	}

	// The control plane's pods keep the default handler: an apiserver replica has lo and eth0.
	replica := strings.Fields(c.kubectl(t, "-n", "network-apiserver", "get", "pods", "-l", "app.kubernetes.io/component=apiserver", "-o", "jsonpath={.items[*].metadata.name}"))
	if len(replica) == 0 {
		t.Fatal("no apiserver replica")
	}
	if rc := c.kubectl(t, "-n", "network-apiserver", "get", "pod", replica[0], "-o", "jsonpath={.spec.runtimeClassName}"); rc != "" {
		t.Errorf("%s: runtimeClassName %q", replica[0], rc)
	}
	pid, _ := c.podPID(t, "network-apiserver", replica[0])
	ifs := podInterfaces(t, pid)
	if _, ok := ifs["eth1"]; ok || len(ifs) != 2 || !ifs["eth0"].addr.IsValid() {
		t.Errorf("%s (default handler): interfaces %v, want lo and eth0 only", replica[0], ifs)
	}

	// Deleting the pods runs DEL with the same configuration: their leases on backend (host-local's
	// files in the node's /var/lib/cni/networks) are gone.
	lease := func(node string) string {
		return filepath.Join(c.state, "nodes", node, "var", "lib", "cni", "networks", "samplecrd_default_backend", got[node].net1.Addr().String())
	}
	for node := range got {
		if _, err := os.Stat(lease(node)); err != nil {
			t.Errorf("%s: the pod's lease on backend: %v", node, err)
		}
	}
	c.kubectl(t, "delete", "pod", "across-node1", "across-node2", "--wait=true", "--timeout=120s")
	for node := range got {
		if _, err := os.Stat(lease(node)); !os.IsNotExist(err) {
			t.Errorf("%s: lease %s still there after the pod was deleted (%v)", node, lease(node), err)
		}
	}
}
