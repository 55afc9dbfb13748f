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
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// leaseHolder returns the container ID to which host-local leased ip in key's network, "" when
// none: host-local records a lease as a file named by the address in its network's directory.
func (b *Backend) leaseHolder(key string, ip netip.Addr) string {
	content, err := os.ReadFile(filepath.Join(b.leaseDir(key), ip.String()))
	if err != nil {
		return ""
	}
	if id, _, _ := strings.Cut(strings.TrimSpace(string(content)), "\n"); strings.TrimSpace(id) != "" {
		return strings.TrimSpace(id)
	}
	return "(unknown container)"
}

// ipamDataDir is host-local's data directory: one directory per network name.
func (b *Backend) ipamDataDir() string {
	if b.cfg.IPAMDataDir != "" {
		return b.cfg.IPAMDataDir
	}
	return DefaultIPAMDataDir
}

// leaseDir is the directory in which host-local records key's leases.
func (b *Backend) leaseDir(key string) string {
	return filepath.Join(b.ipamDataDir(), NetworkName(key))
}

// Leases implements netbackend.LeaseReader.
func (b *Backend) Leases(_ context.Context, key string) ([]string, error) {
	if key == "" {
		return nil, netbackend.Errorf(netbackend.ReasonBackendError, "network key is empty")
	}
	leases, _, err := b.leases(key)
	if err != nil {
		return nil, fail(err, "reading host-local's leases of network %s", key)
	}
	return leases, nil
}

// leases returns the addresses host-local holds for key (a file named by each address), sorted,
// and whether host-local has a directory for key at all (it keeps one, with its lock file,
// after the last lease went).
func (b *Backend) leases(key string) ([]string, bool, error) {
	entries, err := os.ReadDir(b.leaseDir(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var out []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil && e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out, true, nil // ReadDir sorts by name
}

// leaseDirKeys returns the keys of the networks that have a directory of ours in host-local's
// data directory (named by NetworkName, so only names it can map back are recognised).
func (b *Backend) leaseDirKeys() ([]string, error) {
	entries, err := readDirIfExists(b.ipamDataDir())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range entries {
		if key, ok := keyOfLeaseDir(e.Name()); ok && e.IsDir() {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// LeaseHolder returns the container ID that holds ip in key's network, "" when none (the
// network controller names it in an AddressConflict).
func (b *Backend) LeaseHolder(key string, ip netip.Addr) string { return b.leaseHolder(key, ip) }
