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
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Ensure's own echoes. Every change Ensure makes to a bridge (created, alias, MAC, address, MTU,
// up) comes back through Watch as a link or address notification, and each used to queue the
// Network for a second reconcile that found nothing to do: about half of the node's work per
// created Network (docs/performance.md, issue 25 item 5). The kernel marks a notification with
// the port of the socket that caused it only for some requests, and vishvananda/netlink does not
// tell its sockets' ports, so echoes are told apart like this:
//
//   - While Ensure runs for a Network, notifications about the Network's bridge itself are held
//     back. At its end Ensure sets the bridge's transmit queue length to a marker of its own
//     and back (a bridge has no queue: the length is unused) and then looks at the bridge
//     (settle). Link notifications come in order on one socket, so every link notification
//     before the marker's is older than that look, which covers what it said: they are left
//     out, however late Watch reads them.
//   - After the look the bridge's state is remembered as settled: its link attributes that
//     Ensure sets, and its addresses. A later notification about the bridge that says exactly
//     that state (a change of something Ensure does not manage, such as the carrier) is left
//     out; anything else is passed on. Address notifications come on another socket, without
//     order against the marker; the ones read before the look is remembered are checked
//     against it (Ensure only takes addresses off or puts the gateway on, so its own address
//     notifications agree with where it ends).
//   - Settle checks the bridge against what Ensure made; a bridge changed by someone else
//     meanwhile is not settled and the Network is notified at once. If Ensure failed, what
//     was held back is passed on as one notification.
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

// ensureRecord is what Watch holds back about a Network's bridge around its Ensure.
type ensureRecord struct {
	held int // notifications held back before the marker: settle's look covers them
	// marker is the queue length settle sets before it looks (0 until then); markerSeen once
	// Watch read its notification.
	marker     int
	markerSeen bool
	// done: settle ended and the bridge is settled; the record waits for the marker only.
	done bool
	// after are the link notifications read after the marker and addrs the address ones read
	// before the record was done: checked against the settled state.
	after []linkPrint
	addrs []addrChange
}

type addrChange struct {
	index int
	p     netip.Prefix
	added bool
}

// markers counts the queue-length markers (echo.go).
var markers atomic.Uint32

// nextMarker returns a queue length no bridge has by itself: 2^30 and up.
func nextMarker() int { return 1<<30 | int(markers.Add(1)&(1<<29-1)) }

// beginEnsure marks key's Ensure as running. The caller holds b.mu and key's lock.
func (b *Backend) beginEnsure(key string) {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	if rec := b.ensuring[key]; rec != nil && rec.done {
		rec.done = false // still waiting for the last marker: keep holding back until it comes
		rec.after, rec.addrs = nil, nil
		return
	}
	b.ensuring[key] = &ensureRecord{}
}

// endEnsure ends key's Ensure. When it succeeded for a Network without a segment, made no
// change and no notification about the bridge was held back meanwhile, a settled state stays
// as it is. Otherwise the marker is set and the bridge looked at once more, and settled if it is
// what Ensure made (the MTU, the configuration's MAC, up, ours, no address but the gateway and
// IPv6 link-local ones) and agrees with the notifications read after the marker. If it is not
// settled, the Network is notified (what was held back may have been someone else's change).
// An Ensure that left the bridge to a pod's first ADD (listOnly) has no bridge to settle and
// none of its own changes (a file) reach Watch: what was held back meanwhile was about a bridge
// made since (by our plugin), so the Network is notified. The caller holds b.mu and d.Key's lock.
func (b *Backend) endEnsure(d netbackend.Desired, ok, changed, listOnly bool) {
	b.knownMu.Lock()
	rec := b.ensuring[d.Key]
	_, settled := b.settled[d.Key]
	if rec == nil || !ok || listOnly || d.Segment != nil || (settled && !changed && rec.held == 0 && rec.marker == 0) {
		if rec != nil && rec.marker == 0 {
			delete(b.ensuring, d.Key)
		} else if rec != nil {
			rec.done = true // an earlier marker is still to come
		}
		if rec != nil && (!ok || listOnly || d.Segment != nil) {
			delete(b.settled, d.Key)
		}
		b.knownMu.Unlock()
		if rec != nil && (!ok || listOnly) && rec.held > 0 {
			b.notifyWatch(d.Key)
		}
		return
	}
	b.knownMu.Unlock()

	state, settled := b.settle(d, rec)
	b.knownMu.Lock()
	if settled {
		settled = state.agrees(rec)
	}
	if settled {
		b.settled[d.Key] = state
	} else {
		delete(b.settled, d.Key)
	}
	if rec.marker == 0 || rec.markerSeen || !settled {
		delete(b.ensuring, d.Key)
	} else {
		rec.done, rec.after, rec.addrs = true, nil, nil
	}
	b.knownMu.Unlock()
	if !settled {
		b.notifyWatch(d.Key)
	}
}

// agrees reports whether the notifications read since the marker say what s says.
func (s bridgeState) agrees(rec *ensureRecord) bool {
	for _, l := range rec.after {
		if l != s.link {
			return false
		}
	}
	for _, c := range rec.addrs {
		if c.index == s.index && s.addrs[c.p] != c.added {
			return false
		}
	}
	return true
}

// settle sets the marker on d's bridge (while Watch runs), looks at the bridge and returns its
// state if it is what a successful Ensure of d leaves.
func (b *Backend) settle(d netbackend.Desired, rec *ensureRecord) (bridgeState, bool) {
	link, err := b.linkByName(netbackend.BridgeName(d.Key))
	if err != nil || link == nil || !isOurs(link, d.Key) {
		return bridgeState{}, false
	}
	if b.watching.Load() {
		marker, qlen := nextMarker(), link.Attrs().TxQLen
		b.knownMu.Lock()
		rec.marker, rec.markerSeen, rec.after = marker, false, nil
		b.knownMu.Unlock()
		if err := b.nl().LinkSetTxQLen(link, marker); err != nil {
			return bridgeState{}, false
		}
		if err := b.nl().LinkSetTxQLen(link, qlen); err != nil {
			return bridgeState{}, false
		}
		if link, err = b.linkByName(netbackend.BridgeName(d.Key)); err != nil || link == nil || !isOurs(link, d.Key) {
			return bridgeState{}, false
		}
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

// linkEchoLocked reports whether a link notification about key, which is not a deletion, is
// about key's bridge and says nothing Ensure has not already seen, holding it back around key's
// Ensure. knownMu must be held.
func (b *Backend) linkEchoLocked(key string, l netlink.Link) bool {
	a := l.Attrs()
	if rec := b.ensuring[key]; rec != nil && (a.Name == netbackend.BridgeName(key) || a.Name == stagingName(key) ||
		a.Alias == Alias(key) || b.indexes[a.Index] == key) {
		switch {
		case rec.marker != 0 && !rec.markerSeen && a.TxQLen == rec.marker:
			rec.markerSeen = true
			if rec.done {
				delete(b.ensuring, key) // from here on the settled state decides
			}
		case !rec.markerSeen:
			rec.held++ // older than settle's look
		default:
			rec.after = append(rec.after, printOf(l))
		}
		return true
	}
	s, ok := b.settled[key]
	return ok && s.index == a.Index && s.link == printOf(l)
}

// addrEcho reports whether an address notification about key's bridge says nothing Ensure has
// not already seen; around key's Ensure it is kept and checked against the settled state.
func (b *Backend) addrEcho(key string, u netlink.AddrUpdate) bool {
	ones, _ := u.LinkAddress.Mask.Size()
	p, ok := prefixOf(u.LinkAddress.IP, ones)
	if !ok {
		return false
	}
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	s, settled := b.settled[key]
	if rec := b.ensuring[key]; rec != nil && !rec.done {
		rec.held++
		rec.addrs = append(rec.addrs, addrChange{index: u.LinkIndex, p: p, added: u.NewAddr})
		return true
	}
	return settled && s.index == u.LinkIndex && s.addrs[p] == u.NewAddr
}

// forgetEchoesLocked drops what waits for a marker that may never come: Watch (re)subscribed,
// and notifications sent while it was not subscribed are lost (after a failed subscription it
// notifies every key). knownMu must be held.
func (b *Backend) forgetEchoesLocked() {
	for key, rec := range b.ensuring {
		if rec.done {
			delete(b.ensuring, key)
		} else {
			rec.marker, rec.markerSeen = 0, false
		}
	}
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
