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

// Package e2e runs the built network-apiserver binary and drives it with the pinned kubectl, the
// way a person following the README does.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
	"github.com/samplecrd/network-apiserver/test/localcluster"
)

var repoRoot = func() string { d, _ := localcluster.RepoRoot(); return d }()

// tool returns the path of a binary built by make (KUBECTL / SERVER override).
func tool(t *testing.T, env, name string) string {
	t.Helper()
	p := os.Getenv(env)
	if p == "" {
		p = filepath.Join(repoRoot, "_output", "bin", name)
	}
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found at %s (make test-e2e builds it: make build, hack/build-tools.sh): %v", name, p, err)
	}
	return p
}

// requireCNIPlugins returns the directory of the CNI plugins make builds (the reference plugins
// from hack/build-tools.sh cni, samplecrd-bridge from make build), failing t when one of
// plugins is not there.
func requireCNIPlugins(t *testing.T, plugins ...string) string {
	t.Helper()
	dir := filepath.Join(repoRoot, "_output", "bin", "cni")
	for _, p := range plugins {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("CNI plugin %s not built (make test-e2e builds it: make build, hack/build-tools.sh cni): %v", p, err)
		}
	}
	return dir
}

// standalone is a network-apiserver process started from the binary.
type standalone struct {
	cmd        *exec.Cmd
	kubeconfig string
	url        string
	log        *bytes.Buffer
	local      *localcluster.Cluster // set by localCluster: the scripts' cluster
	// dataDir and port, for starting another binary in its place (startStandaloneFrom).
	dataDir string
	port    int
	// stop sends SIGTERM and waits for the exit (once; also run at cleanup). nil for servers
	// not started by startStandaloneFrom.
	stop func()
}

// freePort is a free loopback port.
func freePort(t *testing.T) int {
	t.Helper()
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		t.Fatal(err)
	}
	return ports[0]
}

func startStandalone(t *testing.T, args ...string) *standalone {
	t.Helper()
	return startStandaloneFrom(t, standaloneFiles{}, args...)
}

// standaloneFiles say which binary a standalone server runs and where its files are: empty
// fields pick the binary make builds, a new data directory and a free port. A server started
// again on the same data directory and port keeps its etcd data, certificate and admin
// kubeconfig (an upgrade in place).
type standaloneFiles struct {
	binary, dataDir string
	port            int
}

func startStandaloneFrom(t *testing.T, files standaloneFiles, args ...string) *standalone {
	t.Helper()
	dataDir, port, binary := files.dataDir, files.port, files.binary
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	if port == 0 {
		port = freePort(t)
	}
	if binary == "" {
		binary = tool(t, "SERVER", "network-apiserver")
	}
	s := &standalone{log: &bytes.Buffer{}, kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"), url: fmt.Sprintf("https://127.0.0.1:%d", port),
		dataDir: dataDir, port: port}
	s.cmd = exec.Command(binary, append([]string{
		"--data-dir", dataDir, "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(port),
	}, args...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- s.cmd.Wait() }()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			_ = s.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case err := <-exited:
				if err != nil {
					t.Errorf("network-apiserver did not exit cleanly on SIGTERM: %v\n%s", err, tail(s.log))
				}
				exited <- err
			case <-time.After(60 * time.Second):
				_ = s.cmd.Process.Kill()
				t.Errorf("network-apiserver still running 60s after SIGTERM")
			}
		})
	}
	t.Cleanup(s.stop)
	t.Cleanup(func() {
		// Runs before the stop: a failed test shows what the server said up to then.
		if !t.Failed() {
			return
		}
		t.Logf("log of %s (%s), up to the failure:\n%s", binary, s.url, tailN(s.log, 30000))
		// What each of its goroutines was doing then, grouped by stack: where a request that
		// timed out was waiting.
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig); err == nil {
			if c, err := versioned.NewForConfig(cfg); err == nil {
				body, err := c.Discovery().RESTClient().Get().AbsPath("/debug/pprof/goroutine").Param("debug", "1").DoRaw(ctx)
				if len(body) > 100000 {
					body = body[:100000]
				}
				t.Logf("goroutines of %s (%s) at the failure (err %v):\n%s", binary, s.url, err, body)
			}
		}
	})
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-exited:
			exited <- err
			return false, fmt.Errorf("network-apiserver exited: %v", err)
		default:
		}
		// The kubectl line is printed once the admin kubeconfig is written.
		return strings.Contains(s.log.String(), "kubectl --kubeconfig "+s.kubeconfig), nil
	})
	if err != nil {
		t.Fatalf("network-apiserver not ready: %v\n%s", err, tail(s.log))
	}
	// Then ready as an operator's probe sees it: /readyz answers ok once every post-start hook
	// has run and etcd (and the allocator's own etcd client) answer. Its verbose answer, when it
	// never does, says which check held it back.
	rc := s.clientset(t).Discovery().RESTClient()
	var notReady string
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		body, err := rc.Get().AbsPath("/readyz").Param("verbose", "true").Timeout(10 * time.Second).DoRaw(ctx)
		if err != nil {
			notReady = fmt.Sprintf("%v\n%s", err, body)
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("network-apiserver's /readyz not ok after 90s: %s\n%s", notReady, tail(s.log))
	}
	return s
}

// restConfig is the client configuration of the admin kubeconfig.
func (s *standalone) restConfig(t *testing.T) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", s.kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// clientset is a typed client with the admin credentials.
func (s *standalone) clientset(t *testing.T) versioned.Interface {
	t.Helper()
	client, err := versioned.NewForConfig(s.restConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	return client
}

func tail(b *bytes.Buffer) string { return tailN(b, 4000) }

// tailN is the last n bytes of b.
func tailN(b *bytes.Buffer, n int) string {
	s := b.String()
	if len(s) > n {
		s = s[len(s)-n:]
	}
	return s
}

// kubectl runs the pinned kubectl against the server and returns its output.
func (s *standalone) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := s.kubectlErr(args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// kubectlSplit runs the pinned kubectl and returns its standard output and error apart.
func (s *standalone) kubectlSplit(t *testing.T, args ...string) (string, string) {
	t.Helper()
	cmd := exec.Command(os.Getenv("E2E_KUBECTL"), append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	cmd.Dir = repoRoot
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

func (s *standalone) kubectlErr(args ...string) (string, error) {
	cmd := exec.Command(os.Getenv("E2E_KUBECTL"), append([]string{"--kubeconfig", s.kubeconfig}, args...)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestStandaloneWithKubectl(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	ns := netnstest.New(t, "e2e")
	// A bridge per Network: the test looks at the bridge without attaching a pod.
	s := startStandalone(t, "--backend-netns", ns.Path, "--cni-conf-dir", t.TempDir(), "--node-name", "e2e-node", "--bridge-on-attach=false")

	if out := s.kubectl(t, "version"); !strings.Contains(out, "v1.37.2") {
		t.Errorf("kubectl version does not say v1.37.2:\n%s", out)
	}
	if out := s.kubectl(t, "api-resources", "--api-group", "samplecrd.k8s.io"); !regexpLine(out, `networks\s+net\s+samplecrd.k8s.io/v1\s+true\s+Network`) {
		t.Errorf("api-resources:\n%s", out)
	}
	if out := s.kubectl(t, "apply", "-f", "artifacts/examples/network.yaml"); !strings.Contains(out, "network.samplecrd.k8s.io/backend created") {
		t.Fatalf("apply:\n%s", out)
	}
	// The controller realises it in the test's namespace and the server derives Ready.
	var out string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		out = s.kubectl(t, "get", "networks")
		return regexpLine(out, `backend\s+10\.10\.0\.0/24\s+10\.10\.0\.1\s+True\s+\S+\s+\S+\s+\S+`), nil
	})
	if err != nil {
		t.Fatalf("kubectl get networks never showed backend Ready:\n%s", out)
	}
	if !regexpLine(out, `NAME\s+CIDR\s+GATEWAY\s+READY\s+USED\s+AVAILABLE\s+AGE`) {
		t.Errorf("columns:\n%s", out)
	}
	if out := s.kubectl(t, "get", "net", "-o", "wide"); !regexpLine(out, `backend\s+10\.10\.0\.0/24\s+10\.10\.0\.1\s+True\s+\S+\s+\S+\s+\S+\s+Realized\s+1\s+253\s+\d+`) {
		t.Errorf("get -o wide:\n%s", out)
	}
	if out := s.kubectl(t, "explain", "network.spec.cidr"); !strings.Contains(out, "canonical form") || !strings.Contains(out, "FIELD: cidr <string>") {
		t.Errorf("explain network.spec.cidr:\n%s", out)
	}
	if out := s.kubectl(t, "get", "net", "--field-selector", "spec.cidr=10.10.0.0/24", "-o", "name"); strings.TrimSpace(out) != "network.samplecrd.k8s.io/backend" {
		t.Errorf("field selector:\n%s", out)
	}
	// The older version, converted both ways.
	s.kubectl(t, "apply", "-f", "artifacts/examples/network-v1beta1.yaml")
	if out := s.kubectl(t, "get", "networks.v1.samplecrd.k8s.io", "legacy", "-o", "jsonpath={.spec.cidr} {.spec.gateway}"); out != "10.11.0.0/24 10.11.0.254" {
		t.Errorf("v1beta1 Network read through v1: %q", out)
	}
	// kubectl prints v1beta1's deprecation warning on stderr.
	out, warnings := s.kubectlSplit(t, "get", "networks.v1beta1.samplecrd.k8s.io", "backend", "-o", "jsonpath={.spec.subnet} {.spec.gatewayIP}")
	if out != "10.10.0.0/24 10.10.0.1" {
		t.Errorf("v1 Network read through v1beta1: %q", out)
	}
	if !strings.Contains(warnings, "samplecrd.k8s.io/v1beta1 Network is deprecated") {
		t.Errorf("kubectl printed no deprecation warning for v1beta1: %q", warnings)
	}
	// Bad input: a clear error, nothing stored.
	bad := `{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network","metadata":{"name":"bad"},"spec":{"cidr":"192.168.0.1/16"}}`
	cmd := exec.Command(os.Getenv("E2E_KUBECTL"), "--kubeconfig", s.kubeconfig, "apply", "-f", "-")
	cmd.Stdin = strings.NewReader(bad)
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), `must be in canonical form "192.168.0.0/16"`) {
		t.Errorf("bad cidr: err %v\n%s", err, out)
	}
	if out, _ := s.kubectlErr("get", "network", "bad"); !strings.Contains(out, "NotFound") && !strings.Contains(out, "not found") {
		t.Errorf("a rejected Network was stored:\n%s", out)
	}
	// Raw discovery with the admin credentials, like the README's curl lines.
	cfg := s.restConfig(t)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]string{
		"/apis/samplecrd.k8s.io":    `"preferredVersion":{"groupVersion":"samplecrd.k8s.io/v1"`,
		"/apis/samplecrd.k8s.io/v1": `"name":"networks/status"`,
	} {
		resp, err := client.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body := new(bytes.Buffer)
		_, _ = body.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(strings.ReplaceAll(body.String(), " ", ""), want) {
			t.Errorf("GET %s: %d\n%s", path, resp.StatusCode, body)
		}
	}
	// The bundled controller's metrics are on the server's /metrics.
	resp, err := client.Get(s.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics := new(bytes.Buffer)
	_, _ = metrics.ReadFrom(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`network_controller_reconcile_total{result="changed"}`, `workqueue_adds_total{name="network"}`, "network_controller_reconcile_duration_seconds_bucket"} {
		if !strings.Contains(metrics.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// Anonymous requests are refused.
	anon := &http.Client{Transport: &http.Transport{TLSClientConfig: mustTLS(t, cfg)}}
	if resp, err := anon.Get(s.url + "/apis/samplecrd.k8s.io/v1/networks"); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous list: %v %v, want 401", resp.StatusCode, err)
	}
	s.kubectl(t, "delete", "-f", "artifacts/examples/network.yaml")
	if out := s.kubectl(t, "get", "networks", "-o", "name"); strings.Contains(out, "backend") {
		t.Errorf("backend still listed after delete:\n%s", out)
	}
}
