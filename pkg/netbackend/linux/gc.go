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
	"io/fs"
	"os"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Remove implements netbackend.Backend: it deletes key's bridge and configuration if they are
// ours and leaves anything else with their names alone.
func (b *Backend) Remove(_ context.Context, key string) error {
	if key == "" {
		return netbackend.Errorf(netbackend.ReasonBackendError, "network key is empty")
	}
	name := netbackend.BridgeName(key)
	b.mu.RLock()
	defer b.mu.RUnlock()
	defer b.keys.lock(key)()
	// The configuration first: it is what a runtime ADDs with, and it goes at once, while the
	// kernel takes tens of milliseconds to unregister a bridge. A bridge left by a crash in
	// between has no Network and no configuration; List reports it and the collection removes it.
	if _, err := b.removeConfig(key); err != nil {
		return err
	}
	link, err := b.linkByName(name)
	if err != nil {
		return fail(err, "looking up bridge %s of network %s", name, key)
	}
	if link != nil && isOurs(link, key) {
		// Deleted in a batch with other Removes' bridges (groupdelete.go), without b.mu (key's
		// lock is kept), so that a Close waits for no batch it need not.
		b.mu.RUnlock()
		err := b.deleteBridge(link)
		b.mu.RLock()
		if err != nil {
			return fail(err, "deleting bridge %s of network %s", name, key)
		}
	}
	if err := b.removeSegment(key); err != nil {
		return err
	}
	staged, err := b.linkByName(stagingName(key))
	if err != nil {
		return fail(err, "looking up %s", stagingName(key))
	}
	if staged != nil && isStaged(staged, key) {
		if err := b.nl().LinkDel(staged); err != nil && !errors.Is(err, unix.ENODEV) {
			return fail(err, "deleting %s of network %s", stagingName(key), key)
		}
	}
	// host-local's reservations for the network: without the configuration no runtime can DEL
	// against it any more, so whatever is left there is a leak.
	leases := b.leaseDir(key)
	if _, err := os.Lstat(leases); err == nil {
		fileWrites.WithLabelValues("remove").Inc()
		if err := os.RemoveAll(leases); err != nil {
			return fail(err, "removing host-local's leftover reservations %s", leases)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(err, "looking at host-local's reservations %s", leases)
	}
	b.forget(key)
	return nil
}

// RemoveConfig implements netbackend.ConfigRemover. It takes no lock of the backend's, not even
// key's: Remove holds key's lock while its bridge waits for a batch of deletions, which holds
// the kernel's rtnl lock for up to 32 × 20 ms (groupdelete.go); behind a backend-wide lock, the
// removal of 1000 deleted Networks' lists stretched with the bridges' pace (8 s after the last
// delete with 32 workers). It touches only key's file, which it replaces with nothing: a removal racing
// Remove of key finds the file gone, and one racing Ensure of key (the Network created
// again) may remove the list Ensure just wrote, as it could under a lock when it ran just after
// Ensure; the controller then syncs the Network again (unconfigure.go), which writes it back.
func (b *Backend) RemoveConfig(_ context.Context, key string) (bool, error) {
	if key == "" {
		return false, netbackend.Errorf(netbackend.ReasonBackendError, "network key is empty")
	}
	return b.removeConfig(key)
}

// removeConfig removes key's configuration if it is ours. It needs no lock of the
// backend's (see RemoveConfig); Remove calls it under key's lock.
func (b *Backend) removeConfig(key string) (bool, error) {
	_, state, err := readConfig(b.cfg.CNIConfDir, key)
	if err != nil {
		return false, fail(err, "reading the CNI configuration of network %s", key)
	}
	if state != confOurs {
		return false, nil
	}
	path := ConfPath(b.cfg.CNIConfDir, key)
	fileWrites.WithLabelValues("remove").Inc()
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, fail(err, "removing CNI configuration %s", path)
	}
	if err := syncDir(b.cfg.CNIConfDir); err != nil {
		return false, fail(err, "syncing %s", b.cfg.CNIConfDir)
	}
	return true, nil
}

// List implements netbackend.Backend: the keys in the aliases of our bridges (including one
// left under its staging name) and in our configuration lists, sorted.
func (b *Backend) List(context.Context) ([]string, error) {
	b.mu.RLock()
	links, err := dump(b.nl().LinkList)
	b.mu.RUnlock()
	if err != nil {
		return nil, fail(err, "listing links")
	}
	var keys []string
	for _, l := range links {
		key, ok := KeyOfAlias(l.Attrs().Alias)
		switch {
		case ok && isOurs(l, key):
			keys = append(keys, key)
			b.remember(key, l.Attrs().Name, l.Attrs().Index)
		case ok && isStaged(l, key):
			keys = append(keys, key) // left by an interrupted creation; Remove deletes it
		case ok && isSegmentOf(l, key):
			keys = append(keys, key) // a VXLAN device left without its bridge; Remove deletes it
		}
	}
	confKeys, err := listConfigKeys(b.cfg.CNIConfDir)
	if err != nil {
		return nil, fail(err, "listing CNI configurations in %s", b.cfg.CNIConfDir)
	}
	for _, key := range confKeys {
		b.remember(key, netbackend.BridgeName(key), 0)
	}
	keys = append(keys, confKeys...)
	b.mu.RLock()
	filterKeys, err := b.filterKeys()
	if err == nil || nftUnsupported(err) {
		var sourceKeys []string
		sourceKeys, err = b.sourceFilterKeys()
		filterKeys = append(filterKeys, sourceKeys...)
	}
	b.mu.RUnlock()
	if err != nil && !nftUnsupported(err) {
		return nil, fail(err, "listing our nftables tables (bridge and inet %s*)", filterTablePrefix)
	}
	keys = append(keys, filterKeys...)
	leaseKeys, err := b.leaseDirKeys()
	if err != nil {
		return nil, fail(err, "listing host-local's data directory %s", b.ipamDataDir())
	}
	keys = append(keys, leaseKeys...)
	slices.Sort(keys)
	return slices.Compact(keys), nil
}
