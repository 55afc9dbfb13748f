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
		Help:           "Reconciles of Networks by result (in_sync, changed, removed, error).",
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
	registerMetrics sync.Once
)

func registerControllerMetrics() {
	registerMetrics.Do(func() {
		legacyregistry.MustRegister(reconciles, reconcileDuration, reconcileErrors)
	})
}
