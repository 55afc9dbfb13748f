package e2e

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// writeManifest writes a manifest into a temporary file and returns its path.
func writeManifest(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func networkYAML(name, cidr string, extra ...string) string {
	s := "apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: " + name + "\nspec:\n  cidr: " + cidr + "\n"
	for _, e := range extra {
		s += e + "\n"
	}
	return s
}

// processGone reports whether pid no longer runs (absent, or a zombie nobody has reaped yet).
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return os.IsNotExist(err)
	}
	// pid (comm) STATE ...; comm may contain spaces, so look after the last ')'.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] == 'Z' || s[i+2] == 'X'
	}
	return false
}

// TestAggregatedMore drives more of the API through kube-apiserver on one local cluster: kubectl
// verbs, network-apiserver going away and coming back, and a ValidatingAdmissionPolicy.
func TestAggregatedMore(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	c := localCluster(t)
	state := filepath.Dir(c.kubeconfig)

	t.Run("KubectlVerbs", func(t *testing.T) {
		c.kubectl(t, "apply", "-f", "artifacts/examples/network.yaml")

		// describe prints the spec fields of the aggregated type.
		out := c.kubectl(t, "describe", "network", "backend")
		if !regexpLine(out, `Name:\s+backend`) || !regexpLine(out, `Kind:\s+Network`) ||
			!regexpLine(out, `\s+Cidr:\s+10\.10\.0\.0/24`) || !regexpLine(out, `\s+Gateway:\s+10\.10\.0\.1`) {
			t.Errorf("describe network backend:\n%s", out)
		}

		// Server-side apply: the object is owned by field manager "kubectl" with an Apply entry.
		ssa := writeManifest(t, "ssa.yaml", networkYAML("ssa", "10.40.0.0/24", "  gateway: 10.40.0.1"))
		if out := c.kubectl(t, "apply", "--server-side", "-f", ssa); !strings.Contains(out, "network.samplecrd.k8s.io/ssa serverside-applied") {
			t.Errorf("apply --server-side:\n%s", out)
		}
		out = c.kubectl(t, "get", "network", "ssa", "-o",
			`jsonpath={range .metadata.managedFields[*]}{.manager}/{.operation}{"\n"}{end}`)
		if !regexpLine(out, `kubectl/Apply`) {
			t.Errorf("managedFields of ssa, want kubectl/Apply:\n%s", out)
		}
		// A second server-side apply with a changed field is applied by the server.
		ssa2 := writeManifest(t, "ssa2.yaml", networkYAML("ssa", "10.40.0.0/24", "  gateway: 10.40.0.7"))
		c.kubectl(t, "apply", "--server-side", "-f", ssa2)
		if out := c.kubectl(t, "get", "network", "ssa", "-o", "jsonpath={.spec.gateway}"); out != "10.40.0.7" {
			t.Errorf("gateway after second server-side apply: %q", out)
		}

		// Strategic merge patch.
		if out := c.kubectl(t, "patch", "network", "backend", "--type=strategic", "-p", `{"spec":{"gateway":"10.10.0.2"}}`); !strings.Contains(out, "network.samplecrd.k8s.io/backend patched") {
			t.Errorf("patch --type=strategic:\n%s", out)
		}
		if out := c.kubectl(t, "get", "network", "backend", "-o", "jsonpath={.spec.cidr} {.spec.gateway}"); out != "10.10.0.0/24 10.10.0.2" {
			t.Errorf("after strategic patch: %q", out)
		}

		// edit with a non-interactive editor.
		c.kubectl(t, "create", "-f", writeManifest(t, "edited.yaml", networkYAML("edited", "10.50.0.0/24", "  gateway: 10.50.0.1")))
		t.Setenv("KUBE_EDITOR", "sed -i s/10.50.0.1/10.50.0.9/")
		if out := c.kubectl(t, "edit", "network", "edited"); !strings.Contains(out, "network.samplecrd.k8s.io/edited edited") {
			t.Errorf("edit:\n%s", out)
		}
		if out := c.kubectl(t, "get", "network", "edited", "-o", "jsonpath={.spec.gateway}"); out != "10.50.0.9" {
			t.Errorf("gateway after edit: %q", out)
		}

		// get -w sees a Network being created.
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		w := exec.CommandContext(ctx, os.Getenv("E2E_KUBECTL"), "--kubeconfig", c.kubeconfig,
			"get", "networks", "-w", "--output-watch-events")
		w.Dir = repoRoot
		stdout, err := w.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		var stderr strings.Builder
		w.Stderr = &stderr
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		lines := make(chan string)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		defer func() {
			_ = w.Process.Kill()
			for range lines { // drain, so that the reader ends
			}
			_ = w.Wait()
		}()
		// The watch lists existing objects first; wait for one so that the watch is established
		// before creating the new Network.
		var seen []string
		waitFor := func(want string) bool {
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						return false
					}
					seen = append(seen, l)
					if regexpLine(l, want) {
						return true
					}
				case <-ctx.Done():
					return false
				}
			}
		}
		if !waitFor(`(ADDED\s+)?backend\s+10\.10\.0\.0/24\s+.*`) {
			t.Fatalf("watch: no initial ADDED for backend; saw %q; stderr:\n%s", seen, stderr.String())
		}
		c.kubectl(t, "create", "-f", writeManifest(t, "watched.yaml", networkYAML("watched", "10.60.0.0/24")))
		if !waitFor(`ADDED\s+watched\s+10\.60\.0\.0/24\s+10\.60\.0\.1\s+.*`) {
			t.Fatalf("watch: no ADDED for watched; saw %q; stderr:\n%s", seen, stderr.String())
		}

		// delete.
		if out := c.kubectl(t, "delete", "network", "watched"); !strings.Contains(out, `network.samplecrd.k8s.io "watched" deleted`) {
			t.Errorf("delete:\n%s", out)
		}
		out, err = c.kubectlErr("get", "network", "watched")
		if err == nil || !strings.Contains(out, `networks.samplecrd.k8s.io "watched" not found`) {
			t.Errorf("get after delete: err %v\n%s", err, out)
		}
	})

	t.Run("DownAndBack", func(t *testing.T) {
		c.kubectl(t, "create", "-f", writeManifest(t, "survivor.yaml", networkYAML("survivor", "10.70.0.0/24")))
		before := c.kubectl(t, "get", "networks", "-A", "-o", "name")
		if !strings.Contains(before, "network.samplecrd.k8s.io/survivor") {
			t.Fatalf("networks before the restart:\n%s", before)
		}

		b, err := os.ReadFile(filepath.Join(state, "network-apiserver.pid"))
		if err != nil {
			t.Fatal(err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatalf("SIGTERM network-apiserver (pid %d): %v", pid, err)
		}
		eventually(t, 60*time.Second, "network-apiserver exits on SIGTERM", func() (bool, string) {
			return processGone(pid), "pid " + strconv.Itoa(pid) + " still running"
		})

		const available = `jsonpath={.status.conditions[?(@.type=="Available")].status} {.status.conditions[?(@.type=="Available")].reason}`
		eventually(t, 90*time.Second, "APIService v1.samplecrd.k8s.io becomes unavailable", func() (bool, string) {
			out, err := c.kubectlErr("get", "apiservice", "v1.samplecrd.k8s.io", "-o", available)
			f := strings.Fields(out)
			return err == nil && len(f) == 2 && f[0] == "False" && f[1] != "", out
		})
		eventually(t, 60*time.Second, "get networks fails while network-apiserver is down", func() (bool, string) {
			out, err := c.kubectlErr("get", "networks")
			l := strings.ToLower(out)
			return err != nil && (strings.Contains(l, "the server is currently unable to handle the request") ||
				strings.Contains(l, "service unavailable")), out
		})

		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(repoRoot, "hack", "local-up-cluster.sh"), "restart-apiserver")
		cmd.Dir, cmd.Env = repoRoot, append(os.Environ(), "LOCAL_CLUSTER_DIR="+state)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("restart-apiserver: %v\n%s", err, out)
		}
		eventually(t, 60*time.Second, "APIService v1.samplecrd.k8s.io Available again", func() (bool, string) {
			out, err := c.kubectlErr("get", "apiservice", "v1.samplecrd.k8s.io", "-o", available)
			return err == nil && strings.HasPrefix(out, "True "), out
		})
		eventually(t, 60*time.Second, "the Networks survive the restart", func() (bool, string) {
			out, err := c.kubectlErr("get", "networks", "-A", "-o", "name")
			return err == nil && out == before, out
		})
		if b, err := os.ReadFile(filepath.Join(state, "network-apiserver.pid")); err != nil || strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
			t.Errorf("pid file after restart: %q, %v", b, err)
		}
	})

	t.Run("ValidatingAdmissionPolicy", func(t *testing.T) {
		policy := writeManifest(t, "policy.yaml", `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata:
  name: e2e-no-192-168
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - apiGroups: [samplecrd.k8s.io]
      apiVersions: ["*"]
      operations: [CREATE, UPDATE]
      resources: [networks]
  validations:
  - expression: "!object.spec.cidr.startsWith('192.168.')"
    message: "e2e: Networks in 192.168.0.0/16 are not allowed"
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata:
  name: e2e-no-192-168
spec:
  policyName: e2e-no-192-168
  validationActions: [Deny]
`)
		c.kubectl(t, "apply", "-f", policy)
		bad := writeManifest(t, "bad.yaml", networkYAML("private", "192.168.5.0/24"))
		const msg = "e2e: Networks in 192.168.0.0/16 are not allowed"
		// Dry-run while waiting, so that nothing is stored before the policy takes effect.
		eventually(t, 90*time.Second, "the policy rejects a 192.168 Network", func() (bool, string) {
			out, err := c.kubectlErr("create", "--dry-run=server", "-f", bad)
			return err != nil && strings.Contains(out, msg), out
		})
		out, err := c.kubectlErr("create", "-f", bad)
		if err == nil || !strings.Contains(out, msg) || !strings.Contains(out, "ValidatingAdmissionPolicy 'e2e-no-192-168'") {
			t.Errorf("create violating the policy: err %v\n%s", err, out)
		}
		if out, err := c.kubectlErr("get", "network", "private"); err == nil {
			t.Errorf("the rejected Network was stored:\n%s", out)
		}
		good := writeManifest(t, "good.yaml", networkYAML("allowed", "10.80.0.0/24"))
		if out := c.kubectl(t, "create", "-f", good); !strings.Contains(out, "network.samplecrd.k8s.io/allowed created") {
			t.Errorf("compliant create:\n%s", out)
		}
	})
}
