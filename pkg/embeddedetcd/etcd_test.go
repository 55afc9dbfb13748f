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

package embeddedetcd

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// probeEnv makes the test binary, run as another user, try the etcd at the endpoint in it
// (PKI directory after a comma) and print what happened as JSON instead of running tests.
const probeEnv = "EMBEDDEDETCD_PROBE"

func TestMain(m *testing.M) {
	if v := os.Getenv(probeEnv); v != "" {
		endpoint, dir, _ := strings.Cut(v, ",")
		b, _ := json.Marshal(probe(endpoint, PKIFor(filepath.Dir(dir))))
		fmt.Println(string(b))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// probeResult is the error (or "" for success) of each attempt.
type probeResult map[string]string

// probe tries every way in to the etcd that does not need the client key, and the key itself.
func probe(endpoint string, p PKI) probeResult {
	r := probeResult{}
	errString := func(err error) string {
		if err == nil {
			return ""
		}
		return err.Error()
	}
	for _, f := range []string{p.KeyFile, p.ServerKeyFile, filepath.Join(p.Dir, caKeyFile)} {
		_, err := os.ReadFile(f)
		r["read "+filepath.Base(f)] = errString(err)
	}
	// The client certificate with the key, as etcdctl --cert/--key would load them.
	_, err := tls.LoadX509KeyPair(p.CertFile, p.KeyFile)
	r["load client key pair"] = errString(err)

	host := strings.TrimPrefix(endpoint, "https://")
	noCert := &tls.Config{InsecureSkipVerify: true} // trust anything: only our own certificate is missing
	for name, tc := range map[string]*tls.Config{"plain": nil, "tls without client cert": noCert} {
		cfg := clientv3.Config{Endpoints: []string{"http://" + host}, DialTimeout: time.Second}
		if tc != nil {
			cfg.Endpoints, cfg.TLS = []string{"https://" + host}, tc
		}
		c, err := clientv3.New(cfg)
		if err == nil {
			// Each attempt has its own deadline: a refused client retries until then.
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err = c.Put(ctx, "/probe/"+strings.ReplaceAll(name, " ", "-"), "x")
			cancel()
			r[name+" put"] = errString(err)
			ctx, cancel = context.WithTimeout(context.Background(), time.Second)
			_, err = c.Get(ctx, "/secret")
			cancel()
			r[name+" get"] = errString(err)
			c.Close()
		} else {
			r[name+" put"], r[name+" get"] = errString(err), errString(err)
		}
		// etcd's JSON gateway on the same port, the way curl would try it.
		httpClient := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		scheme := "http://"
		if tc != nil {
			scheme = "https://"
		}
		resp, err := httpClient.Post(scheme+host+"/v3/kv/range", "application/json", strings.NewReader(`{"key":"L3NlY3JldA=="}`))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				err = nil
				r[name+" gateway range"] = ""
				r[name+" gateway body"] = string(body)
				continue
			}
			err = fmt.Errorf("%s: %s", resp.Status, body)
		}
		r[name+" gateway range"] = errString(err)
	}
	return r
}

func start(t *testing.T, dir string) *Etcd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e, err := Start(ctx, dir, 0)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func client(t *testing.T, e *Etcd) *clientv3.Client {
	t.Helper()
	tc, err := transport.TLSInfo{CertFile: e.PKI.CertFile, KeyFile: e.PKI.KeyFile, TrustedCAFile: e.PKI.CAFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, TLS: tc, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// The embedded etcd answers only on loopback, over TLS, to the holder of its client key.
func TestClosedToAllButTheClientCertificate(t *testing.T) {
	// A data dir anyone may enter, so that only the modes of what Start writes keep others out.
	dir, err := os.MkdirTemp("", "embeddedetcd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	e := start(t, dir)
	t.Cleanup(e.Stop)

	if !strings.HasPrefix(e.Endpoint, "https://127.0.0.1:") {
		t.Errorf("endpoint %q, want https on 127.0.0.1", e.Endpoint)
	}
	if m := mode(t, e.PKI.Dir); m != 0o700 {
		t.Errorf("%s has mode %v, want 0700", e.PKI.Dir, m)
	}
	for _, key := range []string{e.PKI.KeyFile, e.PKI.ServerKeyFile, filepath.Join(e.PKI.Dir, caKeyFile)} {
		if m := mode(t, key); m != 0o600 {
			t.Errorf("%s has mode %v, want 0600", key, m)
		}
	}
	// Every listener etcd opened is on loopback and speaks TLS only.
	for _, l := range e.etcd.Clients {
		if !strings.HasPrefix(l.Addr().String(), "127.0.0.1:") {
			t.Errorf("client listener on %s", l.Addr())
		}
	}
	for _, p := range e.etcd.Peers {
		if !strings.HasPrefix(p.Addr().String(), "127.0.0.1:") {
			t.Errorf("peer listener on %s", p.Addr())
		}
	}
	if len(e.etcd.Peers) != 1 {
		t.Fatalf("%d peer listeners, want 1", len(e.etcd.Peers))
	}

	c := client(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := c.Put(ctx, "/secret", "kept"); err != nil {
		t.Fatalf("put with the client certificate: %v", err)
	}

	// As this user without the client certificate, and with one from another CA.
	results := probe(e.Endpoint, e.PKI)
	other, err := ensurePKI(t.TempDir(), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	otherTLS, err := transport.TLSInfo{CertFile: other.CertFile, KeyFile: other.KeyFile}.ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	otherTLS.InsecureSkipVerify = true
	if oc, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Endpoint}, TLS: otherTLS, DialTimeout: 2 * time.Second}); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err := oc.Get(ctx, "/secret")
		cancel()
		oc.Close()
		if err == nil {
			t.Errorf("a client certificate from another CA read a key")
		}
	}
	// The peer port refuses clients without a certificate too.
	peerResults := probe("https://"+e.etcd.Peers[0].Addr().String(), e.PKI)
	for k, v := range peerResults {
		if strings.Contains(k, "put") || strings.Contains(k, "get") || strings.Contains(k, "gateway range") {
			if v == "" {
				t.Errorf("peer port, %s: succeeded", k)
			}
		}
	}
	for _, k := range []string{"plain put", "plain get", "plain gateway range",
		"tls without client cert put", "tls without client cert get", "tls without client cert gateway range"} {
		if v, ok := results[k]; !ok || v == "" {
			t.Errorf("without the client certificate, %s: succeeded (%q)", k, results[k+" body"])
		}
	}

	if os.Geteuid() == 0 {
		// As nobody: copy this test binary where nobody may run it and let it probe.
		bin := filepath.Join(dir, "probe")
		self, err := os.ReadFile(os.Args[0])
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(bin, self, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin)
		cmd.Env = []string{probeEnv + "=" + e.Endpoint + "," + e.PKI.Dir}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("probe as nobody: %v\n%s", err, out)
		}
		var nobody probeResult
		if err := json.Unmarshal(out, &nobody); err != nil {
			t.Fatalf("probe output %q: %v", out, err)
		}
		for k, v := range nobody {
			if strings.HasSuffix(k, " body") {
				continue
			}
			if v == "" {
				t.Errorf("as nobody, %s: succeeded", k)
			}
			if strings.HasPrefix(k, "read ") && !strings.Contains(v, "permission denied") {
				t.Errorf("as nobody, %s: %s, want permission denied", k, v)
			}
		}
		if len(nobody) < 10 {
			t.Errorf("the probe as nobody tried only %v", nobody)
		}
	} else {
		t.Log("not root: the probe as nobody is skipped")
	}

	// Nothing was written or changed by the attempts.
	ctx, cancel = context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "/secret" || string(resp.Kvs[0].Value) != "kept" {
		t.Errorf("etcd holds %v, want only /secret=kept", resp.Kvs)
	}
}

// A restart keeps the certificates; a broken set is made anew, and the member still serves its data.
func TestCertificatesKeptAndRenewed(t *testing.T) {
	dir := t.TempDir()
	e := start(t, dir)
	ca1, err := os.ReadFile(e.PKI.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client(t, e).Put(ctx, "/k", "v"); err != nil {
		t.Fatal(err)
	}
	e.Stop()

	e = start(t, dir)
	ca2, _ := os.ReadFile(e.PKI.CAFile)
	if string(ca1) != string(ca2) {
		t.Errorf("a restart replaced a valid CA")
	}
	e.Stop()

	if err := os.Remove(e.PKI.KeyFile); err != nil {
		t.Fatal(err)
	}
	e = start(t, dir)
	defer e.Stop()
	ca3, _ := os.ReadFile(e.PKI.CAFile)
	if string(ca3) == string(ca1) {
		t.Errorf("a missing client key did not renew the certificates")
	}
	resp, err := client(t, e).Get(ctx, "/k")
	if err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v" {
		t.Fatalf("after renewing: %v %v", resp, err)
	}
	// The new client certificate chains to the new CA only.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca1)
	cert, err := readCert(e.PKI.CertFile)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err == nil {
		t.Errorf("the renewed client certificate chains to the old CA")
	}
}

// A fixed client port (--embedded-etcd-port) is the port of the https endpoint.
func TestFixedPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	e, err := Start(ctx, t.TempDir(), port)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Stop()
	if want := fmt.Sprintf("https://127.0.0.1:%d", port); e.Endpoint != want {
		t.Errorf("endpoint %s, want %s", e.Endpoint, want)
	}
	if _, err := client(t, e).Get(ctx, "/"); err != nil {
		t.Errorf("get through the fixed port: %v", err)
	}
}
