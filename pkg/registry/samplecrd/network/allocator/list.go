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

// EachTrusting is Each reading keys only (etcdscan's ScanTrusting: etcd reads no value from its
// database). A key that trust accepts by its key and ModRevision is handed to fn with Trusted
// set and only its scope; the values of the other keys are read at rev and decoded as Each does.
// fn sees every key in key order. rev must be a revision (not 0): the values are read at it.
func (a *Allocator) EachTrusting(ctx context.Context, rev int64, trust func(key []byte, modRevision int64) bool, fn func(Stored) error) (int64, error) {
	return a.scanner.ScanTrusting(ctx, a.Root(), rev,
		func(kv *mvccpb.KeyValue) bool { return trust(kv.Key, kv.ModRevision) },
		func(kv *mvccpb.KeyValue, trusted bool) error {
			if trusted {
				return fn(a.trustedStored(kv))
			}
			return fn(a.stored(kv))
		})
}

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
