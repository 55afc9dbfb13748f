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

// Package netnstest creates network namespaces for tests that need real networking (root only),
// and removes them with everything in them when the test ends.
package netnstest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// RequireRoot skips tests that create network namespaces when not run as root.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: this test creates network namespaces, bridges and veths, which needs root (run go test as root)")
	}
}

var seq atomic.Int64

// NS is a network namespace made for one test and deleted with it (and with it everything in
// it: bridges, veths, addresses).
type NS struct {
	Name, Path string
	Handle     netns.NsHandle
	// Netlink sends the test's own requests into the namespace.
	Netlink *netlink.Handle
}

// New creates a named network namespace. netns.NewNamed moves the calling thread into the
// new namespace, so it runs on a goroutine of its own that locks its thread and never unlocks
// it: the Go runtime ends that thread with the goroutine and no other goroutine ever runs in
// the namespace. The test then uses handles only.
func New(t testing.TB, role string) *NS {
	t.Helper()
	name := fmt.Sprintf("nstest-%d-%s-%d", os.Getpid(), role, seq.Add(1))
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // deliberately never unlocked, see above
		h, err := netns.NewNamed(name)
		if err == nil {
			err = h.Close()
		}
		errc <- err
	}()
	if err := <-errc; err != nil {
		_ = netns.DeleteNamed(name)
		t.Fatalf("creating network namespace %s: %v", name, err)
	}
	ns := &NS{Name: name, Path: "/var/run/netns/" + name}
	t.Cleanup(func() {
		if ns.Netlink != nil {
			ns.Netlink.Close()
		}
		if ns.Handle.IsOpen() {
			_ = ns.Handle.Close()
		}
		if err := netns.DeleteNamed(name); err != nil {
			t.Errorf("deleting network namespace %s: %v", name, err)
		}
	})
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatalf("opening network namespace %s: %v", name, err)
	}
	ns.Handle = h
	if ns.Netlink, err = netlink.NewHandleAt(h); err != nil {
		t.Fatalf("netlink handle in %s: %v", name, err)
	}
	return ns
}

// InNS runs fn on a thread that is in the namespace at path, and moves that thread back
// afterwards (a thread that cannot be moved back is left locked, so the runtime ends it).
func InNS(path string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			errc <- err
			return
		}
		defer func() { _ = orig.Close() }()
		target, err := netns.GetFromPath(path)
		if err != nil {
			errc <- err
			return
		}
		defer func() { _ = target.Close() }()
		if err := netns.Set(target); err != nil {
			errc <- err
			return
		}
		fnErr := fn()
		if err := netns.Set(orig); err != nil {
			errc <- errors.Join(fnErr, fmt.Errorf("moving the thread back: %w", err))
			return
		}
		runtime.UnlockOSThread()
		errc <- fnErr
	}()
	return <-errc
}

// DisableDAD turns IPv6 duplicate address detection off in ns for interfaces created later, so
// that no address changes state asynchronously (a link-local address leaving "tentative" would
// be a notification nobody caused).
func (ns *NS) DisableDAD(t testing.TB) {
	t.Helper()
	err := InNS(ns.Path, func() error {
		for _, conf := range []string{"all", "default"} {
			if err := os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/accept_dad", []byte("0"), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("disabling DAD in %s: %v", ns.Name, err)
	}
}
