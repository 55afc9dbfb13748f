package repair

import (
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
)

var (
	violations = metrics.NewGaugeVec(&metrics.GaugeOpts{
		Subsystem:      "network_allocation",
		Name:           "violations",
		Help:           "Violations of the allocation invariant the last verification found, by kind (overlap, orphan, missing, mismatch, invalid).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"kind"})
	repairs = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_allocation",
		Name:           "repairs_total",
		Help:           "Allocations the verifier fixed, by action (restored, rewritten, removed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"action"})
	verifications = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_allocation",
		Name:           "verifications_total",
		Help:           "Verifications of the allocation invariant, by result (ok, violations, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(violations, repairs, verifications) })
}
