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
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// ownedNetworkYAML is a Network in namespace ns owned by the ConfigMap owner with the given uid;
// extra lines go under metadata.
func ownedNetworkYAML(ns, name, cidr, owner, uid string, extra ...string) string {
	s := "apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: " + name + "\n  namespace: " + ns +
		"\n  ownerReferences:\n  - apiVersion: v1\n    kind: ConfigMap\n    name: " + owner + "\n    uid: " + uid + "\n"
	for _, e := range extra {
		s += e + "\n"
	}
	return s + "spec:\n  cidr: " + cidr + "\n"
}

// TestAggregatedNamespacesAndGC checks that kube-controller-manager's namespace and garbage
// collector controllers handle Networks served through the aggregation layer.
func TestAggregatedNamespacesAndGC(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	// network-apiserver runs its controller, confined to a network namespace of this test, so
	// that the Networks these paths delete have bridges and CNI configurations to clean up.
	// Registered first, the namespace is removed after the cluster is down.
	netNS := netnstest.New(t, "nsgc")
	confDir := t.TempDir()
	c := localCluster(t, "NETWORK_APISERVER_ARGS=--controllers=true --backend-netns="+netNS.Path+
		" --cni-conf-dir="+confDir+" --node-name=e2e-node --bridge-on-attach=false")
	node := &realizedNetworks{ns: netNS, confDir: confDir}

	// gone reports whether `kubectl get args...` says NotFound.
	gone := func(args ...string) (bool, string) {
		out, err := c.kubectlErr(append([]string{"get"}, args...)...)
		return err != nil && strings.Contains(out, "NotFound"), out
	}
	// owner creates ConfigMap name in ns and returns its uid.
	owner := func(t *testing.T, ns, name string) string {
		t.Helper()
		c.kubectl(t, "-n", ns, "create", "configmap", name, "--from-literal=k=v")
		uid := strings.TrimSpace(c.kubectl(t, "-n", ns, "get", "configmap", name, "-o", "jsonpath={.metadata.uid}"))
		if uid == "" {
			t.Fatalf("configmap %s/%s has no uid", ns, name)
		}
		return uid
	}

	t.Run("NamespaceDeletion", func(t *testing.T) {
		c.kubectl(t, "create", "namespace", "ns-del")
		var manifest []string
		for i := range 20 {
			manifest = append(manifest, networkYAML(fmt.Sprintf("net-%02d", i), fmt.Sprintf("10.120.%d.0/24", i)))
		}
		c.kubectl(t, "-n", "ns-del", "create", "-f", writeManifest(t, "nets.yaml", strings.Join(manifest, "---\n")))
		if out := c.kubectl(t, "-n", "ns-del", "get", "networks", "-o", "name"); strings.Count(out, "network.samplecrd.k8s.io/net-") != 20 {
			t.Fatalf("networks in ns-del before the delete:\n%s", out)
		}
		var keys []string
		for i := range 20 {
			keys = append(keys, fmt.Sprintf("ns-del/net-%02d", i))
		}
		node.waitRealized(t, c, keys...)
		// The controller records Events through kube-apiserver's core API.
		eventually(t, 60*time.Second, "a Created Event for each Network", func() (bool, string) {
			out, err := c.kubectlErr("-n", "ns-del", "get", "events", "--field-selector",
				"involvedObject.kind=Network,reason=Created", "-o", `jsonpath={range .items[*]}{.involvedObject.name}{"\n"}{end}`)
			return err == nil && len(strings.Fields(out)) == 20, out
		})
		start := time.Now()
		c.kubectl(t, "delete", "namespace", "ns-del", "--wait=false")
		eventually(t, 90*time.Second, "namespace ns-del is removed", func() (bool, string) {
			ok, out := gone("namespace", "ns-del")
			if !ok {
				out, _ = c.kubectlErr("get", "namespace", "ns-del", "-o",
					`jsonpath={.status.phase}{"\n"}{range .status.conditions[*]}{.type}={.status}: {.message}{"\n"}{end}`)
			}
			return ok, out
		})
		t.Logf("namespace ns-del with 20 Networks removed in %s", time.Since(start).Round(time.Millisecond))
		out, err := c.kubectlErr("get", "networks", "-A", "-o",
			`jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name}{"\n"}{end}`)
		if err != nil || strings.Contains(out, "ns-del/") {
			t.Errorf("networks left after namespace ns-del is gone: err %v\n%s", err, out)
		}
		if out, err := c.kubectlErr("-n", "ns-del", "get", "networks", "-o", "name"); err != nil || strings.Contains(out, "network.samplecrd.k8s.io/") {
			t.Errorf("kubectl get networks -n ns-del: err %v\n%s", err, out)
		}
		node.waitCleaned(t, keys...)
	})

	c.kubectl(t, "create", "namespace", "gc")
	t.Cleanup(func() { _, _ = c.kubectlErr("delete", "namespace", "gc", "--wait=false") })

	t.Run("BackgroundGC", func(t *testing.T) {
		uid := owner(t, "gc", "bg-owner")
		c.kubectl(t, "create", "-f", writeManifest(t, "bg.yaml", ownedNetworkYAML("gc", "bg-net", "10.121.0.0/24", "bg-owner", uid)))
		node.waitRealized(t, c, "gc/bg-net")
		c.kubectl(t, "-n", "gc", "delete", "configmap", "bg-owner")
		eventually(t, 90*time.Second, "the dependent Network is collected", func() (bool, string) {
			return gone("-n", "gc", "network", "bg-net")
		})
		node.waitCleaned(t, "gc/bg-net")
	})

	t.Run("Orphan", func(t *testing.T) {
		uid := owner(t, "gc", "orphan-owner")
		c.kubectl(t, "create", "-f", writeManifest(t, "orphan.yaml", ownedNetworkYAML("gc", "orphan-net", "10.122.0.0/24", "orphan-owner", uid)))
		c.kubectl(t, "-n", "gc", "delete", "configmap", "orphan-owner", "--cascade=orphan")
		eventually(t, 90*time.Second, "the orphaned Network loses its ownerReferences", func() (bool, string) {
			out, err := c.kubectlErr("-n", "gc", "get", "network", "orphan-net", "-o", "jsonpath={.metadata.ownerReferences}")
			return err == nil && strings.TrimSpace(out) == "", out
		})
		if ok, out := gone("-n", "gc", "configmap", "orphan-owner"); !ok {
			t.Errorf("the orphaning owner is still there:\n%s", out)
		}
		// The Network outlives its owner, and is not collected later either.
		if out := c.kubectl(t, "-n", "gc", "get", "network", "orphan-net", "-o", "jsonpath={.metadata.deletionTimestamp}"); out != "" {
			t.Errorf("orphaned Network is being deleted: deletionTimestamp %q", out)
		}
		c.kubectl(t, "-n", "gc", "delete", "network", "orphan-net")
	})

	t.Run("Foreground", func(t *testing.T) {
		// The Network carries a finalizer of ours, so that it stays (being deleted) until we let
		// it go; meanwhile its owner must stay too.
		const hold = "e2e.samplecrd.k8s.io/hold"
		uid := owner(t, "gc", "fg-owner")
		c.kubectl(t, "create", "-f", writeManifest(t, "fg.yaml", ownedNetworkYAML("gc", "fg-net", "10.123.0.0/24", "fg-owner", uid,
			"  finalizers:\n  - "+hold)))
		if out := c.kubectl(t, "-n", "gc", "patch", "network", "fg-net", "--type=json", "-p",
			`[{"op":"add","path":"/metadata/ownerReferences/0/blockOwnerDeletion","value":true}]`); !strings.Contains(out, "patched") {
			t.Fatalf("patch blockOwnerDeletion:\n%s", out)
		}
		c.kubectl(t, "-n", "gc", "delete", "configmap", "fg-owner", "--cascade=foreground", "--wait=false")
		eventually(t, 90*time.Second, "the garbage collector deletes the dependent Network", func() (bool, string) {
			out, err := c.kubectlErr("-n", "gc", "get", "network", "fg-net", "-o", "jsonpath={.metadata.deletionTimestamp}")
			return err == nil && strings.TrimSpace(out) != "", out
		})
		out, err := c.kubectlErr("-n", "gc", "get", "configmap", "fg-owner", "-o", "jsonpath={.metadata.deletionTimestamp} {.metadata.finalizers}")
		if err != nil || !strings.Contains(out, "foregroundDeletion") {
			t.Fatalf("owner while its blocking dependent is being deleted: err %v\n%s", err, out)
		}
		c.kubectl(t, "-n", "gc", "patch", "network", "fg-net", "--type=json", "-p", `[{"op":"remove","path":"/metadata/finalizers"}]`)
		eventually(t, 90*time.Second, "the dependent Network is gone", func() (bool, string) {
			return gone("-n", "gc", "network", "fg-net")
		})
		node.waitCleaned(t, "gc/fg-net")
		eventually(t, 90*time.Second, "the foreground-deleted owner is gone", func() (bool, string) {
			return gone("-n", "gc", "configmap", "fg-owner")
		})
	})

	// Deleting a namespace while network-apiserver is down must neither lose its Networks nor
	// touch other namespaces' ones: the namespace controller cannot discover our group, so the
	// namespace stays Terminating and says why, and finishes once we are back.
	t.Run("NamespaceDeletionWhileDown", func(t *testing.T) {
		c.kubectl(t, "create", "namespace", "ns-down")
		c.kubectl(t, "create", "namespace", "ns-keep")
		t.Cleanup(func() { _, _ = c.kubectlErr("delete", "namespace", "ns-keep", "--wait=false") })
		var down, keep []string
		for i := range 3 {
			c.kubectl(t, "-n", "ns-down", "create", "-f", writeManifest(t, "down.yaml", networkYAML(fmt.Sprintf("down-%d", i), fmt.Sprintf("10.124.%d.0/24", i))))
			c.kubectl(t, "-n", "ns-keep", "create", "-f", writeManifest(t, "keep.yaml", networkYAML(fmt.Sprintf("keep-%d", i), fmt.Sprintf("10.125.%d.0/24", i))))
			down, keep = append(down, fmt.Sprintf("ns-down/down-%d", i)), append(keep, fmt.Sprintf("ns-keep/keep-%d", i))
		}
		node.waitRealized(t, c, append(down, keep...)...)
		uids := `jsonpath={range .items[*]}{.metadata.name}={.metadata.uid}{"\n"}{end}`
		keepBefore := c.kubectl(t, "-n", "ns-keep", "get", "networks", "-o", uids)

		localClusterCommand(t, c, "stop-apiserver")
		c.kubectl(t, "delete", "namespace", "ns-down", "--wait=false")
		const conditions = `jsonpath={.status.phase}{"\n"}{range .status.conditions[*]}{.type}={.status}: {.message}{"\n"}{end}`
		failure := regexp.MustCompile(`(?m)^NamespaceDeletionDiscoveryFailure=True: .*samplecrd\.k8s\.io.*$`)
		var condition string
		eventually(t, 90*time.Second, "ns-down reports that discovery of samplecrd.k8s.io failed", func() (bool, string) {
			out, err := c.kubectlErr("get", "namespace", "ns-down", "-o", conditions)
			condition = failure.FindString(out)
			return err == nil && condition != "", out
		})
		t.Logf("while network-apiserver is down: %s", condition)
		if out := c.kubectl(t, "get", "namespace", "ns-down", "-o", "jsonpath={.status.phase}"); out != "Terminating" {
			t.Errorf("ns-down phase while network-apiserver is down: %q", out)
		}
		// Nothing of ns-down is lost meanwhile: the controller is down with the server, so the
		// bridges stay, and the Networks are still stored.
		node.checkRealized(t, down...)

		localClusterCommand(t, c, "start-apiserver")
		start := time.Now()
		eventually(t, 3*time.Minute, "ns-down is removed once network-apiserver is back", func() (bool, string) {
			ok, out := gone("namespace", "ns-down")
			if !ok {
				out, _ = c.kubectlErr("get", "namespace", "ns-down", "-o", conditions)
			}
			return ok, out
		})
		t.Logf("ns-down removed %s after network-apiserver was Available again", time.Since(start).Round(time.Millisecond))
		node.waitCleaned(t, down...)
		if out := c.kubectl(t, "-n", "ns-keep", "get", "networks", "-o", uids); out != keepBefore {
			t.Errorf("ns-keep's Networks changed:\nbefore:\n%s\nafter:\n%s", keepBefore, out)
		}
		node.waitRealized(t, c, keep...)
	})
}

// realizedNetworks checks what the controller built on the test's node: a bridge in its
// network namespace and a CNI configuration in its conf dir, for each Network key
// (namespace/name).
type realizedNetworks struct {
	ns      *netnstest.NS
	confDir string
}

// differing returns the keys whose bridge or configuration is missing (want true) or still
// there (want false).
func (r *realizedNetworks) differing(keys []string, want bool) []string {
	var out []string
	for _, key := range keys {
		_, linkErr := r.ns.Netlink.LinkByName(netbackend.BridgeName(key))
		_, confErr := os.Stat(linux.ConfPath(r.confDir, key))
		if (linkErr == nil) != want || (confErr == nil) != want {
			out = append(out, fmt.Sprintf("%s (bridge: %v, conf: %v)", key, linkErr, confErr))
		}
	}
	return out
}

// waitRealized waits for each Network to be Ready and to have its bridge and configuration.
func (r *realizedNetworks) waitRealized(t *testing.T, c *standalone, keys ...string) {
	t.Helper()
	eventually(t, 90*time.Second, "the Networks are Ready with their bridges and configurations", func() (bool, string) {
		var notReady []string
		for _, key := range keys {
			ns, name, _ := strings.Cut(key, "/")
			out, err := c.kubectlErr("-n", ns, "get", "network", name, "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			if err != nil || out != "True" {
				notReady = append(notReady, key+": "+out)
			}
		}
		missing := r.differing(keys, true)
		return len(notReady) == 0 && len(missing) == 0, fmt.Sprintf("not Ready: %v\nnot built: %v", notReady, missing)
	})
}

// checkRealized fails unless every Network's bridge and configuration are there.
func (r *realizedNetworks) checkRealized(t *testing.T, keys ...string) {
	t.Helper()
	if missing := r.differing(keys, true); len(missing) > 0 {
		t.Errorf("missing on the node: %v", missing)
	}
}

// waitCleaned waits for the controller to remove each Network's bridge and configuration.
func (r *realizedNetworks) waitCleaned(t *testing.T, keys ...string) {
	t.Helper()
	eventually(t, 60*time.Second, "the controller removes the bridges and configurations", func() (bool, string) {
		left := r.differing(keys, false)
		return len(left) == 0, fmt.Sprintf("still on the node: %v", left)
	})
}
