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
	"net/netip"
	"slices"
	"strings"

	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Event reasons recorded on Networks.
const (
	EventCreated  = "Created"
	EventRepaired = "Repaired"
	// EventAdopted: the node had an unmarked bridge with exactly the Network's name and gateway
	// (the CNI bridge plugin made it for a pod attached before the controller ran), now ours.
	EventAdopted = "Adopted"
	EventDeleted = "Deleted"
	EventFailed  = "Failed"
)

// IPMasqAnnotation set to "true" on a Network makes the CNI bridge plugin masquerade its pods'
// traffic leaving the prefix (ipMasq in the configuration list); absent or anything else, off.
const IPMasqAnnotation = "samplecrd.k8s.io/ip-masq"

// sync converges the node with n, a Network not being deleted, reports the node's entry and
// returns the result label for metrics. The backend's Ensure is its one look at the node.
func (c *Controller) sync(ctx context.Context, key string, n *v1.Network) (string, error) {
	// The protection finalizer is the server's: it adds it in the create (and to a Network
	// created before it did, in the first write after), so none is written here.
	desired, err := desiredOf(key, n)
	if err != nil {
		_, err = c.report(ctx, n, 0, nil, err)
		return "error", err
	}
	c.withSegment(&desired, n)
	var view *blockView
	if c.blockLister != nil {
		v := c.nodeBlocks(ctx, n, key, desired.Prefix, desired.Gateway)
		view = &v
		desired.Blocks = v.blocks // nil in legacy mode: the whole prefix, as before blocks
		desired.DefaultRoute = n.Spec.DefaultRoute != nil && *n.Spec.DefaultRoute
	}
	changes, outcome, ensureErr := c.backend.Ensure(ctx, desired)
	attachments := int32(len(outcome.Ports))
	if ensureErr != nil {
		// Ensure stopped part way, so its ports are not the node's: look again.
		attachments = c.attachments(ctx, key)
	}
	var extra *entryExtra
	failure := ensureErr
	if view != nil || c.opts.Underlay.IsValid() {
		extra = &entryExtra{mtu: int32(desired.EffectiveMTU())}
		if c.opts.Underlay.IsValid() {
			extra.underlay = c.opts.Underlay.String()
		}
	}
	if view != nil {
		extra.blocks = view.cidrs()
		extra.ipamMode = samplecrd.IPAMModeBlocks
		if view.legacy {
			extra.ipamMode = samplecrd.IPAMModeLegacy
		}
		if ensureErr == nil {
			actual, err := c.observeEnsured(ctx, key, desired.Segment != nil)
			if err == nil && actual == nil {
				// Nothing of the Network on the node: no block, so no list (and, made on the
				// first attach, no bridge). It holds no leases either, which the entry says, so
				// that a node whose Node is deleted withdraws it rather than keep it "while pods
				// may hold addresses".
				actual = &netbackend.Actual{Key: key}
			}
			if err == nil {
				// No bridge on the node (one made on a pod's first attach, none yet) has no
				// VXLAN device either: the first ADD makes both.
				if desired.Segment != nil && (actual.Bridge != "" || actual.Segment != nil) {
					if actual.Segment == nil {
						view.failure = netbackend.Errorf(netbackend.ReasonSegmentDown,
							"the VXLAN device %s of the Network's segment is missing on node %s", netbackend.SegmentDeviceName(key), c.opts.NodeName)
					} else {
						extra.vxlan = actual.Segment.Device
					}
				}
				leases := int32(len(actual.Leases))
				extra.leases = &leases
				extra.leaseReclaim = c.leaseReclaimState()
				if !view.legacy && (view.failure == nil || netbackend.ReasonOf(view.failure) == netbackend.ReasonSegmentDown) {
					added, notice, err := c.keepHeadroom(ctx, n, desired.Prefix, desired.Gateway, *view, actual.Leases, len(outcome.Ports))
					if added {
						c.queue.Add(key) // realise the new block
					}
					if err != nil {
						view.failure = err
					}
					extra.notice = notice
				}
			}
			failure = view.failure
			switch {
			case view.conflict != nil && failure != nil:
				// The conflict lasts until a pod restarts: it leads, the other cause is kept.
				failure = netbackend.Errorf(ReasonAddressConflict, "%v; also %s: %v", view.conflict, netbackend.ReasonOf(failure), failure)
			case view.conflict != nil:
				failure = view.conflict
			}
		}
	}
	if outcome.AwaitsAttach {
		if extra == nil {
			extra = &entryExtra{}
		}
		extra.awaitsAttach = true
	}
	if _, err := c.report(ctx, n, attachments, extra, failure); err != nil {
		return "error", err
	}
	if failure != nil {
		return "error", failure
	}
	if len(changes) == 0 {
		return "in_sync", nil
	}
	reason := EventRepaired
	if outcome.Created {
		reason = EventCreated
	}
	if slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, netbackend.AdoptedPrefix) }) {
		reason = EventAdopted
	}
	c.event(n, "Normal", reason, fmt.Sprintf("%s on node %s: %v", reason, c.opts.NodeName, changes))
	klog.FromContext(ctx).Info("Converged network", "network", key, "reason", reason, "changes", changes)
	return "changed", nil
}

func desiredOf(key string, n *v1.Network) (netbackend.Desired, error) {
	prefix, err := netip.ParsePrefix(n.Spec.CIDR)
	if err != nil {
		return netbackend.Desired{}, netbackend.Errorf("InvalidSpec", "spec.cidr %q: %v", n.Spec.CIDR, err)
	}
	gateway, err := netip.ParseAddr(n.Spec.Gateway)
	if err != nil {
		return netbackend.Desired{}, netbackend.Errorf("InvalidSpec", "spec.gateway %q: %v", n.Spec.Gateway, err)
	}
	return netbackend.Desired{Key: key, Prefix: prefix, Gateway: gateway, IPMasq: n.Annotations[IPMasqAnnotation] == "true"}, nil
}

// leases returns the node's leases of key, read alone when the backend can (LeaseReader).
func (c *Controller) leases(ctx context.Context, key string) ([]string, error) {
	if r, ok := c.backend.(netbackend.LeaseReader); ok {
		return r.Leases(ctx, key)
	}
	a, err := c.backend.Observe(ctx, key)
	if err != nil || a == nil {
		return nil, err
	}
	return a.Leases, nil
}

// observeEnsured returns what a sync needs of the node after a successful Ensure, which
// reported the ports: the leases and, for a Network with a segment, its VXLAN device. Without a
// segment and with a LeaseReader, only the leases are read (Observe would dump the bridge's
// ports again, a walk of every link in the kernel).
func (c *Controller) observeEnsured(ctx context.Context, key string, segment bool) (*netbackend.Actual, error) {
	r, ok := c.backend.(netbackend.LeaseReader)
	if segment || !ok {
		return c.backend.Observe(ctx, key)
	}
	leases, err := r.Leases(ctx, key)
	if err != nil {
		return nil, err
	}
	return &netbackend.Actual{Key: key, Leases: leases}, nil
}

// attachments returns the number of pods attached to key's bridge on this node (0 when unknown).
func (c *Controller) attachments(ctx context.Context, key string) int32 {
	a, err := c.backend.Observe(ctx, key)
	if err != nil || a == nil {
		return 0
	}
	return int32(len(a.Ports))
}

func (c *Controller) event(n *v1.Network, eventType, reason, message string) {
	if c.opts.Recorder != nil {
		c.opts.Recorder.Event(n, eventType, reason, message)
	}
}
