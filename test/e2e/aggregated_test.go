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
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// localCluster runs hack/local-up-cluster.sh in a temporary state dir on free loopback ports and
// returns a handle whose kubectl talks to kube-apiserver with the admin credentials. extraEnv
// (NAME=value) goes to the script, e.g. NETWORK_APISERVER_ARGS.
func localCluster(t *testing.T, extraEnv ...string) *standalone {
	t.Helper()
	tool(t, "SERVER", "network-apiserver")
	for _, b := range []string{"etcd", "etcdctl", "kube-apiserver", "kube-controller-manager"} {
		tool(t, "", b)
	}
	state := filepath.Join(t.TempDir(), "cluster")
	local, err := localcluster.New(repoRoot, state, extraEnv...)
	if err != nil {
		t.Fatal(err)
	}
	script := func(ctx context.Context, arg string) (string, error) {
		out, err := local.Command(ctx, "local-up-cluster.sh", arg).CombinedOutput()
		return string(out), err
	}
	// Registered before starting, so that a half-started cluster is stopped too.
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if out, err := script(ctx, "down"); err != nil {
			t.Errorf("cluster-down: %v\n%s", err, out)
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("cluster-down left %s behind (%v)", state, err)
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	out, err := script(ctx, "up")
	if err != nil {
		for _, name := range []string{"kube-apiserver", "kube-controller-manager", "network-apiserver"} {
			if b, rerr := os.ReadFile(filepath.Join(state, name+".log")); rerr == nil {
				t.Logf("%s.log (tail):\n%s", name, tail(bytes.NewBuffer(b)))
			}
		}
		t.Fatalf("cluster-up: %v\n%s", err, out)
	}
	t.Logf("cluster-up took %s", time.Since(start).Round(time.Millisecond))
	kubeconfig := local.Path("admin.kubeconfig")
	if !strings.Contains(out, "export KUBECONFIG="+kubeconfig) {
		t.Errorf("cluster-up did not print the KUBECONFIG line:\n%s", out)
	}
	return &standalone{kubeconfig: kubeconfig, local: local}
}

// localClusterCommand runs `hack/local-up-cluster.sh arg` on the cluster c (restart-apiserver,
// stop-apiserver, start-apiserver), failing the test if it fails.
func localClusterCommand(t *testing.T, c *standalone, arg string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := c.local.Command(ctx, "local-up-cluster.sh", arg).CombinedOutput(); err != nil {
		t.Fatalf("local-up-cluster.sh %s: %v\n%s", arg, err, out)
	}
}

// eventually polls f until it returns true or the deadline passes; f reports its last state.
func eventually(t *testing.T, timeout time.Duration, what string, f func() (bool, string)) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, timeout, true, func(context.Context) (bool, error) {
		var ok bool
		ok, last = f()
		return ok, nil
	})
	if err != nil {
		t.Fatalf("%s: not within %s; last:\n%s", what, timeout, last)
	}
}

func TestAggregatedThroughKubeAPIServer(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	c := localCluster(t)

	if out := c.kubectl(t, "get", "apiservice", "v1.samplecrd.k8s.io", "v1beta1.samplecrd.k8s.io"); !regexpLine(out, `v1\.samplecrd\.k8s\.io\s+network-apiserver/network-apiserver\s+True\s+\S+`) ||
		!regexpLine(out, `v1beta1\.samplecrd\.k8s\.io\s+network-apiserver/network-apiserver\s+True\s+\S+`) {
		t.Errorf("APIServices not Available:\n%s", out)
	}
	// Discovery through the aggregator.
	eventually(t, 60*time.Second, "api-resources lists networks", func() (bool, string) {
		out, _ := c.kubectlErr("api-resources", "--api-group", "samplecrd.k8s.io")
		return regexpLine(out, `networks\s+net\s+samplecrd.k8s.io/v1\s+true\s+Network`), out
	})
	if out := c.kubectl(t, "get", "--raw", "/apis/samplecrd.k8s.io/v1"); !strings.Contains(out, `"name":"networks"`) || !strings.Contains(out, `"name":"networks/status"`) {
		t.Errorf("/apis/samplecrd.k8s.io/v1:\n%s", out)
	}

	// CRUD through kube-apiserver, proxied to network-apiserver.
	if out := c.kubectl(t, "apply", "-f", "artifacts/examples/network.yaml"); !strings.Contains(out, "network.samplecrd.k8s.io/backend created") {
		t.Fatalf("apply:\n%s", out)
	}
	// No controller runs here (--controllers=false), so READY stays Unknown; no node leases
	// anything, so USED is 0 and AVAILABLE all 253 usable addresses of the /24.
	if out := c.kubectl(t, "get", "networks"); !regexpLine(out, `NAME\s+CIDR\s+GATEWAY\s+READY\s+USED\s+AVAILABLE\s+AGE`) ||
		!regexpLine(out, `backend\s+10\.10\.0\.0/24\s+10\.10\.0\.1\s+Unknown\s+0\s+253\s+\S+`) {
		t.Errorf("get networks:\n%s", out)
	}
	// kube-apiserver aggregates network-apiserver's OpenAPI; that can trail Available a little.
	eventually(t, 90*time.Second, "kubectl explain network.spec", func() (bool, string) {
		out, _ := c.kubectlErr("explain", "network.spec")
		return strings.Contains(out, "FIELD: spec") && strings.Contains(out, "cidr") && strings.Contains(out, "gateway"), out
	})

	// Protobuf through the aggregator, with the admin kubeconfig's credentials.
	cfg := c.restConfig(t)
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodGet, cfg.Host+"/apis/samplecrd.k8s.io/v1/namespaces/default/networks", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Accept", "application/vnd.kubernetes.protobuf")
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.HasPrefix(body, []byte("k8s\x00")) ||
		resp.Header.Get("Content-Type") != "application/vnd.kubernetes.protobuf" || !bytes.Contains(body, []byte("10.10.0.0/24")) {
		t.Errorf("protobuf LIST: %d %s, %d bytes starting %q", resp.StatusCode, resp.Header.Get("Content-Type"), len(body), body[:min(len(body), 16)])
	}

	// etcd holds the Network as protobuf: etcdctl get shows the "k8s\x00" envelope.
	args, err := os.ReadFile(filepath.Join(filepath.Dir(c.kubeconfig), "network-apiserver.args"))
	if err != nil {
		t.Fatal(err)
	}
	// The local cluster's etcd takes TLS clients only: etcdctl uses the server's own flags.
	flag := func(name string) string {
		_, v, _ := strings.Cut(string(args), "--"+name+"\n")
		v, _, _ = strings.Cut(v, "\n")
		return v
	}
	endpoint := flag("etcd-servers")
	raw, err := exec.Command(tool(t, "", "etcdctl"), "--endpoints", endpoint, "--cacert", flag("etcd-cafile"),
		"--cert", flag("etcd-certfile"), "--key", flag("etcd-keyfile"), "get", "--print-value-only",
		"/network-apiserver/samplecrd.k8s.io/networks/default/backend").Output()
	if err != nil || !bytes.HasPrefix(raw, []byte("k8s\x00")) || !bytes.Contains(raw, []byte("10.10.0.0/24")) {
		t.Errorf("etcdctl get (endpoint %q): %v, %d bytes starting %q", endpoint, err, len(raw), raw[:min(len(raw), 16)])
	}

	// RBAC: the view role (aggregated from samplecrd-networks-view by kube-controller-manager)
	// lets "viewer" read but not write; someone bound to nothing may not even read.
	c.kubectl(t, "create", "clusterrolebinding", "e2e-viewer", "--clusterrole", "view", "--user", "viewer")
	eventually(t, 60*time.Second, "viewer can list networks", func() (bool, string) {
		out, err := c.kubectlErr("--as", "viewer", "get", "networks", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "network.samplecrd.k8s.io/backend", out
	})
	out, err := c.kubectlErr("--as", "viewer", "create", "-n", "kube-public", "-f", "artifacts/examples/network.yaml")
	if err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, `User "viewer" cannot create resource "networks"`) {
		t.Errorf("viewer create: err %v\n%s", err, out)
	}
	out, err = c.kubectlErr("--as", "stranger", "get", "networks")
	if err == nil || !strings.Contains(out, "Forbidden") || !strings.Contains(out, `User "stranger" cannot list resource "networks"`) {
		t.Errorf("unbound user list: err %v\n%s", err, out)
	}

	// Attached mode runs NamespaceLifecycle: no Networks in namespaces that do not exist.
	out, err = c.kubectlErr("create", "-n", "no-such-namespace", "-f", "artifacts/examples/network.yaml")
	if err == nil || !strings.Contains(out, `namespaces "no-such-namespace" not found`) {
		t.Errorf("create in a missing namespace: err %v\n%s", err, out)
	}
	if out, _ := c.kubectlErr("get", "networks", "-A", "-o", "name"); strings.TrimSpace(out) != "network.samplecrd.k8s.io/backend" {
		t.Errorf("networks after the rejected creates:\n%s", out)
	}

	// The NetworkTemplate ConfigMap in the server's namespace, read through its informer.
	c.kubectl(t, "-n", "network-apiserver", "create", "configmap", "network-template",
		"--from-literal=template=metadata: {labels: {team: platform}}")
	eventually(t, 60*time.Second, "the template ConfigMap is applied to new Networks", func() (bool, string) {
		out, _ := c.kubectlErr("create", "--dry-run=server", "-f", "artifacts/examples/network-ipv6.yaml", "-o",
			`jsonpath={.metadata.labels.team} {.metadata.annotations.samplecrd\.k8s\.io/applied-template}`)
		return strings.HasPrefix(out, "platform configmap:network-apiserver/network-template@"), out
	})
}
