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
		Help:           "Allocations the verifier fixed, by action (restored, rewritten, removed; lengthsRecorded: a length record completed).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"action"})
	verifications = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_allocation",
		Name:           "verifications_total",
		Help:           "Verifications of the allocation invariant, by result (ok, violations, error).",
		StabilityLevel: metrics.ALPHA,
	}, []string{"result"})
	verificationSeconds = metrics.NewHistogram(&metrics.HistogramOpts{
		Subsystem:      "network_allocation",
		Name:           "verification_duration_seconds",
		Help:           "How long one verification of the allocation invariant took, reads, checks, fixes and its pauses included.",
		Buckets:        []float64{0.01, 0.1, 1, 5, 15, 30, 60, 120, 240, 480},
		StabilityLevel: metrics.ALPHA,
	})
	registerOnce sync.Once
)

func registerMetrics() {
	registerOnce.Do(func() { legacyregistry.MustRegister(violations, repairs, verifications, verificationSeconds) })
}
