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
	"context"
	"crypto/tls"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Etcd is an etcd cluster on loopback with TLS between its members and to their clients, its
// certificates under dir/pki.
type Etcd struct {
	Members   []*Process
	Endpoints []string // client URLs, one a member
	PKI       *PKI
	Client    TLSFiles // the client certificate the servers and the test use
	TLS       *tls.Config
}

// StartEtcd starts members members of bin/etcd in dir (logs etcd-<i>.log, data etcd-<i>) and
// waits until each answers; on failure it kills what it started.
func StartEtcd(ctx context.Context, dir, bin string, members int) (*Etcd, error) {
	e := &Etcd{}
	if err := e.start(ctx, dir, bin, members); err != nil {
		e.Stop()
		return nil, err
	}
	return e, nil
}

func (e *Etcd) start(ctx context.Context, dir, bin string, members int) error {
	var err error
	if e.PKI, err = NewPKI(filepath.Join(dir, "pki"), "robustness-etcd-ca"); err != nil {
		return err
	}
	if e.Client, err = e.PKI.Issue("client", false); err != nil {
		return err
	}
	info := transport.TLSInfo{TrustedCAFile: e.PKI.CAFile, CertFile: e.Client.Cert, KeyFile: e.Client.Key}
	if e.TLS, err = info.ClientConfig(); err != nil {
		return err
	}
	ports, err := FreePorts(2 * members)
	if err != nil {
		return err
	}
	var initial []string
	for i := range members {
		initial = append(initial, fmt.Sprintf("m%d=https://127.0.0.1:%d", i, ports[2*i+1]))
		e.Endpoints = append(e.Endpoints, fmt.Sprintf("https://127.0.0.1:%d", ports[2*i]))
	}
	for i := range members {
		cert, err := e.PKI.Issue(fmt.Sprintf("member-%d", i), true)
		if err != nil {
			return err
		}
		peer := fmt.Sprintf("https://127.0.0.1:%d", ports[2*i+1])
		m := NewProcess(fmt.Sprintf("etcd-%d", i), filepath.Join(dir, fmt.Sprintf("etcd-%d.log", i)),
			filepath.Join(bin, "etcd"), "--name", fmt.Sprintf("m%d", i),
			"--data-dir", filepath.Join(dir, fmt.Sprintf("etcd-%d", i)),
			"--listen-client-urls", e.Endpoints[i], "--advertise-client-urls", e.Endpoints[i],
			"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
			"--initial-cluster", strings.Join(initial, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", "robustness",
			"--cert-file", cert.Cert, "--key-file", cert.Key, "--trusted-ca-file", e.PKI.CAFile, "--client-cert-auth",
			"--peer-cert-file", cert.Cert, "--peer-key-file", cert.Key, "--peer-trusted-ca-file", e.PKI.CAFile, "--peer-client-cert-auth",
			"--log-level", "warn")
		e.Members = append(e.Members, m)
		if err := m.Start(); err != nil {
			return err
		}
	}
	return e.WaitHealthy(ctx, 2*time.Minute)
}

// WaitHealthy waits until every member answers a read of its own (a serializable read still
// needs the member to have joined; a linearizable one needs a leader).
func (e *Etcd) WaitHealthy(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for _, ep := range e.Endpoints {
		cli, err := clientv3.New(clientv3.Config{Endpoints: []string{ep}, TLS: e.TLS, DialTimeout: 2 * time.Second})
		if err != nil {
			return err
		}
		for {
			rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err = cli.Get(rctx, "health")
			cancel()
			if err == nil {
				break
			}
			if time.Now().After(deadline) || ctx.Err() != nil {
				cli.Close()
				return fmt.Errorf("etcd member %s not healthy after %s: %v", ep, timeout, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		cli.Close()
	}
	return nil
}

// Stop kills every member (nothing is kept).
func (e *Etcd) Stop() {
	for _, m := range e.Members {
		_ = m.Stop(syscall.SIGKILL, 10*time.Second)
	}
}
