package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

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
	c := localCluster(t)

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
	})

	c.kubectl(t, "create", "namespace", "gc")
	t.Cleanup(func() { _, _ = c.kubectlErr("delete", "namespace", "gc", "--wait=false") })

	t.Run("BackgroundGC", func(t *testing.T) {
		uid := owner(t, "gc", "bg-owner")
		c.kubectl(t, "create", "-f", writeManifest(t, "bg.yaml", ownedNetworkYAML("gc", "bg-net", "10.121.0.0/24", "bg-owner", uid)))
		c.kubectl(t, "-n", "gc", "delete", "configmap", "bg-owner")
		eventually(t, 90*time.Second, "the dependent Network is collected", func() (bool, string) {
			return gone("-n", "gc", "network", "bg-net")
		})
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
		eventually(t, 90*time.Second, "the foreground-deleted owner is gone", func() (bool, string) {
			return gone("-n", "gc", "configmap", "fg-owner")
		})
	})
}
