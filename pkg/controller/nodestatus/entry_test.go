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
	"reflect"
	"testing"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

func TestMarkNodeNotReady(t *testing.T) {
	entry := v1.NetworkNodeStatus{NodeName: "node-2", Bridge: "nwabc", Ready: true, ObservedGeneration: 3,
		Message: "bridge and CNI configuration match the spec", Attachments: 2}
	marked := MarkNodeNotReady(entry, "NodeStatusUnknown")
	want := v1.NetworkNodeStatus{NodeName: "node-2", Bridge: "nwabc", Ready: false, Reason: ReasonNodeObjectNotReady, ObservedGeneration: 3,
		Message: "node node-2 is not Ready (NodeStatusUnknown); bridge, generation and attachments as its agent last reported", Attachments: 2}
	if !sameEntry(marked, want) {
		t.Fatalf("marked:\n%+v\nwant\n%+v", marked, want)
	}
	if again := MarkNodeNotReady(marked, "NodeStatusUnknown"); !sameEntry(again, marked) {
		t.Errorf("marking a marked entry changed it:\n%+v\n%+v", again, marked)
	}
	// What a failing agent reported is replaced the same way: the mark depends on the kept fields only.
	failed := entry
	failed.Ready, failed.Reason, failed.Message = false, "AddressInUse", "10.1.0.1 is on eth0"
	if got := MarkNodeNotReady(failed, "NodeStatusUnknown"); !sameEntry(got, want) {
		t.Errorf("marking a failed entry: %+v", got)
	}
}

// sameEntry compares node entries, which hold slices since issue 23 and so cannot be compared with ==.
func sameEntry(a, b v1.NetworkNodeStatus) bool { return reflect.DeepEqual(a, b) }

// TestSameReport: the capacity the server adds to a stored entry does not make an agent write its
// unchanged report again; any field the agent reports does.
func TestSameReport(t *testing.T) {
	leases := int32(3)
	report := v1.NetworkNodeStatus{NodeName: "node-1", Ready: true, ObservedGeneration: 2, Blocks: []string{"10.0.0.64/26"}, Leases: &leases}
	stored := report
	stored.Capacity = &v1.NodeCapacity{Allocated: "64", Used: "3"}
	if !SameReport(stored, report) {
		t.Errorf("stored entry with the derived capacity differs from the same report")
	}
	if stored.Capacity == nil {
		t.Errorf("SameReport changed its argument's capacity")
	}
	more := int32(4)
	changed := report
	changed.Leases = &more
	if SameReport(stored, changed) {
		t.Errorf("a changed lease count is the same report")
	}
	changed = report
	changed.Blocks = []string{"10.0.0.64/26", "10.0.0.128/26"}
	if SameReport(stored, changed) {
		t.Errorf("a new block is the same report")
	}
}
