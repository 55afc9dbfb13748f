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
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

const (
	// subscribeBuffer is the receive buffer of the link and address subscriptions.
	subscribeBuffer = 8 << 20

	resubscribeMin = 100 * time.Millisecond
	resubscribeMax = 5 * time.Second
)

// Watch implements netbackend.Backend. It subscribes to the namespace's link and address
// notifications and calls notify with the key of
//   - a link whose alias records the key (one of our bridges), created, changed or deleted;
//   - a link named like the bridge of a key this Backend has seen (Ensure, Observe, List), so
//     that a bridge deleted by hand, or a foreign interface taking its name, is noticed;
//   - a link attached to one of our bridges (a pod's veth), or a remembered port of one of our
//     bridges detached or deleted;
//   - an address added to or removed from one of our bridges;
//   - one of our nftables tables changed by another process (nftwatch.go);
//   - a lease of host-local added to or removed from a Network's directory (leasewatch.go).
//
// When a subscription fails or ends (for example when the socket's buffer overflowed and
// notifications were lost), Watch subscribes again with backoff and then notifies every key it
// knows, since anything may have changed meanwhile. It returns nil when ctx is done. notify is
// called from one goroutine at a time and should not block.
func (b *Backend) Watch(ctx context.Context, notify func(key string)) error {
	logger := klog.FromContext(ctx).WithValues("netns", nsDescription(b.cfg.NetNSPath))
	defer b.watching.Store(false)
	if err := b.learn(); err != nil {
		logger.V(2).Info("Listing links before watching failed; bridges not seen yet are recognised by their alias only", "err", err)
	}
	// Our nftables tables are watched alongside, for as long as Watch runs; the monitor is
	// open (or failed once) before the links are subscribed.
	nftKeys := make(chan string, 256)
	nftCtx, stopNFT := context.WithCancel(ctx)
	nftDone, nftOpened := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(nftDone)
		b.watchNFT(nftCtx, logger, nftKeys, nftOpened)
	}()
	// host-local's lease files are watched alongside too (leasewatch.go), into the same channel.
	leasesDone := make(chan struct{})
	go func() {
		defer close(leasesDone)
		b.watchLeases(nftCtx, logger, nftKeys)
	}()
	defer func() {
		stopNFT()
		<-nftDone
		<-leasesDone
	}()
	<-nftOpened
	backoff := resubscribeMin
	for attempt := 0; ; attempt++ {
		if ctx.Err() != nil {
			return nil
		}
		linkCh := make(chan netlink.LinkUpdate, 1024)
		addrCh := make(chan netlink.AddrUpdate, 1024)
		done := make(chan struct{})
		onError := func(err error) { logger.V(2).Info("Netlink subscription error", "err", err) }
		if err := b.subscribe(linkCh, addrCh, done, onError); err != nil {
			close(done)
			logger.Error(err, "Subscribing to link and address changes failed; retrying", "after", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil
			case <-t.C:
			}
			backoff = min(2*backoff, resubscribeMax)
			continue
		}
		backoff = resubscribeMin
		// Ensure sets markers from now on (echo.go); one set before, while nothing was
		// subscribed, never comes: what waits for it is dropped.
		b.watching.Store(true)
		b.knownMu.Lock()
		b.forgetEchoesLocked()
		b.knownMu.Unlock()
		if b.subscribed != nil {
			b.subscribed()
		}
		if attempt > 0 {
			for _, key := range b.knownKeys() {
				notify(key)
			}
		}
		b.pump(ctx, linkCh, addrCh, nftKeys, notify)
		b.watching.Store(false)
		close(done)
		// The subscription goroutines end (closing their channel) once their socket is
		// closed; until then they may be blocked sending to us.
		for range linkCh {
		}
		for range addrCh {
		}
		if ctx.Err() == nil {
			logger.Info("Netlink subscription ended; subscribing again")
		}
	}
}

// netlinkSubscribe opens both subscriptions in the managed namespace. On failure nothing is
// left open.
func (b *Backend) netlinkSubscribe(linkCh chan netlink.LinkUpdate, addrCh chan netlink.AddrUpdate, done <-chan struct{}, onError func(error)) error {
	ns := &b.ns
	if !b.ns.IsOpen() {
		ns = nil // the process's namespace
	}
	// A burst of changes (a thousand Networks created at once) overflows the default socket
	// buffer; the subscription then ends and Watch notifies every key. A larger buffer, forced
	// past net.core.rmem_max where the process may (CAP_NET_ADMIN), else as large as allowed.
	force := true
	err := netlink.LinkSubscribeWithOptions(linkCh, done, netlink.LinkSubscribeOptions{Namespace: ns, ErrorCallback: onError,
		ReceiveBufferSize: subscribeBuffer, ReceiveBufferForceSize: force})
	if err != nil {
		force = false
		err = netlink.LinkSubscribeWithOptions(linkCh, done, netlink.LinkSubscribeOptions{Namespace: ns, ErrorCallback: onError,
			ReceiveBufferSize: subscribeBuffer})
	}
	if err != nil {
		return err
	}
	err = netlink.AddrSubscribeWithOptions(addrCh, done, netlink.AddrSubscribeOptions{Namespace: ns, ErrorCallback: onError,
		ReceiveBufferSize: subscribeBuffer, ReceiveBufferForceSize: force})
	if err != nil {
		// The caller closes done, which closes the link subscription; drain it meanwhile.
		go func() {
			for range linkCh {
			}
		}()
		return err
	}
	return nil
}

// pump handles notifications until ctx is done or a subscription ends.
func (b *Backend) pump(ctx context.Context, linkCh <-chan netlink.LinkUpdate, addrCh <-chan netlink.AddrUpdate, nftKeys <-chan string, notify func(string)) {
	for {
		select {
		case <-ctx.Done():
			return
		case key := <-nftKeys:
			notify(key)
		case <-b.settleSignal:
			for _, key := range b.takeSettleKeys() {
				notify(key)
			}
		case u, ok := <-linkCh:
			if !ok {
				return
			}
			for _, key := range b.keysOfLinkUpdate(u) {
				notify(key)
			}
		case u, ok := <-addrCh:
			if !ok {
				return
			}
			if key, ok := b.keyOfIndex(u.LinkIndex); ok && !b.addrEcho(key, u) {
				notify(key)
			}
		}
	}
}

// keysOfLinkUpdate returns the keys a link notification concerns, updating what is known. A
// notification about a Network's bridge itself that only echoes what Ensure made is left out
// (echo.go); one that concerns the Network otherwise too (a port, its VXLAN device) is not.
func (b *Backend) keysOfLinkUpdate(u netlink.LinkUpdate) []string {
	attrs := u.Link.Attrs()
	deleted := u.Header.Type == unix.RTM_DELLINK
	var keys []string
	other := map[string]bool{} // keys concerned other than as the bridge itself
	add := func(key string, asBridge bool) {
		if !asBridge {
			other[key] = true
		}
		for _, k := range keys {
			if k == key {
				return
			}
		}
		keys = append(keys, key)
	}
	if key, ok := KeyOfAlias(attrs.Alias); ok && isOurs(u.Link, key) {
		add(key, true)
		if !deleted {
			b.remember(key, attrs.Name, attrs.Index)
		}
	}
	if key, ok := isSegmentLink(u.Link); ok {
		add(key, false) // our VXLAN device changed or went: Ensure repairs it
	}
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	if key, ok := b.names[attrs.Name]; ok {
		add(key, attrs.Name == netbackend.BridgeName(key))
	}
	if key, ok := b.indexes[attrs.Index]; ok {
		add(key, true) // for example our bridge renamed
		if deleted || attrs.Name != netbackend.BridgeName(key) {
			delete(b.indexes, attrs.Index)
		}
	}
	if key, ok := b.indexes[attrs.MasterIndex]; ok && attrs.MasterIndex != 0 && !deleted {
		if _, segment := isSegmentLink(u.Link); !segment {
			add(key, false) // a port attached to our bridge: a pod came
		}
	}
	if key, ok := b.portKeys[attrs.Index]; ok {
		add(key, false) // a port of our bridge detached or gone: a pod left, or the bridge was deleted
	}
	out := keys[:0]
	for _, key := range keys {
		if s, ok := b.settled[key]; ok && deleted && s.index == attrs.Index {
			delete(b.settled, key)
		}
		if !deleted && !other[key] && b.linkEchoLocked(key, u.Link) {
			continue
		}
		out = append(out, key)
	}
	return out
}

// keyOfIndex returns the key of our bridge with index, asking the kernel when it is not known.
func (b *Backend) keyOfIndex(index int) (string, bool) {
	b.knownMu.Lock()
	key, ok := b.indexes[index]
	b.knownMu.Unlock()
	if ok {
		return key, true
	}
	b.mu.RLock()
	link, err := b.nl().LinkByIndex(index)
	b.mu.RUnlock()
	if err != nil {
		return "", false // gone already; its deletion is a link notification
	}
	if key, ok := KeyOfAlias(link.Attrs().Alias); ok && isOurs(link, key) {
		b.remember(key, link.Attrs().Name, index)
		return key, true
	}
	return "", false
}

// learn records our bridges in the namespace, so that Watch maps them from the start.
func (b *Backend) learn() error {
	b.mu.RLock()
	links, err := dump(b.nl().LinkList)
	b.mu.RUnlock()
	if err != nil {
		return err
	}
	for _, l := range links {
		if key, ok := KeyOfAlias(l.Attrs().Alias); ok && isOurs(l, key) {
			b.remember(key, l.Attrs().Name, l.Attrs().Index)
		}
		if key, ok := isSegmentLink(l); ok {
			b.rememberSegment(key, l.Attrs().Name)
		}
	}
	return nil
}

func (b *Backend) knownKeys() []string {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	keys := make([]string, 0, len(b.names))
	for _, key := range b.names {
		keys = append(keys, key)
	}
	return keys
}
