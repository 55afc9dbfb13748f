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
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/certs"
)

// The files under <data-dir>/etcd-certs (a directory only the server's user may enter): a CA,
// the member's certificate (serving clients and peers) and the one client certificate the
// server, its allocator and an operator's etcdctl use. Keys are 0600.
const (
	CertsDirName   = "etcd-certs"
	caCertFile     = "ca.crt"
	caKeyFile      = "ca.key"
	serverCertFile = "server.crt"
	serverKeyFile  = "server.key"
	clientCertFile = "client.crt"
	clientKeyFile  = "client.key"

	certValidity = 5 * 365 * 24 * time.Hour
	// Certificates that expire within this are made again at start.
	renewBefore = 30 * 24 * time.Hour
)

// PKI names the TLS files of the embedded etcd.
type PKI struct {
	Dir string
	// CAFile verifies the member's certificate (etcdctl --cacert, --etcd-cafile).
	CAFile string
	// CertFile and KeyFile are the client certificate and key (etcdctl --cert/--key,
	// --etcd-certfile/--etcd-keyfile).
	CertFile, KeyFile string
	// ServerCertFile and ServerKeyFile are the member's own.
	ServerCertFile, ServerKeyFile string
}

// PKIFor names the files of the embedded etcd that runs with data directory dir.
func PKIFor(dir string) PKI {
	d := filepath.Join(dir, CertsDirName)
	return PKI{
		Dir:            d,
		CAFile:         filepath.Join(d, caCertFile),
		CertFile:       filepath.Join(d, clientCertFile),
		KeyFile:        filepath.Join(d, clientKeyFile),
		ServerCertFile: filepath.Join(d, serverCertFile),
		ServerKeyFile:  filepath.Join(d, serverKeyFile),
	}
}

// ensurePKI keeps the certificates under dir if they are complete, chain to the CA and stay valid
// for a while; otherwise it makes a new CA and certificates.
func ensurePKI(dir string, now time.Time) (PKI, error) {
	p := PKIFor(dir)
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return p, err
	}
	// A directory made by an earlier version or by hand may be open: close it.
	if err := os.Chmod(p.Dir, 0o700); err != nil {
		return p, err
	}
	if err := p.check(now); err == nil {
		return p, nil
	}
	return p, p.generate(now)
}

// check fails unless every file is there, keys are 0600, and both certificates chain to the CA
// and are valid for at least renewBefore more.
func (p PKI) check(now time.Time) error {
	ca, err := readCert(p.CAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca)
	for _, pair := range []struct {
		cert, key string
		usage     x509.ExtKeyUsage
	}{{p.ServerCertFile, p.ServerKeyFile, x509.ExtKeyUsageServerAuth}, {p.CertFile, p.KeyFile, x509.ExtKeyUsageClientAuth}} {
		cert, err := readCert(pair.cert)
		if err != nil {
			return err
		}
		if _, err := tls.LoadX509KeyPair(pair.cert, pair.key); err != nil {
			return err
		}
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, CurrentTime: now.Add(renewBefore),
			KeyUsages: []x509.ExtKeyUsage{pair.usage}}); err != nil {
			return err
		}
		for _, key := range []string{pair.key, filepath.Join(p.Dir, caKeyFile)} {
			fi, err := os.Stat(key)
			if err != nil {
				return err
			}
			if fi.Mode().Perm() != 0o600 {
				return fmt.Errorf("%s has mode %v", key, fi.Mode().Perm())
			}
		}
	}
	return nil
}

func (p PKI) generate(now time.Time) error {
	ca, err := certs.NewCA("network-apiserver-embedded-etcd-ca", now.Add(-time.Hour), now.Add(certValidity))
	if err != nil {
		return err
	}
	leaf := func(cn string, usages []x509.ExtKeyUsage, certFile, keyFile string) error {
		t := &x509.Certificate{
			Subject:     pkix.Name{CommonName: cn},
			NotBefore:   now.Add(-time.Hour),
			NotAfter:    now.Add(certValidity),
			KeyUsage:    x509.KeyUsageDigitalSignature,
			ExtKeyUsage: usages,
		}
		if usages[0] == x509.ExtKeyUsageServerAuth {
			t.DNSNames = []string{"localhost"}
			t.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback}
		}
		pair, err := certs.Issue(t, ca)
		if err != nil {
			return err
		}
		return writePair(certFile, keyFile, pair)
	}
	// Written leaves first and the CA last, so that an interrupted run fails check next time.
	// The member's certificate serves clients and peers and is its client when dialling itself.
	if err := leaf("network-apiserver-embedded-etcd", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		p.ServerCertFile, p.ServerKeyFile); err != nil {
		return err
	}
	if err := leaf("network-apiserver", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, p.CertFile, p.KeyFile); err != nil {
		return err
	}
	return writePair(p.CAFile, filepath.Join(p.Dir, caKeyFile), ca)
}

func writePair(certFile, keyFile string, pair *certs.KeyPair) error {
	keyPEM, err := pair.KeyPEM()
	if err != nil {
		return err
	}
	if err := writeAtomic(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	return writeAtomic(certFile, pair.CertPEM(), 0o644)
}

// writeAtomic writes data to a new file with mode perm and renames it over name.
func writeAtomic(name string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), name)
}

func readCert(file string) (*x509.Certificate, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	block, _ := pem.Decode(b)
	if block == nil || block.Type != "CERTIFICATE" {
		return nil, errors.New(file + " holds no certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}
