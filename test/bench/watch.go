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
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/watch"
)

// watchResult is one watch fan-out: every update should reach every watcher once.
type watchResult struct {
	Watchers     int      `json:"watchers"`
	Updates      int      `json:"updates"`
	Objects      int      `json:"objects"`
	Expected     int      `json:"expectedEvents"`
	Received     int      `json:"receivedEvents"`
	Lost         int      `json:"lostEvents"`
	UpdateErrors int      `json:"updateErrors"`
	WatchErrors  []string `json:"watchErrors,omitempty"`
	Seconds      float64  `json:"seconds"`
	// Latency runs from just before an update request to the event's arrival at a watcher.
	Latency dist `json:"latency"`
}

// deliveryWait is how long the bench waits, after the last update, for events still on their way.
const deliveryWait = time.Minute

// watchFanout opens watchers watches on ns from the collection's current resourceVersion, then
// patches an annotation on objects (names) one at a time, updates times, and collects the latency
// of every MODIFIED event carrying the annotation.
func watchFanout(ctx context.Context, b backend, ns string, names []string, watchers, updates int) (*watchResult, error) {
	res := &watchResult{Watchers: watchers, Updates: updates, Objects: len(names), Expected: watchers * updates}
	rv, _, err := b.list(ctx, ns)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	base := time.Now()
	sent := make([]atomic.Int64, updates) // nanoseconds since base, monotonic
	var (
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, res.Expected)
		received  atomic.Int64
		wg        sync.WaitGroup
	)
	for w := range watchers {
		wi, err := b.watch(ctx, ns, rv)
		if err != nil {
			return nil, fmt.Errorf("watcher %d: %w", w, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer wi.Stop()
			seen := make([]bool, updates)
			mine := make([]time.Duration, 0, updates)
			defer func() {
				mu.Lock()
				latencies = append(latencies, mine...)
				mu.Unlock()
			}()
			for {
				select {
				case <-ctx.Done():
					return
				case ev, ok := <-wi.ResultChan():
					if !ok {
						if ctx.Err() == nil {
							mu.Lock()
							res.WatchErrors = append(res.WatchErrors, fmt.Sprintf("watcher %d: closed by the server after %d events", w, len(mine)))
							mu.Unlock()
						}
						return
					}
					at := time.Since(base)
					if ev.Type == watch.Error {
						mu.Lock()
						res.WatchErrors = append(res.WatchErrors, fmt.Sprintf("watcher %d: error event %v", w, ev.Object))
						mu.Unlock()
						continue
					}
					if ev.Type != watch.Modified {
						continue
					}
					m, err := meta.Accessor(ev.Object)
					if err != nil {
						continue
					}
					seq, err := strconv.Atoi(m.GetAnnotations()[seqAnnotation])
					if err != nil || seq < 0 || seq >= updates || seen[seq] {
						continue
					}
					seen[seq] = true
					mine = append(mine, at-time.Duration(sent[seq].Load()))
					received.Add(1)
				}
			}
		}()
	}

	start := time.Now()
	for seq := range updates {
		sent[seq].Store(int64(time.Since(base)))
		rctx, cancel := context.WithTimeout(ctx, requestTimeout)
		err := b.annotate(rctx, ns, names[seq%len(names)], seqAnnotation, seq)
		cancel()
		if err != nil {
			res.UpdateErrors++
			if res.UpdateErrors == 1 {
				mu.Lock()
				res.WatchErrors = append(res.WatchErrors, "update: "+err.Error())
				mu.Unlock()
			}
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	deadline := time.Now().Add(deliveryWait)
	for received.Load() < int64(res.Expected-res.UpdateErrors*watchers) && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	res.Seconds = time.Since(start).Seconds()
	cancel()
	wg.Wait()
	res.Received = int(received.Load())
	res.Lost = res.Expected - res.Received
	res.Latency = summarize(latencies)
	return res, nil
}
