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

package e2e

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// TestSmallNetworkReadyOnOneNode: a /28 (13 usable addresses) on one agent with the default
// headroom of 16 free addresses. The node takes the whole /28, its headroom claim is refused,
// and yet the Network is Ready (the entry is ready, reason AddressesExhausted) with its
// AddressesExhausted condition True; pods get addresses through the real CNI plugins; the
// refused claim is not repeated on resyncs (the harness's agents resync every 2s).
func TestSmallNetworkReadyOnOneNode(t *testing.T) {
	c := newMNCluster(t, 1)
	n1 := c.nodes[0]
	const name = "tiny"
	prefix := netip.MustParsePrefix("10.77.0.0/28")
	start := time.Now()
	key := c.createNetwork(name, prefix.String())
	ctx := context.Background()

	// state says whether the Network is Ready with the AddressesExhausted condition True and
	// n1's entry ready with reason AddressesExhausted and leases reported as want.
	state := func(want int32) (bool, string) {
		nw, err := c.client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(nw.Status.Conditions, samplecrd.ConditionReady)
		exhausted := meta.FindStatusCondition(nw.Status.Conditions, samplecrd.ConditionAddressesExhausted)
		e := entryOf(nw, n1.name)
		ok := ready != nil && ready.Status == metav1.ConditionTrue && ready.Reason == "Realized" &&
			exhausted != nil && exhausted.Status == metav1.ConditionTrue && strings.Contains(exhausted.Message, n1.name) &&
			e != nil && e.Ready && e.Reason == samplecrd.ReasonAddressesExhausted && len(e.Blocks) > 0 &&
			e.Leases != nil && *e.Leases == want
		return ok, describeNetwork(nw)
	}
	eventually(t, time.Minute, "the /28 Ready with AddressesExhausted True", func() (bool, string) { return state(0) })
	t.Logf("the /28 was Ready (AddressesExhausted True) %v after its create", time.Since(start).Round(time.Millisecond))
	nw, err := c.client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	e := entryOf(nw, n1.name)
	for _, b := range e.Blocks {
		if p := netip.MustParsePrefix(b); !prefix.Contains(p.Addr()) || p.Bits() < prefix.Bits() {
			t.Fatalf("block %s is not inside %s", b, prefix)
		}
	}
	if !strings.Contains(e.Message, "headroom of 16") {
		t.Errorf("entry message %q does not name the headroom", e.Message)
	}
	t.Logf("n1's entry: ready %v, reason %s, message %q, blocks %v", e.Ready, e.Reason, e.Message, e.Blocks)

	// A pod-equivalent ADD gets an address of the /28.
	n1.waitConfList(key)
	gateway := netip.MustParseAddr(nw.Spec.Gateway)
	for _, id := range []string{"tiny-pod0", "tiny-pod1"} {
		p := n1.pod(key, id)
		if !prefix.Contains(p.ip) || p.ip == gateway {
			t.Fatalf("%s got %s: want an address of %s other than the gateway", id, p.ip, prefix)
		}
	}
	// The second lease is a count change alone, which the agent may hold for its count interval
	// (30s by default).
	eventually(t, 45*time.Second, "n1's entry with 2 leases, still ready", func() (bool, string) { return state(2) })

	// No claim loop: the refused claim is tried again only when the counts change, not on the
	// resyncs. Absence takes a window: three resync periods of the harness's agents.
	refused := func() int { return strings.Count(n1.log.String(), "No block left for headroom") }
	before := refused()
	time.Sleep(6 * time.Second)
	if after := refused(); after != before {
		t.Errorf("refused headroom claims went from %d to %d over 6s with nothing changing", before, after)
	}
	if strings.Contains(n1.log.String(), "Reconcile failed; retrying with backoff") {
		t.Errorf("the agent retried a failed reconcile:\n%s", n1.log.tail())
	}
	t.Logf("refused headroom claims over the test: %d", before)
}

// describeNetwork is the Network's conditions and entries, for a failure message.
func describeNetwork(nw *v1.Network) string {
	var b strings.Builder
	for _, c := range nw.Status.Conditions {
		fmt.Fprintf(&b, "%s=%s (%s: %s); ", c.Type, c.Status, c.Reason, c.Message)
	}
	for _, e := range nw.Status.Nodes {
		leases := "unknown"
		if e.Leases != nil {
			leases = fmt.Sprint(*e.Leases)
		}
		fmt.Fprintf(&b, "%s: ready=%v reason=%s leases=%s blocks=%v message=%q; ", e.NodeName, e.Ready, e.Reason, leases, e.Blocks, e.Message)
	}
	return b.String()
}
