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

package release

import (
	"context"
	"fmt"
	"net/netip"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/storage"
)

// EtcdStore reads BlockAllocations and their Networks from etcd and releases them there.
type EtcdStore struct {
	// Blocks is the allocator of the block keyspace; its client reads and writes.
	Blocks *allocator.Allocator
	// Networks and Objects are the codecs of Networks and BlockAllocations.
	Networks, Objects *networkstorage.EtcdCodec
}

// Candidates reads every BlockAllocation, then the Network of each at the same revision. An
// object whose Network is gone or is another incarnation is left out: the Network's delete and
// the verifier remove those.
func (s *EtcdStore) Candidates(ctx context.Context) ([]Candidate, error) {
	var objects []struct {
		obj *samplecrd.BlockAllocation
		key string
		rev int64
	}
	rev, err := s.Blocks.Scan(ctx, s.Objects.KeyPrefix(), 0, func(kv *mvccpb.KeyValue) error {
		obj := &samplecrd.BlockAllocation{}
		if err := s.Objects.DecodeInto(ctx, kv, obj); err != nil {
			return fmt.Errorf("block allocation %s: %w", kv.Key, err)
		}
		objects = append(objects, struct {
			obj *samplecrd.BlockAllocation
			key string
			rev int64
		}{obj, string(kv.Key), kv.ModRevision})
		return nil
	})
	if err != nil {
		return nil, err
	}
	type stored struct {
		n   *samplecrd.Network
		rev int64
	}
	networks := map[string]stored{}
	var out []Candidate
	for _, o := range objects {
		netKey := s.Networks.KeyPrefix() + o.obj.Namespace + "/" + o.obj.Network
		n, ok := networks[netKey]
		if !ok {
			kv, err := s.Blocks.GetAt(ctx, netKey, rev)
			if err != nil {
				return nil, err
			}
			if kv != nil {
				network, err := s.Networks.Decode(ctx, kv)
				if err != nil {
					return nil, fmt.Errorf("network %s: %w", netKey, err)
				}
				n = stored{network, kv.ModRevision}
			}
			networks[netKey] = n
		}
		if n.n == nil || string(n.n.UID) != o.obj.NetworkUID || o.obj.NodeName == "" {
			continue
		}
		c := Candidate{Namespace: o.obj.Namespace, Network: o.obj.Network, Node: o.obj.NodeName,
			ObjectKey: o.key, ObjectRevision: o.rev, NetworkKey: netKey, NetworkRevision: n.rev}
		for i := range n.n.Status.Nodes {
			if n.n.Status.Nodes[i].NodeName == c.Node {
				c.Entry = &n.n.Status.Nodes[i]
				break
			}
		}
		owner := allocator.Owner{Namespace: c.Namespace, Name: c.Network, UID: o.obj.NetworkUID}
		for _, b := range o.obj.Blocks {
			p, err := netip.ParsePrefix(b.CIDR)
			if err != nil {
				continue // not a key the claims wrote; the verifier reports it
			}
			c.Blocks = append(c.Blocks, allocator.Allocation{Scope: o.obj.NetworkUID, Prefix: p, Owner: owner,
				Node: c.Node, Role: allocator.RoleBlock})
		}
		out = append(out, c)
	}
	return out, nil
}

// Release deletes c's BlockAllocation and its block keys if the Network and the BlockAllocation
// are still at the revisions c was read at.
func (s *EtcdStore) Release(ctx context.Context, c Candidate) (bool, error) {
	done, _, err := s.Blocks.DeleteIf(ctx, []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(c.NetworkKey), "=", c.NetworkRevision),
		clientv3.Compare(clientv3.ModRevision(c.ObjectKey), "=", c.ObjectRevision),
	}, c.ObjectKey, c.Blocks)
	return done, err
}
