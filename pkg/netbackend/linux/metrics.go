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

package linux

import (
	"sync"

	"github.com/vishvananda/netlink"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

// What the backend asks of the node, so that the cost of one Network can be read off /metrics
// (the bench's controller step divides them by the Networks it created and deleted).
var (
	netlinkRequests = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "network_backend",
		Name:           "netlink_requests_total",
		Help:           "Netlink requests of the linux backend (a dump counts once).",
		StabilityLevel: metrics.ALPHA,
	})
	nftablesFlushes = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "network_backend",
		Name:           "nftables_flushes_total",
		Help:           "nftables batches the linux backend sent.",
		StabilityLevel: metrics.ALPHA,
	})
	fileWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_backend",
		Name:           "file_writes_total",
		Help:           "Files the linux backend wrote (write: a CNI configuration list replaced) or removed (remove: a configuration list or a Network's lease directory).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	deleteBatchSizes = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      "network_backend",
		Name:           "bridge_delete_batch_size",
		Help:           "Removes served by one group delete of the linux backend's bridges (see DeleteGroup).",
		Buckets:        []float64{1, 2, 4, 8, 16, 32},
		StabilityLevel: metrics.ALPHA,
	})
	registerMetrics sync.Once
)

// RegisterMetrics registers the backend's metrics with the legacy registry (once).
func RegisterMetrics() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(netlinkRequests, nftablesFlushes, fileWrites, deleteBatchSizes)
	})
}

// nl is the netlink handle, counted: every request goes through it.
func (b *Backend) nl() *netlink.Handle {
	netlinkRequests.Inc()
	return b.h
}
