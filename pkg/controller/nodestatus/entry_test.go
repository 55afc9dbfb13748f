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
