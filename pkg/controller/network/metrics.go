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

package network

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	// Registers client-go's workqueue metrics (depth, latency, retries) with the legacy registry.
	_ "k8s.io/component-base/metrics/prometheus/workqueue"
)

var (
	reconciles = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_controller",
		Name:           "reconcile_total",
		Help:           "Reconciles of Networks by result (in_sync, changed, removed, not_selected, draining, waiting_for_node, terminating, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	reconcileDuration = metrics.NewHistogramVec(&metrics.HistogramOpts{
		Subsystem:      "network_controller",
		Name:           "reconcile_duration_seconds",
		Help:           "Duration of reconciles of Networks by result.",
		Buckets:        metrics.ExponentialBuckets(0.0005, 2, 16),
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	reconcileErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_controller",
		Name:           "reconcile_errors_total",
		Help:           "Failed reconciles of Networks by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	statusWrites = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_controller",
		Name:           "status_writes_total",
		Help:           "Writes of the node's entries in Networks' status.nodes by kind: state (anything but the counts changed, written at once) or counts (leases or attachments alone changed, at most one write per Network per --count-report-interval).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	registerMetrics sync.Once
)

func registerControllerMetrics() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(reconciles, reconcileDuration, reconcileErrors, statusWrites)
	})
}
