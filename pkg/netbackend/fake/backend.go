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

// Package fake is an in-memory netbackend.Backend for unit tests of the controller: it keeps
// what a node would have per Network key, lets a test inject failures, occupy a bridge name with
// a foreign interface and simulate drift (a bridge deleted or changed by hand), counts calls and
// writes so that a test can assert that a resync wrote nothing, and notifies watchers of drift.
package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Counts are the calls a Backend received and the writes it made.
type Counts struct {
	Observe, Ensure, Remove, List, Watch int
	// Leases counts LeaseReader calls.
	Leases int
	// Writes is the number of changes made by Ensure and Remove (one per reported change,
	// one per deleted bridge or configuration).
	Writes int
}

// Backend is an in-memory netbackend.Backend. The zero value is not usable; use NewBackend.
type Backend struct {
	mu       sync.Mutex
	nodes    map[string]*netbackend.Actual
	desired  map[string]netbackend.Desired
	failures map[string]error
	occupied map[string]bool
	listErr  error
	watchErr error
	counts   Counts

	nextWatcher int
	watchers    map[int]func(string)
	// watchersChanged is closed and replaced whenever a watcher starts or stops.
	watchersChanged chan struct{}

	// BridgeOnAttach is the linux backend's mode of that name: Ensure writes only the
	// configuration of a Network that has no bridge and no ports; Attach makes the bridge.
	BridgeOnAttach bool
}

var _ netbackend.Backend = (*Backend)(nil)

// NewBackend returns an empty Backend: a node with no networks.
func NewBackend() *Backend {
	return &Backend{
		nodes:           map[string]*netbackend.Actual{},
		desired:         map[string]netbackend.Desired{},
		failures:        map[string]error{},
		occupied:        map[string]bool{},
		watchers:        map[int]func(string){},
		watchersChanged: make(chan struct{}),
	}
}

// CNIConfig is the content the fake backend records as a Network's CNI configuration. It is
// a stable rendering of d (not the real CNI format): equal desires give equal bytes. Like the
// linux backend, a Desired with Blocks empty but not nil has no configuration (nil).
func CNIConfig(d netbackend.Desired) []byte {
	if d.Blocks != nil && len(d.Blocks) == 0 {
		return nil
	}
	var blocks []string
	for _, p := range d.Blocks {
		blocks = append(blocks, p.String())
	}
	b, err := json.Marshal(struct {
		Network      string   `json:"network"`
		Bridge       string   `json:"bridge"`
		Subnet       string   `json:"subnet"`
		Gateway      string   `json:"gateway"`
		MTU          int      `json:"mtu"`
		Blocks       []string `json:"blocks,omitempty"`
		DefaultRoute bool     `json:"defaultRoute,omitempty"`
	}{d.Key, netbackend.BridgeName(d.Key), d.Prefix.Masked().String(), d.Gateway.String(), d.EffectiveMTU(), blocks, d.DefaultRoute})
	if err != nil {
		panic(err) // cannot happen: only strings and ints
	}
	return b
}

// Observe implements netbackend.Backend.
func (b *Backend) Observe(_ context.Context, key string) (*netbackend.Actual, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts.Observe++
	if err := b.failures[key]; err != nil {
		return nil, err
	}
	a, ok := b.nodes[key]
	if !ok || a.Bridge == "" && a.CNIConfig == nil && len(a.Leases) == 0 && a.Segment == nil {
		// Nothing of the Network on the node (an Ensure without a block writes no list and,
		// with BridgeOnAttach, makes nothing): nil, as the linux backend answers.
		return nil, nil
	}
	return clone(a), nil
}

// Leases implements netbackend.LeaseReader.
func (b *Backend) Leases(_ context.Context, key string) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts.Leases++
	if err := b.failures[key]; err != nil {
		return nil, err
	}
	if a, ok := b.nodes[key]; ok {
		return slices.Clone(a.Leases), nil
	}
	return nil, nil
}

// Ensure implements netbackend.Backend: it changes only what differs from d and reports each change.
func (b *Backend) Ensure(_ context.Context, d netbackend.Desired) ([]string, netbackend.Outcome, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts.Ensure++
	if err := d.Validate(); err != nil {
		return nil, netbackend.Outcome{}, err
	}
	if err := b.failures[d.Key]; err != nil {
		return nil, netbackend.Outcome{}, err
	}
	bridge := netbackend.BridgeName(d.Key)
	a := b.nodes[d.Key]
	if (a == nil || a.Bridge == "") && b.occupied[d.Key] {
		return nil, netbackend.Outcome{}, netbackend.Errorf(netbackend.ReasonNotOurs,
			"interface %s exists and is not a bridge of network %s; leaving it alone", bridge, d.Key)
	}
	created := a == nil || a.Bridge == "" && a.CNIConfig == nil
	if a == nil {
		a = &netbackend.Actual{Key: d.Key}
		b.nodes[d.Key] = a
	}
	var changes []string
	if b.BridgeOnAttach && a.Bridge == "" && len(a.Ports) == 0 {
		if conf := CNIConfig(d); string(a.CNIConfig) != string(conf) {
			a.CNIConfig = conf
			changes = append(changes, "wrote CNI configuration for "+bridge)
		}
		b.desired[d.Key] = cloneDesired(d)
		b.counts.Writes += len(changes)
		return changes, netbackend.Outcome{Created: created, AwaitsAttach: true}, nil
	}
	if a.Bridge == "" {
		a.Bridge = bridge
		changes = append(changes, "created bridge "+bridge)
	}
	want := netip.PrefixFrom(d.Gateway, d.Prefix.Bits())
	var kept []netip.Prefix
	for _, p := range a.Addresses {
		if p == want {
			kept = append(kept, p)
			continue
		}
		changes = append(changes, fmt.Sprintf("removed stale address %s from %s", p, bridge))
	}
	if !slices.Contains(kept, want) {
		kept = append(kept, want)
		changes = append(changes, fmt.Sprintf("added address %s to %s", want, bridge))
	}
	a.Addresses = kept
	if mtu := d.EffectiveMTU(); a.MTU != mtu {
		changes = append(changes, fmt.Sprintf("set MTU of %s from %d to %d", bridge, a.MTU, mtu))
		a.MTU = mtu
	}
	if !a.Up {
		a.Up = true
		changes = append(changes, "set "+bridge+" up")
	}
	switch conf := CNIConfig(d); {
	case conf == nil && a.CNIConfig != nil:
		a.CNIConfig = nil
		changes = append(changes, "removed CNI configuration for "+bridge+": the node holds no block")
	case conf != nil && string(a.CNIConfig) != string(conf):
		a.CNIConfig = conf
		changes = append(changes, "wrote CNI configuration for "+bridge)
	}
	changes = append(changes, ensureSegment(a, d)...)
	b.desired[d.Key] = cloneDesired(d)
	b.counts.Writes += len(changes)
	return changes, netbackend.Outcome{Created: created, Ports: slices.Clone(a.Ports)}, nil
}

// Remove implements netbackend.Backend. A foreign interface occupying the name is left alone.
func (b *Backend) Remove(_ context.Context, key string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts.Remove++
	if err := b.failures[key]; err != nil {
		return err
	}
	a, ok := b.nodes[key]
	if !ok {
		return nil
	}
	if a.Bridge != "" {
		b.counts.Writes++
	}
	if a.CNIConfig != nil {
		b.counts.Writes++
	}
	delete(b.nodes, key)
	delete(b.desired, key)
	return nil
}

// Desired returns the last Desired that Ensure accepted for key (its Blocks, DefaultRoute and
// Segment included), and whether there was one since the last Remove of key.
func (b *Backend) Desired(key string) (netbackend.Desired, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	d, ok := b.desired[key]
	if !ok {
		return netbackend.Desired{}, false
	}
	return cloneDesired(d), true
}

func cloneDesired(d netbackend.Desired) netbackend.Desired {
	d.Blocks = slices.Clone(d.Blocks)
	if d.Segment != nil {
		s := *d.Segment
		s.Peers = slices.Clone(s.Peers)
		d.Segment = &s
	}
	return d
}

// ensureSegment makes a's segment device what d asks, like the linux backend's VXLAN device.
func ensureSegment(a *netbackend.Actual, d netbackend.Desired) []string {
	name := netbackend.SegmentDeviceName(d.Key)
	if d.Segment == nil {
		if a.Segment == nil {
			return nil
		}
		a.Segment = nil
		return []string{"deleted VXLAN device " + name}
	}
	peers := slices.Clone(d.Segment.Peers)
	slices.SortFunc(peers, func(x, y netip.Addr) int { return x.Compare(y) })
	want := netbackend.SegmentState{Device: name, Enslaved: true, Up: true, VNI: d.Segment.VNI,
		Local: d.Segment.UnderlayAddress, MTU: d.EffectiveMTU(), Peers: slices.Compact(peers)}
	if a.Segment != nil && a.Segment.Device == want.Device && a.Segment.Enslaved && a.Segment.Up && a.Segment.VNI == want.VNI &&
		a.Segment.Local == want.Local && a.Segment.MTU == want.MTU && slices.Equal(a.Segment.Peers, want.Peers) {
		return nil
	}
	change := "created VXLAN device " + name
	if a.Segment != nil {
		change = "updated VXLAN device " + name
	}
	a.Segment = &want
	return []string{fmt.Sprintf("%s (VNI %d, peers %v)", change, want.VNI, want.Peers)}
}

// List implements netbackend.Backend: the keys of every network with a bridge or a configuration.
func (b *Backend) List(context.Context) ([]string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts.List++
	if b.listErr != nil {
		return nil, b.listErr
	}
	keys := make([]string, 0, len(b.nodes))
	for k := range b.nodes {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys, nil
}

// Watch implements netbackend.Backend: notify is called with the key of every simulated drift
// (and of Occupy) until ctx is done. Changes made by Ensure and Remove are not reported. Watch
// returns the error set with SetWatchError at once, if any.
func (b *Backend) Watch(ctx context.Context, notify func(key string)) error {
	b.mu.Lock()
	b.counts.Watch++
	if err := b.watchErr; err != nil {
		b.mu.Unlock()
		return err
	}
	id := b.nextWatcher
	b.nextWatcher++
	b.watchers[id] = notify
	b.signalWatchersLocked()
	b.mu.Unlock()

	<-ctx.Done()

	b.mu.Lock()
	delete(b.watchers, id)
	b.signalWatchersLocked()
	b.mu.Unlock()
	return nil
}

func (b *Backend) signalWatchersLocked() {
	close(b.watchersChanged)
	b.watchersChanged = make(chan struct{})
}

// WaitForWatchers waits until at least n Watch calls are running, so that a test can simulate
// drift knowing it will be seen. It returns ctx's error if that does not happen first.
func (b *Backend) WaitForWatchers(ctx context.Context, n int) error {
	for {
		b.mu.Lock()
		running, changed := len(b.watchers), b.watchersChanged
		b.mu.Unlock()
		if running >= n {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return fmt.Errorf("%d watchers running, waiting for %d: %w", running, n, ctx.Err())
		}
	}
}

// Counts returns the calls and writes so far.
func (b *Backend) Counts() Counts {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.counts
}

// ResetCounts sets every count to zero, for example after a test's setup.
func (b *Backend) ResetCounts() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.counts = Counts{}
}

func clone(a *netbackend.Actual) *netbackend.Actual {
	c := *a
	c.Addresses = slices.Clone(a.Addresses)
	c.CNIConfig = slices.Clone(a.CNIConfig)
	c.Ports = slices.Clone(a.Ports)
	c.Leases = slices.Clone(a.Leases)
	if a.Segment != nil {
		s := *a.Segment
		s.Peers = slices.Clone(s.Peers)
		c.Segment = &s
	}
	return &c
}
