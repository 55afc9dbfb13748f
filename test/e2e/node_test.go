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
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// nodeCluster is a local cluster with real nodes (hack/local-up-nodes.sh).
type nodeCluster struct {
	*standalone
	state    string
	cgPrefix string // the cluster's cgroups: <cgPrefix>-cp, <cgPrefix>-node<i>
}

func (c *nodeCluster) script(ctx context.Context, args ...string) (string, error) {
	out, err := c.local.Command(ctx, "local-up-nodes.sh", args...).CombinedOutput()
	return string(out), err
}

// pid reads one of the cluster's pid files (nodes/NAME.pid).
func (c *nodeCluster) pid(t *testing.T, name string) int {
	t.Helper()
	pid, err := c.local.PID(filepath.Join("nodes", name))
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// requireNodeSupport skips the test unless `make test-e2e-node` runs it (E2E_NODE=1: it
// installs the Debian packages and builds the node binaries) and this machine can run nodes.
func requireNodeSupport(t *testing.T) {
	t.Helper()
	netnstest.RequireRoot(t)
	if os.Getenv("E2E_NODE") != "1" {
		t.Skip("real nodes: run by make test-e2e-node (E2E_NODE=1)")
	}
	out, err := exec.Command(filepath.Join(repoRoot, "hack", "local-up-nodes.sh"), "check").CombinedOutput()
	if err != nil {
		t.Skipf("real nodes: %s", strings.TrimSpace(string(out)))
	}
}

// hostSnapshot is what a local cluster must leave as it found it: the host's network (links,
// addresses, routes, firewall), the global sysctls a kubelet would write, and the host paths a
// node writes to by default.
func hostSnapshot(t *testing.T) map[string]string {
	t.Helper()
	snap := map[string]string{}
	run := func(key string, name string, args ...string) {
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		snap[key] = string(out)
	}
	run("links", "ip", "-o", "link", "show")
	run("addresses", "ip", "-o", "addr", "show")
	run("routes", "ip", "route", "show", "table", "all")
	run("iptables", "iptables-save")
	run("nftables", "nft", "list", "ruleset")
	for _, s := range []string{"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
		"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes", "net/ipv4/ip_forward", "net/ipv4/conf/all/route_localnet",
		"net/bridge/bridge-nf-call-iptables", "net/netfilter/nf_conntrack_max"} {
		b, err := os.ReadFile("/proc/sys/" + s)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		snap["sysctl "+s] = string(b)
	}
	for _, p := range []string{"/etc/cni", "/opt/cni", "/var/lib/kubelet", "/var/lib/cni", "/var/lib/containerd",
		"/run/containerd", "/var/run/containerd", "/run/xtables.lock", "/var/log/containers", "/var/log/pods",
		"/etc/kubernetes"} {
		_, err := os.Lstat(p)
		snap["path "+p] = fmt.Sprint(err == nil)
	}
	return snap
}

func compareSnapshots(t *testing.T, when string, before, after map[string]string) {
	t.Helper()
	keys := make([]string, 0, len(before))
	for k := range before {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if before[k] != after[k] {
			t.Errorf("%s: the host's %s changed:\nbefore:\n%s\nafter:\n%s", when, k, before[k], after[k])
		}
	}
}

// httpGetIn GETs url from inside the network namespace of process pid.
func httpGetIn(pid int, url string) (string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	var conn net.Conn
	// The socket is made in the namespace; the request then runs on it from anywhere.
	if err := netnstest.InNS(fmt.Sprintf("/proc/%d/ns/net", pid), func() error {
		var err error
		conn, err = net.DialTimeout("tcp", req.URL.Host, 5*time.Second)
		return err
	}); err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req.Close = true
	if err := req.Write(conn); err != nil {
		return "", err
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("%s: %s", resp.Status, b)
	}
	return string(b), err
}

const nodeWorkloads = `apiVersion: apps/v1
kind: Deployment
metadata: {name: web, namespace: default}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec:
      # One replica a node.
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: kubernetes.io/hostname, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: web}}}
      containers:
      - name: serve
        image: local/test:1
        imagePullPolicy: Never
        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: every-node, namespace: default}
spec:
  selector: {matchLabels: {app: every-node}}
  template:
    metadata: {labels: {app: every-node}}
    spec:
      containers:
      - name: serve
        image: local/test:1
        imagePullPolicy: Never
        env: [{name: NODE_NAME, valueFrom: {fieldRef: {fieldPath: spec.nodeName}}}]
---
apiVersion: v1
kind: Service
metadata: {name: web, namespace: default}
spec:
  selector: {app: web}
  ports: [{port: 80, targetPort: 8080}]
`

// startNodeCluster brings up the local cluster with two real nodes (hack/local-up-nodes.sh up,
// extraEnv added to its environment) and registers its teardown, which checks that cluster-down
// leaves nothing behind and the host as before found it.
func startNodeCluster(t *testing.T, before map[string]string, extraEnv ...string) *nodeCluster {
	t.Helper()
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	tool(t, "SERVER", "network-apiserver")
	for _, b := range []string{"etcd", "etcdctl", "kube-apiserver", "kube-controller-manager", "kubelet", "kube-proxy", "kube-scheduler", "coredns", "cni/bridge"} {
		tool(t, "", b)
	}
	state := filepath.Join(t.TempDir(), "cluster")
	local, err := localcluster.New(repoRoot, state, append([]string{"NODES=2"}, extraEnv...)...)
	if err != nil {
		t.Fatal(err)
	}
	c := &nodeCluster{state: state, standalone: &standalone{kubeconfig: local.Path("admin.kubeconfig"), local: local}}
	sum := sha256.Sum256([]byte(state))
	c.cgPrefix = "lc-" + hex.EncodeToString(sum[:])[:8]
	// What must be gone after cluster-down, recorded while the cluster runs.
	var namespaces []string
	down := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		if out, err := c.script(ctx, "down"); err != nil {
			t.Errorf("cluster-down: %v\n%s", err, out)
		} else if m := regexp.MustCompile(`down: nodes in \d+s, control plane in \d+s`).FindString(out); m != "" {
			t.Log(m)
		}
		t.Logf("cluster-down took %s", time.Since(start).Round(time.Millisecond))
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("cluster-down left %s behind (%v)", state, err)
		}
		// No cgroup of the cluster in any hierarchy.
		leftCgroups, _ := filepath.Glob("/sys/fs/cgroup/*/" + c.cgPrefix + "*")
		if more, _ := filepath.Glob("/sys/fs/cgroup/" + c.cgPrefix + "*"); len(more) > 0 {
			leftCgroups = append(leftCgroups, more...)
		}
		if len(leftCgroups) > 0 {
			t.Errorf("cluster-down left cgroups: %v", leftCgroups)
		}
		// No process in the nodes' or the control plane's namespaces.
		procs, _ := filepath.Glob("/proc/[0-9]*/ns/*")
		for _, p := range procs {
			target, err := os.Readlink(p)
			if err != nil {
				continue
			}
			for _, ns := range namespaces {
				if target == ns {
					comm, _ := os.ReadFile(filepath.Join(filepath.Dir(filepath.Dir(p)), "comm"))
					t.Errorf("cluster-down left %s (%s) in %s", filepath.Dir(filepath.Dir(p)), strings.TrimSpace(string(comm)), ns)
				}
			}
		}
		// No mount of the state dir, and nothing listens on the forwarded ports.
		if b, _ := os.ReadFile("/proc/self/mountinfo"); bytes.Contains(b, []byte(state)) {
			t.Errorf("cluster-down left mounts under %s", state)
		}
		for _, p := range []int{local.EtcdPort, local.APIServerPort, local.NetworkPort} {
			if conn, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", p), time.Second); err == nil {
				conn.Close()
				t.Errorf("cluster-down left a listener on 127.0.0.1:%d", p)
			}
		}
		compareSnapshots(t, "after cluster-down", before, hostSnapshot(t))
	}
	// Registered before starting, so that a half-started cluster is stopped too.
	t.Cleanup(down)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := c.script(ctx, "up")
	if err != nil {
		t.Fatalf("cluster-up NODES=2: %v\n%s", err, out)
	}
	t.Logf("cluster-up NODES=2 took %s", time.Since(start).Round(time.Millisecond))
	if m := regexp.MustCompile(`control plane up in \d+s; 2 nodes started in \d+s, Ready \d+s later; DNS ready \d+s after`).FindString(out); m != "" {
		t.Log(m)
	} else {
		t.Errorf("cluster-up did not report its timings:\n%s", out)
	}
	for _, name := range []string{"cp-holder", "node1-holder", "node2-holder"} {
		for _, kind := range []string{"net", "mnt"} {
			ns, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", c.pid(t, name), kind))
			if err != nil {
				t.Fatal(err)
			}
			self, _ := os.Readlink("/proc/self/ns/" + kind)
			if ns == self && !(name == "cp-holder" && kind == "mnt") {
				t.Fatalf("%s is in the host's %s namespace", name, kind)
			}
			if ns != self {
				namespaces = append(namespaces, ns)
			}
		}
	}
	return c
}

// TestLocalNodes brings up the local cluster with two real nodes (make cluster-up NODES=2), runs
// a Deployment and a DaemonSet on both, reaches their pods across nodes and through a Service,
// checks that the host's network, sysctls and paths never change, and that cluster-down leaves
// no process, cgroup, mount or file behind.
func TestLocalNodes(t *testing.T) {
	requireNodeSupport(t)
	before := hostSnapshot(t)
	c := startNodeCluster(t, before)
	state, cgPrefix := c.state, c.cgPrefix

	t.Run("NodesReady", func(t *testing.T) {
		out := c.kubectl(t, "get", "nodes", "-o", `jsonpath={range .items[*]}{.metadata.name} {.status.addresses[?(@.type=="InternalIP")].address} {.status.conditions[?(@.type=="Ready")].status} {.status.nodeInfo.containerRuntimeVersion} {.status.nodeInfo.kubeletVersion}{"\n"}{end}`)
		for _, want := range []string{"node1 10.200.0.11 True containerd://", "node2 10.200.0.12 True containerd://"} {
			if !strings.Contains(out, want) {
				t.Errorf("nodes: want a line with %q:\n%s", want, out)
			}
		}
		if !strings.Contains(out, "v1.37.2") {
			t.Errorf("nodes do not run kubelet v1.37.2:\n%s", out)
		}
	})

	t.Run("Workloads", func(t *testing.T) {
		c.kubectl(t, "apply", "-f", writeManifest(t, "workloads.yaml", nodeWorkloads))
		start := time.Now()
		c.kubectl(t, "rollout", "status", "deployment/web", "--timeout=120s")
		c.kubectl(t, "rollout", "status", "daemonset/every-node", "--timeout=120s")
		t.Logf("Deployment and DaemonSet rolled out in %s", time.Since(start).Round(time.Millisecond))

		pods := map[string][2]string{} // name: node, IP
		out := c.kubectl(t, "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.nodeName} {.status.podIP} {.status.phase}{"\n"}{end}`)
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) != 4 || f[3] != "Running" {
				t.Fatalf("pods:\n%s", out)
			}
			pods[f[0]] = [2]string{f[1], f[2]}
		}
		perApp := map[string]map[string]bool{"web-": {}, "every-node-": {}}
		for name, p := range pods {
			for prefix, nodes := range perApp {
				if strings.HasPrefix(name, prefix) {
					nodes[p[0]] = true
				}
			}
		}
		for prefix, nodes := range perApp {
			if !nodes["node1"] || !nodes["node2"] || len(nodes) != 2 {
				t.Errorf("%s pods run on %v, want node1 and node2:\n%s", prefix, nodes, out)
			}
		}

		// Every pod answers from both nodes (the same node's bridge, and across the control
		// plane's routes), with its own name and its node's.
		for _, from := range []string{"node1", "node2"} {
			holder := c.pid(t, from+"-holder")
			for name, p := range pods {
				got, err := httpGetIn(holder, "http://"+p[1]+":8080/")
				if err != nil {
					t.Errorf("from %s, pod %s at %s: %v", from, name, p[1], err)
				} else if got != name+" "+p[0]+"\n" {
					t.Errorf("from %s, pod %s at %s answered %q", from, name, p[1], got)
				}
			}
		}
		// The Service's cluster IP, through kube-proxy on a node and beside the control plane.
		ip := strings.TrimSpace(c.kubectl(t, "get", "service", "web", "-o", "jsonpath={.spec.clusterIP}"))
		for _, from := range []string{"node1-holder", "node2-holder", "cp-holder"} {
			// kube-proxy beside the control plane has no Node object: it waits 30s for one
			// before it programs its rules.
			eventually(t, 60*time.Second, "service web from "+from, func() (bool, string) {
				got, err := httpGetIn(c.pid(t, from), "http://"+ip+":80/")
				return err == nil && strings.HasPrefix(got, "web-"), fmt.Sprintf("%q, %v", got, err)
			})
		}
		// Cluster DNS: the Service's name from a node, and the pods' resolv.conf.
		resolver := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var conn net.Conn
			err := netnstest.InNS(fmt.Sprintf("/proc/%d/ns/net", c.pid(t, "node1-holder")), func() error {
				var err error
				conn, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, "10.0.0.10:53")
				return err
			})
			return conn, err
		}}
		eventually(t, 30*time.Second, "DNS name of service web", func() (bool, string) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			addrs, err := resolver.LookupHost(ctx, "web.default.svc.cluster.local")
			return err == nil && len(addrs) == 1 && addrs[0] == ip, fmt.Sprintf("%v, %v", addrs, err)
		})
		confs, _ := filepath.Glob(filepath.Join(state, "nodes", "node*", "var", "lib", "containerd", "io.containerd.grpc.v1.cri", "sandboxes", "*", "resolv.conf"))
		found := 0
		for _, f := range confs {
			b, err := os.ReadFile(f)
			if err == nil && strings.Contains(string(b), "nameserver 10.0.0.10") && strings.Contains(string(b), "search default.svc.cluster.local svc.cluster.local cluster.local") {
				found++
			}
		}
		if found < len(pods) {
			t.Errorf("%d of the pods' resolv.conf name the cluster DNS, want at least %d (%v)", found, len(pods), confs)
		}

		// kube-apiserver reaches the pods (its service proxy) and the kubelets (logs).
		if got := c.kubectl(t, "get", "--raw", "/api/v1/namespaces/default/services/web:80/proxy/"); !strings.HasPrefix(got, "web-") {
			t.Errorf("service proxy: %q", got)
		}
		for name := range pods {
			if got := c.kubectl(t, "logs", name); !strings.Contains(got, "serving on :8080") {
				t.Errorf("kubectl logs %s: %q", name, got)
			}
		}

		// The host saw none of it.
		compareSnapshots(t, "with the cluster running", before, hostSnapshot(t))
	})

	t.Run("Resources", func(t *testing.T) {
		out, err := c.script(context.Background(), "status")
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		t.Logf("processes and resident memory:\n%s", out)
		// Sections "lc-<hash>-<group>:", then "  PID COMM RSS KiB" lines.
		rss := map[string]map[string]int{}
		group := ""
		for _, line := range strings.Split(out, "\n") {
			if g, ok := strings.CutSuffix(line, ":"); ok && strings.HasPrefix(g, cgPrefix+"-") {
				group = strings.TrimPrefix(g, cgPrefix+"-")
				rss[group] = map[string]int{}
			} else if f := strings.Fields(line); group != "" && len(f) == 4 && f[3] == "KiB" {
				kib, _ := strconv.Atoi(f[2])
				rss[group][f[1]] += kib
			}
		}
		for _, node := range []string{"node1", "node2"} {
			for _, comm := range []string{"kubelet", "containerd", "kube-proxy"} {
				if rss[node][comm] <= 0 {
					t.Errorf("status shows no %s in %s:\n%s", comm, node, out)
				}
			}
			t.Logf("%s: kubelet %d MiB, containerd %d MiB, kube-proxy %d MiB, containerd-shim %d MiB in all",
				node, rss[node]["kubelet"]/1024, rss[node]["containerd"]/1024, rss[node]["kube-proxy"]/1024, rss[node]["containerd-shim"]/1024)
		}
	})
}
