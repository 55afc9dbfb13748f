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
	"sync"
	"sync/atomic"
	"time"
)

// createResult is one parallel create run.
type createResult struct {
	Objects int `json:"objects"`
	// StoredBefore is how many objects of the kind the server held when the run began.
	StoredBefore int `json:"storedBefore"`
	// Began is when the run began (set by the scale point, whose steps are read against the
	// server's log).
	Began     *time.Time `json:"began,omitempty"`
	Clients   int        `json:"clients"`
	Created   int        `json:"created"`
	Errors    int        `json:"errors"`
	FirstErrs []string   `json:"firstErrors,omitempty"`
	Seconds   float64    `json:"seconds"`
	PerSecond float64    `json:"perSecond"`
	Latency   dist       `json:"latency"`
	// CPUMs is each process's CPU milliseconds per created object over the run.
	CPUMs map[string]float64 `json:"cpuMsPerObject,omitempty"`
	// LostGuardsPerCreate (ours only) is how many guarded allocation writes lost their guard
	// per created object (network_allocation_guarded_writes_total{result="lost"}): each one is
	// a transaction that failed and a read before the next attempt.
	LostGuardsPerCreate *float64 `json:"lostGuardsPerCreate,omitempty"`
}

// requestTimeout bounds every single request the bench makes.
const requestTimeout = 2 * time.Minute

// createMany creates objects first..first+count-1 in ns with clients goroutines pulling the next
// index from a shared counter, and measures throughput and per-request latency.
func createMany(ctx context.Context, b backend, ns string, first, count, clients int, dryRun bool) *createResult {
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, count)
		res       = &createResult{Objects: count, Clients: clients}
		wg        sync.WaitGroup
	)
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for {
				i := int(next.Add(1)) - 1
				if i >= count || ctx.Err() != nil {
					break
				}
				rctx, cancel := context.WithTimeout(ctx, requestTimeout)
				t := time.Now()
				err := b.create(rctx, ns, first+i, dryRun)
				d := time.Since(t)
				cancel()
				if err != nil {
					mu.Lock()
					res.Errors++
					if len(res.FirstErrs) < 5 {
						res.FirstErrs = append(res.FirstErrs, err.Error())
					}
					mu.Unlock()
					continue
				}
				mine = append(mine, d)
			}
			mu.Lock()
			latencies = append(latencies, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.Created = len(latencies)
	res.Seconds = elapsed.Seconds()
	res.PerSecond = float64(res.Created) / elapsed.Seconds()
	res.Latency = summarize(latencies)
	return res
}
