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

package localcluster

import (
	"crypto/x509"
	"crypto/x509/pkix"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/certs"
)

// PKI is a throwaway CA in a directory, with the certificates it has issued there as NAME.crt
// and NAME.key.
type PKI struct {
	Dir    string
	CAFile string
	ca     *certs.KeyPair
}

// TLSFiles are the certificate and key of one identity.
type TLSFiles struct{ Cert, Key string }

// NewPKI makes a CA named commonName, valid for a day, and writes it to dir/ca.crt.
func NewPKI(dir, commonName string) (*PKI, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ca, err := certs.NewCA(commonName, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
	if err != nil {
		return nil, err
	}
	p := &PKI{Dir: dir, CAFile: filepath.Join(dir, "ca.crt"), ca: ca}
	return p, os.WriteFile(p.CAFile, ca.CertPEM(), 0o600)
}

// Issue signs a client certificate for name; a server's is also valid for serving on
// 127.0.0.1 and localhost.
func (p *PKI) Issue(name string, server bool) (TLSFiles, error) {
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		NotBefore:   time.Now().Add(-time.Hour),
		NotAfter:    time.Now().Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	}
	pair, err := certs.Issue(tmpl, p.ca)
	if err != nil {
		return TLSFiles{}, err
	}
	keyPEM, err := pair.KeyPEM()
	if err != nil {
		return TLSFiles{}, err
	}
	f := TLSFiles{Cert: filepath.Join(p.Dir, name+".crt"), Key: filepath.Join(p.Dir, name+".key")}
	if err := os.WriteFile(f.Cert, pair.CertPEM(), 0o600); err != nil {
		return TLSFiles{}, err
	}
	return f, os.WriteFile(f.Key, keyPEM, 0o600)
}
