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
	"slices"
	"strings"
	"time"

	"k8s.io/klog/v2"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// ReasonTerminating is a node's reason while the Network it serves is being deleted.
const ReasonTerminating = "Terminating"

// leaseRecheck is how often a Network waiting for its leases (see Options.LeaseGrace) looks
// again: the linux backend's watch of host-local's files queues it on each release too, but a
// backend may have no such watch, and the grace's end is no event.
const leaseRecheck = 200 * time.Millisecond

// terminate handles a Network being deleted: while pods are attached on this node it keeps (and
// repairs) the bridge and configuration and reports them; with none it reports zero. When every
// node's entry says zero the server removes the finalizer, the Network goes, and the node's part
// is removed like any deleted Network's.
func (c *Controller) terminate(ctx context.Context, key string, n *v1.Network) (string, error) {
	if !slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		return c.remove(ctx, key) // only other finalizers remain: this node's part goes now
	}
	// Unlike a status report, the release must not guess: an unreadable node keeps the Network.
	actual, err := c.backend.Observe(ctx, key)
	if err != nil {
		return "error", err
	}
	var count int32
	if actual != nil {
		count = int32(len(actual.Ports))
	}
	if count > 0 {
		c.leasesDone(key)
		var failure error
		if desired, err := desiredOf(key, n); err == nil {
			c.withSegment(&desired, n)
			if c.blockLister != nil {
				// No claim while the Network goes: the blocks the node holds, if any.
				desired.Blocks = blocksOf(c.nodeAllocation(n), desired.Prefix)
				desired.DefaultRoute = n.Spec.DefaultRoute != nil && *n.Spec.DefaultRoute
			}
			_, _, failure = c.backend.Ensure(ctx, desired)
		}
		if failure == nil {
			failure = netbackend.Errorf(ReasonTerminating,
				"the Network is being deleted but %d pod(s) are attached on node %s; the bridge and CNI configuration stay until the runtime detaches them", count, c.opts.NodeName)
		}
		if _, err := c.report(ctx, n, count, nil, failure); err != nil {
			return "error", err
		}
		return "terminating", nil
	}
	// A runtime's DEL removes the pod's veth before the IPAM plugin releases its address:
	// releasing now would remove host-local's directory under that DEL, which then leaves it
	// behind. Wait (a little) for the leases to go.
	if actual != nil && len(actual.Leases) > 0 {
		if c.leasesPending(key) {
			// The message does not count down: each recheck would rewrite the status. The entry
			// reports the leases: while it does, the server keeps the Network.
			leased := int32(len(actual.Leases))
			if _, err := c.report(ctx, n, 0, &entryExtra{leases: &leased, leaseReclaim: c.leaseReclaimState()}, netbackend.Errorf(ReasonTerminating,
				"the Network is being deleted; no pods are attached on node %s, but addresses %s are still leased (a runtime's DEL under way?): waiting for their release, at most %v",
				c.opts.NodeName, strings.Join(actual.Leases, ", "), c.opts.LeaseGrace)); err != nil {
				return "error", err
			}
			c.queue.AddAfter(key, leaseRecheck)
			return "terminating", nil
		}
		klog.FromContext(ctx).Info("Leases without pods outlived the grace period; they go with the Network",
			"network", key, "leases", actual.Leases, "grace", c.opts.LeaseGrace)
	}
	c.leasesDone(key)
	// The server releases the Network once no node's entry reports attachments or leases: this
	// report of none (leases left past the grace go with the Network, so none are reported) may
	// be the one that does.
	if _, err := c.report(ctx, n, 0, nil, netbackend.Errorf(ReasonTerminating,
		"the Network is being deleted; no pods are attached on node %s", c.opts.NodeName)); err != nil {
		return "error", err
	}
	return "terminating", nil
}

// leasesPending records that key has leases without ports and tells whether to keep waiting for
// them.
func (c *Controller) leasesPending(key string) bool {
	c.leasesMu.Lock()
	defer c.leasesMu.Unlock()
	first, ok := c.leasesSeen[key]
	if !ok {
		first = c.clock.Now()
		c.leasesSeen[key] = first
	}
	return c.clock.Since(first) < c.opts.LeaseGrace
}

// leasesDone forgets key's wait for leases.
func (c *Controller) leasesDone(key string) {
	c.leasesMu.Lock()
	defer c.leasesMu.Unlock()
	delete(c.leasesSeen, key)
}
