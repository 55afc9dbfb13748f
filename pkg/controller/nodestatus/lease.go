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

package nodestatus

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// ReasonNodeDeleted is a node's reason in status.nodes once its Node is deleted while its agent
// still reports (and so may still have pods holding addresses of its blocks).
const ReasonNodeDeleted = "NodeDeleted"

// DefaultLeaseNamespace is where node agents hold their Leases unless told otherwise: the
// namespace the agent DaemonSet of artifacts/deploy runs in.
const DefaultLeaseNamespace = "network-agent"

// leaseNamePrefix starts every agent Lease's name.
const leaseNamePrefix = "network-agent-"

// LeaseName is the name of the coordination.k8s.io Lease the agent of node holds:
// "network-agent-<node>", or, when that is longer than a name may be, the prefix and the first 16
// hex digits of the node name's SHA-256 (the Lease's holderIdentity names the node).
func LeaseName(node string) string {
	name := leaseNamePrefix + node
	if len(name) <= validation.DNS1123SubdomainMaxLength {
		return name
	}
	sum := sha256.Sum256([]byte(node))
	return leaseNamePrefix + hex.EncodeToString(sum[:])[:16]
}

// LeaseHeld says whether lease is held at now: renewed less than its duration ago.
func LeaseHeld(lease *coordinationv1.Lease, now time.Time) bool {
	if lease == nil || lease.Spec.RenewTime == nil || lease.Spec.LeaseDurationSeconds == nil {
		return false
	}
	expires := lease.Spec.RenewTime.Add(time.Duration(*lease.Spec.LeaseDurationSeconds) * time.Second)
	return now.Before(expires)
}

// MarkNodeDeleted returns entry as it reads once its Node is deleted: not ready, reason
// NodeDeleted, a message naming the node; everything else (blocks, leases, attachments) as its
// agent last reported. Like MarkNodeNotReady it depends only on the entry, so the agent and every
// server replica write the same entry.
func MarkNodeDeleted(entry v1.NetworkNodeStatus) v1.NetworkNodeStatus {
	entry.Ready = false
	entry.Reason = ReasonNodeDeleted
	entry.Message = fmt.Sprintf("node %s's Node is deleted; its agent still reports, and its blocks stay while pods may hold addresses in them", entry.NodeName)
	return entry
}

// ReportsNoLeases says whether entry reports zero leases explicitly (a missing count is unknown).
func ReportsNoLeases(entry v1.NetworkNodeStatus) bool {
	return entry.Leases != nil && *entry.Leases == 0
}
