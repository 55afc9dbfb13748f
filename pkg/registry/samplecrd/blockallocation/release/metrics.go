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

package release

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	releases = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "network_block",
		Name:           "releases_total",
		Help:           "Nodes' BlockAllocations released (with their block keys) because no pod of the node could hold an address in them.",
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

// RegisterMetrics registers the loop's metrics once.
func RegisterMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(releases) })
}
