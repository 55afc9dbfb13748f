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
	"bytes"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Ensure's own echoes. Every change Ensure makes to a bridge (created, alias, MAC, address, MTU,
// up) comes back through Watch as a link or address notification, and each used to queue the
// Network for a second reconcile that found nothing to do: about half of the node's work per
// created Network (docs/performance.md, issue 25 item 5). The kernel marks a notification with
// the port of the socket that caused it only for some requests, and vishvananda/netlink does not
// tell its sockets' ports, so echoes are told by what they say instead:
//
//   - While Ensure runs for a Network, notifications about the Network's bridge itself are held
//     back: Ensure looks at the bridge after its last change (settle), and that look covers
//     whatever those notifications said; if Ensure failed, they are passed on as one.
//   - After a successful Ensure the bridge's state is remembered as settled: its link
//     attributes that Ensure sets, and its addresses. A later notification about the bridge
//     that says exactly that state (a late echo, or a change of something Ensure does not
//     manage, such as the carrier) is not passed on; anything else is (drift, or an echo of an
//     intermediate state read late, which costs one reconcile as before).
//   - Settle itself checks the bridge against what Ensure made; a bridge changed by someone
//     else meanwhile is not settled and the Network is notified at once.
//
// Deletions, ports (pods' veths) and the VXLAN device are always passed on, and Networks with a
// segment are not settled at all (their bridge has more state than the fingerprint holds).

// bridgeState is what settle remembers of a bridge.
type bridgeState struct {
	index int
	link  linkPrint
	addrs map[netip.Prefix]bool // every address, IPv6 link-local ones included
}

// linkPrint is what Ensure manages of a bridge's link attributes.
type linkPrint struct {
	name, alias string
	up          bool
	mtu         int
	mac         string
	master      int
}

func printOf(l netlink.Link) linkPrint {
	a := l.Attrs()
	return linkPrint{name: a.Name, alias: a.Alias, up: a.Flags&net.FlagUp != 0, mtu: a.MTU,
		mac: a.HardwareAddr.String(), master: a.MasterIndex}
}

// beginEnsure marks key's Ensure as running. The caller holds b.mu.
func (b *Backend) beginEnsure(key string) {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	b.ensuring[key] = 0
}

// endEnsure ends key's Ensure. When it succeeded for a Network without a segment, made no
// change and no notification about the bridge was held back meanwhile, a settled state stays
// as it is. Otherwise the bridge is looked at once more and settled if it is what Ensure made
// (the MTU, the configuration's MAC, up, ours, no address but the gateway and IPv6 link-local
// ones); if it is not, the Network is notified (what was held back may have been someone
// else's change). The caller holds b.mu.
func (b *Backend) endEnsure(d netbackend.Desired, ok, changed bool) {
	b.knownMu.Lock()
	held, ensuring := b.ensuring[d.Key]
	delete(b.ensuring, d.Key)
	_, settled := b.settled[d.Key]
	if !ensuring || !ok || d.Segment != nil {
		delete(b.settled, d.Key)
		b.knownMu.Unlock()
		if ensuring && held > 0 {
			b.notifyWatch(d.Key)
		}
		return
	}
	b.knownMu.Unlock()
	if settled && !changed && held == 0 {
		return
	}
	state, settled := b.settle(d)
	b.knownMu.Lock()
	if settled {
		b.settled[d.Key] = state
	} else {
		delete(b.settled, d.Key)
	}
	b.knownMu.Unlock()
	if !settled {
		b.notifyWatch(d.Key)
	}
}

// settle looks at d's bridge and returns its state if it is what a successful Ensure of d leaves.
func (b *Backend) settle(d netbackend.Desired) (bridgeState, bool) {
	link, err := b.linkByName(netbackend.BridgeName(d.Key))
	if err != nil || link == nil || !isOurs(link, d.Key) {
		return bridgeState{}, false
	}
	a := link.Attrs()
	if a.Flags&net.FlagUp == 0 || a.MTU != d.EffectiveMTU() || a.MasterIndex != 0 {
		return bridgeState{}, false
	}
	if content, _, err := readConfig(b.cfg.CNIConfDir, d.Key); err != nil {
		return bridgeState{}, false
	} else if mac, recorded := recordedMAC(content); recorded && !bytes.Equal(mac, a.HardwareAddr) {
		return bridgeState{}, false
	}
	addrs, err := b.linkAddrs(a.Index, unix.AF_UNSPEC)
	if err != nil {
		return bridgeState{}, false
	}
	gateway := netip.PrefixFrom(d.Gateway, d.Prefix.Bits())
	state := bridgeState{index: a.Index, link: printOf(link), addrs: map[netip.Prefix]bool{}}
	for _, p := range addrs {
		if p != gateway && !(p.Addr().Is6() && p.Addr().IsLinkLocalUnicast()) {
			return bridgeState{}, false // a stale address Ensure would remove
		}
		state.addrs[p] = true
	}
	if !state.addrs[gateway] {
		return bridgeState{}, false
	}
	return state, true
}

// linkEcho reports whether a link notification about key, which is not a deletion, is about
// key's bridge and says nothing Ensure has not already seen. knownMu must be held.
func (b *Backend) linkEchoLocked(key string, l netlink.Link) bool {
	a := l.Attrs()
	if _, ok := b.ensuring[key]; ok && (a.Name == netbackend.BridgeName(key) || a.Alias == Alias(key)) {
		b.ensuring[key]++
		return true
	}
	s, ok := b.settled[key]
	return ok && s.index == a.Index && s.link == printOf(l)
}

// addrEcho reports whether an address notification about key's bridge says nothing Ensure has
// not already seen.
func (b *Backend) addrEcho(key string, u netlink.AddrUpdate) bool {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	if _, ok := b.ensuring[key]; ok {
		b.ensuring[key]++
		return true
	}
	s, ok := b.settled[key]
	if !ok || s.index != u.LinkIndex {
		return false
	}
	ones, _ := u.LinkAddress.Mask.Size()
	p, ok := prefixOf(u.LinkAddress.IP, ones)
	return ok && s.addrs[p] == u.NewAddr
}

// notifyWatch hands key to the running Watch's pump, which calls notify with it (notify is
// called from one goroutine only); without a Watch there is no one to tell.
func (b *Backend) notifyWatch(key string) {
	if !b.watching.Load() {
		return
	}
	b.settleMu.Lock()
	b.settleKeys = append(b.settleKeys, key)
	b.settleMu.Unlock()
	select {
	case b.settleSignal <- struct{}{}:
	default: // already signalled
	}
}

// takeSettleKeys returns the keys endEnsure handed to the pump since the last call.
func (b *Backend) takeSettleKeys() []string {
	b.settleMu.Lock()
	defer b.settleMu.Unlock()
	keys := b.settleKeys
	b.settleKeys = nil
	return keys
}
