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

package repair

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strings"
	"sync"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
)

// healthyNetworks is what etcd holds for n Networks with nothing to repair, as the server writes
// them: each Network (/28, gateway, status.vni), its allocation, its gateway key and its pair of
// VNI keys.
func healthyNetworks(b *testing.B, n int) (*fakeAllocations, *fakeBlockKeys, *fakeVNIKeys) {
	f := &fakeAllocations{}
	blocks := &fakeBlockKeys{}
	vnis := &fakeVNIKeys{stored: segment.Stored{ByVNI: map[int32]segment.Key{}, ByUID: map[string]segment.Key{}}}
	for i := range n {
		name := fmt.Sprintf("net-%07d", i)
		uid := fmt.Sprintf("%08x-1d2e-4f3a-8b4c-5d6e7f8a9b0c", i)
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 12), byte(i >> 4), byte(i << 4)}), 28)
		gw := p.Addr().Next()
		nw := samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "bench", Name: name, UID: types.UID(uid)},
			Spec: samplecrd.NetworkSpec{CIDR: p.String(), Gateway: gw.String()}, Status: samplecrd.NetworkStatus{VNI: int32(i + 1)}}
		data, err := json.Marshal(nw)
		if err != nil {
			b.Fatal(err)
		}
		f.kvs = append(f.kvs, &mvccpb.KeyValue{Key: []byte("/registry/samplecrd.k8s.io/networks/bench/" + name), Value: data, CreateRevision: 1, ModRevision: 1})
		owner := allocator.Owner{Namespace: "bench", Name: name, UID: uid}
		f.stored = append(f.stored, allocator.Stored{Allocation: allocator.Allocation{Scope: allocator.ClusterScope, Prefix: p, Owner: owner},
			Key: f.Key(allocator.ClusterScope, p)})
		g := netip.PrefixFrom(gw, 32)
		blocks.stored = append(blocks.stored, allocator.Stored{Allocation: allocator.Allocation{Scope: uid, Prefix: g, Owner: owner, Role: allocator.RoleGateway},
			Key: blocks.Key(uid, g)})
		vni := itoa(int32(i + 1))
		vnis.stored.ByUID[uid] = segment.Key{Key: "/seg/uid/" + uid, Value: vni}
		vnis.stored.ByVNI[int32(i+1)] = segment.Key{Key: "/seg/vni/" + vni, Value: uid}
	}
	return f, blocks, vnis
}

// readAllocations, readBlockKeys and readVNIKeys hand out a fresh copy of what they hold on every
// read, decoded strings and all, as the allocator and the segment read them from etcd: what a
// verification reads is its own to hold.
type readAllocations struct{ *fakeAllocations }
type readBlockKeys struct{ *fakeBlockKeys }
type readVNIKeys struct {
	*fakeVNIKeys
	entries []segment.Entry // in key order
}

func (f readAllocations) Each(_ context.Context, rev int64, fn func(allocator.Stored) error) (int64, error) {
	return rev, eachRead(f.stored, fn)
}

func (f readBlockKeys) Each(_ context.Context, rev int64, fn func(allocator.Stored) error) (int64, error) {
	return rev, eachRead(f.stored, fn)
}

func eachRead(stored []allocator.Stored, fn func(allocator.Stored) error) error {
	for _, st := range stored {
		if err := fn(readOne(st)); err != nil {
			return err
		}
	}
	return nil
}

func readOne(st allocator.Stored) allocator.Stored {
	st.Key, st.Scope = strings.Clone(st.Key), strings.Clone(st.Scope)
	st.Owner = allocator.Owner{Namespace: strings.Clone(st.Owner.Namespace), Name: strings.Clone(st.Owner.Name), UID: strings.Clone(st.Owner.UID)}
	return st
}

func (f readVNIKeys) Each(_ context.Context, _ int64, fn func(segment.Entry) error) error {
	for _, e := range f.entries {
		e.Key = segment.Key{Key: strings.Clone(e.Key.Key), Value: strings.Clone(e.Value), ModRevision: e.ModRevision}
		e.UID = strings.Clone(e.UID)
		if err := fn(e); err != nil {
			return err
		}
	}
	return nil
}

// BenchmarkVerifyMemory reports what one verification of 100,000 healthy Networks holds and
// allocates, what it reads included: peak-B/network is the heap's highest point during the
// verification, sampled every millisecond with the collector running after every 5% of growth,
// less the heap before it (the fakes' data, which stands for etcd's); alloc-B/network is every
// byte it allocates, the garbage the collector has to go through.
func BenchmarkVerifyMemory(b *testing.B) {
	const n = 100_000
	f, blocks, vnis := healthyNetworks(b, n)
	r := New(readAllocations{f}, allocator.Scoping{}, "/registry/samplecrd.k8s.io/networks/", decodeJSON).
		WithBlocks(readBlockKeys{blocks}, "/registry/samplecrd.k8s.io/blockallocations/", decodeBlocksJSON).WithVNIs(readVNIKeys{vnis, entries(vnis.stored)}, nil)
	defer debug.SetGCPercent(debug.SetGCPercent(5))
	sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	heap := func() uint64 {
		metrics.Read(sample)
		return sample[0].Value.Uint64()
	}
	var peak, allocated uint64
	for b.Loop() {
		runtime.GC()
		base := heap()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var high uint64
		stop, done := make(chan struct{}), sync.WaitGroup{}
		done.Go(func() {
			t := time.NewTicker(time.Millisecond)
			defer t.Stop()
			for {
				high = max(high, heap())
				select {
				case <-stop:
					return
				case <-t.C:
				}
			}
		})
		v, err := r.Verify(context.Background())
		close(stop)
		done.Wait()
		runtime.ReadMemStats(&after)
		if err != nil || v.Networks != n || len(v.Violations) != 0 {
			b.Fatalf("verified %d networks, %d violations, err %v: want %d healthy ones", v.Networks, len(v.Violations), err, n)
		}
		peak = max(peak, high-min(high, base))
		allocated = after.TotalAlloc - before.TotalAlloc
	}
	b.ReportMetric(float64(peak)/n, "peak-B/network")
	b.ReportMetric(float64(allocated)/n, "alloc-B/network")
}
