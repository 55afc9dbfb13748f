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
	"testing"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"

	"github.com/samplecrd/network-apiserver/test/etcdtest"
)

func startEtcd(t *testing.T) *embed.Etcd { return etcdtest.Start(t) }

func grpcClient(t *testing.T, e *embed.Etcd) *clientv3.Client { return etcdtest.Client(t, e) }

const keys = 500

// fill writes keys keys under /s/ (and one key on either side of the range) and returns the
// revision after.
func fill(t *testing.T, c *clientv3.Client) int64 {
	t.Helper()
	ctx := context.Background()
	for _, k := range []string{"/r", "/t"} {
		if _, err := c.Put(ctx, k, "outside"); err != nil {
			t.Fatal(err)
		}
	}
	var rev int64
	for i := range keys {
		resp, err := c.Put(ctx, fmt.Sprintf("/s/%04d", i), "v0")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	return rev
}

// scanWhileWriting scans /s/ and, once the scan has seen its first key, adds a key inside the
// range and changes the last one: the scan must see neither, and return the revision before.
func scanWhileWriting(t *testing.T, s *Scanner, writer *clientv3.Client, want int64) {
	t.Helper()
	ctx := context.Background()
	var got []string
	rev, err := s.Scan(ctx, "/s/", 0, func(kv *mvccpb.KeyValue) error {
		if len(got) == 0 {
			if _, err := writer.Put(ctx, "/s/0250x", "new"); err != nil {
				return err
			}
			if _, err := writer.Put(ctx, fmt.Sprintf("/s/%04d", keys-1), "v1"); err != nil {
				return err
			}
		}
		if string(kv.Value) != "v0" {
			return fmt.Errorf("%s holds %q, a value written after the scan began", kv.Key, kv.Value)
		}
		got = append(got, string(kv.Key))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rev != want {
		t.Errorf("scan at revision %d, want %d (the revision it began at)", rev, want)
	}
	if len(got) != keys {
		t.Fatalf("scan saw %d keys, want %d", len(got), keys)
	}
	for i, k := range got {
		if w := fmt.Sprintf("/s/%04d", i); k != w {
			t.Fatalf("key %d is %s, want %s (every key once, in order)", i, k, w)
		}
	}
	// And at that revision again, after the writes.
	n := 0
	again, err := s.Scan(ctx, "/s/", rev, func(*mvccpb.KeyValue) error { n++; return nil })
	if err != nil || again != rev || n != keys {
		t.Fatalf("scan at revision %d: %d keys at %d, %v; want %d keys", rev, n, again, err, keys)
	}
}

// TestStreamsAtOneRevision: through gRPC, a scan is one RangeStream, pinned to the revision it
// began at, over many chunks (etcd starts a stream with chunks of 10 keys).
func TestStreamsAtOneRevision(t *testing.T) {
	e := startEtcd(t)
	c := grpcClient(t, e)
	s := New(c)
	scanWhileWriting(t, s, c, fill(t, c))
	if !s.Streaming() {
		t.Fatal("the scanner fell back to pages against an etcd that serves RangeStream")
	}
}

// TestPagesAtOneRevision: the fallback reads pages at the first page's revision.
func TestPagesAtOneRevision(t *testing.T) {
	e := startEtcd(t)
	c := grpcClient(t, e)
	s := New(c)
	s.PagesOnly(7)
	scanWhileWriting(t, s, c, fill(t, c))
}

// TestFallsBackWithoutRangeStream: etcd's own in-process client answers RangeStream with
// Unimplemented, as an etcd older than 3.7 does: the scanner reads pages, and says so.
func TestFallsBackWithoutRangeStream(t *testing.T) {
	e := startEtcd(t)
	c := v3client.New(e.Server)
	s := New(c)
	s.Page = 7
	scanWhileWriting(t, s, grpcClient(t, e), fill(t, c))
	if s.Streaming() {
		t.Fatal("the scanner still streams after Unimplemented")
	}
}

// TestStopsWhenFnFails: an error of fn ends the scan with that error, for both ways of reading.
func TestStopsWhenFnFails(t *testing.T) {
	e := startEtcd(t)
	c := grpcClient(t, e)
	fill(t, c)
	stop := errors.New("enough")
	for _, pages := range []bool{false, true} {
		s := New(c)
		if pages {
			s.PagesOnly(7)
		}
		n := 0
		_, err := s.Scan(context.Background(), "/s/", 0, func(*mvccpb.KeyValue) error {
			n++
			if n == 25 {
				return stop
			}
			return nil
		})
		if !errors.Is(err, stop) || n != 25 {
			t.Fatalf("pages %v: scan ended with %v after %d keys, want %v after 25", pages, err, n, stop)
		}
	}
}

// TestCompacted: a scan or a page at a compacted revision fails with rpctypes.ErrCompacted,
// which the verifier retries on and a list answers with 410 Gone.
func TestCompacted(t *testing.T) {
	e := startEtcd(t)
	c := grpcClient(t, e)
	rev := fill(t, c)
	if _, err := c.Put(context.Background(), "/s/late", "v0"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Compact(context.Background(), rev+1); err != nil {
		t.Fatal(err)
	}
	for _, pages := range []bool{false, true} {
		s := New(c)
		if pages {
			s.PagesOnly(7)
		}
		_, err := s.Scan(context.Background(), "/s/", rev, func(*mvccpb.KeyValue) error { return nil })
		if !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("pages %v: scan at compacted revision %d: %v, want ErrCompacted", pages, rev, err)
		}
		_, err = s.ReadPage(context.Background(), "/s/0100", clientv3.GetPrefixRangeEnd("/s/"), rev, 10)
		if !errors.Is(err, rpctypes.ErrCompacted) {
			t.Fatalf("pages %v: page at compacted revision %d: %v, want ErrCompacted", pages, rev, err)
		}
	}
}
