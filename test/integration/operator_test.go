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

package integration

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"

	"github.com/samplecrd/network-apiserver/pkg/certs"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/standaloneauth"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// What a cluster operator turns on: encryption at rest, audit logging, serving certificate rotation.

func encryptionConfig(t *testing.T, path string, keys ...string) {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: apiserver.config.k8s.io/v1\nkind: EncryptionConfiguration\nresources:\n" +
		"- resources: [networks.samplecrd.k8s.io]\n  providers:\n  - aescbc:\n      keys:\n")
	for _, k := range keys {
		secret := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte(k[len(k)-1:]), 32))
		fmt.Fprintf(&b, "      - name: %s\n        secret: %s\n", k, secret)
	}
	b.WriteString("  - identity: {}\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// restart stops *s and starts a server on its data directory with flags in its place (the
// caller stops the last one).
func restart(t *testing.T, s **framework.Server, flags ...string) {
	t.Helper()
	if err := (*s).Stop(); err != nil {
		t.Fatal(err)
	}
	var err error
	if *s, err = framework.Start((*s).DataDir, flags...); err != nil {
		*s = nil
		t.Fatalf("restarting: %v", err)
	}
}

// --encryption-provider-config: Networks are stored encrypted, read back in the clear, and move
// to a new key when rewritten after a rotation.
func TestEncryptionAtRest(t *testing.T) {
	ctx := testContext(t)
	cfg := filepath.Join(t.TempDir(), "encryption.yaml")
	encryptionConfig(t, cfg, "key1")
	dir := t.TempDir()
	s, err := framework.Start(dir, "--encryption-provider-config", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s != nil {
			_ = s.Stop()
		}
	})
	c := jsonClient(t, s)
	const ns = "enc"
	a, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("a", "10.200.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stored := func(s *framework.Server, name string) []byte {
		t.Helper()
		_, v := storedNetwork(ctx, t, s, ns, name)
		if bytes.Contains(v, []byte("10.200.")) || bytes.Contains(v, []byte("samplecrd.k8s.io/v1")) {
			t.Errorf("etcd holds %s in the clear: %q", name, v[:min(len(v), 80)])
		}
		return v
	}
	if v := stored(s, "a"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Errorf("created Network stored as %q, want the k8s:enc:aescbc:v1:key1: prefix", v[:min(len(v), 40)])
	}
	// Reads, updates and lists work through the transformer.
	got, err := c.SamplecrdV1().Networks(ns).Get(ctx, "a", metav1.GetOptions{})
	if err != nil || got.Spec.CIDR != "10.200.0.0/24" || got.UID != a.UID {
		t.Fatalf("get a: %v %+v", err, got)
	}
	if _, err := c.SamplecrdV1().Networks(ns).Patch(ctx, "a", types.MergePatchType, []byte(`{"metadata":{"labels":{"k":"v"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := stored(s, "a"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key1:")) {
		t.Errorf("patched Network stored as %q", v[:min(len(v), 40)])
	}

	// Rotation, step 1: key2 first, key1 still known; old data stays readable.
	encryptionConfig(t, cfg, "key2", "key1")
	restart(t, &s, "--encryption-provider-config", cfg)
	c = jsonClient(t, s)
	if got, err := c.SamplecrdV1().Networks(ns).Get(ctx, "a", metav1.GetOptions{}); err != nil || got.Labels["k"] != "v" {
		t.Fatalf("get a after adding key2: %v %+v", err, got)
	}
	if _, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("b", "10.200.1.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v := stored(s, "b"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key2:")) {
		t.Errorf("new Network after the rotation stored as %q, want key2", v[:min(len(v), 40)])
	}
	// Step 2: rewrite every Network (an unchanged update rewrites data read with an old key).
	list, err := c.SamplecrdV1().Networks(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list: %v %d items", err, len(list.Items))
	}
	for i := range list.Items {
		if _, err := c.SamplecrdV1().Networks(ns).Update(ctx, &list.Items[i], metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if v := stored(s, "a"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key2:")) {
		t.Errorf("rewritten Network stored as %q, want key2", v[:min(len(v), 40)])
	}
	// Step 3: key1 gone; everything is still readable, and deletes work.
	encryptionConfig(t, cfg, "key2")
	restart(t, &s, "--encryption-provider-config", cfg)
	c = jsonClient(t, s)
	list, err = c.SamplecrdV1().Networks(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("list with key2 only: %v %+v", err, list)
	}
	if err := c.SamplecrdV1().Networks(ns).Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("a", "10.200.0.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatalf("re-create a after deleting it: %v", err)
	}
	if v := stored(s, "a"); !bytes.HasPrefix(v, []byte("k8s:enc:aescbc:v1:key2:")) {
		t.Errorf("re-created Network stored as %q, want key2", v[:min(len(v), 40)])
	}
}

// auditEvent is the part of an audit.k8s.io/v1 Event the test reads.
type auditEvent struct {
	Verb      string                    `json:"verb"`
	Stage     string                    `json:"stage"`
	User      struct{ Username string } `json:"user"`
	ObjectRef struct {
		Resource, Namespace, Name, APIGroup string
	} `json:"objectRef"`
	ResponseStatus struct{ Code int } `json:"responseStatus"`
}

// --audit-policy-file and --audit-log-path: who created, changed and deleted which Network.
func TestAuditLog(t *testing.T) {
	ctx := testContext(t)
	dir := t.TempDir()
	policy := filepath.Join(dir, "audit-policy.yaml")
	if err := os.WriteFile(policy, []byte(`apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
- level: Metadata
  resources:
  - group: samplecrd.k8s.io
    resources: [networks, networks/status]
  verbs: [create, update, patch, delete, deletecollection]
- level: None
`), 0o600); err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "audit.log")
	s := framework.StartForTest(t, "--audit-policy-file", policy, "--audit-log-path", logPath, "--audit-log-mode", "blocking")
	c := jsonClient(t, s)
	const ns = "audited"
	if _, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("x", "10.201.0.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SamplecrdV1().Networks(ns).Patch(ctx, "x", types.MergePatchType, []byte(`{"metadata":{"labels":{"k":"v"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.SamplecrdV1().Networks(ns).Delete(ctx, "x", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SamplecrdV1().Networks(ns).List(ctx, metav1.ListOptions{}); err != nil {
		t.Fatal(err)
	}

	f, err := os.Open(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]auditEvent{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var e auditEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if e.ObjectRef.Resource != "networks" {
			t.Errorf("the policy logs only Network writes, got %+v", e)
			continue
		}
		if e.Stage == "ResponseComplete" {
			seen[e.Verb] = e
		}
	}
	if _, ok := seen["list"]; ok {
		t.Errorf("a list was logged though the policy leaves reads out")
	}
	for _, verb := range []string{"create", "patch", "delete"} {
		e, ok := seen[verb]
		if !ok {
			t.Errorf("no ResponseComplete %s event; saw %v", verb, seen)
			continue
		}
		// A create's objectRef names the Network only at levels that log the request body.
		nameOK := e.ObjectRef.Name == "x" || (verb == "create" && e.ObjectRef.Name == "")
		if e.User.Username != standaloneauth.AdminUser || e.ObjectRef.Namespace != ns || !nameOK ||
			e.ObjectRef.APIGroup != "samplecrd.k8s.io" || e.ResponseStatus.Code/100 != 2 {
			t.Errorf("%s event %+v, want user admin, %s/x, a 2xx", verb, e, ns)
		}
	}
}

// selfSigned writes a self-signed serving certificate for 127.0.0.1 and returns its serial.
func selfSigned(t *testing.T, certFile, keyFile string) *big.Int {
	t.Helper()
	pair, err := certs.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: "rotated"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM, err := pair.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	// Key and certificate are replaced by rename, as a Secret volume or cert-manager does.
	for _, f := range []struct {
		path string
		pem  []byte
	}{{keyFile, keyPEM}, {certFile, pair.CertPEM()}} {
		if err := os.WriteFile(f.path+".new", f.pem, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(f.path+".new", f.path); err != nil {
			t.Fatal(err)
		}
	}
	return pair.Cert.SerialNumber
}

// The serving certificate is re-read from disk: new connections see a replaced one, no restart.
func TestServingCertificateRotation(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := selfSigned(t, certFile, keyFile)
	s := framework.StartForTest(t, "--tls-cert-file", certFile, "--tls-private-key-file", keyFile)
	served := func() *big.Int {
		conn, err := tls.Dial("tcp", strings.TrimPrefix(s.URL, "https://"), &tls.Config{InsecureSkipVerify: true})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	if got := served(); got.Cmp(first) != 0 {
		t.Fatalf("serving serial %v, want the first certificate's %v", got, first)
	}
	second := selfSigned(t, certFile, keyFile)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for served().Cmp(second) != 0 {
		select {
		case <-ctx.Done():
			t.Fatalf("still serving %v 90s after the files were replaced with %v", served(), second)
		case <-time.After(200 * time.Millisecond):
		}
	}
	// The server still answers, with its admin token, over the new certificate (which the
	// kubeconfig written at start does not know as its CA).
	cfg := rest.CopyConfig(s.Config)
	cfg.TLSClientConfig = rest.TLSClientConfig{Insecure: true}
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.SamplecrdV1().Networks("default").List(context.Background(), metav1.ListOptions{}); err != nil {
		t.Errorf("list after the rotation: %v", err)
	}
}
