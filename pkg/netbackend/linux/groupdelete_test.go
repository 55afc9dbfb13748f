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
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// desiredN is a Network with a /24 of its own (10.100+i/256.i%256.0/24), so that many coexist.
func desiredN(key string, i int) netbackend.Desired {
	p := netip.AddrFrom4([4]byte{10, byte(100 + i/256), byte(i % 256), 0})
	return netbackend.Desired{Key: key, Prefix: netip.PrefixFrom(p, 24), Gateway: p.Next()}
}

// inDeleteGroup returns the names of the links in ns that are in DeleteGroup.
func (ns *testNS) inDeleteGroup(t *testing.T) []string {
	t.Helper()
	names, err := ns.deleteGroupNames()
	if err != nil {
		t.Fatalf("listing links of %s: %v", ns.name, err)
	}
	return names
}

func (ns *testNS) deleteGroupNames() ([]string, error) {
	links, err := ns.nl.LinkList()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, l := range links {
		if l.Attrs().Group == DeleteGroup {
			names = append(names, l.Attrs().Name)
		}
	}
	return names, nil
}

// addGrouped creates a veth pair in ns (this kernel may lack the dummy driver), the end called
// name in group (0: the default).
func (ns *testNS) addGrouped(t *testing.T, name, peer string, group uint32) {
	t.Helper()
	l := ns.addVeth(t, name, peer, "")
	if group != 0 {
		if err := ns.nl.LinkSetGroup(l, int(group)); err != nil {
			t.Fatalf("setting the group of %s: %v", name, err)
		}
	}
}

// TestRemoveBatches: Removes from many goroutines at once all return with their bridges gone;
// their bridges went in fewer group deletes than Removes, never more than maxDeleteBatch of
// them in the group at once; what is not ours (a link in the default group, one in another
// group, a bridge with our alias under another name) is still there.
func TestRemoveBatches(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const n = maxDeleteBatch + 8
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("batch/n%d", i)
		e.ensure(desiredN(keys[i], i))
	}
	e.ns.addGrouped(t, "foreign0", "foreign0p", 0)
	e.ns.addGrouped(t, "foreign7", "foreign7p", 7)
	e.ns.addBridge(t, "renamed0", Alias("batch/n0"))

	// The first group delete waits until the group is full: the Removes behind it mark their
	// bridges meanwhile, as they do while the kernel deletes a batch.
	var deletes atomic.Int32
	var most atomic.Int32
	var hookErr atomic.Value
	e.b.beforeGroupDelete = func() {
		first := deletes.Add(1) == 1
		deadline := time.Now().Add(20 * time.Second)
		for {
			names, err := e.ns.deleteGroupNames()
			if err != nil {
				hookErr.Store(err)
				return
			}
			marked := int32(len(names))
			if marked > most.Load() {
				most.Store(marked)
			}
			if !first || marked >= maxDeleteBatch || time.Now().After(deadline) {
				return
			}
			time.Sleep(5 * time.Millisecond) // polling the kernel's state
		}
	}

	var wg sync.WaitGroup
	errs := make([]error, n)
	for i, k := range keys {
		wg.Go(func() { errs[i] = e.b.Remove(ctx, k) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Remove(%s): %v", keys[i], err)
		}
	}
	if err := hookErr.Load(); err != nil {
		t.Fatalf("listing the group's links: %v", err)
	}
	for _, k := range keys {
		if l := e.ns.link(t, netbackend.BridgeName(k)); l != nil {
			t.Errorf("bridge %s of %s is still there after its Remove returned", l.Attrs().Name, k)
		}
	}
	if got := most.Load(); got != maxDeleteBatch {
		t.Errorf("most links in the group before a delete: %d, want the cap %d", got, maxDeleteBatch)
	}
	if got := deletes.Load(); got > n-maxDeleteBatch+2 {
		t.Errorf("%d group deletes for %d Removes, want at most %d: the Removes were not batched", got, n, n-maxDeleteBatch+2)
	}
	for _, name := range []string{"foreign0", "foreign0p", "foreign7", "foreign7p", "renamed0"} {
		if e.ns.link(t, name) == nil {
			t.Errorf("%s, not ours, was deleted", name)
		}
	}
	if l := e.ns.link(t, "foreign7"); l != nil && l.Attrs().Group != 7 {
		t.Errorf("group of foreign7 is %d, want 7", l.Attrs().Group)
	}
	if left := e.ns.inDeleteGroup(t); len(left) != 0 {
		t.Errorf("links left in the group: %v", left)
	}
	if keys, err := e.b.List(ctx); err != nil || len(keys) != 0 {
		t.Errorf("List after the Removes = %v, %v; want nothing", keys, err)
	}
}

// TestRemoveWhileEnsuring: Removes of some Networks running while others are created: every
// removed one's bridge is gone, every created one's is there, out of the group, and stays.
func TestRemoveWhileEnsuring(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const n = 12
	var old, fresh []string
	for i := range n {
		old = append(old, fmt.Sprintf("old/n%d", i))
		e.ensure(desiredN(old[i], i))
		fresh = append(fresh, fmt.Sprintf("new/n%d", i))
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2*n)
	for i := range n {
		wg.Go(func() {
			if err := e.b.Remove(ctx, old[i]); err != nil {
				errs <- fmt.Errorf("Remove(%s): %w", old[i], err)
			}
		})
		wg.Go(func() {
			if changes, _, err := e.b.Ensure(ctx, desiredN(fresh[i], n+i)); err != nil {
				errs <- fmt.Errorf("Ensure(%s): %w (changes %q)", fresh[i], err, changes)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// One more batch after them: it must not take a created bridge.
	e.ensure(desiredN("last/one", 2*n))
	if err := e.b.Remove(ctx, "last/one"); err != nil {
		t.Fatal(err)
	}
	for _, k := range old {
		if l := e.ns.link(t, netbackend.BridgeName(k)); l != nil {
			t.Errorf("bridge of removed %s is still there", k)
		}
	}
	for _, k := range fresh {
		l := e.ns.link(t, netbackend.BridgeName(k))
		if l == nil || !isOurs(l, k) {
			t.Errorf("bridge of created %s: %v, want ours", k, l)
		} else if l.Attrs().Group != 0 {
			t.Errorf("bridge of created %s is in group %d", k, l.Attrs().Group)
		}
	}
}

// TestDeleteGroupLeftovers: a bridge of ours left in the group by a Remove that did not finish
// (a crash between marking and deleting) is listed and deleted by a later Remove (the garbage
// collection's) of a restarted backend; one whose Network exists again is taken back out of the
// group by its Ensure and survives the next batch.
func TestDeleteGroupLeftovers(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	gone, back, other := "crash/gone", "crash/back", "crash/other"
	for i, k := range []string{gone, back, other} {
		e.ensure(desiredN(k, i))
	}
	for _, k := range []string{gone, back} {
		if err := e.ns.nl.LinkSetGroup(e.ns.link(t, netbackend.BridgeName(k)), DeleteGroup); err != nil {
			t.Fatal(err)
		}
		// The configuration goes first in Remove: gone's is gone, back's is there again.
	}
	if _, err := e.b.RemoveConfig(ctx, gone); err != nil {
		t.Fatal(err)
	}

	b := e.newBackend(Config{}) // the restarted agent
	keys, err := b.List(ctx)
	if err != nil || !slices.Contains(keys, gone) || !slices.Contains(keys, back) {
		t.Fatalf("List = %v, %v; want %s and %s among them", keys, err, gone, back)
	}
	changes, _, err := b.Ensure(ctx, desiredN(back, 1))
	if err != nil {
		t.Fatalf("Ensure(%s): %v", back, err)
	}
	if !slices.ContainsFunc(changes, func(c string) bool { return strings.Contains(c, "out of link group") }) {
		t.Errorf("Ensure(%s) changes %q, want the bridge taken out of the group", back, changes)
	}
	if l := e.ns.link(t, netbackend.BridgeName(back)); l == nil || l.Attrs().Group != 0 {
		t.Fatalf("bridge of %s after its Ensure: %v, want it in group 0", back, l)
	}

	// The collection's Remove of gone, and one more of other: back stays.
	for _, k := range []string{gone, other} {
		if err := b.Remove(ctx, k); err != nil {
			t.Fatalf("Remove(%s): %v", k, err)
		}
		if l := e.ns.link(t, netbackend.BridgeName(k)); l != nil {
			t.Errorf("bridge of %s still there after its Remove", k)
		}
	}
	if l := e.ns.link(t, netbackend.BridgeName(back)); l == nil || !isOurs(l, back) {
		t.Errorf("bridge of %s, whose Network exists again, was deleted", back)
	}
	if keys, err := b.List(ctx); err != nil || !slices.Equal(keys, []string{back}) {
		t.Errorf("List = %v, %v; want [%s]", keys, err, back)
	}
}

// TestGroupDeleteRefused: when the kernel refuses the group delete (here: the namespace's
// loopback, which cannot be deleted, was put into our group by someone else), each Remove
// deletes its own bridge, and the loopback is left alone.
func TestGroupDeleteRefused(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	if err := e.ns.nl.LinkSetGroup(e.ns.link(t, "lo"), DeleteGroup); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	keys := []string{"refused/a", "refused/b", "refused/c"}
	for i, k := range keys {
		e.ensure(desiredN(k, i))
	}
	errs := make([]error, len(keys))
	for i, k := range keys {
		wg.Go(func() { errs[i] = e.b.Remove(ctx, k) })
	}
	wg.Wait()
	for i, k := range keys {
		if errs[i] != nil {
			t.Errorf("Remove(%s): %v", k, errs[i])
		}
		if l := e.ns.link(t, netbackend.BridgeName(k)); l != nil {
			t.Errorf("bridge of %s still there after its Remove", k)
		}
	}
	if e.ns.link(t, "lo") == nil {
		t.Error("the loopback is gone")
	}
}

// TestRemoveConfigWithoutLock: RemoveConfig does not wait for the backend's lock, which the
// backend's netlink requests hold while the kernel deletes a batch of bridges; the Remove after
// it still deletes the bridge and finds the list gone.
func TestRemoveConfigWithoutLock(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	k := "unconf/a"
	e.ensure(desiredN(k, 0))
	type result struct {
		removed bool
		err     error
	}
	done := make(chan result, 1)
	e.b.mu.Lock() // as a request waiting for the rtnl lock holds it
	go func() {
		removed, err := e.b.RemoveConfig(ctx, k)
		done <- result{removed, err}
	}()
	select {
	case r := <-done:
		e.b.mu.Unlock()
		if r.err != nil || !r.removed {
			t.Fatalf("RemoveConfig = %v, %v; want true, nil", r.removed, r.err)
		}
	case <-time.After(10 * time.Second):
		e.b.mu.Unlock()
		<-done
		t.Fatal("RemoveConfig waited for the backend's lock")
	}
	if files := confFiles(t, e.confDir); len(files) != 0 {
		t.Errorf("configuration directory after RemoveConfig: %v", files)
	}
	if removed, err := e.b.RemoveConfig(ctx, k); err != nil || removed {
		t.Errorf("RemoveConfig again = %v, %v; want false, nil", removed, err)
	}
	if err := e.b.Remove(ctx, k); err != nil {
		t.Fatal(err)
	}
	if l := e.ns.link(t, netbackend.BridgeName(k)); l != nil {
		t.Errorf("bridge of %s still there after its Remove", k)
	}
}
