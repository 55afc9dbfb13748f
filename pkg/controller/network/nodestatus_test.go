package network

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

func readyNode(name string, status corev1.ConditionStatus, reason string) *corev1.Node {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if status != "" {
		node.Status.Conditions = []corev1.NodeCondition{
			{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse, Reason: "KubeletHasSufficientMemory"},
			{Type: corev1.NodeReady, Status: status, Reason: reason, Message: "a message that may change on every update"},
		}
	}
	return node
}

func TestNodeReadiness(t *testing.T) {
	for _, tc := range []struct {
		node  *corev1.Node
		ready bool
		why   string
	}{
		{readyNode("a", corev1.ConditionTrue, "KubeletReady"), true, ""},
		{readyNode("a", corev1.ConditionUnknown, "NodeStatusUnknown"), false, "NodeStatusUnknown"},
		{readyNode("a", corev1.ConditionFalse, "KubeletNotReady"), false, "KubeletNotReady"},
		{readyNode("a", corev1.ConditionFalse, ""), false, "Ready=False"},
		{readyNode("a", "", ""), false, "no Ready condition"},
	} {
		if ready, why := NodeReadiness(tc.node); ready != tc.ready || why != tc.why {
			t.Errorf("NodeReadiness(%+v) = %v, %q; want %v, %q", tc.node.Status.Conditions, ready, why, tc.ready, tc.why)
		}
	}
}

func TestMarkNodeNotReady(t *testing.T) {
	entry := v1.NetworkNodeStatus{NodeName: "node-2", Bridge: "nwabc", Ready: true, ObservedGeneration: 3,
		Message: "bridge and CNI configuration match the spec", Attachments: 2}
	marked := MarkNodeNotReady(entry, "NodeStatusUnknown")
	want := v1.NetworkNodeStatus{NodeName: "node-2", Bridge: "nwabc", Ready: false, Reason: ReasonNodeNotReady, ObservedGeneration: 3,
		Message: "node node-2 is not Ready (NodeStatusUnknown); bridge, generation and attachments as its agent last reported", Attachments: 2}
	if marked != want {
		t.Fatalf("marked:\n%+v\nwant\n%+v", marked, want)
	}
	if again := MarkNodeNotReady(marked, "NodeStatusUnknown"); again != marked {
		t.Errorf("marking a marked entry changed it:\n%+v\n%+v", again, marked)
	}
	// What a failing agent reported is replaced the same way: the mark depends on the kept fields only.
	failed := entry
	failed.Ready, failed.Reason, failed.Message = false, "AddressInUse", "10.1.0.1 is on eth0"
	if got := MarkNodeNotReady(failed, "NodeStatusUnknown"); got != want {
		t.Errorf("marking a failed entry: %+v", got)
	}
}

func TestTrimNode(t *testing.T) {
	node := readyNode("n", corev1.ConditionTrue, "KubeletReady")
	node.ResourceVersion, node.Labels = "7", map[string]string{"a": "b"}
	node.Status.Images = []corev1.ContainerImage{{Names: []string{"big"}, SizeBytes: 1}}
	got, err := TrimNode(node)
	if err != nil {
		t.Fatal(err)
	}
	trimmed := got.(*corev1.Node)
	if trimmed.Name != "n" || trimmed.ResourceVersion != "7" || trimmed.Labels != nil || trimmed.Status.Images != nil ||
		len(trimmed.Status.Conditions) != 1 || trimmed.Status.Conditions[0].Type != corev1.NodeReady {
		t.Errorf("trimmed: %+v", trimmed)
	}
	if ready, _ := NodeReadiness(trimmed); !ready {
		t.Error("trimming lost readiness")
	}
}

// The agent reports the marked entry while its Node is not Ready, withdraws its entry once the
// Node is deleted, and reports as usual again once the Node is Ready.
func TestAgentFollowsItsNode(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	ctx := context.Background()
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	normal := f.statusApplies()
	if len(normal) != 1 || !normal[0].Ready {
		t.Fatalf("first report: %+v", normal)
	}
	f.refresh("web")

	// Another node's Node changes nothing here.
	f.controller.nodeChanged(readyNode("node-b", corev1.ConditionUnknown, "NodeStatusUnknown"), false)
	if n := f.controller.queue.Len(); n != 0 {
		t.Fatalf("another node's Node queued %d Networks", n)
	}
	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionTrue, "KubeletReady"), false)
	if result, err := f.sync("team/web"); err != nil || result != "in_sync" || len(f.client.Actions()) != 0 {
		t.Fatalf("sync with the Node Ready: %s, %v, %v", result, err, f.client.Actions())
	}

	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionUnknown, "NodeStatusUnknown"), false)
	if n := f.controller.queue.Len(); n != 1 {
		t.Fatalf("the Node going NotReady queued %d Networks, want 1", n)
	}
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	marked := f.statusApplies()
	if len(marked) != 1 || marked[0] != MarkNodeNotReady(normal[0], "NodeStatusUnknown") {
		t.Fatalf("report while NotReady: %+v", marked)
	}
	f.refresh("web")
	if _, err := f.sync("team/web"); err != nil || len(f.client.Actions()) != 0 {
		t.Fatalf("a resync while NotReady wrote again (%v): %v", err, f.client.Actions())
	}

	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionUnknown, "NodeStatusUnknown"), true)
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	n := f.refresh("web")
	if len(n.Status.Nodes) != 0 {
		t.Fatalf("entries after the Node was deleted: %+v", n.Status.Nodes)
	}
	if f.backend.Get("team/web") == nil {
		t.Fatal("the bridge went with the Node object")
	}
	if _, err := f.sync("team/web"); err != nil || len(f.client.Actions()) != 0 {
		t.Fatalf("a resync after the Node was deleted wrote again (%v): %v", err, f.client.Actions())
	}

	f.controller.nodeChanged(readyNode("node-a", corev1.ConditionTrue, "KubeletReady"), false)
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if back := f.statusApplies(); len(back) != 1 || back[0] != normal[0] {
		t.Fatalf("report once the Node is Ready again: %+v", back)
	}
	got, err := f.client.SamplecrdV1().Networks("team").Get(ctx, "web", metav1.GetOptions{})
	if err != nil || len(got.Status.Nodes) != 1 || !strings.Contains(got.Status.Nodes[0].Message, "match the spec") {
		t.Fatalf("stored: %+v, %v", got, err)
	}
}
