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
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// ReasonNotSelected is a node's reason while it drains a Network whose spec.nodeSelector no
// longer selects it: pods are still attached, or their addresses still leased.
const ReasonNotSelected = "NotSelected"

// EventDeselected is recorded when a node has removed a Network that no longer selects it.
const EventDeselected = "Deselected"

// selected says whether n's spec.nodeSelector selects this node: nil or empty selects every
// node; otherwise the selector is matched against the Node's labels (attached mode) or
// Options.NodeLabels.
func (c *Controller) selected(n *v1.Network) (bool, error) {
	if n.Spec.NodeSelector == nil {
		return true, nil
	}
	selector, err := metav1.LabelSelectorAsSelector(n.Spec.NodeSelector)
	if err != nil {
		// The server validates the selector, so this is data written around it.
		return false, netbackend.Errorf("InvalidSpec", "spec.nodeSelector: %v", err)
	}
	return selector.Matches(c.selectorLabels()), nil
}

// deselect handles n, a Network that does not select this node. A node with nothing of it
// withdraws its entry, if any. A node that has its bridge drains it like a deleted Network:
// while pods are attached, or their addresses are still leased (a runtime's DEL under way,
// for at most LeaseGrace), the bridge, configuration and segment stay (so that the runtime's
// DEL works, and the pods keep their peers) and the entry says NotSelected; then the node's
// part is removed and the entry withdrawn. It claims no block; its blocks are the server's to
// release once the entry is gone.
func (c *Controller) deselect(ctx context.Context, key string, n *v1.Network) (string, error) {
	actual, err := c.backend.Observe(ctx, key)
	if err != nil {
		return "error", err // an unreadable node removes nothing
	}
	if actual != nil {
		ports := int32(len(actual.Ports))
		waiting := ports == 0 && len(actual.Leases) > 0 && c.leasesPending(key)
		if ports > 0 || waiting {
			if ports > 0 {
				c.leasesDone(key)
			}
			return c.drain(ctx, key, n, actual, ports, waiting)
		}
		if len(actual.Leases) > 0 {
			klog.FromContext(ctx).Info("Leases without pods outlived the grace period; they go with the node's part of the Network",
				"network", key, "leases", actual.Leases, "grace", c.opts.LeaseGrace)
		}
		if err := c.backend.Remove(ctx, key); err != nil {
			return "error", err
		}
		c.event(n, "Normal", EventDeselected, fmt.Sprintf("Removed from node %s: spec.nodeSelector does not select it", c.opts.NodeName))
		klog.FromContext(ctx).Info("Removed a network that does not select this node", "network", key)
	}
	c.leasesDone(key)
	c.forgetClaim(key)
	if nodestatus.FindEntry(n, c.opts.NodeName) == nil {
		klog.FromContext(ctx).V(2).Info("The network does not select this node; nothing of it here", "network", key)
		return "not_selected", nil
	}
	if _, err := nodestatus.WithdrawNodeEntry(ctx, c.client, n, c.opts.NodeName, ""); err != nil {
		return "error", err
	}
	klog.FromContext(ctx).Info("Withdrew the node's entry of a network that does not select it", "network", key)
	return "not_selected", nil
}

// drain keeps (and repairs) the node's part of n while its pods go, and reports it NotSelected.
// It claims no block: the configuration keeps the blocks the node holds.
func (c *Controller) drain(ctx context.Context, key string, n *v1.Network, actual *netbackend.Actual, ports int32, waiting bool) (string, error) {
	desired, err := desiredOf(key, n)
	if err != nil {
		_, reportErr := c.report(ctx, n, ports, nil, err)
		return "error", reportErrOr(reportErr, err)
	}
	c.withSegment(&desired, n)
	var extra *entryExtra
	if c.blockLister != nil || c.opts.Underlay.IsValid() {
		extra = &entryExtra{mtu: int32(desired.EffectiveMTU())}
		if c.opts.Underlay.IsValid() {
			extra.underlay = c.opts.Underlay.String()
		}
		leases := int32(len(actual.Leases))
		extra.leases = &leases
		extra.leaseReclaim = c.leaseReclaimState()
	}
	if c.blockLister != nil {
		desired.Blocks = blocksOf(c.nodeAllocation(n), desired.Prefix)
		desired.DefaultRoute = n.Spec.DefaultRoute != nil && *n.Spec.DefaultRoute
		extra.ipamMode = samplecrd.IPAMModeBlocks
		for _, b := range desired.Blocks {
			extra.blocks = append(extra.blocks, b.String())
		}
	}
	if _, _, err := c.backend.Ensure(ctx, desired); err != nil {
		_, reportErr := c.report(ctx, n, ports, extra, err)
		return "error", reportErrOr(reportErr, err)
	}
	if extra != nil && desired.Segment != nil {
		if now, err := c.backend.Observe(ctx, key); err == nil && now != nil && now.Segment != nil {
			extra.vxlan = now.Segment.Device
		}
	}
	var failure error
	if waiting {
		// The message does not count down: each recheck would rewrite the status.
		failure = netbackend.Errorf(ReasonNotSelected,
			"spec.nodeSelector does not select node %s; no pods are attached, but addresses %s are still leased (a runtime's DEL under way?): waiting for their release, at most %v",
			c.opts.NodeName, strings.Join(actual.Leases, ", "), c.opts.LeaseGrace)
		c.queue.AddAfter(key, leaseRecheck)
	} else {
		failure = netbackend.Errorf(ReasonNotSelected,
			"spec.nodeSelector does not select node %s but %d pod(s) are attached; the bridge and CNI configuration stay until the runtime detaches them",
			c.opts.NodeName, ports)
	}
	if _, err := c.report(ctx, n, ports, extra, failure); err != nil {
		return "error", err
	}
	return "draining", nil
}

func reportErrOr(reportErr, err error) error {
	if reportErr != nil {
		return reportErr
	}
	return err
}

// terminateUnselected handles n, being deleted, on a node n does not select and that has
// nothing of it and no entry: terminate would report an entry for it. There is nothing to do:
// the server releases n once no node reports attached pods. done is false when terminate is to
// handle n.
func (c *Controller) terminateUnselected(ctx context.Context, key string, n *v1.Network) (done bool, result string, err error) {
	if selected, err := c.selected(n); err != nil || selected || nodestatus.FindEntry(n, c.opts.NodeName) != nil {
		return false, "", nil
	}
	actual, err := c.backend.Observe(ctx, key)
	switch {
	case err != nil:
		return true, "error", err
	case actual != nil:
		return false, "", nil // the node's part is still there: drains as any deletion
	}
	c.forgetClaim(key)
	return true, "not_selected", nil
}

// forgetClaim drops the remembered answer of the node's last claim of key, and a refused
// headroom claim.
func (c *Controller) forgetClaim(key string) {
	c.claimedMu.Lock()
	defer c.claimedMu.Unlock()
	delete(c.claimed, key)
	delete(c.refused, key)
}
