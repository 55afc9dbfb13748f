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

package certs

import (
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"testing"
	"time"
)

func TestIssueChainsToCA(t *testing.T) {
	now := time.Now()
	ca, err := NewCA("test-ca", now.Add(-time.Hour), now.Add(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "test-ca" {
		t.Fatalf("CA certificate: IsCA %v, CN %q", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	leaf := func() *KeyPair {
		p, err := Issue(&x509.Certificate{Subject: pkix.Name{CommonName: "server"}, NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}, ca)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	a, b := leaf(), leaf()
	if a.Cert.SerialNumber.Cmp(b.Cert.SerialNumber) == 0 {
		t.Errorf("two certificates share the serial %v", a.Cert.SerialNumber)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := a.Cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("the issued certificate does not chain to the CA: %v", err)
	}
	keyPEM, err := a.KeyPEM()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tls.X509KeyPair(a.CertPEM(), keyPEM); err != nil {
		t.Errorf("the PEM certificate and key do not load as a pair: %v", err)
	}
}

func TestIssueSelfSigned(t *testing.T) {
	p, err := Issue(&x509.Certificate{Subject: pkix.Name{CommonName: "self"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Cert.CheckSignature(p.Cert.SignatureAlgorithm, p.Cert.RawTBSCertificate, p.Cert.Signature); err != nil {
		t.Errorf("not self-signed: %v", err)
	}
}
