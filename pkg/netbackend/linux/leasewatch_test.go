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
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// leaseWatches counts, per Backend, how often its lease watch was put in place.
type leaseWatches struct {
	mu     sync.Mutex
	opened map[*Backend]chan struct{}
}

var watchedLeases = &leaseWatches{opened: map[*Backend]chan struct{}{}}

func init() {
	leaseWatchOpened = func(b *Backend) {
		watchedLeases.mu.Lock()
		ch := watchedLeases.opened[b]
		watchedLeases.mu.Unlock()
		if ch != nil {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
	}
}

// openedCh returns the channel that receives each time b's lease watch is put in place.
func (l *leaseWatches) openedCh(b *Backend) chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	ch := make(chan struct{}, 16)
	l.opened[b] = ch
	return ch
}

func waitOpened(t *testing.T, ch chan struct{}, within time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(within):
		t.Fatalf("%s: the lease watch was not in place within %v", what, within)
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWatchNotifiesLeaseChanges: host-local's reservations and releases in a Network's
// directory notify the Network's key, its other files do not; a directory made after the
// watch started (the Network's first reservation) is watched from then on.
func TestWatchNotifiesLeaseChanges(t *testing.T) {
	e := newEnv(t)
	dataDir := t.TempDir()
	b := e.newBackend(Config{IPAMDataDir: dataDir})
	opened := watchedLeases.openedCh(b)
	const key, other = "default/net1", "default/net2"
	existing := filepath.Join(dataDir, NetworkName(key))
	if err := os.Mkdir(existing, 0o755); err != nil {
		t.Fatal(err)
	}
	w := e.startWatch(b)
	waitOpened(t, opened, 5*time.Second, "start")

	writeFile(t, filepath.Join(existing, "10.99.0.2"), "container-1\r\neth0")
	w.expect(t, key, "a lease reserved")
	writeFile(t, filepath.Join(existing, "last_reserved_ip.0"), "10.99.0.2")
	writeFile(t, filepath.Join(existing, "lock"), "")
	w.expectNone(t, key, 300*time.Millisecond, "host-local's lock and last reserved address written")
	if err := os.Remove(filepath.Join(existing, "10.99.0.2")); err != nil {
		t.Fatal(err)
	}
	w.expect(t, key, "a lease released")

	// The other Network's first reservation makes its directory, then the lease.
	dir := filepath.Join(dataDir, NetworkName(other))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	w.expect(t, other, "a Network's directory made")
	writeFile(t, filepath.Join(dir, "10.98.0.2"), "container-2\r\neth0")
	w.expect(t, other, "a lease in a directory made after the watch started")

	// Not ours: no notification.
	if err := os.Mkdir(filepath.Join(dataDir, "cbr0"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dataDir, "cbr0", "10.0.0.5"), "x")
	w.expectNone(t, key, 300*time.Millisecond, "another plugin's lease")

	// The Network's directory removed (the backend's Remove): notified.
	if err := os.RemoveAll(existing); err != nil {
		t.Fatal(err)
	}
	w.expect(t, key, "a Network's directory removed")
}

// TestWatchWaitsForTheDataDirectory: without host-local's data directory nothing is created;
// once host-local makes it, the watch is put in place and the Networks in it are notified.
func TestWatchWaitsForTheDataDirectory(t *testing.T) {
	e := newEnv(t)
	dataDir := filepath.Join(t.TempDir(), "networks")
	b := e.newBackend(Config{IPAMDataDir: dataDir})
	opened := watchedLeases.openedCh(b)
	w := e.startWatch(b)
	time.Sleep(200 * time.Millisecond) // a few attempts: none may create the directory
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatalf("the watch created host-local's data directory (or stat failed): %v", err)
	}
	const key = "default/net1"
	dir := filepath.Join(dataDir, NetworkName(key))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "10.99.0.2"), "container-1\r\neth0")
	waitOpened(t, opened, 10*time.Second, "data directory made")
	w.expect(t, key, "leases made before the watch was in place")
	writeFile(t, filepath.Join(dir, "10.99.0.3"), "container-2\r\neth0")
	w.expect(t, key, "a lease reserved afterwards")
}

func TestKeyOfLeaseEvent(t *testing.T) {
	b := &Backend{}
	dir := NetworkName("team/web")
	for _, tc := range []struct {
		path         string
		key          string
		lease, found bool
	}{
		{"/d/" + dir, "team/web", false, true},
		{"/d/" + dir + "/10.0.0.2", "team/web", true, true},
		{"/d/" + dir + "/fd00::2", "team/web", true, true},
		{"/d/" + dir + "/lock", "", false, false},
		{"/d/" + dir + "/last_reserved_ip.0", "", false, false},
		{"/d/cbr0/10.0.0.2", "", false, false},
		{"/d", "", false, false},
		{"/elsewhere/" + dir + "/10.0.0.2", "", false, false},
	} {
		key, lease, found := b.keyOfLeaseEvent("/d", tc.path)
		if key != tc.key || lease != tc.lease || found != tc.found {
			t.Errorf("%s: %q %v %v, want %q %v %v", tc.path, key, lease, found, tc.key, tc.lease, tc.found)
		}
	}
}
