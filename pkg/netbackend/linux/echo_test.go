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

package linux

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// fence changes fenceKey's bridge behind the backend's back, once through a link and once
// through an address notification (the two subscriptions are separate sockets), and returns
// every key Watch notified until both were seen: everything the kernel announced before the
// fence has then been through Watch.
func fence(t *testing.T, e *testEnv, w *watcher, fenceKey string) []string {
	t.Helper()
	bridge := e.ns.link(t, netbackend.BridgeName(fenceKey))
	mtu := bridge.Attrs().MTU - 1
	if err := e.ns.nl.LinkSetMTU(bridge, mtu); err != nil {
		t.Fatal(err)
	}
	var seen []string
	deadline := time.After(5 * time.Second)
	wait := func(what string) {
		for {
			select {
			case k := <-w.keys:
				if k == fenceKey {
					return
				}
				seen = append(seen, k)
			case <-deadline:
				t.Fatalf("fence (%s) not seen within 5s; saw %q", what, seen)
			}
		}
	}
	wait("MTU")
	if err := e.ns.nl.AddrAdd(bridge, netlinkAddr(netip.MustParsePrefix("192.0.2.9/24"))); err != nil {
		t.Fatal(err)
	}
	wait("address")
	e.ensure(netbackend.Desired{Key: fenceKey, Prefix: netip.MustParsePrefix("10.98.0.0/24"), Gateway: netip.MustParseAddr("10.98.0.1")})
	return seen
}

// TestWatchLeavesOutEnsureEchoes: the changes Ensure itself makes to a bridge (created, alias,
// MAC, address, up) do not come back from Watch as a notification of the Network, on a create
// or a resync, while changes by anyone else after it still do (TestWatchReportsDriftAndEnsureRepairs
// covers each kind of drift on a settled bridge).
func TestWatchLeavesOutEnsureEchoes(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	other := netbackend.Desired{Key: "default/fence", Prefix: netip.MustParsePrefix("10.98.0.0/24"), Gateway: netip.MustParseAddr("10.98.0.1")}
	e.ensure(other)
	w := e.startWatch(e.b)
	defer w.stop(t)

	d := desired4("default/net1")
	if changes := e.ensure(d); !hasChange(changes, "created bridge") {
		t.Fatalf("changes %q, want the bridge created", changes)
	}
	if seen := fence(t, e, w, other.Key); slices.Contains(seen, d.Key) {
		t.Errorf("Watch notified %s for Ensure's own changes (notified: %q)", d.Key, seen)
	}
	if changes := e.ensure(d); len(changes) != 0 {
		t.Fatalf("resync changed %q", changes)
	}
	if seen := fence(t, e, w, other.Key); slices.Contains(seen, d.Key) {
		t.Errorf("Watch notified %s after a resync that changed nothing (notified: %q)", d.Key, seen)
	}
	// A change by someone else is reported as before.
	if err := e.ns.nl.LinkSetDown(e.ns.link(t, netbackend.BridgeName(d.Key))); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "bridge set down after it settled")
}

// TestChangeDuringEnsureIsReported: notifications about a bridge are held back while its Ensure
// runs; if someone else changed the bridge meanwhile, the look at the end of Ensure sees it and
// the Network is notified.
func TestChangeDuringEnsureIsReported(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/net1")
	e.ensure(d)
	w := e.startWatch(e.b)
	defer w.stop(t)

	e.b.mu.Lock()
	unlock := sync.OnceFunc(e.b.mu.Unlock) // also when a check below fails
	defer unlock()
	e.b.beginEnsure(d.Key)
	// Someone sets the bridge down while "Ensure" runs; its notification is held back...
	if err := e.ns.nl.LinkSetDown(e.ns.link(t, netbackend.BridgeName(d.Key))); err != nil {
		t.Fatal(err)
	}
	w.expectNone(t, d.Key, 300*time.Millisecond, "held back while Ensure runs")
	// ...and Ensure, having set it up before, ends successfully without a change.
	e.b.endEnsure(d, true, false, false)
	unlock()
	w.expect(t, d.Key, "bridge found down when Ensure ended")
	if changes := e.ensure(d); !hasChange(changes, "set "+netbackend.BridgeName(d.Key)+" up") {
		t.Errorf("Ensure after the notification: %q, want the bridge set up", changes)
	}
}

// TestLateEchoesLeftOut: Watch reads the notifications of Ensure's changes only after Ensure
// returned (a busy node: the pump lags behind). The older ones, intermediate states of the bridge
// among them (created down, without its alias), are still left out: they come before the
// marker Ensure set at its end.
func TestLateEchoesLeftOut(t *testing.T) {
	e := newEnv(t)
	other := netbackend.Desired{Key: "default/fence", Prefix: netip.MustParsePrefix("10.98.0.0/24"), Gateway: netip.MustParseAddr("10.98.0.1")}
	e.ensure(other)
	gate := make(chan struct{})
	e.b.subscribe = func(linkCh chan netlink.LinkUpdate, addrCh chan netlink.AddrUpdate, done <-chan struct{}, onError func(error)) error {
		innerLink, innerAddr := make(chan netlink.LinkUpdate, 1024), make(chan netlink.AddrUpdate, 1024)
		if err := e.b.netlinkSubscribe(innerLink, innerAddr, done, onError); err != nil {
			return err
		}
		go func() {
			defer close(linkCh)
			<-gate
			for u := range innerLink {
				linkCh <- u
			}
		}()
		go func() {
			defer close(addrCh)
			<-gate
			for u := range innerAddr {
				addrCh <- u
			}
		}()
		return nil
	}
	w := e.startWatch(e.b)
	defer w.stop(t)

	d := desired4("default/net1")
	if changes := e.ensure(d); !hasChange(changes, "created bridge") {
		t.Fatalf("changes %q, want the bridge created", changes)
	}
	close(gate) // Watch reads everything now, after Ensure returned
	if seen := fence(t, e, w, other.Key); slices.Contains(seen, d.Key) {
		t.Errorf("Watch notified %s for Ensure's own changes read after it returned (notified: %q)", d.Key, seen)
	}
	if err := e.ns.nl.LinkSetMTU(e.ns.link(t, netbackend.BridgeName(d.Key)), 1400); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "MTU changed after the bridge settled")
}

// TestNoDriftLostAmongEchoes tries to make Watch lose someone else's change among the echoes it
// leaves out: Ensures of many Networks run at once while another goroutine sets their bridges
// down, changes their MTU, takes their gateway off or adds a stray address, at random moments
// (also while an Ensure of the same Network runs). Every notified Network is then ensured again
// until Watch is quiet; a change that was left out stays on its bridge and fails the test.
func TestNoDriftLostAmongEchoes(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	other := netbackend.Desired{Key: "default/fence", Prefix: netip.MustParsePrefix("10.98.0.0/24"), Gateway: netip.MustParseAddr("10.98.0.1")}
	e.ensure(other)
	const n = 24
	desired := make([]netbackend.Desired, n)
	for i := range desired {
		desired[i] = netbackend.Desired{Key: fmt.Sprintf("team/n%d", i),
			Prefix:  netip.MustParsePrefix(fmt.Sprintf("10.96.%d.0/24", i)),
			Gateway: netip.MustParseAddr(fmt.Sprintf("10.96.%d.1", i))}
		e.ensure(desired[i])
	}
	w := e.startWatch(e.b)
	defer w.stop(t)
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	changes := 0
	change := func(v, kind int) {
		d := desired[v]
		l, err := e.ns.nl.LinkByName(netbackend.BridgeName(d.Key))
		if err != nil {
			return
		}
		switch kind {
		case 0:
			err = e.ns.nl.LinkSetDown(l)
		case 1:
			err = e.ns.nl.LinkSetMTU(l, 1300+v)
		case 2:
			err = e.ns.nl.AddrDel(l, netlinkAddr(netip.PrefixFrom(d.Gateway, 24)))
		case 3:
			err = e.ns.nl.AddrAdd(l, netlinkAddr(netip.MustParsePrefix(fmt.Sprintf("192.0.2.%d/24", 1+v))))
		}
		if err == nil {
			changes++
		}
	}
	// Rounds of Ensures (some Networks, all in the last round) racing changes by someone else;
	// then changes alone, after the last Ensure of their Network: only Watch can tell of them.
	const rounds = 30
	for round := 0; round <= rounds; round++ {
		var wg sync.WaitGroup
		for _, d := range desired {
			if round < rounds && (round == rounds-1 || rng.IntN(2) == 0) {
				wg.Go(func() { _, _, _ = e.b.Ensure(context.Background(), d) })
			}
		}
		victims, kinds := make([]int, 1+rng.IntN(n/2)), make([]int, 0)
		for i := range victims {
			victims[i] = rng.IntN(n)
			kinds = append(kinds, rng.IntN(4))
		}
		wg.Go(func() {
			for i, v := range victims {
				change(v, kinds[i])
			}
		})
		wg.Wait()
	}
	// The controller's part: ensure every notified Network again until Watch is quiet.
	for pass := 0; ; pass++ {
		if pass == 20 {
			t.Fatal("Watch still notified after 20 passes of ensuring the notified Networks")
		}
		seen := fence(t, e, w, other.Key)
		keys := map[string]bool{}
		for _, k := range seen {
			keys[k] = true
		}
		if len(keys) == 0 {
			break
		}
		for _, d := range desired {
			if keys[d.Key] {
				e.ensure(d)
			}
		}
	}
	for _, d := range desired {
		bridge := e.ns.link(t, netbackend.BridgeName(d.Key))
		a := bridge.Attrs()
		want := []netip.Prefix{netip.PrefixFrom(d.Gateway, 24)}
		if got := e.ns.globalAddrs(t, a.Name); a.Flags&net.FlagUp == 0 || a.MTU != 1500 || !slices.Equal(got, want) {
			t.Errorf("%s: left as someone else changed it (up %v, MTU %d, addresses %v): Watch did not notify it", d.Key, a.Flags&net.FlagUp != 0, a.MTU, got)
		}
	}
	t.Logf("%d changes by someone else, none lost", changes)
}

// TestEnsureWhileWatchSubscribes: an Ensure that ends after Watch started but before its
// subscriptions are open sets no marker (its notification would never come, and every later
// notification about the bridge would be held back waiting for it): a change made once Watch is
// subscribed is reported.
func TestEnsureWhileWatchSubscribes(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/net1")
	gate, entered := make(chan struct{}), make(chan struct{})
	var once sync.Once
	e.b.subscribe = func(linkCh chan netlink.LinkUpdate, addrCh chan netlink.AddrUpdate, done <-chan struct{}, onError func(error)) error {
		once.Do(func() {
			close(entered)
			<-gate
		})
		return e.b.netlinkSubscribe(linkCh, addrCh, done, onError)
	}
	for len(e.subscribed) > 0 {
		<-e.subscribed
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{keys: make(chan string, 4096), cancel: cancel, done: make(chan error, 1)}
	defer w.stop(t)
	go func() {
		w.done <- e.b.Watch(ctx, func(key string) {
			select {
			case w.keys <- key:
			default:
			}
		})
	}()
	<-entered // Watch runs and is subscribing
	e.ensure(d)
	close(gate)
	select {
	case <-e.subscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not subscribe within 5s")
	}
	if err := e.ns.nl.LinkSetMTU(e.ns.link(t, netbackend.BridgeName(d.Key)), 1400); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "MTU changed once Watch was subscribed")
}
