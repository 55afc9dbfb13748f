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
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
)

// walk reads /s/ in pages of limit keys, each from just after the last page's last key at the
// first page's revision, and writes a new key and a new value between pages: the walk must see
// neither. It returns the keys and each page's size.
func walk(t *testing.T, s *Scanner, writer *clientv3.Client, limit int64) ([]string, []int) {
	t.Helper()
	ctx := context.Background()
	start, end := "/s/", clientv3.GetPrefixRangeEnd("/s/")
	var rev int64
	var got []string
	var sizes []int
	for page := 0; ; page++ {
		p, err := s.ReadPage(ctx, start, end, rev, limit)
		if err != nil {
			t.Fatalf("page %d: %v", page, err)
		}
		if rev == 0 {
			rev = p.Revision
		} else if p.Revision != rev {
			t.Fatalf("page %d read at revision %d, asked for %d", page, p.Revision, rev)
		}
		for _, kv := range p.Kvs {
			if string(kv.Value) != "v0" {
				t.Fatalf("page %d: %s holds %q, written after the first page", page, kv.Key, kv.Value)
			}
			got = append(got, string(kv.Key))
		}
		sizes = append(sizes, len(p.Kvs))
		if !p.More {
			return got, sizes
		}
		if len(p.Kvs) == 0 {
			t.Fatalf("page %d is empty but says more follow", page)
		}
		start = string(p.Kvs[len(p.Kvs)-1].Key) + "\x00"
		if _, err := writer.Put(ctx, fmt.Sprintf("/s/%04dx", page), "new"); err != nil {
			t.Fatal(err)
		}
		if _, err := writer.Put(ctx, fmt.Sprintf("/s/%04d", keys-1-page), "v1"); err != nil {
			t.Fatal(err)
		}
	}
}

// TestPages: a walk in pages returns every key once, in order, pages of exactly the limit but
// the last, and "more" on every page but the last, also when the limit divides the range (the
// last full page must not claim more). Streamed, through the fallback, and through a client
// without RangeStream.
func TestPages(t *testing.T) {
	for _, limit := range []int64{37, 50, keys, keys + 1} {
		for _, mode := range []string{"stream", "pages", "unimplemented"} {
			t.Run(fmt.Sprintf("%s/%d", mode, limit), func(t *testing.T) {
				e := startEtcd(t)
				writer := grpcClient(t, e)
				fill(t, writer)
				s := New(writer)
				switch mode {
				case "pages":
					s.PagesOnly(7)
				case "unimplemented":
					s = New(v3client.New(e.Server))
				}
				got, sizes := walk(t, s, writer, limit)
				if len(got) != keys {
					t.Fatalf("%d keys, want %d", len(got), keys)
				}
				for i, k := range got {
					if want := fmt.Sprintf("/s/%04d", i); k != want {
						t.Fatalf("key %d is %s, want %s", i, k, want)
					}
				}
				pages := (keys + int(limit) - 1) / int(limit)
				if len(sizes) != pages {
					t.Fatalf("%d pages %v, want %d", len(sizes), sizes, pages)
				}
				for i, n := range sizes[:pages-1] {
					if int64(n) != limit {
						t.Fatalf("page %d holds %d keys, want %d", i, n, limit)
					}
				}
				if streaming := mode == "stream"; s.Streaming() != streaming {
					t.Fatalf("streaming %v, want %v", s.Streaming(), streaming)
				}
			})
		}
	}
}
