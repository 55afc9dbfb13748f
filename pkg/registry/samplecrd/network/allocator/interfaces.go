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

package allocator

import (
	"context"
	"iter"
	"net/netip"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Interface is what the Network storage needs of the allocator: to create and delete a Network
// together with its allocation, to check an allocation without writing it (dry runs), and to
// pick a free prefix for spec.prefixLength.
type Interface interface {
	Create(ctx context.Context, objKey, objValue string, al Allocation, also ...clientv3.Op) (int64, error)
	CreateGuarded(ctx context.Context, objKey, objValue string, al Allocation, cmps []clientv3.Cmp, probes []clientv3.Op,
		check func([]*etcdserverpb.ResponseOp) error, also ...clientv3.Op) (int64, error)
	Delete(ctx context.Context, objKey string, modRevision int64, al *Allocation, also ...clientv3.Op) (bool, int64, error)
	Get(ctx context.Context, key string) (*mvccpb.KeyValue, error)
	Key(scope string, p netip.Prefix) string
	Check(ctx context.Context, al Allocation) error
	Pick(ctx context.Context, scope string, pool netip.Prefix, bits, attempt int) (netip.Prefix, error)
}

// RepairInterface is what the repair needs of the allocator: to read the allocations and the
// Networks at one revision, and to fix an allocation in a transaction guarded by what it read.
type RepairInterface interface {
	Each(ctx context.Context, rev int64, fn func(Stored) error) (int64, error)
	EachTrusting(ctx context.Context, rev int64, trust func(key []byte, modRevision int64) bool, fn func(Stored) error) (int64, error)
	Scan(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error)
	Count(ctx context.Context, prefix string) (int64, error)
	Key(scope string, p netip.Prefix) string
	Restore(ctx context.Context, objKey string, objCreateRevision int64, al Allocation) error
	Rewrite(ctx context.Context, key string, keyModRevision int64, objKey string, objCreateRevision int64, al Allocation) (bool, error)
	Remove(ctx context.Context, key string, modRevision int64) (bool, error)
	RecordLengths(ctx context.Context, prefixes iter.Seq2[string, netip.Prefix]) ([]LengthFinding, error)
}

var (
	_ Interface       = &Allocator{}
	_ RepairInterface = &Allocator{}
)
