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

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// entryExtra is what a node with blocks adds to its entry.
type entryExtra struct {
	// ipamMode: how the node hands out addresses (Blocks, or Legacy until its leases from the
	// whole-prefix configuration are covered).
	ipamMode string
	underlay string
	vxlan    string
	blocks   []string
	mtu      int32
	leases   *int32
	// leaseReclaim: whether the node releases leaked leases (reported beside leases).
	leaseReclaim string
	// notice, when set and nothing failed, gives the ready entry its reason and message: the
	// node has free addresses but fewer than its headroom, and no block is left to claim.
	notice error
	// awaitsAttach: the node has the configuration list and no bridge yet, which the first
	// pod's ADD makes (netbackend.Outcome.AwaitsAttach); the ready entry's message says so.
	awaitsAttach bool
}

// Messages of a ready entry.
const (
	messageMatches      = "bridge and CNI configuration match the spec"
	messageAwaitsAttach = "CNI configuration matches the spec; the bridge is made by the first pod's ADD on this node"
)

// report applies this node's status entry, unless it already says the same, and returns the
// Network as it is afterwards (nil when it is gone). A change of the counts alone waits for the
// end of the node's count interval (coalesce.go); n is then returned as it is.
// extra, when set, adds what the node reports about its blocks.
func (c *Controller) report(ctx context.Context, n *v1.Network, attachments int32, extra *entryExtra, failure error) (*v1.Network, error) {
	entry := v1.NetworkNodeStatus{
		NodeName:           c.opts.NodeName,
		Bridge:             netbackend.BridgeName(n.Namespace + "/" + n.Name),
		Ready:              failure == nil,
		ObservedGeneration: n.Generation,
		Message:            messageMatches,
		Attachments:        attachments,
	}
	if extra != nil {
		if extra.awaitsAttach {
			entry.Message = messageAwaitsAttach
		}
		entry.Blocks = extra.blocks
		if len(entry.Blocks) == 0 {
			entry.Blocks = nil
		}
		entry.IPAMMode = extra.ipamMode
		entry.UnderlayAddress, entry.VXLAN = extra.underlay, extra.vxlan
		entry.MTU = extra.mtu
		entry.Leases = extra.leases
		entry.LeaseReclaim = extra.leaseReclaim
	}
	var notice error
	switch {
	case failure != nil:
		entry.Reason, entry.Message = netbackend.ReasonOf(failure), failure.Error()
	case extra != nil && extra.notice != nil:
		notice = extra.notice
		entry.Reason, entry.Message = netbackend.ReasonOf(notice), notice.Error()
	}
	// While the Node is not Ready the entry says so, exactly as the server's node lifecycle loop
	// marks it, so the two never undo each other. Once the Node is deleted the entry says
	// NodeDeleted while pods may hold addresses (the blocks stay while it does), and goes once it
	// reports no leases or this agent holds no Lease, as that loop removes it.
	key := n.Namespace + "/" + n.Name
	switch node := c.nodeStatus(); {
	case node.deleted && (nodestatus.ReportsNoLeases(entry) || c.opts.LeaseHeld == nil || !c.opts.LeaseHeld()):
		c.forgetWritten(key)
		return nodestatus.WithdrawNodeEntry(ctx, c.client, n, c.opts.NodeName, "")
	case node.deleted:
		entry = nodestatus.MarkNodeDeleted(entry)
	case node.why != "":
		entry = nodestatus.MarkNodeNotReady(entry, node.why)
	}
	kind := writeState
	current := nodestatus.FindEntry(n, c.opts.NodeName)
	if current != nil {
		if nodestatus.SameReport(*current, entry) {
			return n, nil
		}
		if countsOnly(*current, entry) {
			// Counts alone changed: at most one write per CountReportInterval. The sync
			// scheduled for the window's end writes the counts as they are then.
			if wait := c.countsWait(key); wait > 0 {
				c.queue.AddAfter(key, wait)
				return n, nil
			}
			kind = writeCounts
		}
	}
	if reason := netbackend.ReasonOf(failure); failure != nil && reason != ReasonTerminating && reason != ReasonNotSelected {
		c.event(n, "Warning", EventFailed, fmt.Sprintf("node %s: %v", c.opts.NodeName, failure))
	}
	if notice != nil && entry.Ready && (current == nil || current.Reason != entry.Reason || current.Message != entry.Message) {
		// Once, when the entry starts saying so: it is a warning, not a failure.
		c.event(n, "Warning", netbackend.ReasonOf(notice), fmt.Sprintf("node %s: %v", c.opts.NodeName, notice))
	}
	// Deleted meanwhile (nil): the delete event removes it from the node.
	// Remembered before the write: its watch event may arrive before the answer (echo.go).
	c.rememberEntry(key, entry)
	updated, err := nodestatus.ApplyNodeEntry(ctx, c.client, n, entry, "")
	if err == nil {
		c.wrote(key, kind)
	}
	return updated, err
}
