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

package robustness

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/client-go/rest"

	"github.com/samplecrd/network-apiserver/pkg/embeddedetcd"
	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// etcdPrefix is the servers' default --etcd-prefix; Networks and allocations live under it.
const etcdPrefix = "/registry/samplecrd.k8s.io"

// cluster is one topology: etcd members (none in embedded mode) and network-apiserver replicas.
type cluster struct {
	dir      string
	bin      string
	embedded bool

	etcd      *localcluster.Etcd // nil in embedded mode
	members   []*localcluster.Process
	endpoints []string // etcd client URLs
	etcdTLS   *tls.Config
	replicas  []*replica
}

// replica is one network-apiserver process.
type replica struct {
	index   int
	proc    *localcluster.Process
	url     string
	dataDir string
	// proxies: the replica reaches each etcd member through its own proxy (none in embedded
	// mode), so that a fault can cut it off etcd alone.
	proxies []*tcpProxy

	mu     sync.Mutex
	config *rest.Config // admin credentials, the serving CA; nil until ready
}

// startCluster starts the topology of sc in dir: members etcd members with TLS between them and
// to the servers, and sc.Replicas servers (or one server with its embedded etcd).
func startCluster(ctx context.Context, dir, bin string, sc scenario) (*cluster, error) {
	c := &cluster{dir: dir, bin: bin, embedded: sc.Embedded}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if !sc.Embedded {
		etcd, err := localcluster.StartEtcd(ctx, dir, bin, sc.EtcdMembers)
		if err != nil {
			return nil, err
		}
		c.etcd, c.members, c.endpoints, c.etcdTLS = etcd, etcd.Members, etcd.Endpoints, etcd.TLS
	}
	n := sc.Replicas
	if sc.Embedded {
		n = 1
	}
	ports, err := localcluster.FreePorts(n + 1)
	if err != nil {
		return nil, err
	}
	for i := range n {
		r := &replica{index: i, url: fmt.Sprintf("https://127.0.0.1:%d", ports[i]), dataDir: filepath.Join(dir, fmt.Sprintf("server-%d", i))}
		args := []string{filepath.Join(bin, "network-apiserver"), "--data-dir", r.dataDir,
			"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[i]), "--controllers=false",
			"--overlap-scope", sc.OverlapScope, "-v", "1"}
		if sc.Guards != "" {
			args = append(args, "--allocation-guards", sc.Guards)
		}
		if sc.VNIKeys != "" {
			args = append(args, "--vni-keys", sc.VNIKeys)
		}
		if sc.GatewayKeys != "" {
			args = append(args, "--gateway-keys", sc.GatewayKeys)
		}
		if sc.Embedded {
			// A fixed client port, so that the suite's etcd client finds it again after a restart.
			args = append(args, "--embedded-etcd-port", strconv.Itoa(ports[n]))
		} else {
			var via []string
			for _, ep := range c.endpoints {
				px, err := newTCPProxy(strings.TrimPrefix(ep, "https://"))
				if err != nil {
					c.stop()
					return nil, err
				}
				r.proxies = append(r.proxies, px)
				via = append(via, "https://"+px.Addr())
			}
			args = append(args, "--etcd-servers", strings.Join(via, ","),
				"--etcd-cafile", c.etcd.PKI.CAFile,
				"--etcd-certfile", c.etcd.Client.Cert,
				"--etcd-keyfile", c.etcd.Client.Key)
		}
		r.proc = localcluster.NewProcess(fmt.Sprintf("network-apiserver-%d", i), filepath.Join(dir, fmt.Sprintf("network-apiserver-%d.log", i)), args...)
		c.replicas = append(c.replicas, r)
		if err := r.proc.Start(); err != nil {
			c.stop()
			return nil, err
		}
	}
	for _, r := range c.replicas {
		if err := r.waitReady(ctx, 2*time.Minute); err != nil {
			c.stop()
			return nil, err
		}
	}
	if sc.Embedded {
		ep, tlsConfig, err := embeddedEtcd(c.replicas[0].dataDir)
		if err != nil {
			c.stop()
			return nil, err
		}
		c.endpoints, c.etcdTLS = []string{ep}, tlsConfig
	}
	return c, nil
}

// embeddedEtcd reads the client endpoint of a server's embedded etcd from its data dir, and for
// an https endpoint the client certificate the server keeps in <data-dir>/etcd-certs (the
// layout of the embedded etcd's TLS; plain http before it). The one place that knows both.
func embeddedEtcd(dataDir string) (string, *tls.Config, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, "etcd.endpoint"))
	if err != nil {
		return "", nil, fmt.Errorf("the embedded etcd's endpoint: %w", err)
	}
	ep := strings.TrimSpace(string(b))
	if !strings.HasPrefix(ep, "https://") {
		return ep, nil, nil
	}
	pki := embeddedetcd.PKIFor(dataDir)
	info := transport.TLSInfo{TrustedCAFile: pki.CAFile, CertFile: pki.CertFile, KeyFile: pki.KeyFile}
	cfg, err := info.ClientConfig()
	return ep, cfg, err
}

// etcdClient is a client of the whole etcd cluster (or the embedded member).
func (c *cluster) etcdClient() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints: c.endpoints, TLS: c.etcdTLS, DialTimeout: 5 * time.Second,
		// Notice a frozen member within seconds and move to another one.
		DialKeepAliveTime: 2 * time.Second, DialKeepAliveTimeout: 2 * time.Second,
	})
}

// stop ends every process (SIGKILL: nothing is kept).
func (c *cluster) stop() {
	for _, r := range c.replicas {
		_ = r.proc.Stop(syscall.SIGKILL, 10*time.Second)
		for _, px := range r.proxies {
			px.Close()
		}
	}
	if c.etcd != nil {
		c.etcd.Stop()
	}
}

// waitReady waits for /readyz and the admin credentials the server writes into its data dir.
func (r *replica) waitReady(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		err := r.probe(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-r.proc.Exited():
			return fmt.Errorf("%s exited before it was ready (log: %s): %v", r.proc.Name, r.proc.Log, err)
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s not ready after %s: %v", r.proc.Name, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (r *replica) probe(ctx context.Context) error {
	token, err := os.ReadFile(filepath.Join(r.dataDir, "admin.token"))
	if err != nil {
		return err
	}
	ca, err := os.ReadFile(filepath.Join(r.dataDir, "certs", "apiserver.crt"))
	if err != nil {
		return err
	}
	if !x509.NewCertPool().AppendCertsFromPEM(ca) {
		return fmt.Errorf("no certificate in %s/certs/apiserver.crt", r.dataDir)
	}
	cfg := &rest.Config{Host: r.url, BearerToken: strings.TrimSpace(string(token)),
		TLSClientConfig: rest.TLSClientConfig{CAData: ca}, QPS: -1, Timeout: 5 * time.Second}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, r.url+"/readyz", nil)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("/readyz: %d", resp.StatusCode)
	}
	r.mu.Lock()
	cfg.Timeout = 0
	r.config = cfg
	r.mu.Unlock()
	return nil
}

// restConfig is a copy of the replica's admin client configuration.
func (r *replica) restConfig() *rest.Config {
	r.mu.Lock()
	defer r.mu.Unlock()
	return rest.CopyConfig(r.config)
}
