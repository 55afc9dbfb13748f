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
	"net/netip"
	"slices"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// drift applies change to key's state under the lock (when the key has state) and then
// notifies every watcher. It reports whether there was state to change.
func (b *Backend) drift(key string, change func(a *netbackend.Actual)) bool {
	b.mu.Lock()
	a, ok := b.nodes[key]
	if ok {
		change(a)
		if a.Bridge == "" && a.CNIConfig == nil && a.Segment == nil {
			delete(b.nodes, key)
		}
	}
	b.notifyUnlock(key)
	return ok
}

// notifyUnlock notifies every watcher of key; it is called with the lock held and releases it.
func (b *Backend) notifyUnlock(key string) {
	notifies := make([]func(string), 0, len(b.watchers))
	for _, n := range b.watchers {
		notifies = append(notifies, n)
	}
	b.mu.Unlock()
	for _, n := range notifies {
		n(key)
	}
}

// DeleteBridge simulates the bridge of key deleted by hand (with its addresses). It reports
// whether key had state.
func (b *Backend) DeleteBridge(key string) bool {
	return b.drift(key, func(a *netbackend.Actual) {
		a.Bridge, a.Addresses, a.MTU, a.Up = "", nil, 0, false
	})
}

// DeleteSegment simulates key's VXLAN device deleted by hand (the segment is down until the
// next Ensure). It reports whether key had state.
func (b *Backend) DeleteSegment(key string) bool {
	return b.drift(key, func(a *netbackend.Actual) { a.Segment = nil })
}

// SetMTU simulates the MTU of key's bridge changed by hand.
func (b *Backend) SetMTU(key string, mtu int) bool {
	return b.drift(key, func(a *netbackend.Actual) {
		if a.Bridge != "" {
			a.MTU = mtu
		}
	})
}

// SetDown simulates key's bridge set down by hand.
func (b *Backend) SetDown(key string) bool {
	return b.drift(key, func(a *netbackend.Actual) { a.Up = false })
}

// SetAddresses simulates the addresses of key's bridge changed by hand.
func (b *Backend) SetAddresses(key string, addrs ...netip.Prefix) bool {
	return b.drift(key, func(a *netbackend.Actual) {
		if a.Bridge != "" {
			a.Addresses = slices.Clone(addrs)
		}
	})
}

// SetPorts simulates pods attached to key's bridge (their veths its ports), as a runtime's
// CNI ADD and DEL change them. Watchers are notified.
func (b *Backend) SetPorts(key string, ports ...string) bool {
	return b.drift(key, func(a *netbackend.Actual) {
		if a.Bridge != "" {
			a.Ports = slices.Clone(ports)
		}
	})
}

// SetLeases simulates the addresses host-local holds for key (a runtime's ADD reserves one,
// its DEL releases it after removing the pod's veth). Watchers are notified, as the linux
// backend's watch of host-local's lease files notifies them.
func (b *Backend) SetLeases(key string, leases ...string) bool {
	b.mu.Lock()
	a, ok := b.nodes[key]
	if ok {
		a.Leases = slices.Clone(leases)
	}
	b.notifyUnlock(key)
	return ok
}

// DeleteConfig simulates key's CNI configuration deleted by hand.
func (b *Backend) DeleteConfig(key string) bool {
	return b.drift(key, func(a *netbackend.Actual) { a.CNIConfig = nil })
}

// SetConfig simulates key's CNI configuration edited by hand.
func (b *Backend) SetConfig(key string, content []byte) bool {
	return b.drift(key, func(a *netbackend.Actual) { a.CNIConfig = slices.Clone(content) })
}

// Occupy simulates a foreign interface (not ours) created with key's bridge name while key has
// no bridge: Ensure then fails with netbackend.ReasonNotOurs until Vacate. Watchers are notified.
func (b *Backend) Occupy(key string) {
	b.mu.Lock()
	b.occupied[key] = true
	b.mu.Unlock()
	b.drift(key, func(*netbackend.Actual) {})
}

// Vacate removes the foreign interface of Occupy. Watchers are notified.
func (b *Backend) Vacate(key string) {
	b.mu.Lock()
	delete(b.occupied, key)
	b.mu.Unlock()
	b.drift(key, func(*netbackend.Actual) {})
}

// Put stores a as what the node has for a.Key (for example an orphan left by a deleted
// Network), replacing any state. It counts as no call and no write, and notifies nobody.
func (b *Backend) Put(a netbackend.Actual) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.nodes[a.Key] = clone(&a)
}

// Get returns a copy of what the node has for key, nil when nothing. It counts as no call.
func (b *Backend) Get(key string) *netbackend.Actual {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a, ok := b.nodes[key]; ok {
		return clone(a)
	}
	return nil
}

// SetFailure makes every Observe, Ensure and Remove of key fail with err; nil clears it.
// Wrap err with netbackend.Errorf to give it a reason.
func (b *Backend) SetFailure(key string, err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err == nil {
		delete(b.failures, key)
		return
	}
	b.failures[key] = err
}

// SetListError makes List fail with err; nil clears it.
func (b *Backend) SetListError(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.listErr = err
}

// SetWatchError makes later Watch calls return err at once; nil clears it.
func (b *Backend) SetWatchError(err error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.watchErr = err
}

// Attach is a pod's first ADD with BridgeOnAttach: the bridge is made as Ensure makes it, with
// the pod's port, and watchers hear of it. It reports false when key has no configuration.
func (b *Backend) Attach(key, port string) bool {
	b.mu.Lock()
	a, d := b.nodes[key], b.desired[key]
	if a == nil || a.CNIConfig == nil {
		b.mu.Unlock()
		return false
	}
	a.Bridge, a.Up, a.MTU = netbackend.BridgeName(key), true, d.EffectiveMTU()
	a.Addresses = []netip.Prefix{netip.PrefixFrom(d.Gateway, d.Prefix.Bits())}
	ensureSegment(a, d)
	a.Ports = append(a.Ports, port)
	b.notifyUnlock(key)
	return true
}
