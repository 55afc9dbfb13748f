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
	"errors"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// TestWatchReportsDriftAndEnsureRepairs changes the bridge behind the backend's back, each time
// with a Watch started on the settled state, and checks that the Watch names the Network
// within 2s and that the next Ensure repairs exactly that.
func TestWatchReportsDriftAndEnsureRepairs(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	d := desired4("default/net1")
	bridge := netbackend.BridgeName(d.Key)
	gw := netip.MustParsePrefix("10.99.0.1/24")
	e.ensure(d)

	w := e.startWatch(e.b)
	w.expectNone(t, d.Key, 300*time.Millisecond, "nothing changed")
	w.stop(t)

	drifts := []struct {
		name  string
		drift func(l netlink.Link) error
		want  []string
	}{
		{"bridge deleted", func(l netlink.Link) error { return e.ns.nl.LinkDel(l) },
			[]string{"created bridge " + bridge, "added address 10.99.0.1/24", "set " + bridge + " up"}},
		{"MTU changed", func(l netlink.Link) error { return e.ns.nl.LinkSetMTU(l, 1300) },
			[]string{"set MTU of " + bridge + " from 1300 to 1500"}},
		{"gateway removed", func(l netlink.Link) error { return e.ns.nl.AddrDel(l, netlinkAddr(gw)) },
			[]string{"added address 10.99.0.1/24"}},
		{"stale address added", func(l netlink.Link) error {
			return e.ns.nl.AddrAdd(l, netlinkAddr(netip.MustParsePrefix("192.0.2.7/24")))
		}, []string{"removed stale address 192.0.2.7/24"}},
		{"set down", func(l netlink.Link) error { return e.ns.nl.LinkSetDown(l) },
			[]string{"set " + bridge + " up"}},
	}
	for _, dr := range drifts {
		w := e.startWatch(e.b)
		if err := dr.drift(e.ns.link(t, bridge)); err != nil {
			t.Fatalf("%s: %v", dr.name, err)
		}
		w.expect(t, d.Key, dr.name)
		w.stop(t)

		changes, _, err := e.b.Ensure(context.Background(), d)
		if err != nil {
			t.Fatalf("%s: Ensure: %v", dr.name, err)
		}
		// Only what drifted is repaired (the configuration, unchanged, is not rewritten).
		want := dr.want
		if len(changes) != len(want) {
			t.Fatalf("%s: changes %q, want %q", dr.name, changes, want)
		}
		for _, w := range want {
			if !hasChange(changes, w) {
				t.Fatalf("%s: changes %q lack %q", dr.name, changes, w)
			}
		}
		if changes := e.ensure(d); len(changes) != 0 {
			t.Fatalf("%s: Ensure after the repair changed %q", dr.name, changes)
		}
		if got := e.ns.globalAddrs(t, bridge); !slices.Equal(got, []netip.Prefix{gw}) {
			t.Fatalf("%s: addresses after the repair %v", dr.name, got)
		}
	}
}

// TestWatchAfterRestart is a Backend that did not create the bridge (the agent restarted): it
// still maps the bridge's deletion and a foreign interface taking the name to the key.
func TestWatchAfterRestart(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	d := desired4("default/net1")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)
	other := desired4("default/other")
	other.Prefix, other.Gateway = netip.MustParsePrefix("10.97.0.0/24"), netip.MustParseAddr("10.97.0.1")
	e.ensure(other)

	restarted := e.newBackend(Config{})
	w := e.startWatch(restarted)
	if err := e.ns.nl.LinkDel(e.ns.link(t, bridge)); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "bridge deleted")
	w.stop(t)

	// A foreign interface (no alias) takes the name: only the name maps it to the key.
	w = e.startWatch(restarted)
	e.ns.addVeth(t, bridge, "foreignpeer0", "")
	w.expect(t, d.Key, "foreign interface with the bridge's name")
	w.stop(t)

	_, _, err := restarted.Ensure(context.Background(), d)
	if netbackend.ReasonOf(err) != netbackend.ReasonNotOurs {
		t.Fatalf("Ensure with a foreign interface named %s: %v, want reason %s", bridge, err, netbackend.ReasonNotOurs)
	}
	// The other network's bridge was never touched.
	if changes, _, err := restarted.Ensure(context.Background(), other); err != nil || len(changes) != 0 {
		t.Fatalf("Ensure of the untouched network: %q, %v", changes, err)
	}
}

// TestWatchResubscribes makes the first subscription fail and the second end (as when the
// kernel drops a subscriber whose buffer overflowed): Watch subscribes again, notifies every
// key it knows (changes may have been missed), and keeps reporting changes.
func TestWatchResubscribes(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	d := desired4("default/net1")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)

	calls := make(chan int, 16)
	drop := make(chan struct{})
	n := 0
	realSubscribe := e.b.subscribe
	e.b.subscribe = func(linkCh chan netlink.LinkUpdate, addrCh chan netlink.AddrUpdate, done <-chan struct{}, onError func(error)) error {
		n++
		calls <- n
		switch n {
		case 1:
			return errors.New("injected subscription failure")
		case 2:
			inner := make(chan struct{})
			go func() {
				select {
				case <-done:
				case <-drop:
				}
				close(inner)
			}()
			return realSubscribe(linkCh, addrCh, inner, onError)
		}
		return realSubscribe(linkCh, addrCh, done, onError)
	}

	w := e.startWatch(e.b) // returns after the second (first successful) subscription
	if got := []int{<-calls, <-calls}; !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("subscription calls %v", got)
	}
	w.expect(t, d.Key, "resubscribed after a failure")

	close(drop) // the kernel side of the subscription goes away
	select {
	case c := <-calls:
		if c != 3 {
			t.Fatalf("subscription call %d, want 3", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not subscribe again within 5s after its subscription ended")
	}
	w.expect(t, d.Key, "resubscribed after the subscription ended")
	select {
	case <-e.subscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("third subscription did not complete")
	}
	for len(w.keys) > 0 {
		<-w.keys
	}
	if err := e.ns.nl.LinkSetMTU(e.ns.link(t, bridge), 1280); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "MTU changed after resubscribing")
}

// TestWatchReportsPorts: a pod's veth joining or leaving one of our bridges notifies the key, so
// the controller keeps the attachments (and the ports to re-attach) current.
func TestWatchReportsPorts(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/watchports")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)
	w := e.startWatch(e.b)
	p := e.ns.addVeth(t, "podw", "podwpeer", "")
	w.expectNone(t, d.Key, 200*time.Millisecond, "a veth not on our bridge")
	if err := e.ns.nl.LinkSetMaster(p, e.ns.link(t, bridge)); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "a port joined")
	if _, err := e.b.Observe(context.Background(), d.Key); err != nil {
		t.Fatal(err)
	}
	if err := e.ns.nl.LinkSetNoMaster(e.ns.link(t, "podw")); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "a port left")
}
