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

package fake

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

func desired(key string) netbackend.Desired {
	return netbackend.Desired{
		Key:     key,
		Prefix:  netip.MustParsePrefix("10.99.0.0/24"),
		Gateway: netip.MustParseAddr("10.99.0.1"),
	}
}

func TestEnsureCreatesThenResyncWritesNothing(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	d := desired("default/net1")

	changes, outcome, err := b.Ensure(ctx, d)
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	if len(changes) == 0 || !outcome.Created {
		t.Fatalf("first Ensure reported no changes or did not create: %v, %+v", changes, outcome)
	}
	a, err := b.Observe(ctx, d.Key)
	if err != nil || a == nil {
		t.Fatalf("Observe = %v, %v; want the network", a, err)
	}
	want := netbackend.Actual{
		Key:       d.Key,
		Bridge:    netbackend.BridgeName(d.Key),
		Addresses: []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24")},
		Up:        true,
		MTU:       netbackend.DefaultMTU,
		CNIConfig: CNIConfig(d),
	}
	if !equalActual(*a, want) {
		t.Fatalf("Observe = %+v, want %+v", *a, want)
	}

	b.ResetCounts()
	changes, _, err = b.Ensure(ctx, d)
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	if len(changes) != 0 {
		t.Fatalf("second Ensure reported changes %v, want none", changes)
	}
	if c := b.Counts(); c.Writes != 0 || c.Ensure != 1 {
		t.Fatalf("counts after resync = %+v, want 1 Ensure and 0 writes", c)
	}
}

func TestEnsureChangesOnlyWhatDiffers(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	d := desired("default/net1")
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatal(err)
	}
	d.MTU = 9000
	b.ResetCounts()
	changes, _, err := b.Ensure(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(changes) != 2 || !strings.Contains(changes[0], "MTU") || !strings.Contains(changes[1], "CNI") {
		t.Fatalf("changes = %q, want the MTU and the CNI configuration", changes)
	}
	if got := b.Counts().Writes; got != 2 {
		t.Fatalf("writes = %d, want 2", got)
	}
	if a := b.Get(d.Key); a.MTU != 9000 {
		t.Fatalf("MTU = %d, want 9000", a.MTU)
	}
}

func TestEnsureRejectsInvalidDesired(t *testing.T) {
	b := NewBackend()
	for name, d := range map[string]netbackend.Desired{
		"empty key":         {Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1")},
		"gateway outside":   {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.1.1")},
		"family mismatch":   {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("fd00::1")},
		"MTU out of range":  {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1"), MTU: 20},
		"no prefix/gateway": {Key: "a/b"},
	} {
		if _, _, err := b.Ensure(context.Background(), d); err == nil {
			t.Errorf("%s: Ensure succeeded, want an error", name)
		}
	}
	if keys, _ := b.List(context.Background()); len(keys) != 0 {
		t.Fatalf("invalid desires left state: %v", keys)
	}
}

func TestFailureInjection(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	d := desired("default/net1")
	b.SetFailure(d.Key, netbackend.Errorf(netbackend.ReasonPermissionDenied, "operation not permitted"))
	if _, _, err := b.Ensure(ctx, d); netbackend.ReasonOf(err) != netbackend.ReasonPermissionDenied {
		t.Fatalf("Ensure error = %v, want reason %s", err, netbackend.ReasonPermissionDenied)
	}
	if _, err := b.Observe(ctx, d.Key); err == nil {
		t.Fatalf("Observe succeeded despite the injected failure")
	}
	if err := b.Remove(ctx, d.Key); err == nil {
		t.Fatalf("Remove succeeded despite the injected failure")
	}
	// Other keys are unaffected.
	if _, _, err := b.Ensure(ctx, desired("default/other")); err != nil {
		t.Fatalf("Ensure of another key: %v", err)
	}
	b.SetFailure(d.Key, nil)
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatalf("Ensure after clearing the failure: %v", err)
	}

	listErr := errors.New("list failed")
	b.SetListError(listErr)
	if _, err := b.List(ctx); !errors.Is(err, listErr) {
		t.Fatalf("List error = %v, want %v", err, listErr)
	}
	b.SetWatchError(listErr)
	if err := b.Watch(ctx, func(string) {}); !errors.Is(err, listErr) {
		t.Fatalf("Watch error = %v, want %v", err, listErr)
	}
}

func TestOccupiedNameIsNotOurs(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	d := desired("default/net1")
	b.Occupy(d.Key)
	_, _, err := b.Ensure(ctx, d)
	if netbackend.ReasonOf(err) != netbackend.ReasonNotOurs {
		t.Fatalf("Ensure error = %v, want reason %s", err, netbackend.ReasonNotOurs)
	}
	if a, err := b.Observe(ctx, d.Key); a != nil || err != nil {
		t.Fatalf("Observe = %v, %v; want nothing of ours", a, err)
	}
	b.Vacate(d.Key)
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatalf("Ensure after Vacate: %v", err)
	}
}

func TestRemoveAndList(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	for _, k := range []string{"ns2/b", "ns1/a"} {
		if _, _, err := b.Ensure(ctx, desired(k)); err != nil {
			t.Fatal(err)
		}
	}
	b.Put(netbackend.Actual{Key: "ns3/orphan", CNIConfig: []byte("{}")})
	keys, err := b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"ns1/a", "ns2/b", "ns3/orphan"}; !slices.Equal(keys, want) {
		t.Fatalf("List = %v, want %v", keys, want)
	}
	b.ResetCounts()
	if err := b.Remove(ctx, "ns1/a"); err != nil {
		t.Fatal(err)
	}
	if got := b.Counts().Writes; got != 2 {
		t.Fatalf("Remove made %d writes, want 2 (bridge and configuration)", got)
	}
	if err := b.Remove(ctx, "ns1/a"); err != nil {
		t.Fatalf("second Remove: %v", err)
	}
	if got := b.Counts().Writes; got != 2 {
		t.Fatalf("Remove of a missing network wrote: %d writes in total", got)
	}
	if a, _ := b.Observe(ctx, "ns1/a"); a != nil {
		t.Fatalf("Observe after Remove = %+v", a)
	}
	keys, _ = b.List(ctx)
	if want := []string{"ns2/b", "ns3/orphan"}; !slices.Equal(keys, want) {
		t.Fatalf("List after Remove = %v, want %v", keys, want)
	}
}

func TestObserveReturnsCopies(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	d := desired("default/net1")
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatal(err)
	}
	a, _ := b.Observe(ctx, d.Key)
	a.Addresses[0] = netip.MustParsePrefix("192.0.2.1/32")
	a.CNIConfig[0] = 'X'
	if changes, _, _ := b.Ensure(ctx, d); len(changes) != 0 {
		t.Fatalf("mutating an observed copy changed the backend: %v", changes)
	}
}

func TestWatchReportsDriftAndEnsureRepairs(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := NewBackend()
	d := desired("default/net1")
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatal(err)
	}
	notified := make(chan string, 16)
	watchDone := make(chan error, 1)
	go func() { watchDone <- b.Watch(ctx, func(key string) { notified <- key }) }()
	waitCtx, waitCancel := context.WithTimeout(ctx, 2*time.Second)
	defer waitCancel()
	if err := b.WaitForWatchers(waitCtx, 1); err != nil {
		t.Fatal(err)
	}

	drifts := []struct {
		name  string
		apply func() bool
		want  []string // one substring per expected change, in order
	}{
		{"bridge deleted", func() bool { return b.DeleteBridge(d.Key) }, []string{"created bridge", "added address", "MTU", " up"}},
		{"MTU changed", func() bool { return b.SetMTU(d.Key, 1400) }, []string{"MTU"}},
		{"set down", func() bool { return b.SetDown(d.Key) }, []string{" up"}},
		{"address removed", func() bool { return b.SetAddresses(d.Key) }, []string{"added address"}},
		{"stale address", func() bool {
			return b.SetAddresses(d.Key, netip.MustParsePrefix("10.99.0.1/24"), netip.MustParsePrefix("10.99.0.7/24"))
		}, []string{"removed stale address 10.99.0.7/24"}},
		{"configuration deleted", func() bool { return b.DeleteConfig(d.Key) }, []string{"CNI"}},
		{"configuration edited", func() bool { return b.SetConfig(d.Key, []byte("{}")) }, []string{"CNI"}},
	}
	for _, drift := range drifts {
		if !drift.apply() {
			t.Fatalf("%s: the key had no state", drift.name)
		}
		select {
		case key := <-notified:
			if key != d.Key {
				t.Fatalf("%s: notified %q, want %q", drift.name, key, d.Key)
			}
		case <-time.After(2 * time.Second):
			t.Fatalf("%s: no notification within 2s", drift.name)
		}
		changes, _, err := b.Ensure(ctx, d)
		if err != nil {
			t.Fatalf("%s: Ensure: %v", drift.name, err)
		}
		if len(changes) != len(drift.want) {
			t.Fatalf("%s: changes = %q, want %d matching %q", drift.name, changes, len(drift.want), drift.want)
		}
		for i, c := range changes {
			if !strings.Contains(c, drift.want[i]) {
				t.Fatalf("%s: change %d = %q, want it to contain %q", drift.name, i, c, drift.want[i])
			}
		}
		if changes, _, _ := b.Ensure(ctx, d); len(changes) != 0 {
			t.Fatalf("%s: Ensure after the repair changed %v", drift.name, changes)
		}
	}

	// Ensure's own writes are not reported as drift.
	select {
	case key := <-notified:
		t.Fatalf("unexpected notification for %q", key)
	default:
	}

	cancel()
	select {
	case err := <-watchDone:
		if err != nil {
			t.Fatalf("Watch returned %v after cancel, want nil", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Watch did not return within 2s of cancel")
	}
	if c := b.Counts(); c.Watch != 1 {
		t.Fatalf("Watch calls = %d, want 1", c.Watch)
	}
}

func TestWaitForWatchersTimesOut(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := NewBackend().WaitForWatchers(ctx, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForWatchers = %v, want a deadline error", err)
	}
}

func equalActual(a, b netbackend.Actual) bool {
	return a.Key == b.Key && a.Bridge == b.Bridge && slices.Equal(a.Addresses, b.Addresses) &&
		a.Up == b.Up && a.MTU == b.MTU && string(a.CNIConfig) == string(b.CNIConfig)
}

func TestEnsureRecordsBlocks(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	d := desired("default/blocks")
	before := CNIConfig(d)
	d.Blocks = []netip.Prefix{netip.MustParsePrefix("10.99.0.0/28")}
	d.DefaultRoute = true
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatal(err)
	}
	got, ok := b.Desired(d.Key)
	if !ok || !slices.Equal(got.Blocks, d.Blocks) || !got.DefaultRoute {
		t.Fatalf("Desired = %+v, %v; want the blocks and the default route recorded", got, ok)
	}
	if a := b.Get(d.Key); string(a.CNIConfig) == string(before) || !strings.Contains(string(a.CNIConfig), "10.99.0.0/28") {
		t.Errorf("configuration %s does not reflect the blocks", a.CNIConfig)
	}
	// No block: no configuration.
	d.Blocks = []netip.Prefix{}
	if changes, _, err := b.Ensure(ctx, d); err != nil || len(changes) != 1 {
		t.Fatalf("Ensure without blocks: %q, %v; want the configuration removed", changes, err)
	}
	if a := b.Get(d.Key); a.CNIConfig != nil {
		t.Errorf("configuration %s without blocks, want none", a.CNIConfig)
	}
	if got, _ := b.Desired(d.Key); got.Blocks == nil {
		t.Error("empty blocks recorded as nil")
	}
	if err := b.Remove(ctx, d.Key); err != nil {
		t.Fatal(err)
	}
	if _, ok := b.Desired(d.Key); ok {
		t.Error("Desired still recorded after Remove")
	}
}

func TestEnsureRecordsSegment(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	d := desired("default/seg")
	d.Segment = &netbackend.Segment{VNI: 7, UnderlayAddress: netip.MustParseAddr("192.168.1.1"),
		Peers: []netip.Addr{netip.MustParseAddr("192.168.1.3"), netip.MustParseAddr("192.168.1.2")}}
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatal(err)
	}
	got, _ := b.Desired(d.Key)
	if got.Segment == nil || got.Segment.VNI != 7 || len(got.Segment.Peers) != 2 || got.Segment == d.Segment {
		t.Fatalf("recorded segment %+v, want a copy of %+v", got.Segment, d.Segment)
	}
	a := b.Get(d.Key)
	if a.Segment == nil || a.Segment.VNI != 7 || a.MTU != 1450 || a.Segment.MTU != 1450 ||
		!slices.Equal(a.Segment.Peers, []netip.Addr{netip.MustParseAddr("192.168.1.2"), netip.MustParseAddr("192.168.1.3")}) {
		t.Errorf("segment state %+v, bridge MTU %d; want VNI 7, MTU 1450, sorted peers", a.Segment, a.MTU)
	}
	if changes, _, err := b.Ensure(ctx, d); err != nil || len(changes) != 0 {
		t.Errorf("resync: %q, %v", changes, err)
	}
	d.Segment = nil
	if changes, _, _ := b.Ensure(ctx, d); len(changes) == 0 || b.Get(d.Key).Segment != nil {
		t.Errorf("segment not removed: %q", changes)
	}
	d.Segment = &netbackend.Segment{VNI: 1 << 24, UnderlayAddress: netip.MustParseAddr("192.168.1.1")}
	if _, _, err := b.Ensure(ctx, d); err == nil {
		t.Error("a VNI beyond 24 bits was accepted")
	}
}

func TestDeleteSegmentIsRepaired(t *testing.T) {
	ctx := context.Background()
	b := NewBackend()
	d := desired("default/seg")
	d.Segment = &netbackend.Segment{VNI: 9, UnderlayAddress: netip.MustParseAddr("192.168.1.1")}
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatal(err)
	}
	if !b.DeleteSegment(d.Key) || b.Get(d.Key).Segment != nil {
		t.Fatal("DeleteSegment left the segment")
	}
	if changes, _, err := b.Ensure(ctx, d); err != nil || len(changes) != 1 || b.Get(d.Key).Segment == nil {
		t.Errorf("Ensure after DeleteSegment: %q, %v; want the device created again", changes, err)
	}
}

func TestSetLeasesNotifiesWatchers(t *testing.T) {
	b := NewBackend()
	b.Put(netbackend.Actual{Key: "team/web", Leases: []string{"10.0.0.2"}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	keys := make(chan string, 4)
	go func() { _ = b.Watch(ctx, func(key string) { keys <- key }) }()
	if err := b.WaitForWatchers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	if !b.SetLeases("team/web", "10.0.0.2", "10.0.0.3") {
		t.Fatal("SetLeases found no state")
	}
	if key := <-keys; key != "team/web" {
		t.Fatalf("notified %q", key)
	}
	if a := b.Get("team/web"); a == nil || len(a.Leases) != 2 {
		t.Fatalf("after SetLeases: %+v; want the state kept with 2 leases", a)
	}
}
