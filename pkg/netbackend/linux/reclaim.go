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
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// host-local (containernetworking/plugins v1.9.1, plugins/ipam/host-local/backend/disk) keeps a
// network's leases in <dataDir>/<network name>/: one file per address, named by the address and
// holding "<container id>\r\n<ifname>" (older versions: the container id alone), written once
// with O_EXCL in the ADD; last_reserved_ip.<range> files; and a file "lock" that it flocks
// (LOCK_EX) around every allocation and release. Releasing a lease here takes that same lock, so
// it never interleaves with a host-local ADD or DEL of the network.

// hostLocalLockFile is the name of host-local's lock file in a network's directory.
const hostLocalLockFile = "lock"

var _ netbackend.LeaseReleaser = (*Backend)(nil)

// LeaseRecords implements netbackend.LeaseReleaser.
func (b *Backend) LeaseRecords(_ context.Context, key string) ([]netbackend.Lease, error) {
	return ReadLeases(b.leaseDir(key))
}

// ReleaseLease implements netbackend.LeaseReleaser.
func (b *Backend) ReleaseLease(ctx context.Context, key string, l netbackend.Lease) (bool, error) {
	return ReleaseLease(ctx, b.leaseDir(key), l)
}

// ReadLeases returns the leases recorded in dir, one of host-local's network directories, sorted
// by address; none when dir does not exist. A record that cannot be read (it went meanwhile) is
// left out.
func ReadLeases(dir string) ([]netbackend.Lease, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []netbackend.Lease
	for _, e := range entries {
		addr, err := netip.ParseAddr(e.Name())
		if err != nil || !e.Type().IsRegular() {
			continue
		}
		l, err := readLease(filepath.Join(dir, e.Name()), addr)
		if err != nil {
			continue
		}
		out = append(out, l)
	}
	return out, nil // ReadDir sorts by name; host-local names files by the address
}

// readLease reads one lease record: the container id is its first line, and the write time its
// modification time (host-local never rewrites a record).
func readLease(path string, addr netip.Addr) (netbackend.Lease, error) {
	f, err := os.Open(path)
	if err != nil {
		return netbackend.Lease{}, err
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return netbackend.Lease{}, err
	}
	buf := make([]byte, 512) // a container id and an interface name
	n, err := f.Read(buf)
	if err != nil && n == 0 && !errors.Is(err, io.EOF) {
		return netbackend.Lease{}, err
	}
	id, _, _ := strings.Cut(string(buf[:n]), "\n")
	return netbackend.Lease{Address: addr, ContainerID: strings.TrimSpace(id), Written: info.ModTime()}, nil
}

// lockRetry is how often a release tries host-local's lock again while another holds it.
const lockRetry = 5 * time.Millisecond

// ReleaseLease removes l's record from dir, one of host-local's network directories, holding
// host-local's lock, and only when the record read under the lock still names l's container
// and was written when l's was; it says whether it removed it. It waits for the lock until ctx
// is done.
func ReleaseLease(ctx context.Context, dir string, l netbackend.Lease) (bool, error) {
	if l.ContainerID == "" {
		return false, fmt.Errorf("lease %s in %s names no container", l.Address, dir)
	}
	lock, err := os.OpenFile(filepath.Join(dir, hostLocalLockFile), os.O_RDONLY|os.O_CREATE, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // the network's directory went: nothing to release
	}
	if err != nil {
		return false, err
	}
	defer lock.Close() // closing drops the flock
	for {
		err := unix.Flock(int(lock.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return false, fmt.Errorf("locking %s: %w", lock.Name(), err)
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("waiting for host-local's lock %s: %w", lock.Name(), ctx.Err())
		case <-time.After(lockRetry):
		}
	}
	defer func() { _ = unix.Flock(int(lock.Fd()), unix.LOCK_UN) }()
	path := filepath.Join(dir, l.Address.String())
	now, err := readLease(path, l.Address)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil // released by its DEL meanwhile
	}
	if err != nil {
		return false, err
	}
	if now.ContainerID != l.ContainerID || !now.Written.Equal(l.Written) {
		return false, nil // the address was released and given again meanwhile
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	return true, nil
}
