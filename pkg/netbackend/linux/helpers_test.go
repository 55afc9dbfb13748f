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
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// The namespace helpers live in netnstest, shared with the integration tests.
type testNS struct {
	*netnstest.NS
	name, path string
	handle     netns.NsHandle
	nl         *netlink.Handle
}

func requireRoot(t *testing.T) { netnstest.RequireRoot(t) }

func newNS(t *testing.T, role string) *testNS {
	ns := netnstest.New(t, role)
	return &testNS{NS: ns, name: ns.Name, path: ns.Path, handle: ns.Handle, nl: ns.Netlink}
}

func inNS(path string, fn func() error) error { return netnstest.InNS(path, fn) }

func (ns *testNS) disableDAD(t *testing.T) { ns.DisableDAD(t) }

// link returns the link called name in ns, nil when there is none.
func (ns *testNS) link(t *testing.T, name string) netlink.Link {
	t.Helper()
	l, err := ns.nl.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil
	}
	if err != nil {
		t.Fatalf("looking up %s in %s: %v", name, ns.name, err)
	}
	return l
}

// globalAddrs returns the addresses on the link called name, without IPv6 link-local ones.
func (ns *testNS) globalAddrs(t *testing.T, name string) []netip.Prefix {
	t.Helper()
	l := ns.link(t, name)
	if l == nil {
		t.Fatalf("no link %s in %s", name, ns.name)
	}
	addrs, err := ns.nl.AddrList(l, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatalf("addresses of %s: %v", name, err)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ones, _ := a.Mask.Size()
		p, _ := prefixOf(a.IP, ones)
		if p.Addr().Is6() && p.Addr().IsLinkLocalUnicast() {
			continue
		}
		out = append(out, p)
	}
	return out
}

// addVeth creates a veth pair in ns, the end called name optionally carrying addr.
func (ns *testNS) addVeth(t *testing.T, name, peer string, addr string) netlink.Link {
	t.Helper()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	if err := ns.nl.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: peer}); err != nil {
		t.Fatalf("creating veth %s in %s: %v", name, ns.name, err)
	}
	l := ns.link(t, name)
	if addr != "" {
		p := netip.MustParsePrefix(addr)
		if err := ns.nl.AddrAdd(l, netlinkAddr(p)); err != nil {
			t.Fatalf("adding %s to %s: %v", addr, name, err)
		}
	}
	return l
}

// addBridge creates a bridge in ns, with alias when not empty (the kernel ignores an alias in
// the creation request, so it is set afterwards).
func (ns *testNS) addBridge(t *testing.T, name, alias string) netlink.Link {
	t.Helper()
	attrs := netlink.NewLinkAttrs()
	attrs.Name = name
	if err := ns.nl.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
		t.Fatalf("creating bridge %s in %s: %v", name, ns.name, err)
	}
	l := ns.link(t, name)
	if alias != "" {
		if err := ns.nl.LinkSetAlias(l, alias); err != nil {
			t.Fatalf("setting the alias of %s: %v", name, err)
		}
		l = ns.link(t, name)
	}
	return l
}

// testEnv is a Backend on a fresh namespace and configuration directory.
type testEnv struct {
	t          *testing.T
	ns         *testNS
	b          *Backend
	confDir    string
	subscribed chan struct{}
}

func newEnv(t *testing.T) *testEnv {
	t.Helper()
	requireRoot(t)
	e := &testEnv{t: t, ns: newNS(t, "node"), confDir: t.TempDir(), subscribed: make(chan struct{}, 64)}
	e.b = e.newBackend(Config{})
	return e
}

// newBackend opens another Backend on e's namespace and directory (like a restarted agent).
func (e *testEnv) newBackend(cfg Config) *Backend {
	e.t.Helper()
	cfg.NetNSPath = e.ns.path
	if cfg.CNIConfDir == "" {
		cfg.CNIConfDir = e.confDir
	}
	b, err := New(cfg)
	if err != nil {
		e.t.Fatalf("New: %v", err)
	}
	b.subscribed = func() {
		select {
		case e.subscribed <- struct{}{}:
		default:
		}
	}
	e.t.Cleanup(func() {
		if err := b.Close(); err != nil {
			e.t.Errorf("Close: %v", err)
		}
	})
	return b
}

func (e *testEnv) ensure(d netbackend.Desired) []string {
	e.t.Helper()
	changes, _, err := e.b.Ensure(context.Background(), d)
	if err != nil {
		e.t.Fatalf("Ensure(%s): %v (changes so far %q)", d.Key, err, changes)
	}
	return changes
}

// watcher is a running Watch whose notifications arrive on keys.
type watcher struct {
	keys   chan string
	cancel context.CancelFunc
	done   chan error
}

// startWatch starts b.Watch and returns once its subscriptions are open, so that every change
// made afterwards is seen.
func (e *testEnv) startWatch(b *Backend) *watcher {
	e.t.Helper()
	for len(e.subscribed) > 0 {
		<-e.subscribed
	}
	ctx, cancel := context.WithCancel(context.Background())
	w := &watcher{keys: make(chan string, 4096), cancel: cancel, done: make(chan error, 1)}
	go func() {
		w.done <- b.Watch(ctx, func(key string) {
			select {
			case w.keys <- key:
			default: // a test never lets this many pile up
			}
		})
	}()
	select {
	case <-e.subscribed:
	case err := <-w.done:
		cancel()
		e.t.Fatalf("Watch returned before subscribing: %v", err)
	case <-time.After(5 * time.Second):
		cancel()
		e.t.Fatal("Watch did not subscribe within 5s")
	}
	e.t.Cleanup(func() { w.stop(e.t) })
	return w
}

// stop cancels the Watch and checks that it returns nil promptly. It is idempotent.
func (w *watcher) stop(t *testing.T) {
	t.Helper()
	if w.cancel == nil {
		return
	}
	w.cancel()
	w.cancel = nil
	select {
	case err := <-w.done:
		if err != nil {
			t.Errorf("Watch returned %v after its context ended, want nil", err)
		}
	case <-time.After(5 * time.Second):
		t.Error("Watch did not return within 5s after its context ended")
	}
}

// expect waits up to 2s for a notification of key, ignoring others.
func (w *watcher) expect(t *testing.T, key, what string) {
	t.Helper()
	deadline := time.After(2 * time.Second)
	for {
		select {
		case k := <-w.keys:
			if k == key {
				return
			}
		case <-deadline:
			t.Fatalf("%s: Watch did not notify %s within 2s", what, key)
		}
	}
}

// expectNone checks that no notification of key arrives within d.
func (w *watcher) expectNone(t *testing.T, key string, d time.Duration, what string) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case k := <-w.keys:
			if k == key {
				t.Fatalf("%s: unexpected notification of %s", what, key)
			}
		case <-deadline:
			return
		}
	}
}

func desired4(key string) netbackend.Desired {
	return netbackend.Desired{
		Key:     key,
		Prefix:  netip.MustParsePrefix("10.99.0.0/24"),
		Gateway: netip.MustParseAddr("10.99.0.1"),
	}
}

// hostHasLink tells whether the test process's own namespace has a link called name (it must
// never: every test works in namespaces of its own).
func hostHasLink(name string) bool {
	_, err := net.InterfaceByName(name)
	return err == nil
}

func confFiles(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Clean(path))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
