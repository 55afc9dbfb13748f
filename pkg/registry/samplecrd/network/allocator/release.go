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
	"net/netip"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// DeleteIf removes the object at objKey and the allocations als in one transaction that holds
// only if cmps hold; each allocation's key is removed only while it is still stored as that
// allocation (a key rewritten meanwhile is left alone). It returns whether the transaction held,
// and its revision.
func (a *Allocator) DeleteIf(ctx context.Context, cmps []clientv3.Cmp, objKey string, als []Allocation) (bool, int64, error) {
	ops := []clientv3.Op{clientv3.OpDelete(objKey)}
	for _, al := range als {
		key := a.Key(al.Scope, al.Prefix)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", Value(al))},
			[]clientv3.Op{clientv3.OpDelete(key)}, nil))
	}
	resp, err := a.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, 0, err
	}
	if resp.Succeeded {
		for _, al := range als {
			a.seen.set(a.Key(al.Scope, al.Prefix), 0, netip.Prefix{})
		}
	}
	return resp.Succeeded, resp.Header.Revision, nil
}
