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

package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// memSample is a server's memory with a given number of objects of the measured kind stored.
type memSample struct {
	// Target is the fill size asked for; Objects is how many were stored.
	Target    int   `json:"target"`
	Objects   int   `json:"objects"`
	HeapBytes int64 `json:"heapAllocBytes"`
	RSSBytes  int64 `json:"rssBytes"`
	// Per object: (value - value with no objects) / objects.
	HeapPerObject float64 `json:"heapBytesPerObject,omitempty"`
	RSSPerObject  float64 `json:"rssBytesPerObject,omitempty"`
}

// heapAlloc is the server's live heap right after a forced garbage collection, from the
// HeapAlloc line of its text heap profile.
func heapAlloc(ctx context.Context, ep *endpoint) (int64, error) {
	var v int64
	// Twice: the first collection may leave finalizer-held memory for the second.
	for range 2 {
		status, body, err := ep.get(ctx, "/debug/pprof/heap?gc=1&debug=1", "")
		if err != nil {
			return 0, err
		}
		if status != http.StatusOK {
			return 0, fmt.Errorf("GET /debug/pprof/heap: %d %s", status, truncate(body))
		}
		if v, err = parseHeapAlloc(body); err != nil {
			return 0, err
		}
	}
	return v, nil
}

func parseHeapAlloc(profile []byte) (int64, error) {
	s := bufio.NewScanner(bytes.NewReader(profile))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), "# HeapAlloc = "); ok {
			return strconv.ParseInt(strings.TrimSpace(rest), 10, 64)
		}
	}
	return 0, fmt.Errorf("no HeapAlloc line in the heap profile")
}

// measureMemory samples a server's heap and RSS; baseline, when given, turns them into per-object figures.
func measureMemory(ctx context.Context, ep *endpoint, cl *cluster, component string, objects int, baseline *memSample) (*memSample, error) {
	heap, err := heapAlloc(ctx, ep)
	if err != nil {
		return nil, err
	}
	rss, err := cl.RSSBytes(component)
	if err != nil {
		return nil, err
	}
	m := &memSample{Objects: objects, HeapBytes: heap, RSSBytes: rss}
	if baseline != nil && objects > 0 {
		m.HeapPerObject = float64(heap-baseline.HeapBytes) / float64(objects)
		m.RSSPerObject = float64(rss-baseline.RSSBytes) / float64(objects)
	}
	return m, nil
}
