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
	"context"
	"fmt"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/leasereclaim"
)

// EventLeaseReclaimed: the node released an address whose pod sandbox its container runtime no
// longer has.
const EventLeaseReclaimed = "LeaseReclaimed"

var (
	leasesReclaimed = metrics.NewCounter(&metrics.CounterOpts{
		Subsystem:      "network_agent",
		Name:           "leases_reclaimed_total",
		Help:           "Addresses this node released because the pod sandbox holding them no longer exists in its container runtime (leaked leases).",
		StabilityLevel: metrics.ALPHA,
	})
	registerReclaimMetrics sync.Once
)

// reclaimInterval is how often the leases are looked at for a grace: five looks per grace, at
// least one a second and one a minute, so a leak goes between one grace and a fifth more after
// it is first seen.
func reclaimInterval(grace time.Duration) time.Duration {
	return min(max(grace/5, time.Second), time.Minute)
}

// runReclaim runs the lease reclaim's passes every reclaimInterval until ctx is done.
func (c *Controller) runReclaim(ctx context.Context) {
	wait.UntilWithContext(ctx, c.reclaimPass, reclaimInterval(c.opts.LeaseReclaimGrace))
}

// reclaimPass runs one pass: each released lease gets an Event on its Network and a resync (its
// entry then reports the lower count); a change of the reclaim's state resyncs every Network, so
// each entry's leaseReclaim says it.
func (c *Controller) reclaimPass(ctx context.Context) {
	registerReclaimMetrics.Do(func() { legacyregistry.MustRegister(leasesReclaimed) })
	r := c.opts.LeaseReclaim
	before := r.State()
	released, err := r.Pass(ctx)
	logger := klog.FromContext(ctx)
	if err != nil && ctx.Err() == nil {
		// Said at Info once per change of state (a runtime down for hours logs once), and each
		// time at higher verbosity.
		verbosity := 4
		if r.State() != before {
			verbosity = 0
		}
		logger.V(verbosity).Info("Lease reclaim: nothing released from what could not be checked", "state", r.State(), "err", err)
	}
	for _, rel := range released {
		leasesReclaimed.Inc()
		msg := fmt.Sprintf("node %s released %s: its lease's container %s has not existed in the container runtime since %s",
			c.opts.NodeName, rel.Lease.Address, rel.Lease.ContainerID, rel.OrphanedSince.UTC().Format(time.RFC3339))
		logger.Info("Reclaimed a leaked lease", "network", rel.Key, "address", rel.Lease.Address, "container", rel.Lease.ContainerID)
		if namespace, name, err := cache.SplitMetaNamespaceKey(rel.Key); err == nil {
			if n, err := c.lister.Networks(namespace).Get(name); err == nil {
				c.event(n, "Normal", EventLeaseReclaimed, msg)
			}
		}
		c.queue.Add(rel.Key)
	}
	if r.State() == before {
		return
	}
	logger.Info("Lease reclaim state changed", "from", before, "to", r.State())
	networks, err := c.lister.List(labels.Everything())
	if err != nil {
		return
	}
	for _, n := range networks {
		c.enqueue(n)
	}
}

// leaseReclaimState is what the node's entries say in leaseReclaim.
func (c *Controller) leaseReclaimState() string {
	if c.opts.LeaseReclaim == nil {
		return leasereclaim.StateNoEndpoint
	}
	return c.opts.LeaseReclaim.State()
}
