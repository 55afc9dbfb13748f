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
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	samplecrdv1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/certs"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// issue signs a certificate for cn and dnsNames with the given extended usages; PEM cert and key.
func (ca *testCA) issue(t *testing.T, cn string, dnsNames []string, usages ...x509.ExtKeyUsage) ([]byte, []byte) {
	t.Helper()
	pair, err := certs.Issue(&x509.Certificate{
		Subject: pkix.Name{CommonName: cn}, DNSNames: dnsNames,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: usages,
	}, ca.KeyPair)
	if err != nil {
		t.Fatal(err)
	}
	key, err := pair.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	return pair.CertPEM(), key
}

// tlsSecret creates a Secret of type kubernetes.io/tls with ca.crt, as the README asks.
func (c *nodeCluster) tlsSecret(t *testing.T, name string, ca *testCA, cert, key []byte) {
	t.Helper()
	dir := t.TempDir()
	for f, b := range map[string][]byte{"tls.crt": cert, "tls.key": key, "ca.crt": ca.pem} {
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c.kubectl(t, "-n", "network-apiserver", "create", "secret", "generic", name, "--type", "kubernetes.io/tls",
		"--from-file=tls.crt="+filepath.Join(dir, "tls.crt"), "--from-file=tls.key="+filepath.Join(dir, "tls.key"),
		"--from-file=ca.crt="+filepath.Join(dir, "ca.crt"))
}

// deployOverlay writes the kustomization README's "On a real cluster" has users write over
// artifacts/deploy: the images the nodes have (make image's, and the pinned etcd) and the serving
// CA as both APIServices' caBundle.
func deployOverlay(t *testing.T, dir, apiserverTag, caBundle string) string {
	t.Helper()
	rel, err := filepath.Rel(dir, filepath.Join(repoRoot, "artifacts", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
- %s
images:
- name: network-apiserver
  newName: network-apiserver
  newTag: %s
- name: gcr.io/etcd-development/etcd
  newName: local/etcd
  newTag: v3.7.3
patches:
- target: {kind: APIService}
  patch: |-
    - op: replace
      path: /spec/caBundle
      value: %s
# The agents write their configuration lists to the directory of the nodes' runtime handler
# samplecrd (docs/operations.md, "Pods on a Network"), not to the primary one.
- target: {kind: DaemonSet, name: network-agent}
  patch: |-
    - op: test
      path: /spec/template/spec/volumes/0/name
      value: cni-conf
    - op: replace
      path: /spec/template/spec/volumes/0/hostPath/path
      value: %s
# The agents' init container installs the CNI plugin into the nodes' CNI bin_dir (their
# containerd's; both nodes share this machine's filesystem), not into this machine's /opt/cni/bin:
# the pods below attach through the plugin it installed.
- target: {kind: DaemonSet, name: network-agent}
  patch: |-
    - op: test
      path: /spec/template/spec/volumes/4/name
      value: cni-bin
    - op: replace
      path: /spec/template/spec/volumes/4/hostPath/path
      value: %s
# A short lease reclaim grace, so that a leaked lease goes within the test.
- target: {kind: DaemonSet, name: network-agent}
  patch: |-
    - op: add
      path: /spec/template/spec/containers/0/args/-
      value: --lease-reclaim-grace=%s
`, rel, apiserverTag, caBundle, runtimeClassDir, nodesCNIBinDir, deployReclaimGrace)
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// nodesCNIBinDir is the local nodes' CNI bin_dir (hack/local-up-nodes.sh's containerd.toml), where
// the deploy overlay has the agents install the CNI plugin.
var nodesCNIBinDir = filepath.Join(repoRoot, "_output", "bin", "cni")

// nodeRuntimeClassDir is node's runtime handler directory (runtimeClassDir) on this machine:
// the node's /etc is an overlay whose upper directory is its etc/upper.
func (c *nodeCluster) nodeRuntimeClassDir(node string) string {
	return filepath.Join(c.state, "nodes", node, "etc", "upper", strings.TrimPrefix(runtimeClassDir, "/etc/"))
}

// nodeConfList is the path, on this machine, of the configuration list of the Network key in
// node's runtime handler directory.
func (c *nodeCluster) nodeConfList(node, key string) string {
	return linux.ConfPath(c.nodeRuntimeClassDir(node), key)
}

// nodeExec runs a command in node's network namespace.
func (c *nodeCluster) nodeExec(t *testing.T, node string, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command("nsenter", append([]string{"-t", fmt.Sprint(c.pid(t, node+"-holder")), "-n"}, args...)...).CombinedOutput()
	return string(out), err
}

// TestDeployOnNodes deploys network-apiserver the way the README tells users to, onto the local
// cluster's two real nodes: make image's image (imported, not pulled) through a kustomize images
// override of artifacts/deploy, the etcd and serving certificate Secrets, the caBundle. Then:
// etcd's three members Ready with TLS, two apiserver replicas Ready on different nodes, the
// APIServices Available through the Service, Networks through kube-apiserver realised by the
// agent DaemonSet on both nodes, and what operators do: delete an apiserver pod under load,
// delete an etcd member's pod under writes, a rolling update under creates, stop a node's
// kubelet, kubectl delete -k.
func TestDeployOnNodes(t *testing.T) {
	requireNodeSupport(t)
	image := filepath.Join(repoRoot, "_output", "image", "network-apiserver.tar")
	if _, err := os.Stat(image); err != nil {
		t.Fatalf("%s: make image builds it (make test-e2e-node does): %v", image, err)
	}
	before := hostSnapshot(t)
	c := startNodeCluster(t, before, "IMAGES="+image, "LOCAL_NETWORK_APISERVER=false")

	// The same image under a second tag, for the rolling update.
	for _, node := range []string{"node1", "node2"} {
		sock := filepath.Join(c.state, "nodes", node, "run", "containerd", "containerd.sock")
		if out, err := exec.Command("ctr", "--address", sock, "-n", "k8s.io", "images", "tag",
			"docker.io/library/network-apiserver:v1.37.2", "docker.io/library/network-apiserver:v1.37.2-rollout").CombinedOutput(); err != nil {
			t.Fatalf("ctr images tag on %s: %v\n%s", node, err, out)
		}
	}

	// Step 2 of "On a real cluster": the certificates.
	c.kubectl(t, "create", "namespace", "network-apiserver")
	etcdCA := newTestCA(t, "etcd-ca")
	etcdNames := []string{"*.etcd.network-apiserver.svc", "*.etcd.network-apiserver.svc.cluster.local", "localhost"}
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	cert, key := etcdCA.issue(t, "etcd-server", etcdNames, both...)
	c.tlsSecret(t, "etcd-server", etcdCA, cert, key)
	cert, key = etcdCA.issue(t, "etcd-peer", etcdNames, both...)
	c.tlsSecret(t, "etcd-peer", etcdCA, cert, key)
	cert, key = etcdCA.issue(t, "network-apiserver", nil, x509.ExtKeyUsageClientAuth)
	c.tlsSecret(t, "network-apiserver-etcd-client", etcdCA, cert, key)
	servingCA := newTestCA(t, "network-apiserver-serving-ca")
	cert, key = servingCA.issue(t, "network-apiserver.network-apiserver.svc",
		[]string{"network-apiserver.network-apiserver.svc", "network-apiserver.network-apiserver.svc.cluster.local"}, x509.ExtKeyUsageServerAuth)
	c.tlsSecret(t, "network-apiserver-serving", servingCA, cert, key)

	// No volume provisioner here: a local PersistentVolume per etcd member, spread over the nodes,
	// in the node's /var/lib.
	for i := range 3 {
		node := fmt.Sprintf("node%d", i%2+1)
		dir := filepath.Join(c.state, "nodes", node, "var", "lib", "local-pv", fmt.Sprint(i))
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(dir, 65532, 65532); err != nil { // etcd's user
			t.Fatal(err)
		}
		c.kubectl(t, "apply", "-f", writeManifest(t, "pv.yaml", fmt.Sprintf(`apiVersion: v1
kind: PersistentVolume
metadata: {name: etcd-%d}
spec:
  capacity: {storage: 2Gi}
  accessModes: [ReadWriteOnce]
  local: {path: /var/lib/local-pv/%d}
  nodeAffinity:
    required:
      nodeSelectorTerms:
      - matchExpressions: [{key: kubernetes.io/hostname, operator: In, values: [%s]}]
`, i, i, node)))
	}

	// The overlay (images, caBundle), then apply.
	caBundle := base64.StdEncoding.EncodeToString(servingCA.pem)
	overlayDir := t.TempDir()
	overlay := deployOverlay(t, overlayDir, "v1.37.2", caBundle)
	start := time.Now()
	c.kubectl(t, "apply", "-k", overlay)
	c.kubectl(t, "-n", "network-apiserver", "rollout", "status", "statefulset/etcd", "--timeout=180s")
	c.kubectl(t, "-n", "network-apiserver", "rollout", "status", "deployment/network-apiserver", "--timeout=180s")
	c.kubectl(t, "-n", "network-agent", "rollout", "status", "daemonset/network-agent", "--timeout=180s")
	c.kubectl(t, "wait", "--for=condition=Available", "--timeout=180s", "apiservice/v1.samplecrd.k8s.io", "apiservice/v1beta1.samplecrd.k8s.io")
	t.Logf("kubectl apply -k to APIServices Available: %s", time.Since(start).Round(time.Millisecond))

	client := c.clientset(t)
	networks := client.SamplecrdV1().Networks("default")

	t.Run("EtcdWithTLS", func(t *testing.T) {
		out := c.kubectl(t, "-n", "network-apiserver", "exec", "etcd-0", "--", "etcdctl",
			"--endpoints", "https://etcd-0.etcd.network-apiserver.svc:2379,https://etcd-1.etcd.network-apiserver.svc:2379,https://etcd-2.etcd.network-apiserver.svc:2379",
			"--cacert", "/etc/etcd/server/ca.crt", "--cert", "/etc/etcd/server/tls.crt", "--key", "/etc/etcd/server/tls.key",
			"endpoint", "health")
		if n := strings.Count(out, "is healthy"); n != 3 {
			t.Errorf("etcdctl endpoint health: %d of 3 healthy:\n%s", n, out)
		}
		out = c.kubectl(t, "-n", "network-apiserver", "exec", "etcd-0", "--", "etcdctl", "--endpoints", "https://localhost:2379",
			"--cacert", "/etc/etcd/server/ca.crt", "--cert", "/etc/etcd/server/tls.crt", "--key", "/etc/etcd/server/tls.key",
			"member", "list")
		if n := strings.Count(out, "started"); n != 3 || strings.Contains(out, "http://") {
			t.Errorf("etcd members (want 3 started, peers and clients on https):\n%s", out)
		}
		// Without a client certificate, etcd's client port (reachable: the connection opens)
		// answers no request.
		ip := strings.TrimSpace(c.kubectl(t, "-n", "network-apiserver", "get", "pod", "etcd-0", "-o", "jsonpath={.status.podIP}"))
		var conn net.Conn
		if err := netnstest.InNS(fmt.Sprintf("/proc/%d/ns/net", c.pid(t, "node1-holder")), func() error {
			var err error
			conn, err = net.DialTimeout("tcp", ip+":2379", 5*time.Second)
			return err
		}); err != nil {
			t.Fatalf("etcd-0's client port from node1: %v", err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		tc := tls.Client(conn, &tls.Config{InsecureSkipVerify: true}) // only the refusal matters here
		_, err := fmt.Fprintf(tc, "POST /v3/kv/range HTTP/1.1\r\nHost: etcd\r\nContent-Length: 14\r\n\r\n{\"key\":\"Lw==\"}")
		if err == nil {
			var b [512]byte
			var n int
			n, err = tc.Read(b[:])
			if err == nil {
				t.Errorf("etcd answered a client without a certificate: %q", b[:n])
			}
		}
		t.Logf("etcd without a client certificate: %v", err)
	})

	t.Run("ApiserverReplicasOnBothNodes", func(t *testing.T) {
		out := c.kubectl(t, "-n", "network-apiserver", "get", "pods", "-l", "app.kubernetes.io/component=apiserver",
			"-o", `jsonpath={range .items[*]}{.spec.nodeName} {.status.containerStatuses[0].ready}{"\n"}{end}`)
		if !strings.Contains(out, "node1 true") || !strings.Contains(out, "node2 true") {
			t.Errorf("apiserver replicas (want one Ready on each node):\n%s", out)
		}
	})

	t.Run("CNIPluginInstalled", func(t *testing.T) {
		// Each agent's init container ran before the agent (the rollout above waited for them)
		// and put the image's plugin (static; not the one make build puts there) into the nodes'
		// bin_dir.
		plugin := filepath.Join(nodesCNIBinDir, "samplecrd-bridge")
		info, err := os.Stat(plugin)
		if err != nil || info.Mode().Perm() != 0o755 {
			t.Fatalf("the plugin at %s: %v, %v; want it installed, mode 0755", plugin, info, err)
		}
		installed, err := os.ReadFile(plugin)
		if err != nil {
			t.Fatal(err)
		}
		if fromImage, err := os.ReadFile(filepath.Join(filepath.Dir(image), "samplecrd-bridge")); err != nil || !bytes.Equal(installed, fromImage) {
			t.Errorf("the plugin in %s is not the image's (%v): the init container did not install it", nodesCNIBinDir, err)
		}
		version := exec.Command(plugin)
		version.Env = []string{"CNI_COMMAND=VERSION"}
		version.Stdin = strings.NewReader(`{"cniVersion":"1.0.0"}`)
		if out, err := version.Output(); err != nil || !strings.Contains(string(out), `"1.1.0"`) {
			t.Errorf("the installed plugin's VERSION: %v\n%s", err, out)
		}
		out := c.kubectl(t, "-n", "network-agent", "get", "pods", "-o",
			`jsonpath={range .items[*]}{.status.initContainerStatuses[0].name} {.status.initContainerStatuses[0].state.terminated.exitCode}{"\n"}{end}`)
		if strings.Count(out, "install-cni-plugin 0") != 2 {
			t.Errorf("the agents' init containers (want two that exited 0):\n%s", out)
		}
	})

	t.Run("NetworksOnBothNodes", func(t *testing.T) {
		if out := c.kubectl(t, "apply", "-f", "artifacts/examples/network.yaml"); !strings.Contains(out, "network.samplecrd.k8s.io/backend created") {
			t.Fatalf("apply:\n%s", out)
		}
		c.kubectl(t, "wait", "--for=condition=Ready", "network/backend", "--timeout=60s")
		// Each node's agent reports on its own.
		ready := map[string]string{}
		eventually(t, 60*time.Second, "status.nodes names node1 and node2, ready", func() (bool, string) {
			n, err := networks.Get(context.Background(), "backend", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			clear(ready)
			for _, s := range n.Status.Nodes {
				if s.Ready {
					ready[s.NodeName] = s.Bridge
				}
			}
			b, _ := json.Marshal(n.Status)
			return len(ready) == 2 && ready["node1"] != "" && ready["node2"] != "", string(b)
		})
		// The agents' default: each node has the list, our plugin first, and no bridge until a
		// pod attaches there (RuntimeClassPods attaches one on each).
		for node, bridge := range ready {
			list, err := libcni.ConfListFromFile(c.nodeConfList(node, "default/backend"))
			if err != nil || len(list.Plugins) == 0 || list.Plugins[0].Network.Type != linux.AttachPluginType {
				t.Errorf("%s: the list of backend (%v) does not start with %s", node, err, linux.AttachPluginType)
			}
			if out, err := c.nodeExec(t, node, "ip", "-o", "link", "show", "dev", bridge); err == nil {
				t.Errorf("%s: bridge %s made before any pod attached:\n%s", node, bridge, out)
			}
		}
		if out := c.kubectl(t, "get", "networks"); !regexpLine(out, `backend\s+10\.10\.0\.0/24\s+10\.10\.0\.1\s+True.*`) {
			t.Errorf("kubectl get networks:\n%s", out)
		}
	})

	t.Run("RuntimeClassPods", func(t *testing.T) { runtimeClassPods(t, c, networks) })
	t.Run("LeaseReclaim", func(t *testing.T) { leaseReclaim(t, c, networks) })

	// load runs op every few milliseconds until stop is closed; it counts what failed.
	type load struct {
		ok, failed atomic.Int64
		mu         sync.Mutex
		errs       []string
		acked      []string
	}
	run := func(stop <-chan struct{}, op func(i int) (string, error)) (*load, *sync.WaitGroup) {
		l := &load{}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				name, err := op(i)
				l.mu.Lock()
				if err != nil {
					l.failed.Add(1)
					if len(l.errs) < 10 {
						l.errs = append(l.errs, err.Error())
					}
				} else {
					l.ok.Add(1)
					if name != "" {
						l.acked = append(l.acked, name)
					}
				}
				l.mu.Unlock()
			}
		}()
		return l, &wg
	}
	created := 0
	create := func(prefix string) func(i int) (string, error) {
		return func(i int) (string, error) {
			name := fmt.Sprintf("%s-%d", prefix, i)
			created++
			_, err := networks.Create(context.Background(), &samplecrdv1.Network{
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec:       samplecrdv1.NetworkSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 100+created/256, created%256)},
			}, metav1.CreateOptions{})
			return name, err
		}
	}

	t.Run("DeleteApiserverPod", func(t *testing.T) {
		pods := strings.Fields(c.kubectl(t, "-n", "network-apiserver", "get", "pods", "-l", "app.kubernetes.io/component=apiserver", "-o", "jsonpath={.items[*].metadata.name}"))
		stop := make(chan struct{})
		l, wg := run(stop, func(int) (string, error) {
			_, err := networks.List(context.Background(), metav1.ListOptions{})
			return "", err
		})
		start := time.Now()
		c.kubectl(t, "-n", "network-apiserver", "delete", "pod", pods[0], "--wait=true", "--timeout=120s")
		c.kubectl(t, "-n", "network-apiserver", "rollout", "status", "deployment/network-apiserver", "--timeout=120s")
		time.Sleep(2 * time.Second) // requests also after the replacement is Ready
		close(stop)
		wg.Wait()
		t.Logf("one apiserver pod deleted and replaced in %s: %d requests served, %d failed", time.Since(start).Round(time.Millisecond), l.ok.Load(), l.failed.Load())
		if l.failed.Load() > 0 || l.ok.Load() == 0 {
			t.Errorf("requests failed while one replica was replaced (%d ok): %v", l.ok.Load(), l.errs)
		}
	})

	t.Run("DeleteEtcdPod", func(t *testing.T) {
		stop := make(chan struct{})
		l, wg := run(stop, create("etcd-step"))
		start := time.Now()
		c.kubectl(t, "-n", "network-apiserver", "delete", "pod", "etcd-1", "--wait=true", "--timeout=120s")
		okWhileDown := l.ok.Load()
		c.kubectl(t, "-n", "network-apiserver", "rollout", "status", "statefulset/etcd", "--timeout=180s")
		time.Sleep(2 * time.Second)
		close(stop)
		wg.Wait()
		t.Logf("etcd-1 deleted and back in %s: %d creates acknowledged, %d failed", time.Since(start).Round(time.Millisecond), l.ok.Load(), l.failed.Load())
		if l.failed.Load() > 0 {
			t.Logf("failed creates: %v", l.errs)
		}
		if l.ok.Load() <= okWhileDown {
			t.Errorf("no create succeeded after etcd-1 was deleted (quorum lost?): %v", l.errs)
		}
		// Every acknowledged write is there.
		list, err := networks.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		have := map[string]bool{}
		for _, n := range list.Items {
			have[n.Name] = true
		}
		for _, name := range l.acked {
			if !have[name] {
				t.Errorf("acknowledged create of %s lost", name)
			}
		}
	})

	t.Run("RollingUpdate", func(t *testing.T) {
		stop := make(chan struct{})
		l, wg := run(stop, create("rollout-step"))
		// The PodDisruptionBudget's floor, watched through the rollout.
		var minAvailable atomic.Int64
		minAvailable.Store(1 << 30)
		var watchWG sync.WaitGroup
		watchWG.Add(1)
		go func() {
			defer watchWG.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(250 * time.Millisecond):
				}
				out, err := c.kubectlErr("-n", "network-apiserver", "get", "deployment", "network-apiserver", "-o", "jsonpath={.status.availableReplicas}")
				if err != nil {
					continue
				}
				var n int64
				if _, err := fmt.Sscan(strings.TrimSpace(out), &n); err == nil && n < minAvailable.Load() {
					minAvailable.Store(n)
				}
			}
		}()
		start := time.Now()
		// A new tag in the overlay, applied again: only the Deployment changes.
		c.kubectl(t, "apply", "-k", deployOverlay(t, overlayDir, "v1.37.2-rollout", caBundle))
		c.kubectl(t, "-n", "network-apiserver", "rollout", "status", "deployment/network-apiserver", "--timeout=180s")
		time.Sleep(2 * time.Second)
		close(stop)
		wg.Wait()
		watchWG.Wait()
		t.Logf("rolling update in %s: %d creates acknowledged, %d failed; fewest available replicas %d", time.Since(start).Round(time.Millisecond), l.ok.Load(), l.failed.Load(), minAvailable.Load())
		if l.failed.Load() > 0 || l.ok.Load() == 0 {
			t.Errorf("creates failed during the rolling update (%d ok): %v", l.ok.Load(), l.errs)
		}
		if minAvailable.Load() < 1 {
			t.Errorf("available replicas fell to %d during the rollout (PodDisruptionBudget minAvailable 1)", minAvailable.Load())
		}
		out := c.kubectl(t, "-n", "network-apiserver", "get", "pods", "-l", "app.kubernetes.io/component=apiserver", "-o", `jsonpath={range .items[*]}{.spec.containers[0].image}{"\n"}{end}`)
		if strings.Count(out, "network-apiserver:v1.37.2-rollout") != 2 {
			t.Errorf("pods after the rollout:\n%s", out)
		}
		if out := c.kubectl(t, "get", "apiservice", "v1.samplecrd.k8s.io", "-o", "jsonpath={.spec.caBundle}"); out != caBundle {
			t.Errorf("applying the overlay again changed the APIService's caBundle")
		}
		// The new revision's pods, not the old ones still terminating, must be on both nodes:
		// one node lost must not take the API with it (StopKubelet below).
		var nodes []string
		err := wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
			out := c.kubectl(t, "-n", "network-apiserver", "get", "pods", "-l", "app.kubernetes.io/component=apiserver", "-o",
				`jsonpath={range .items[*]}{.spec.containers[0].image} {.spec.nodeName} {.metadata.deletionTimestamp}{"\n"}{end}`)
			nodes = nil
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				f := strings.Fields(line)
				if len(f) == 2 && strings.HasSuffix(f[0], ":v1.37.2-rollout") {
					nodes = append(nodes, f[1])
				}
			}
			return len(nodes) == 2, nil
		})
		if err != nil || nodes[0] == nodes[1] {
			t.Errorf("after the rollout the new replicas run on %v (%v), want one on each node", nodes, err)
		}
	})

	t.Run("ResourceUse", func(t *testing.T) {
		out, err := c.script(context.Background(), "status")
		if err != nil {
			t.Fatalf("status: %v\n%s", err, out)
		}
		t.Logf("processes and resident memory with network-apiserver deployed:\n%s", out)
	})

	// everyNetwork checks every Network with ok; it says how many there are and shows the
	// status of the first few that fail.
	everyNetwork := func(ctx context.Context, ok func(entries map[string]samplecrdv1.NetworkNodeStatus, ready *metav1.Condition) bool) (bool, string) {
		list, err := networks.List(ctx, metav1.ListOptions{})
		if err != nil || len(list.Items) == 0 {
			return false, fmt.Sprintf("list: %v (%d Networks)", err, len(list.Items))
		}
		var failing []string
		for _, n := range list.Items {
			entries := map[string]samplecrdv1.NetworkNodeStatus{}
			for _, e := range n.Status.Nodes {
				entries[e.NodeName] = e
			}
			if !ok(entries, meta.FindStatusCondition(n.Status.Conditions, "Ready")) {
				if len(failing) < 3 {
					b, _ := json.Marshal(n.Status)
					failing = append(failing, n.Name+": "+string(b))
				} else {
					failing = append(failing, n.Name)
				}
			}
		}
		return len(failing) == 0, fmt.Sprintf("%d of %d Networks not as wanted:\n%s", len(failing), len(list.Items), strings.Join(failing, "\n"))
	}
	// bridges returns node's bridges made for Networks with their interface indexes, so that a
	// bridge deleted and made again shows.
	bridges := func(t *testing.T, node string) map[string]string {
		t.Helper()
		out, err := c.nodeExec(t, node, "ip", "-o", "link", "show", "type", "bridge")
		if err != nil {
			t.Fatalf("%s: ip link: %v\n%s", node, err, out)
		}
		m := map[string]string{}
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) > 1 && strings.HasPrefix(f[1], "nw") {
				m[strings.TrimSuffix(f[1], ":")] = f[0]
			}
		}
		return m
	}

	readyOnBoth := func(e map[string]samplecrdv1.NetworkNodeStatus, ready *metav1.Condition) bool {
		return len(e) == 2 && e["node1"].Ready && e["node2"].Ready && ready != nil && ready.Status == metav1.ConditionTrue
	}

	// diagnose logs, when t has failed, what tells why the API or the agents did not answer.
	diagnose := func(t *testing.T) {
		if !t.Failed() {
			return
		}
		for _, args := range [][]string{
			{"get", "apiservice", "v1.samplecrd.k8s.io", "-o", "jsonpath={.status.conditions}"},
			{"get", "nodes", "-o", "wide"},
			{"get", "pods", "-A", "-o", "wide"},
			{"-n", "network-apiserver", "get", "endpointslices", "-o", "wide"},
			{"-n", "network-apiserver", "logs", "-l", "app.kubernetes.io/component=apiserver", "--tail", "30", "--prefix"},
			{"-n", "network-agent", "logs", "-l", "app.kubernetes.io/component=agent", "--tail", "30", "--prefix"},
		} {
			out, err := c.kubectlErr(args...)
			t.Logf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}

	t.Run("StopKubelet", func(t *testing.T) {
		ctx := context.Background()
		defer diagnose(t)
		// The Networks the steps above created, realised everywhere before the node goes.
		eventually(t, 120*time.Second, "every Network ready on node1 and node2", func() (bool, string) { return everyNetwork(ctx, readyOnBoth) })
		node1Before := bridges(t, "node1")
		if out, err := c.script(ctx, "stop-kubelet", "2"); err != nil {
			t.Fatalf("stop-kubelet 2: %v\n%s", err, out)
		}
		start := time.Now()
		eventually(t, 120*time.Second, "node2 NotReady", func() (bool, string) {
			out, _ := c.kubectlErr("get", "node", "node2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return strings.TrimSpace(out) == "Unknown", out
		})
		t.Logf("node2 NotReady %s after its kubelet stopped (kube-controller-manager --node-monitor-grace-period 20s)", time.Since(start).Round(time.Millisecond))
		// node1 and the API are unaffected: a new Network is realised there.
		if _, err := networks.Create(ctx, &samplecrdv1.Network{ObjectMeta: metav1.ObjectMeta{Name: "node2-down"},
			Spec: samplecrdv1.NetworkSpec{CIDR: "10.20.0.0/24"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Every Network's node2 entry says node2 is not Ready (written by network-apiserver's
		// node lifecycle loop, and by node2's agent, which still runs: only the kubelet
		// stopped), every Network is Ready=False naming node2, and node1's entries are ready.
		marked := time.Now()
		eventually(t, 120*time.Second, "every Network's node2 entry NodeNotReady, node1's ready", func() (bool, string) {
			return everyNetwork(ctx, func(e map[string]samplecrdv1.NetworkNodeStatus, ready *metav1.Condition) bool {
				e1, e2 := e["node1"], e["node2"]
				return len(e) == 2 && e1.Ready && !e2.Ready && e2.Reason == "NodeNotReady" &&
					strings.HasPrefix(e2.Message, "node node2 is not Ready (NodeStatusUnknown)") &&
					ready != nil && ready.Status == metav1.ConditionFalse && ready.Reason == "NodeNotReady" &&
					strings.HasPrefix(ready.Message, "not ready on 1 of 2 nodes: node2: node node2 is not Ready")
			})
		})
		t.Logf("node2's entries marked NodeNotReady %s after node2 went NotReady", time.Since(marked).Round(time.Millisecond))
		if out := c.kubectl(t, "get", "network", "backend"); !regexpLine(out, `backend\s+10\.10\.0\.0/24\s+10\.10\.0\.1\s+False\s+\S+\s+\S+\s+\S+`) {
			t.Errorf("kubectl get network backend with node2 NotReady:\n%s", out)
		}
		node1After := bridges(t, "node1")
		for bridge, index := range node1Before {
			if node1After[bridge] != index {
				t.Errorf("node1's bridge %s (index %s) is now %q", bridge, index, node1After[bridge])
			}
		}
		if len(node1After) != len(node1Before) {
			t.Errorf("node1's bridges: %d before, %d after one Network more that no pod uses", len(node1Before), len(node1After))
		}
		if _, err := os.Stat(c.nodeConfList("node1", "default/node2-down")); err != nil {
			t.Errorf("node1 has no list of node2-down: %v", err)
		}

		if out, err := c.script(ctx, "start-kubelet", "2"); err != nil {
			t.Fatalf("start-kubelet 2: %v\n%s", err, out)
		}
		c.kubectl(t, "wait", "--for=condition=Ready", "node/node2", "--timeout=120s")
		back := time.Now()
		// node2's agent reports again as usual: every Network is ready on both nodes.
		eventually(t, 120*time.Second, "every Network ready on node1 and node2 again", func() (bool, string) { return everyNetwork(ctx, readyOnBoth) })
		t.Logf("every Network ready on both nodes %s after node2 was Ready again", time.Since(back).Round(time.Millisecond))
	})

	// A node that will not come back is deleted, as an operator does: its entries go (no pod
	// there holds an address: they report leases: 0, so neither the node lifecycle loop nor the
	// agent, which still runs and holds its Lease, keeps them as NodeDeleted) and its agent does
	// not put them back; a Network its pods held can be deleted.
	t.Run("DeleteNode", func(t *testing.T) {
		ctx := context.Background()
		defer diagnose(t)
		if out, err := c.script(ctx, "stop-kubelet", "2"); err != nil {
			t.Fatalf("stop-kubelet 2: %v\n%s", err, out)
		}
		eventually(t, 120*time.Second, "node2 NotReady", func() (bool, string) {
			out, _ := c.kubectlErr("get", "node", "node2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return strings.TrimSpace(out) == "Unknown", out
		})
		start := time.Now()
		c.kubectl(t, "delete", "node", "node2")
		eventually(t, 60*time.Second, "every Network only on node1, Ready", func() (bool, string) {
			return everyNetwork(ctx, func(e map[string]samplecrdv1.NetworkNodeStatus, ready *metav1.Condition) bool {
				return len(e) == 1 && e["node1"].Ready && ready != nil && ready.Status == metav1.ConditionTrue
			})
		})
		t.Logf("node2's entries removed %s after the Node was deleted", time.Since(start).Round(time.Millisecond))
		// node2's agent still runs (its container outlives the kubelet) and sees a new Network,
		// but, its Node deleted, it claims no address block of it and, holding no leases,
		// reports nothing: its status names node1 only, and node2 has no list of it (no pod
		// could attach there), nor a bridge.
		n, err := networks.Create(ctx, &samplecrdv1.Network{ObjectMeta: metav1.ObjectMeta{Name: "node2-deleted"},
			Spec: samplecrdv1.NetworkSpec{CIDR: "10.21.0.0/24"}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var bridge string
		eventually(t, 60*time.Second, "node2-deleted realised on node1", func() (bool, string) {
			n, err = networks.Get(ctx, "node2-deleted", metav1.GetOptions{})
			if err != nil {
				return false, err.Error()
			}
			b, _ := json.Marshal(n.Status)
			if len(n.Status.Nodes) == 1 && n.Status.Nodes[0].NodeName == "node1" && n.Status.Nodes[0].Ready {
				bridge = n.Status.Nodes[0].Bridge
				return true, string(b)
			}
			return false, string(b)
		})
		refused := regexp.MustCompile(`(?m)^network_controller_reconcile_errors_total\{reason="NodeDeleted"\} (\d+)$`)
		eventually(t, 60*time.Second, "node2's agent refusing to claim blocks for its deleted Node", func() (bool, string) {
			metrics, err := httpGetIn(c.pid(t, "node2-holder"), "http://127.0.0.1:9469/metrics")
			m := refused.FindStringSubmatch(metrics)
			return err == nil && m != nil && m[1] != "0", fmt.Sprintf("%v %q", err, m)
		})
		if _, err := os.Stat(c.nodeConfList("node2", "default/node2-deleted")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("node2 has a list of node2-deleted, or it cannot tell (%v): a deleted Node's agent claims no block", err)
		}
		if out, err := c.nodeExec(t, "node2", "ip", "-o", "link", "show", "dev", bridge); err == nil {
			t.Errorf("node2 has the bridge of node2-deleted:\n%s", out)
		}
		n, err = networks.Get(ctx, "node2-deleted", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if b, _ := json.Marshal(n.Status.Nodes); len(n.Status.Nodes) != 1 {
			t.Errorf("node2's agent reported after its Node was deleted: %s", b)
		}

		// The kubelet starts again: it registers node2 anew, and node2 reports again.
		if out, err := c.script(ctx, "start-kubelet", "2"); err != nil {
			t.Fatalf("start-kubelet 2: %v\n%s", err, out)
		}
		eventually(t, 120*time.Second, "node2 registered and Ready", func() (bool, string) {
			out, _ := c.kubectlErr("get", "node", "node2", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].status}`)
			return strings.TrimSpace(out) == "True", out
		})
		back := time.Now()
		eventually(t, 180*time.Second, "every Network ready on node1 and node2 again", func() (bool, string) { return everyNetwork(ctx, readyOnBoth) })
		t.Logf("every Network ready on both nodes %s after node2 registered again", time.Since(back).Round(time.Millisecond))
		c.kubectl(t, "-n", "network-apiserver", "rollout", "status", "statefulset/etcd", "--timeout=180s")
		c.kubectl(t, "-n", "network-agent", "rollout", "status", "daemonset/network-agent", "--timeout=180s")
	})

	t.Run("DeleteK", func(t *testing.T) {
		start := time.Now()
		c.kubectl(t, "delete", "-k", overlay, "--wait=true", "--timeout=180s")
		t.Logf("kubectl delete -k in %s", time.Since(start).Round(time.Millisecond))
		for _, what := range [][]string{{"apiservice", "v1.samplecrd.k8s.io"}, {"apiservice", "v1beta1.samplecrd.k8s.io"},
			{"namespace", "network-apiserver"}, {"namespace", "network-agent"}} {
			eventually(t, 120*time.Second, what[0]+" "+what[1]+" gone", func() (bool, string) {
				out, err := c.kubectlErr("get", what[0], what[1])
				return err != nil && strings.Contains(out, "NotFound"), out
			})
		}
		// Discovery is whole again and names no samplecrd.k8s.io.
		out, err := c.kubectlErr("api-resources")
		if err != nil || strings.Contains(out, "samplecrd.k8s.io") || strings.Contains(out, "unable to retrieve") {
			t.Errorf("kubectl api-resources after delete -k: %v\n%s", err, out)
		}
	})
}
