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

package server

import (
	"fmt"
	"net/netip"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/samplecrd/network-apiserver/pkg/apiserver"
	blockstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/blockallocation/storage"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
)

// Overlap scopes accepted by --overlap-scope.
const (
	OverlapScopeCluster   = "cluster"
	OverlapScopeNamespace = "namespace"

	// AllocationGuardsAll and AllocationGuardsRecorded are the values of --allocation-guards.
	AllocationGuardsAll      = "all"
	AllocationGuardsRecorded = "recorded"
)

// DefaultNetworkPools are where prefixes for spec.prefixLength come from unless --network-pool is given.
var DefaultNetworkPools = []string{"10.64.0.0/10", "fd00:64::/32"}

func parsePools(pools []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range pools {
		p, err := netip.ParsePrefix(s)
		if err != nil || p.Masked() != p {
			return nil, fmt.Errorf("--network-pool %q is not a canonical prefix such as 10.64.0.0/10", s)
		}
		for _, q := range out {
			if q.Overlaps(p) {
				return nil, fmt.Errorf("--network-pool %s overlaps %s", p, q)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// newEtcdClient connects to the etcd servers of the storage configuration, with its TLS files.
func newEtcdClient(c storagebackend.TransportConfig) (*clientv3.Client, error) {
	// The same timeouts as the generic storage's client, so that this client, which every create
	// and delete uses, notices a dead etcd member as soon as that one does.
	cfg := clientv3.Config{Endpoints: c.ServerList, DialTimeout: 20 * time.Second,
		DialKeepAliveTime: 30 * time.Second, DialKeepAliveTimeout: 10 * time.Second}
	if c.CertFile != "" || c.KeyFile != "" || c.TrustedCAFile != "" {
		tlsInfo := transport.TLSInfo{CertFile: c.CertFile, KeyFile: c.KeyFile, TrustedCAFile: c.TrustedCAFile}
		tlsConfig, err := tlsInfo.ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("etcd TLS: %w", err)
		}
		cfg.TLS = tlsConfig
	}
	return clientv3.New(cfg)
}

// allocations builds the no-overlap guarantee over the storage's etcd, and returns the client it
// uses.
func (o *Options) allocations() (apiserver.ExtraConfig, *clientv3.Client, error) {
	pools, err := parsePools(o.NetworkPools)
	if err != nil {
		return apiserver.ExtraConfig{}, nil, err
	}
	vniRange, err := segment.ParseRange(o.VNIRange)
	if err != nil {
		return apiserver.ExtraConfig{}, nil, fmt.Errorf("--vni-range: %w", err)
	}
	storage := o.Recommended.Etcd.StorageConfig
	guards := allocator.GuardsAll
	if o.AllocationGuards == AllocationGuardsRecorded {
		guards = allocator.GuardsRecorded
	}
	var client *clientv3.Client
	if o.embedded != nil {
		// The embedded member is in this process: creates and deletes call it directly.
		client = o.embedded.InProcessClient()
	} else if client, err = newEtcdClient(storage.Transport); err != nil {
		return apiserver.ExtraConfig{}, nil, err
	}
	vnis := segment.New(client, storage.Prefix+"/segments", vniRange)
	vnis.Layout = segment.Layout(o.VNIKeys)
	// A sibling of allocations/, never under it: the repair of allocations removes every key
	// there that no Network owns.
	blocks := allocator.New(client, storage.Prefix+"/blocks")
	blocks.Gateways = allocator.GatewayKeys(o.GatewayKeys)
	return apiserver.ExtraConfig{
		// The length records are a sibling of allocations/ too, for the same reason.
		Allocator:      allocator.New(client, storage.Prefix+"/allocations").KeepLengths(storage.Prefix+"/allocation-lengths", guards),
		Scoping:        allocator.Scoping{PerNamespace: o.OverlapScope == OverlapScopeNamespace},
		Pools:          pools,
		VerifyInterval: o.AllocationVerifyInterval,
		// k8s.io/apiserver's compactor, which the generic storage runs at this interval.
		CompactionInterval: storage.CompactionInterval,
		Blocks:             blocks,
		BlockSizes: blockstorage.BlockSizes{IPv4: o.BlockPrefixLengthV4, IPv6: o.BlockPrefixLengthV6,
			MaxPerNode: o.MaxBlocksPerNode},
		VNIs:              vnis,
		BlockReleaseGrace: o.BlockReleaseGrace,
		ClaimQuota:        &blockstorage.Quota{Identity: o.agentIdentity(), MaxFree: int64(o.MaxFreeAddressesPerNode)},
	}, client, nil
}
