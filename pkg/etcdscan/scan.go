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

// Package etcdscan reads every key under a prefix at one etcd revision, without the cost etcd
// adds to paged reads: each unary Range with a limit counts every key left in its range (to fill
// in the response's count), so a scan of n keys in pages of p costs etcd about n²/p key visits —
// at two million keys, minutes of both cores. A RangeStream (etcd 3.7 and later) reads each key
// once; against an older etcd the scanner falls back to pages.
package etcdscan

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

// DefaultPage is how many keys one read of a paged scan returns (some 10 MB of allocations).
const DefaultPage = 10000

// Scanner scans ranges of one etcd client. Use it by pointer.
type Scanner struct {
	Client *clientv3.Client
	// Page is the page size of the fallback (0: DefaultPage).
	Page int64
	// noStream is set once etcd answered RangeStream with Unimplemented, or by PagesOnly.
	noStream atomic.Bool
}

// New returns a scanner of client.
func New(client *clientv3.Client) *Scanner { return &Scanner{Client: client} }

// PagesOnly makes the scanner read pages of page keys, as against an etcd without RangeStream.
func (s *Scanner) PagesOnly(page int64) {
	s.Page = page
	s.noStream.Store(true)
}

func (s *Scanner) page() int64 {
	if s.Page > 0 {
		return s.Page
	}
	return DefaultPage
}

// Scan calls fn for every key under prefix at revision rev (0: the current one), in key order,
// and returns that revision. It streams the range; against an etcd without RangeStream it reads
// pages instead.
func (s *Scanner) Scan(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	return s.scan(ctx, prefix, rev, fn)
}

// ScanKeys is Scan reading keys only: each KeyValue fn gets has its key and revisions and no
// value. etcd 3.7 answers such a read from its in-memory index, reading no value from its
// database (older versions read each value and drop it).
func (s *Scanner) ScanKeys(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error) (int64, error) {
	return s.scan(ctx, prefix, rev, fn, clientv3.WithKeysOnly())
}

func (s *Scanner) scan(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error, opts ...clientv3.OpOption) (int64, error) {
	fn = Paced(ctx, fn)
	if !s.noStream.Load() {
		got, err := s.stream(ctx, prefix, clientv3.GetPrefixRangeEnd(prefix), rev, fn, opts...)
		if !errors.Is(err, errNoStream) {
			return got, err
		}
		s.noStream.Store(true)
		klog.InfoS("etcd does not serve RangeStream: scans read pages", "prefix", prefix)
	}
	return s.scanPages(ctx, prefix, rev, fn, opts...)
}

// errNoStream: the etcd server does not implement RangeStream.
var errNoStream = errors.New("etcd does not serve RangeStream")

// errEnough, returned by a stream's fn, ends the stream early: the caller has what it wanted.
var errEnough = errors.New("enough keys read")

// stream calls fn for every key of one RangeStream of [start, end) at revision rev (0: the
// current one), read with opts, and returns the revision it read at: etcd pins the stream to one
// revision (rev, or its current one, which the last chunk's header gives) and reads each key
// once. A stream that fn ends early (with errEnough or any error) returns fn's error and is
// drained, so that no goroutine of the client is left.
func (s *Scanner) stream(ctx context.Context, start, end string, rev int64, fn func(*mvccpb.KeyValue) error, opts ...clientv3.OpOption) (int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	chunks, err := s.Client.GetStream(ctx, start, append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithRev(rev)}, opts...)...)
	defer cancel()
	if err != nil {
		if status.Code(err) == codes.Unimplemented {
			return 0, errNoStream
		}
		return 0, err
	}
	// The client's goroutine hands every chunk on: it ends only once its channel is drained.
	defer func() {
		cancel()
		for range chunks {
		}
	}()
	received := false
	for chunk := range chunks {
		if err := chunk.Err(); err != nil {
			if !received && status.Code(err) == codes.Unimplemented {
				return 0, errNoStream
			}
			return 0, rpctypes.Error(err)
		}
		received = true
		for _, kv := range chunk.Kvs {
			if err := fn(kv); err != nil {
				return 0, err
			}
		}
		if chunk.Header != nil && rev == 0 {
			rev = chunk.Header.Revision
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if !received || rev == 0 {
		return 0, fmt.Errorf("etcd's RangeStream from %s ended without its revision", start)
	}
	return rev, nil
}

// scanPages is Scan in pages of listPage keys, each a unary Range at the first page's revision.
func (s *Scanner) scanPages(ctx context.Context, prefix string, rev int64, fn func(*mvccpb.KeyValue) error, opts ...clientv3.OpOption) (int64, error) {
	start, end := prefix, clientv3.GetPrefixRangeEnd(prefix)
	for {
		resp, err := s.Client.Get(ctx, start, append([]clientv3.OpOption{clientv3.WithRange(end), clientv3.WithLimit(s.page()), clientv3.WithRev(rev)}, opts...)...)
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

// Streaming says the scanner reads with RangeStream (false once it fell back to pages).
func (s *Scanner) Streaming() bool { return !s.noStream.Load() }
