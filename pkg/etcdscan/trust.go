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

package etcdscan

import (
	"context"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TrustBatch is how many values ScanTrusting reads in one transaction (etcd's --max-txn-ops
// defaults to 128), and maxHeld how many keys it holds at most while it waits for them.
const (
	TrustBatch = 100
	maxHeld    = 4 * TrustBatch
)

// ScanTrusting is ScanKeys for a reader that knows most values already: trust gets each key as
// listed (key and revisions, no value), and the keys it does not accept are read again with their
// values at rev, TrustBatch keys to a transaction. fn sees every key in key order, with trusted
// set and no value for the keys trust accepted, and the whole KeyValue at rev for the others.
// rev must be a revision (not 0): the values are read at it.
func (s *Scanner) ScanTrusting(ctx context.Context, prefix string, rev int64, trust func(*mvccpb.KeyValue) bool, fn func(kv *mvccpb.KeyValue, trusted bool) error) (int64, error) {
	if rev <= 0 {
		return 0, fmt.Errorf("ScanTrusting needs a revision, got %d", rev)
	}
	// held: keys listed since the first key still to be read with its value, in key order.
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
		resp, err := s.Client.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return err
		}
		j := 0
		for i, kv := range held {
			if trusted[i] {
				if err := fn(kv, true); err != nil {
					return err
				}
				continue
			}
			kvs := resp.Responses[j].GetResponseRange().GetKvs()
			j++
			if len(kvs) == 0 {
				return fmt.Errorf("%s, listed at revision %d, cannot be read at it", kv.Key, rev)
			}
			if err := fn(kvs[0], false); err != nil {
				return err
			}
		}
		held, trusted, untrusted = held[:0], trusted[:0], 0
		return nil
	}
	got, err := s.ScanKeys(ctx, prefix, rev, func(kv *mvccpb.KeyValue) error {
		ok := trust(kv)
		if ok && untrusted == 0 {
			return fn(kv, true)
		}
		held, trusted = append(held, kv), append(trusted, ok)
		if !ok {
			untrusted++
		}
		if untrusted == TrustBatch || len(held) >= maxHeld {
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
