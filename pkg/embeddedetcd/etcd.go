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

// Package embeddedetcd runs a one-member etcd inside the server process, for single-machine use:
// the default storage of a standalone network-apiserver. It is closed to everyone but the
// server's user: it listens on loopback only, with TLS, and accepts only clients presenting a
// certificate from its own CA, which it generates under <data-dir>/etcd-certs (keys 0600, the
// directory 0700). Its peer listener, never dialled by a single member, is TLS-only on loopback
// with the same client-certificate check.
package embeddedetcd

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"go.uber.org/zap"
	"k8s.io/klog/v2"
)

// Etcd is an etcd member running inside the server process.
type Etcd struct {
	etcd     *embed.Etcd
	logLevel zap.AtomicLevel
	// Endpoint is the https client URL on loopback.
	Endpoint string
	// PKI names the CA and the client certificate and key a client must present.
	PKI PKI
}

// snapshotCatchUpEntries is how many raft entries the member keeps in memory after a snapshot.
const snapshotCatchUpEntries = 100

// Start starts a one-member etcd with its data under dir, serving clients on loopback
// at port (0 picks a free port), and waits until it is ready.
func Start(ctx context.Context, dir string, port int) (*Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "network-apiserver"
	cfg.Dir = filepath.Join(dir, "etcd")
	// Only errors, and none while closing: etcd reports its listeners' normal shutdown as errors.
	level := zap.NewAtomicLevelAt(zap.ErrorLevel)
	logConfig := zap.NewProductionConfig()
	logConfig.Level = level
	logger, err := logConfig.Build()
	if err != nil {
		return nil, err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(logger.Named("etcd"))
	pki, err := ensurePKI(dir, time.Now())
	if err != nil {
		return nil, fmt.Errorf("embedded etcd certificates in %s: %w", filepath.Join(dir, CertsDirName), err)
	}
	tlsInfo := transport.TLSInfo{CertFile: pki.ServerCertFile, KeyFile: pki.ServerKeyFile,
		TrustedCAFile: pki.CAFile, ClientCertAuth: true}
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = tlsInfo, tlsInfo
	client := url.URL{Scheme: "https", Host: fmt.Sprintf("127.0.0.1:%d", port)}
	// The peer port is never dialled by a single member; port 0 keeps it from clashing.
	peer := url.URL{Scheme: "https", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// The raft log kept in memory after a snapshot is there for followers to catch up from;
	// one member has none. etcd's default keeps 5000 entries: with a Network's create being
	// one entry of about 3 KB (the object, its allocation and the guard), some 15 MB.
	cfg.SnapshotCatchUpEntries = snapshotCatchUpEntries

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting embedded etcd in %s: %w", cfg.Dir, err)
	}
	if err := waitReady(ctx, e.Server.ReadyNotify(), e.Err(), startProgressEvery, func(waited time.Duration) {
		klog.InfoS("Embedded etcd is still starting (it rebuilds its index of every key it holds)", "dataDir", cfg.Dir, "waited", waited.Round(time.Second))
	}); err != nil {
		e.Close()
		return nil, fmt.Errorf("embedded etcd in %s: %w", cfg.Dir, err)
	}
	endpoint := "https://" + e.Clients[0].Addr().String()
	klog.InfoS("Embedded etcd is serving", "endpoint", endpoint, "dataDir", cfg.Dir, "clientCert", pki.CertFile)
	return &Etcd{etcd: e, logLevel: level, Endpoint: endpoint, PKI: pki}, nil
}

// startProgressEvery is how often Start logs that the member is still starting.
const startProgressEvery = 10 * time.Second

// waitReady waits until ready is closed, the member fails (errc) or ctx is done, and calls
// progress every so often while it waits. There is no deadline of its own: a member rebuilds its
// index of every key when it starts, which takes about 40 s for a million Networks (five keys
// each) on two cores, and a deadline would keep a large server from ever starting again.
func waitReady(ctx context.Context, ready <-chan struct{}, errc <-chan error, every time.Duration, progress func(time.Duration)) error {
	start := time.Now()
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		select {
		case <-ready:
			return nil
		case err := <-errc:
			return fmt.Errorf("failed while starting: %w", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
			progress(time.Since(start))
		}
	}
}

// Stop stops the member and waits until its data is flushed.
func (e *Etcd) Stop() {
	e.logLevel.SetLevel(zap.FatalLevel)
	e.etcd.Close()
}

// InProcessClient returns a client that calls the member directly, without gRPC, loopback TCP
// or TLS: what the server's own hot path (every create and delete) uses in standalone mode. Its
// KV also serves GetStream (RangeStream), which etcd's own in-process client does not.
func (e *Etcd) InProcessClient() *clientv3.Client {
	c := v3client.New(e.etcd.Server)
	kvs := v3rpc.NewQuotaKVServer(e.etcd.Server)
	c.KV = clientv3.NewKVFromKVClient(&streamingKV{KVClient: adapter.KvServerToKvClient(kvs), server: kvs}, c)
	return c
}
