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
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/util/workqueue"
	testingclock "k8s.io/utils/clock/testing"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// recordingQueue records the delayed adds a sync asks for; the test plays the queue's timer.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[string]
	mu     sync.Mutex
	delays []time.Duration
}

func (q *recordingQueue) AddAfter(key string, d time.Duration) {
	q.mu.Lock()
	q.delays = append(q.delays, d)
	q.mu.Unlock()
}

// take returns the delays asked for since the last take.
func (q *recordingQueue) take() []time.Duration {
	q.mu.Lock()
	defer q.mu.Unlock()
	d := q.delays
	q.delays = nil
	return d
}

type coalesceFixture struct {
	*blocksFixture
	clock *testingclock.FakeClock
	queue *recordingQueue
	total int // status writes since the fixture was made
}

// newCoalesceFixture realises blockNetwork on node-a with one /25 block (no further claim for
// the leases the tests make), one pod attached and its address leased, written once.
func newCoalesceFixture(t *testing.T) *coalesceFixture {
	t.Helper()
	bf := newBlocksFixture(t, blockNetwork(), "10.66.0.0/25", "10.66.0.128/25")
	f := &coalesceFixture{blocksFixture: bf, clock: testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}
	c := f.controller
	c.opts.MinFreeAddresses = 1
	c.clock = f.clock
	f.queue = &recordingQueue{TypedRateLimitingInterface: c.queue}
	c.queue = f.queue
	f.syncWrites()
	f.pods(1)
	if got := f.syncWrites(); len(got) != 1 || *got[0].Leases != 1 || got[0].Attachments != 1 {
		t.Fatalf("the first pod (leases 0 -> 1) was not written at once: %+v", got)
	}
	f.queue.take()
	return f
}

// pods makes n pods attached with an address each, as the fake backend's watch reports them.
func (f *coalesceFixture) pods(n int) {
	var ports, leases []string
	for i := range n {
		ports = append(ports, fmt.Sprintf("veth%d", i))
		leases = append(leases, fmt.Sprintf("10.66.0.%d", 10+i))
	}
	f.backend.SetPorts("team/web", ports...)
	f.backend.SetLeases("team/web", leases...)
}

// syncWrites syncs once, refreshes the lister with what was written and returns the node's
// entries written.
func (f *coalesceFixture) syncWrites() []v1.NetworkNodeStatus {
	f.t.Helper()
	if _, err := f.sync("team/web"); err != nil {
		f.t.Fatal(err)
	}
	written := f.statusApplies()
	f.total += len(written)
	f.refresh("web")
	return written
}

func TestCountChangesWithinTheIntervalAreOneWrite(t *testing.T) {
	f := newCoalesceFixture(t)
	for n := 2; n <= 6; n++ {
		f.clock.Step(time.Second)
		f.pods(n)
		if got := f.syncWrites(); len(got) != 0 {
			t.Fatalf("%d pods, %v after the last write: written at once %+v; want it coalesced", n, time.Duration(n-1)*time.Second, got)
		}
	}
	delays := f.queue.take()
	if len(delays) != 5 || delays[4] != 25*time.Second {
		t.Fatalf("delayed syncs asked for: %v; want five, the last 25s (the interval's end)", delays)
	}
	f.clock.Step(delays[4]) // the queue hands the key out
	got := f.syncWrites()
	if len(got) != 1 || *got[0].Leases != 6 || got[0].Attachments != 6 {
		t.Fatalf("at the interval's end: %+v; want one write of 6 leases and 6 attachments", got)
	}
	if d := f.queue.take(); len(d) != 0 {
		t.Fatalf("delayed syncs after the write: %v; want none", d)
	}
}

func TestNothingChangedNothingWritten(t *testing.T) {
	f := newCoalesceFixture(t)
	for range 3 {
		f.clock.Step(time.Minute)
		if got := f.syncWrites(); len(got) != 0 {
			t.Fatalf("a resync without change wrote %+v", got)
		}
	}
	// Past the interval a count change is written at once.
	f.pods(3)
	if got := f.syncWrites(); len(got) != 1 || *got[0].Leases != 3 {
		t.Fatalf("a count change a minute after the last write: %+v; want it written at once", got)
	}
	// A count that changes and changes back within the interval: nothing to write at its end.
	f.clock.Step(time.Second)
	f.pods(2)
	if got := f.syncWrites(); len(got) != 0 {
		t.Fatalf("a count change within the interval was written at once: %+v", got)
	}
	f.clock.Step(time.Second)
	f.pods(3)
	if got := f.syncWrites(); len(got) != 0 {
		t.Fatalf("counts back to the written ones wrote %+v", got)
	}
	f.clock.Step(time.Minute)
	if got := f.syncWrites(); len(got) != 0 {
		t.Fatalf("the delayed sync wrote %+v although the counts are as written", got)
	}
	if f.total != 3 {
		t.Fatalf("status writes: %d; want 3 (the realisation, the first pod, the third)", f.total)
	}
}

func TestLastCountChangeIsWritten(t *testing.T) {
	f := newCoalesceFixture(t)
	f.clock.Step(29 * time.Second)
	f.pods(2)
	if got := f.syncWrites(); len(got) != 0 {
		t.Fatalf("a change 29s after the last write was written at once: %+v", got)
	}
	f.clock.Step(900 * time.Millisecond)
	f.pods(4) // the last change, 100ms before the interval ends
	if got := f.syncWrites(); len(got) != 0 {
		t.Fatalf("written before the interval's end: %+v", got)
	}
	delays := f.queue.take()
	if len(delays) != 2 || delays[1] != 100*time.Millisecond {
		t.Fatalf("delayed syncs: %v; want the last at the interval's end (100ms)", delays)
	}
	f.clock.Step(delays[1])
	if got := f.syncWrites(); len(got) != 1 || *got[0].Leases != 4 {
		t.Fatalf("at the interval's end: %+v; want the last count, 4 leases", got)
	}
	// The next change waits for the next interval, counted from this write.
	f.clock.Step(time.Second)
	f.pods(5)
	if got := f.syncWrites(); len(got) != 0 {
		t.Fatalf("a change 1s after the coalesced write was written at once: %+v", got)
	}
	if d := f.queue.take(); len(d) != 1 || d[0] != 29*time.Second {
		t.Fatalf("delayed syncs: %v; want 29s", d)
	}
}

func TestStateChangeIsNotDelayed(t *testing.T) {
	f := newCoalesceFixture(t)
	f.clock.Step(time.Second)
	f.pods(3)
	if got := f.syncWrites(); len(got) != 0 {
		t.Fatalf("count change written at once: %+v", got)
	}
	// The node's MTU changes within the interval: a state change, written at once with the
	// counts as they are.
	f.controller.opts.OverlayMTU, f.controller.opts.Underlay = 1400, netip.MustParseAddr("192.0.2.10")
	got := f.syncWrites()
	if len(got) != 1 || got[0].MTU != 1400 || *got[0].Leases != 3 || got[0].Attachments != 3 {
		t.Fatalf("state change within the interval: %+v; want one write at once with MTU 1400 and 3 leases, 3 attachments", got)
	}
	// A failure is a state change too.
	f.clock.Step(time.Second)
	f.backend.SetFailure("team/web", netbackend.Errorf(netbackend.ReasonBackendError, "boom"))
	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("sync with a failing backend succeeded")
	}
	if got := f.statusApplies(); len(got) != 1 || got[0].Ready {
		t.Fatalf("a failure within the interval: %+v; want it written at once", got)
	}
}

func TestLastPodGoneIsNotDelayed(t *testing.T) {
	f := newCoalesceFixture(t)
	f.clock.Step(time.Second)
	f.pods(0) // attachments and leases reach zero: the server acts on that (deletion, node loss)
	got := f.syncWrites()
	if len(got) != 1 || *got[0].Leases != 0 || got[0].Attachments != 0 {
		t.Fatalf("the last pod gone 1s after a write: %+v; want it written at once", got)
	}
}

func TestCountsOnly(t *testing.T) {
	i32 := func(v int32) *int32 { return &v }
	base := v1.NetworkNodeStatus{NodeName: "a", Ready: true, Attachments: 2, Leases: i32(2), Blocks: []string{"10.0.0.0/28"}}
	for _, tc := range []struct {
		name   string
		change func(e *v1.NetworkNodeStatus)
		want   bool
	}{
		{"leases", func(e *v1.NetworkNodeStatus) { e.Leases = i32(5) }, true},
		{"attachments and leases", func(e *v1.NetworkNodeStatus) { e.Attachments, e.Leases = 7, i32(7) }, true},
		{"leases to zero", func(e *v1.NetworkNodeStatus) { e.Leases = i32(0) }, false},
		{"attachments to zero", func(e *v1.NetworkNodeStatus) { e.Attachments = 0 }, false},
		{"leases unknown", func(e *v1.NetworkNodeStatus) { e.Leases = nil }, false},
		{"ready", func(e *v1.NetworkNodeStatus) { e.Leases, e.Ready = i32(3), false }, false},
		{"blocks", func(e *v1.NetworkNodeStatus) { e.Leases, e.Blocks = i32(3), []string{"10.0.0.0/28", "10.0.0.16/28"} }, false},
		{"generation", func(e *v1.NetworkNodeStatus) { e.ObservedGeneration = 4 }, false},
	} {
		e := *base.DeepCopy()
		tc.change(&e)
		if got := countsOnly(base, e); got != tc.want {
			t.Errorf("%s: countsOnly %v, want %v", tc.name, got, tc.want)
		}
	}
}
