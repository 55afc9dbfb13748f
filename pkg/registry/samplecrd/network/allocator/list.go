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

// listPage is how many keys one read of Scan returns. etcd counts every key left in the range
// for each read (a unary Range always fills in the response's count), so a scan of n keys
// costs etcd about n²/listPage key visits: at a million Networks (two million keys to verify)
// pages of 1000 kept both cores busy for minutes. A page of 10,000 keys is some 10 MB.
var listPage int64 = 10000 // a variable only so that a test can make pages small

// List returns every stored allocation at revision rev (0: the current one) and that revision.
func (a *Allocator) List(ctx context.Context, rev int64) ([]Stored, int64, error) {
	var out []Stored
	rev, err := a.Scan(ctx, a.Root(), rev, func(kv *mvccpb.KeyValue) error {
		out = append(out, a.stored(kv))
		return nil
	})
	return out, rev, err
}

// Scan calls fn for every key under prefix at revision rev (0: the current one), a page at a
// time, and returns that revision.
func (a *Allocator) Scan(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	start, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := a.client.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(listPage), clientv3.WithRev(rev))
		if err != nil {
			return 0, err
		}
		if rev == 0 {
			// The first read fixes the revision. A response's header always carries the
			// store's current revision, also for a read at an older one: taking it from
			// every page would move a scan that spans pages to newer revisions.
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if err := fn(kv); err != nil {
				return 0, err
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, nil
		}
		start = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

func (a *Allocator) stored(kv *mvccpb.KeyValue) Stored {
	s := Stored{Key: string(kv.Key), ModRevision: kv.ModRevision}
	s.Scope, _, _ = strings.Cut(strings.TrimPrefix(s.Key, a.Root()), "/")
	r, p, err := decode(kv.Value)
	if err == nil && a.Key(s.Scope, p) != s.Key {
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
