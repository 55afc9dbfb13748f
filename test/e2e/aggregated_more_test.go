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
	"context"
	"crypto/tls"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	certutil "k8s.io/client-go/util/cert"

	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
	"github.com/samplecrd/network-apiserver/test/localcluster"
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
			return !localcluster.Running(pid), "pid " + strconv.Itoa(pid) + " still running"
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

		localClusterCommand(t, c, "restart-apiserver")
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
    # v1 only: requests in v1beta1 (spec.subnet) are converted to v1 for the expression.
    matchPolicy: Equivalent
    resourceRules:
    - apiGroups: [samplecrd.k8s.io]
      apiVersions: [v1]
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

	t.Run("MutatingWebhook", func(t *testing.T) {
		url, caPEM := startLabelWebhook(t)
		webhook := writeManifest(t, "webhook.yaml", fmt.Sprintf(`apiVersion: admissionregistration.k8s.io/v1
kind: MutatingWebhookConfiguration
metadata:
  name: e2e-label-networks
webhooks:
- name: label.e2e.samplecrd.k8s.io
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  objectSelector:
    matchLabels: {e2e-webhook: "yes"}
  rules:
  - apiGroups: [samplecrd.k8s.io]
    apiVersions: ["*"]
    operations: [CREATE]
    resources: [networks]
  clientConfig:
    url: %s
    caBundle: %s
`, url, base64.StdEncoding.EncodeToString(caPEM)))
		c.kubectl(t, "apply", "-f", webhook)
		labelled := writeManifest(t, "labelled.yaml", strings.Replace(networkYAML("hooked", "10.81.0.0/24"),
			"  name: hooked\n", "  name: hooked\n  labels: {e2e-webhook: \"yes\"}\n", 1))
		// network-apiserver's webhook admission picks the configuration up through its informer.
		eventually(t, 90*time.Second, "the mutating webhook labels new Networks", func() (bool, string) {
			out, _ := c.kubectlErr("create", "--dry-run=server", "-f", labelled, "-o", "jsonpath={.metadata.labels.mutated-by}")
			return out == "e2e-webhook", out
		})
		c.kubectl(t, "create", "-f", labelled)
		if out := c.kubectl(t, "get", "network", "hooked", "-o", "jsonpath={.metadata.labels.mutated-by}"); out != "e2e-webhook" {
			t.Errorf("stored Network not mutated by the webhook: labels.mutated-by=%q", out)
		}
		// Networks the webhook does not select are left alone.
		plain := writeManifest(t, "plain.yaml", networkYAML("unhooked", "10.82.0.0/24"))
		c.kubectl(t, "create", "-f", plain)
		if out := c.kubectl(t, "get", "network", "unhooked", "-o", "jsonpath={.metadata.labels}"); strings.Contains(out, "mutated-by") {
			t.Errorf("an unselected Network was mutated: %s", out)
		}
	})

	t.Run("ExamplesDirectory", func(t *testing.T) {
		// The examples' prefixes are taken by Networks of the subtests above: no overlap, cluster-wide.
		c.kubectl(t, "delete", "networks", "--all", "--all-namespaces")
		c.kubectl(t, "create", "namespace", "examples")
		out := c.kubectl(t, "apply", "-n", "examples", "-f", "artifacts/examples/")
		for _, name := range []string{"backend", "backend-v6", "legacy"} {
			if !strings.Contains(out, "network.samplecrd.k8s.io/"+name+" created") {
				t.Errorf("apply -f artifacts/examples/ did not create %s:\n%s", name, out)
			}
		}
		wide := c.kubectl(t, "get", "networks", "-n", "examples", "-o", "wide")
		for _, row := range []string{
			`NAME\s+CIDR\s+GATEWAY\s+READY\s+USED\s+AVAILABLE\s+AGE\s+REASON\s+OBSERVED\s+TOTAL\s+ALLOCATED`,
			`backend\s+10\.10\.0\.0/24\s+10\.10\.0\.1\s+Unknown\s+0\s+253\s+\S+\s+0\s+253\s+0`,
			`backend-v6\s+fd00:10::/64\s+fd00:10::fe\s+Unknown\s+0\s+18446744073709551614\s+\S+\s+0\s+18446744073709551614\s+0`,
			`legacy\s+10\.11\.0\.0/24\s+10\.11\.0\.254\s+Unknown\s+0\s+253\s+\S+\s+0\s+253\s+0`,
		} {
			if !regexpLine(wide, row) {
				t.Errorf("get -o wide lacks a line matching %s:\n%s", row, wide)
			}
		}
	})
}

// startLabelWebhook serves a mutating admission webhook on loopback that labels every Network it
// is sent with mutated-by=e2e-webhook, and returns its URL and the CA of its certificate.
func startLabelWebhook(t *testing.T) (string, []byte) {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("127.0.0.1", []net.IP{net.ParseIP("127.0.0.1")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var review admissionv1.AdmissionReview
		if err := json.NewDecoder(r.Body).Decode(&review); err != nil || review.Request == nil {
			http.Error(w, "not an AdmissionReview", http.StatusBadRequest)
			return
		}
		var obj struct {
			Metadata struct {
				Labels map[string]string `json:"labels"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(review.Request.Object.Raw, &obj)
		patch := `[{"op":"add","path":"/metadata/labels","value":{"mutated-by":"e2e-webhook"}}]`
		if obj.Metadata.Labels != nil {
			patch = `[{"op":"add","path":"/metadata/labels/mutated-by","value":"e2e-webhook"}]`
		}
		patchType := admissionv1.PatchTypeJSONPatch
		review.Response = &admissionv1.AdmissionResponse{UID: review.Request.UID, Allowed: true, Patch: []byte(patch), PatchType: &patchType}
		review.Request = nil
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(&review)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL + "/mutate", certPEM
}
