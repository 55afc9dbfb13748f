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
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// guardedWrites counts the attempts of guarded writes (every create, and the repair's and the
// gateway's writes) by result: "committed" when the transaction's guard held, "lost" when it
// failed (a write beside the prefix since the allocator last looked, an overlap, or the caller's
// own compares) and the allocator read what stands there. lost / committed is how often the
// first guess of the container keys is wrong: each lost attempt is one more transaction.
var (
	guardedWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_allocation",
		Name:           "guarded_writes_total",
		Help:           "Attempts of guarded allocation writes, by result (committed: the guard held; lost: it failed and the allocator read the keys it guards).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(guardedWrites) })
}
