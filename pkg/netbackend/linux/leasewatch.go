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
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
	"k8s.io/klog/v2"
)

// leaseWatchOpened is called each time a Backend's lease watch is (again) in place (tests).
var leaseWatchOpened = func(*Backend) {}

// watchLeases sends to out the key of each Network whose host-local leases changed: a lease
// file (named by its address) created, removed or renamed in the Network's directory of
// host-local's data directory, or that directory created or removed. The CNI bridge plugin
// attaches a pod's veth to the bridge before host-local reserves its address, so the link
// notification of an ADD comes before its lease exists; this is what makes the lease count
// follow the ADD (and any release not tied to a link change) at once, with no polling.
//
// It uses inotify: one watch on the data directory and one on each Network's directory in it.
// While the data directory does not exist (host-local makes it on the node's first
// reservation) it looks for it again with backoff, at most every 5s, and creates nothing. When the kernel's event queue
// overflowed, every Network with a directory is sent; when the watch fails (the data directory
// removed, inotify unavailable) it is set up again with backoff, and every such Network is sent.
// It returns when ctx is done.
func (b *Backend) watchLeases(ctx context.Context, logger klog.Logger, out chan<- string) {
	send := func(key string) {
		select {
		case out <- key:
		case <-ctx.Done():
		}
	}
	sendAll := func() {
		keys, err := b.leaseDirKeys()
		if err != nil {
			logger.V(2).Info("Listing host-local's directories failed", "err", err)
		}
		for _, key := range keys {
			send(key)
		}
	}
	dataDir := filepath.Clean(b.ipamDataDir())
	backoff := resubscribeMin
	for attempt := 0; ctx.Err() == nil; attempt++ {
		w, err := b.openLeaseWatch(dataDir)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				// host-local makes it on the node's first reservation; nothing to count until
				// then, and the look once it exists counts what came meanwhile.
				logger.V(4).Info("host-local's data directory does not exist yet", "dir", dataDir, "retry", backoff)
			} else {
				logger.Error(err, "Watching host-local's leases failed; lease counts follow link changes and resyncs only until it works", "dir", dataDir, "retry", backoff)
			}
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, resubscribeMax)
			continue
		}
		backoff = resubscribeMin
		leaseWatchOpened(b)
		if attempt > 0 {
			sendAll()
		}
		b.pumpLeases(ctx, logger, w, dataDir, send, sendAll)
		_ = w.Close()
	}
}

// openLeaseWatch watches dataDir and each Network's directory in it.
func (b *Backend) openLeaseWatch(dataDir string) (*fsnotify.Watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := w.Add(dataDir); err != nil {
		_ = w.Close()
		return nil, err
	}
	keys, err := b.leaseDirKeys()
	if err != nil {
		_ = w.Close()
		return nil, err
	}
	for _, key := range keys {
		// A directory removed meanwhile is no error: its removal is seen on dataDir.
		if err := w.Add(b.leaseDir(key)); err != nil && !errors.Is(err, os.ErrNotExist) {
			_ = w.Close()
			return nil, err
		}
	}
	return w, nil
}

// pumpLeases handles w's events until ctx is done or the watch must be set up again.
func (b *Backend) pumpLeases(ctx context.Context, logger klog.Logger, w *fsnotify.Watcher, dataDir string, send func(string), sendAll func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case err, ok := <-w.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				logger.V(2).Info("Lease events were lost; looking at every Network again")
				sendAll()
				continue
			}
			logger.Error(err, "Watching host-local's leases failed; watching again")
			return
		case ev, ok := <-w.Events:
			if !ok {
				return
			}
			if ev.Name == dataDir && ev.Has(fsnotify.Remove|fsnotify.Rename) {
				logger.Info("host-local's data directory went; watching it again", "dir", dataDir)
				return
			}
			key, lease, ok := b.keyOfLeaseEvent(dataDir, ev.Name)
			if !ok || !ev.Has(fsnotify.Create|fsnotify.Remove|fsnotify.Rename) {
				continue // a lease's content written, host-local's lock, its last reserved address
			}
			if !lease && ev.Has(fsnotify.Create) {
				// A Network's directory made by host-local's first reservation: watch it, then
				// look (what it got before the watch is counted by that look).
				if err := w.Add(ev.Name); err != nil && !errors.Is(err, os.ErrNotExist) {
					logger.Error(err, "Watching a Network's leases failed; watching all again", "dir", ev.Name)
					send(key)
					return
				}
			}
			send(key)
		}
	}
}

// keyOfLeaseEvent maps the path of an event under dataDir to its Network's key: path is our
// Network's directory (lease false) or an address's lease file in it (lease true).
func (b *Backend) keyOfLeaseEvent(dataDir, path string) (key string, lease, ok bool) {
	rel, err := filepath.Rel(dataDir, path)
	if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
		return "", false, false
	}
	dir, file, nested := strings.Cut(rel, string(filepath.Separator))
	if key, ok = keyOfLeaseDir(dir); !ok {
		return "", false, false
	}
	if !nested {
		return key, false, true
	}
	if _, err := netip.ParseAddr(file); err != nil {
		return "", false, false
	}
	return key, true, true
}

// keyOfLeaseDir maps the name of a directory in host-local's data directory back to our
// Network's key (see NetworkName; names it cannot map back are not ours).
func keyOfLeaseDir(name string) (string, bool) {
	rest, ok := strings.CutPrefix(name, "samplecrd_")
	namespace, n, found := strings.Cut(rest, "_")
	if !ok || !found {
		return "", false
	}
	if key := namespace + "/" + n; NetworkName(key) == name {
		return key, true
	}
	return "", false
}
