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
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/metrics/testutil"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/cri"
	"github.com/samplecrd/network-apiserver/pkg/cri/critest"
	"github.com/samplecrd/network-apiserver/pkg/leasereclaim"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
)

// leaseDirStore is one Network's host-local directory.
type leaseDirStore struct{ key, dir string }

func (s leaseDirStore) Keys(context.Context) ([]string, error) { return []string{s.key}, nil }
func (s leaseDirStore) LeaseRecords(context.Context, string) ([]netbackend.Lease, error) {
	return linux.ReadLeases(s.dir)
}
func (s leaseDirStore) ReleaseLease(ctx context.Context, _ string, l netbackend.Lease) (bool, error) {
	return linux.ReleaseLease(ctx, s.dir, l)
}

// drainQueue returns the keys queued, emptying the queue.
func drainQueue(c *Controller) []string {
	var keys []string
	for c.queue.Len() > 0 {
		k, _ := c.queue.Get()
		c.queue.Done(k)
		c.queue.Forget(k)
		keys = append(keys, k)
	}
	return keys
}

// TestReclaimPassEventsAndResyncs: a released lease gives a LeaseReclaimed Event on its Network
// naming node, address and container, one on the counter, and a resync of the Network; a live
// sandbox's lease stays; a change of the reclaim's state (runtime answering, socket gone)
// resyncs every Network, whose entries then say it.
func TestReclaimPassEventsAndResyncs(t *testing.T) {
	f := newFixture(t, network("net1", "10.0.0.0/24", "10.0.0.1", 1))
	c := f.controller
	rt := critest.Start(t)
	client, err := cri.New(rt.Socket, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	dir := t.TempDir()
	old := time.Now().Add(-time.Hour)
	for addr, id := range map[string]string{"10.0.0.5": "gone", "10.0.0.6": "alive"} {
		p := filepath.Join(dir, addr)
		if err := os.WriteFile(p, []byte(id+"\r\neth1"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	rt.Add("alive")
	const grace = 50 * time.Millisecond
	r, err := leasereclaim.New(client, leaseDirStore{"team/net1", dir}, grace)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.leaseReclaimState(); got != leasereclaim.StateNoEndpoint {
		t.Errorf("without a reclaim the entries say %q, want %q", got, leasereclaim.StateNoEndpoint)
	}
	recorder := record.NewFakeRecorder(10)
	c.opts.Recorder, c.opts.LeaseReclaim = recorder, r
	before, _ := testutil.GetCounterMetricValue(leasesReclaimed)

	ctx := context.Background()
	c.reclaimPass(ctx) // first sighting; the state turns ContainerRuntime
	if got := drainQueue(c); len(got) != 1 || got[0] != "team/net1" {
		t.Errorf("the state change queued %v, want every Network", got)
	}
	if got := c.leaseReclaimState(); got != samplecrd.LeaseReclaimContainerRuntime {
		t.Errorf("state %q", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for c.queue.Len() == 0 && time.Now().Before(deadline) {
		time.Sleep(grace / 5) // the reclaim's pace
		c.reclaimPass(ctx)
	}
	if got := drainQueue(c); len(got) != 1 || got[0] != "team/net1" {
		t.Fatalf("the release queued %v, want team/net1", got)
	}
	select {
	case e := <-recorder.Events:
		for _, want := range []string{"Normal", EventLeaseReclaimed, "node-a", "10.0.0.5", "gone"} {
			if !strings.Contains(e, want) {
				t.Errorf("event %q does not say %q", e, want)
			}
		}
	default:
		t.Error("no Event for the released lease")
	}
	if after, _ := testutil.GetCounterMetricValue(leasesReclaimed); after != before+1 {
		t.Errorf("network_agent_leases_reclaimed_total went from %v to %v, want +1", before, after)
	}
	leases, err := linux.ReadLeases(dir)
	if err != nil || len(leases) != 1 || leases[0].ContainerID != "alive" {
		t.Fatalf("leases left %v, %v; want only the live sandbox's", leases, err)
	}

	rt.Stop() // the runtime goes away: nothing is released, and every entry says so
	rt.Remove("alive")
	time.Sleep(2 * grace) // the live lease would be due by now if the runtime were not asked
	c.reclaimPass(ctx)
	if got := drainQueue(c); len(got) != 1 || got[0] != "team/net1" {
		t.Errorf("the state change queued %v, want every Network", got)
	}
	if got := c.leaseReclaimState(); !strings.HasPrefix(got, samplecrd.LeaseReclaimOffPrefix) {
		t.Errorf("state %q with the runtime gone", got)
	}
	c.reclaimPass(ctx)
	if leases, err := linux.ReadLeases(dir); err != nil || len(leases) != 1 {
		t.Fatalf("leases %v, %v after passes without a runtime", leases, err)
	}
}
