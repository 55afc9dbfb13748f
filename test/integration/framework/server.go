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

// Package framework starts a real network-apiserver in the test process: embedded etcd on a free
// loopback port, a serving listener on a free loopback port, standalone admin credentials.
package framework

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/samplecrd/network-apiserver/pkg/cmd/server"
	"github.com/samplecrd/network-apiserver/pkg/embeddedetcd"
)

// Server is a running network-apiserver.
type Server struct {
	// Config is an admin client config (protobuf is not forced; clients choose).
	Config *rest.Config
	// Kubeconfig is the path of the admin kubeconfig the server wrote.
	Kubeconfig string
	// DataDir is the server's --data-dir.
	DataDir string
	// URL is the https base URL.
	URL string
	// EtcdEndpoint is the client URL of the server's embedded etcd ("" with --etcd-servers).
	EtcdEndpoint string
	// EtcdPKI names the embedded etcd's CA and the client certificate and key it requires.
	EtcdPKI embeddedetcd.PKI

	cancel context.CancelFunc
	done   chan error
}

// Start runs a server with the given extra flags until Stop. dataDir may be "" for a fresh one.
func Start(dataDir string, extraFlags ...string) (*Server, error) {
	if dataDir == "" {
		d, err := os.MkdirTemp("", "network-apiserver-test-")
		if err != nil {
			return nil, err
		}
		dataDir = d
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := server.NewOptions(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	cmd := server.NewCommand(ctx, o)
	// No controller unless a test asks for one (with --backend-netns): it would change the host's networking.
	flags := append([]string{"--data-dir", dataDir, "--bind-address", "127.0.0.1", "--secure-port", "0", "--controllers=false",
		// Blocks of nodes without an entry (most tests claim for nodes that never report) stay unless a test asks.
		"--block-release-grace=1h"}, extraFlags...)
	if err := cmd.ParseFlags(flags); err != nil {
		cancel()
		return nil, err
	}
	o.Recommended.SecureServing.Listener = ln
	if err := o.Complete(); err != nil {
		cancel()
		return nil, err
	}
	if err := o.Validate(); err != nil {
		cancel()
		return nil, err
	}
	s := &Server{
		DataDir:    dataDir,
		Kubeconfig: filepath.Join(dataDir, "admin.kubeconfig"),
		URL:        "https://" + ln.Addr().String(),
		cancel:     cancel,
		done:       make(chan error, 1),
	}
	embedded := o.EmbeddedEtcd() // Run fills in the etcd servers
	go func() { s.done <- o.Run(ctx) }()

	// Ready when the kubeconfig exists (written by a post-start hook) and /readyz says ok.
	err = wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		select {
		case err := <-s.done:
			s.done <- err // for Stop
			return false, fmt.Errorf("server exited before it was ready: %v", err)
		default:
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
		if err != nil {
			return false, nil
		}
		// After a restart on the same data dir the kubeconfig may still name the old port
		// until the post-start hook rewrites it; the listener is the truth.
		cfg.Host = s.URL
		client, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return false, err
		}
		resp, err := client.Get(s.URL + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, nil
		}
		// On a restart the data dir still holds the previous server's kubeconfig until this
		// server's post-start hook rewrites it: read it again now that the hooks have run, and
		// only accept one that points at this server.
		cfg, err = clientcmd.BuildConfigFromFlags("", s.Kubeconfig)
		if err != nil || cfg.Host != s.URL {
			return false, nil
		}
		s.Config = cfg
		if b, err := os.ReadFile(filepath.Join(dataDir, "etcd.endpoint")); err == nil && embedded {
			s.EtcdEndpoint = strings.TrimSpace(string(b))
			s.EtcdPKI = embeddedetcd.PKIFor(dataDir)
		}
		return true, nil
	})
	if err != nil {
		s.Stop()
		return nil, err
	}
	return s, nil
}

// Stop shuts the server down and waits for it (and its embedded etcd) to finish.
func (s *Server) Stop() error {
	s.cancel()
	select {
	case err := <-s.done:
		return err
	case <-time.After(60 * time.Second):
		return fmt.Errorf("server did not stop within 60s")
	}
}

// StartForTest starts a server that is stopped, and its data removed, when the test ends.
func StartForTest(t testing.TB, extraFlags ...string) *Server {
	t.Helper()
	dir := t.TempDir()
	s, err := Start(dir, extraFlags...)
	if err != nil {
		t.Fatalf("starting network-apiserver: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Errorf("stopping network-apiserver: %v", err)
		}
	})
	return s
}

// EtcdFlags are the flags that make another server use this server's embedded etcd: its
// endpoint and client certificate.
func (s *Server) EtcdFlags() []string {
	return []string{"--etcd-servers", s.EtcdEndpoint, "--etcd-cafile", s.EtcdPKI.CAFile,
		"--etcd-certfile", s.EtcdPKI.CertFile, "--etcd-keyfile", s.EtcdPKI.KeyFile}
}

// EtcdClient connects to the server's embedded etcd with its client certificate; the caller closes it.
func (s *Server) EtcdClient() (*clientv3.Client, error) {
	if s.EtcdEndpoint == "" {
		return nil, fmt.Errorf("the server runs no embedded etcd")
	}
	tc, err := transport.TLSInfo{CertFile: s.EtcdPKI.CertFile, KeyFile: s.EtcdPKI.KeyFile,
		TrustedCAFile: s.EtcdPKI.CAFile}.ClientConfig()
	if err != nil {
		return nil, err
	}
	return clientv3.New(clientv3.Config{Endpoints: []string{s.EtcdEndpoint}, TLS: tc, DialTimeout: 10 * time.Second})
}
