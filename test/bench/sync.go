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
	"runtime"
	"time"

	"k8s.io/client-go/tools/cache"
)

// syncResult is a cold start of several informers at once.
type syncResult struct {
	Informers int     `json:"informers"`
	Objects   int     `json:"objects"`
	Seconds   float64 `json:"seconds"`
}

// coldSync starts informers informers on all namespaces, each with its own list and watch, and
// times until all have synced, decoding included; each must then hold every object.
func coldSync(ctx context.Context, b backend, informers, objects int) (*syncResult, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	start := time.Now()
	infs := make([]cache.SharedIndexInformer, informers)
	synced := make([]cache.InformerSynced, informers)
	for i := range infs {
		infs[i] = b.informer(ctx.Done())
		synced[i] = infs[i].HasSynced
	}
	// Polled every millisecond: cache.WaitForCacheSync polls every 100 ms, too coarse here.
	for !allSynced(synced) {
		if err := pause(ctx, time.Millisecond); err != nil {
			return nil, fmt.Errorf("informers did not sync: %w", err)
		}
	}
	elapsed := time.Since(start)
	for i, inf := range infs {
		if n := len(inf.GetStore().ListKeys()); n != objects {
			return nil, fmt.Errorf("informer %d synced with %d objects, want %d", i, n, objects)
		}
	}
	cancel()
	// Let the next measurement start without ten caches' worth of garbage on this machine.
	infs = nil
	runtime.GC()
	return &syncResult{Informers: informers, Objects: objects, Seconds: elapsed.Seconds()}, nil
}

func allSynced(synced []cache.InformerSynced) bool {
	for _, f := range synced {
		if !f() {
			return false
		}
	}
	return true
}
