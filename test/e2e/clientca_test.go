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
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/certs"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// testCA is a certificate authority made by a test: client certificates for the client-CA
// rotation test, serving certificates for the deploy test's Secrets.
type testCA struct {
	*certs.KeyPair
	pem []byte
}

func newTestCA(t *testing.T, cn string) *testCA {
	t.Helper()
	ca, err := certs.NewCA(cn, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{KeyPair: ca, pem: ca.CertPEM()}
}

// client returns a client certificate signed by ca for user in group.
func (ca *testCA) client(t *testing.T, user, group string) tls.Certificate {
	t.Helper()
	pair, err := certs.Issue(&x509.Certificate{Subject: pkix.Name{CommonName: user, Organization: []string{group}},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}, ca.KeyPair)
	if err != nil {
		t.Fatal(err)
	}
	return pair.TLSCertificate()
}

// An operator replaces network-apiserver's --client-ca-file on disk: client certificates from the
// new CA are accepted on new connections without a restart.
func TestClientCARotation(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	dir := t.TempDir()
	caFile := filepath.Join(dir, "client-ca.crt")
	oldCA, newCA := newTestCA(t, "old-client-ca"), newTestCA(t, "new-client-ca")
	if err := os.WriteFile(caFile, oldCA.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	c := localCluster(t, "NETWORK_APISERVER_ARGS=--client-ca-file="+caFile)

	args, err := os.ReadFile(filepath.Join(filepath.Dir(c.kubeconfig), "network-apiserver.args"))
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(string(args), "--secure-port\n")
	port, _, _ = strings.Cut(port, "\n")
	url := fmt.Sprintf("https://127.0.0.1:%s/apis/samplecrd.k8s.io/v1/namespaces/default/networks", port)
	// A fresh connection for every request: the new CA must hold for new connections.
	get := func(cert tls.Certificate) (int, string) {
		tr := &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{cert}}, DisableKeepAlives: true}
		defer tr.CloseIdleConnections()
		resp, err := (&http.Client{Transport: tr, Timeout: 10 * time.Second}).Get(url)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	oldCert, newCert := oldCA.client(t, "old-admin", "system:masters"), newCA.client(t, "new-admin", "system:masters")
	if code, body := get(oldCert); code != http.StatusOK {
		t.Fatalf("with the old CA's certificate: %d %s", code, body)
	}
	// Unknown to the server: the request is anonymous, and anonymous may not list Networks.
	if code, body := get(newCert); code != http.StatusForbidden || !strings.Contains(body, `User \"system:anonymous\"`) {
		t.Fatalf("with the new CA's certificate before the rotation: %d %s", code, body)
	}

	// Replaced by rename, as a Secret volume update does.
	if err := os.WriteFile(caFile+".new", newCA.pem, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(caFile+".new", caFile); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the new CA's client certificate is accepted", func() (bool, string) {
		code, body := get(newCert)
		return code == http.StatusOK, fmt.Sprintf("%d %s", code, body)
	})
	if code, body := get(oldCert); code != http.StatusForbidden || !strings.Contains(body, `User \"system:anonymous\"`) {
		t.Errorf("with the old CA's certificate after the rotation: %d %s", code, body)
	}
}
