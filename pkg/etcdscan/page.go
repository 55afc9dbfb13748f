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
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"
)

// Page is one page of a range: at most the limit asked for of its first keys.
type Page struct {
	Kvs []*mvccpb.KeyValue
	// Revision is the revision the page was read at.
	Revision int64
	// More says that keys follow the page's last in the range.
	More bool
}

// ReadPage reads the first limit keys of [start, end) at revision rev (0: the current one), and
// whether more follow, without counting the rest of the range. A unary Range with a limit makes
// etcd count every key left in its range, so a walk of n keys in pages costs O(n²); a
// RangeStream without a limit counts nothing, and the page ends it once it has one key more
// than it returns. Its chunks start small and double, so a page reads at most about twice its
// keys. Against an etcd without RangeStream the page is one unary Range, with its count.
func (s *Scanner) ReadPage(ctx context.Context, start, end string, rev, limit int64) (Page, error) {
	if limit <= 0 {
		return Page{}, fmt.Errorf("a page needs a positive limit, not %d", limit)
	}
	if !s.noStream.Load() {
		p, err := s.pageStream(ctx, start, end, rev, limit)
		if !errors.Is(err, errNoStream) {
			return p, err
		}
		s.noStream.Store(true)
		klog.InfoS("etcd does not serve RangeStream: pages are read with counting Range requests", "start", start)
	}
	resp, err := s.Client.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(limit), clientv3.WithRev(rev))
	if err != nil {
		return Page{}, err
	}
	if rev == 0 {
		rev = resp.Header.Revision
	}
	return Page{Kvs: resp.Kvs, Revision: rev, More: resp.More}, nil
}

func (s *Scanner) pageStream(ctx context.Context, start, end string, rev, limit int64) (Page, error) {
	if rev == 0 {
		// A stream gives its revision only in its last chunk, which a page does not wait for:
		// pin it to the current revision, which any read returns (one key: nothing to count).
		resp, err := s.Client.Get(ctx, start)
		if err != nil {
			return Page{}, err
		}
		rev = resp.Header.Revision
	}
	p := Page{Revision: rev}
	_, err := s.stream(ctx, start, end, rev, func(kv *mvccpb.KeyValue) error {
		if int64(len(p.Kvs)) == limit {
			p.More = true
			return errEnough
		}
		p.Kvs = append(p.Kvs, kv)
		return nil
	})
	if err != nil && !errors.Is(err, errEnough) {
		return Page{}, err
	}
	return p, nil
}
