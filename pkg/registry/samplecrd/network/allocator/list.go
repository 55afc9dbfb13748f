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
	"fmt"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// List returns every stored allocation at revision rev (0: the current one) and that revision.
func (a *Allocator) List(ctx context.Context, rev int64) ([]Stored, int64, error) {
	var out []Stored
	rev, err := a.Each(ctx, rev, func(st Stored) error {
		out = append(out, st)
		return nil
	})
	return out, rev, err
}

// Each calls fn for every stored allocation at revision rev (0: the current one), in key order,
// and returns that revision: List without holding them all.
func (a *Allocator) Each(ctx context.Context, rev int64, fn func(Stored) error) (int64, error) {
	return a.Scan(ctx, a.Root(), rev, func(kv *mvccpb.KeyValue) error { return fn(a.stored(kv)) })
}

// EachTrusting is Each reading keys only (etcdscan's ScanKeys: etcd reads no value from its
// database). A key that trust accepts by its key and ModRevision is handed to fn with Trusted
// set and only its scope; the values of the other keys are read at rev, trustBatch keys to a
// transaction, and decoded as Each does. fn sees every key in key order. rev must be a revision
// (not 0): the values are read at it.
func (a *Allocator) EachTrusting(ctx context.Context, rev int64, trust func(key []byte, modRevision int64) bool, fn func(Stored) error) (int64, error) {
	if rev <= 0 {
		return 0, fmt.Errorf("EachTrusting needs a revision, got %d", rev)
	}
	// held: keys read since the first key still to be read with its value, in key order.
	var held []*mvccpb.KeyValue
	var trusted []bool
	untrusted := 0
	flush := func() error {
		if untrusted == 0 {
			return nil
		}
		ops := make([]clientv3.Op, 0, untrusted)
		for i, kv := range held {
			if !trusted[i] {
				ops = append(ops, clientv3.OpGet(string(kv.Key), clientv3.WithRev(rev)))
			}
		}
		resp, err := a.client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return err
		}
		j := 0
		for i, kv := range held {
			if trusted[i] {
				if err := fn(a.trustedStored(kv)); err != nil {
					return err
				}
				continue
			}
			kvs := resp.Responses[j].GetResponseRange().GetKvs()
			j++
			if len(kvs) == 0 {
				return fmt.Errorf("%s, listed at revision %d, cannot be read at it", kv.Key, rev)
			}
			if err := fn(a.stored(kvs[0])); err != nil {
				return err
			}
		}
		held, trusted, untrusted = held[:0], trusted[:0], 0
		return nil
	}
	got, err := a.scanner.ScanKeys(ctx, a.Root(), rev, func(kv *mvccpb.KeyValue) error {
		ok := trust(kv.Key, kv.ModRevision)
		if ok && untrusted == 0 {
			return fn(a.trustedStored(kv))
		}
		held, trusted = append(held, kv), append(trusted, ok)
		if !ok {
			untrusted++
		}
		if untrusted == trustBatch || len(held) >= maxHeld {
			return flush()
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	if err := flush(); err != nil {
		return 0, err
	}
	return got, nil
}

// trustBatch is how many values EachTrusting reads in one transaction (etcd's --max-txn-ops
// defaults to 128), and maxHeld how many keys it holds at most while it waits for them.
const (
	trustBatch = 100
	maxHeld    = 4 * trustBatch
)

func (a *Allocator) trustedStored(kv *mvccpb.KeyValue) Stored {
	s := Stored{Key: string(kv.Key), ModRevision: kv.ModRevision, Trusted: true}
	s.Scope, _, _ = strings.Cut(strings.TrimPrefix(s.Key, a.Root()), "/")
	return s
}

// Scan calls fn for every key under prefix at revision rev (0: the current one), in key order,
// and returns that revision (see etcdscan).
func (a *Allocator) Scan(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	return a.scanner.Scan(ctx, prefix, rev, fn)
}

// Count returns how many keys start with prefix now (etcd counts them in its index, reading no
// value).
func (a *Allocator) Count(ctx context.Context, prefix string) (int64, error) {
	resp, err := a.client.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Count, nil
}

func (a *Allocator) stored(kv *mvccpb.KeyValue) Stored {
	s := Stored{Key: string(kv.Key), ModRevision: kv.ModRevision}
	s.Scope, _, _ = strings.Cut(strings.TrimPrefix(s.Key, a.Root()), "/")
	r, p, err := decode(kv.Value)
	if err == nil && !a.isKey(s.Key, s.Scope, p) {
		err = fmt.Errorf("its prefix %s belongs at another key", p)
	}
	if err != nil {
		s.Corrupt = err
		return s
	}
	s.Prefix, s.Owner, s.Node, s.Role = p, r.Owner, r.Node, r.Role
	return s
}

// Decode reads the allocation stored in kv (Corrupt set when it cannot).
func (a *Allocator) Decode(kv *mvccpb.KeyValue) Stored { return a.stored(kv) }

// ScopePrefix is the key prefix of every allocation of scope, ending in "/".
func (a *Allocator) ScopePrefix(scope string) string { return a.root + "/" + scope + "/" }
