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
	"time"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

// DefaultCountReportInterval is how long a node waits after writing its entry of a Network
// before it writes a change of that entry's counts alone (Options.CountReportInterval).
const DefaultCountReportInterval = 30 * time.Second

// Kinds of status writes (the kind label of network_controller_status_writes_total).
const (
	writeState  = "state"  // something but the counts changed: written at once
	writeCounts = "counts" // the counts alone changed, outside the window: written at once
)

// countsOnly says whether report differs from current, the entry as the server has it, in its
// counts alone (leases, attachments), which may then wait for the node's next write. A change
// the server acts on is not a count change: leases becoming known or unknown, and leases or
// attachments reaching or leaving zero (a Network being deleted is released, and a deleted
// node's entry withdrawn, once no node reports any).
func countsOnly(current, report v1.NetworkNodeStatus) bool {
	if (current.Leases == nil) != (report.Leases == nil) {
		return false
	}
	if current.Leases != nil && (*current.Leases == 0) != (*report.Leases == 0) {
		return false
	}
	if (current.Attachments == 0) != (report.Attachments == 0) {
		return false
	}
	current.Leases, report.Leases = nil, nil
	current.Attachments, report.Attachments = 0, 0
	return nodestatus.SameReport(current, report)
}

// countsWait returns how long a change of key's counts alone must still wait: until
// CountReportInterval after the node last wrote key's entry; 0 when it may be written now.
func (c *Controller) countsWait(key string) time.Duration {
	c.writtenMu.Lock()
	defer c.writtenMu.Unlock()
	last, ok := c.written[key]
	if !ok {
		return 0
	}
	return max(0, last.Add(c.opts.CountReportInterval).Sub(c.clock.Now()))
}

// wrote records that the node has just written key's entry (with its counts as they were).
func (c *Controller) wrote(key, kind string) {
	statusWrites.WithLabelValues(kind).Inc()
	c.writtenMu.Lock()
	defer c.writtenMu.Unlock()
	c.written[key] = c.clock.Now()
}

// forgetWritten drops what is recorded of key's writes (its entry withdrawn or the Network gone).
func (c *Controller) forgetWritten(key string) {
	c.writtenMu.Lock()
	defer c.writtenMu.Unlock()
	delete(c.written, key)
	delete(c.entries, key)
}
