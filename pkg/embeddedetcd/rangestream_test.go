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

package embeddedetcd

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestInProcessClientStreams: the in-process client serves GetStream (etcd's own in-process
// adapter answers Unimplemented): every key once, in order, at the revision the stream began at
// though keys change while it runs; and a caller that gives up mid-stream leaves no goroutine.
func TestInProcessClientStreams(t *testing.T) {
	e := start(t, t.TempDir())
	t.Cleanup(e.Stop)
	c := e.InProcessClient()
	ctx := context.Background()
	const n = 300
	var rev int64
	for i := range n {
		resp, err := c.Put(ctx, fmt.Sprintf("/s/%04d", i), "v0")
		if err != nil {
			t.Fatal(err)
		}
		rev = resp.Header.Revision
	}
	chunks, err := c.GetStream(ctx, "/s/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	seen, nchunks, gotRev := 0, 0, int64(0)
	for chunk := range chunks {
		if err := chunk.Err(); err != nil {
			t.Fatal(err)
		}
		if nchunks == 0 {
			if _, err := c.Put(ctx, fmt.Sprintf("/s/%04d", n-1), "v1"); err != nil {
				t.Fatal(err)
			}
		}
		nchunks++
		for _, kv := range chunk.Kvs {
			if want := fmt.Sprintf("/s/%04d", seen); string(kv.Key) != want || string(kv.Value) != "v0" {
				t.Fatalf("key %d: %s=%s, want %s=v0", seen, kv.Key, kv.Value, want)
			}
			seen++
		}
		if chunk.Header != nil {
			gotRev = chunk.Header.Revision
		}
	}
	if seen != n || gotRev != rev || nchunks < 2 {
		t.Fatalf("stream: %d keys in %d chunks at revision %d; want %d keys in several chunks at %d", seen, nchunks, gotRev, n, rev)
	}

	// Give up after the first chunk, many times: no goroutine may stay behind.
	before := runtime.NumGoroutine()
	for range 50 {
		sctx, cancel := context.WithCancel(ctx)
		chunks, err := c.GetStream(sctx, "/s/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		<-chunks
		cancel()
		for chunk := range chunks {
			if err := chunk.Err(); err != nil && !errors.Is(err, context.Canceled) {
				t.Fatalf("after cancel: %v, want the context's error", err)
			}
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+5 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // waiting for exiting goroutines; nothing to wait on
	}
	if g := runtime.NumGoroutine(); g > before+5 {
		t.Fatalf("%d goroutines after 50 abandoned streams, %d before", g, before)
	}
}
