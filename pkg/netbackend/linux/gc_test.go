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
	"slices"
	"testing"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

func TestRemoveAndList(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	k1, k2, k3 := "ns1/a", "ns2/b", "ns3/orphan"
	d2 := desired4(k2)
	d2.Prefix, d2.Gateway = netip.MustParsePrefix("10.97.0.0/24"), netip.MustParseAddr("10.97.0.1")
	e.ensure(desired4(k1))
	e.ensure(d2)

	// An orphaned configuration (its bridge gone) and an orphaned bridge (its configuration gone).
	d3 := desired4(k3)
	d3.Prefix, d3.Gateway = netip.MustParsePrefix("10.96.0.0/24"), netip.MustParseAddr("10.96.0.1")
	conf3, err := renderConfig(d3, "", netbackend.BridgeMAC(d3.Key), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ConfPath(e.confDir, k3), conf3, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ConfPath(e.confDir, k2)); err != nil {
		t.Fatal(err)
	}
	// Not ours: a file of our pattern recording a key of another bridge, an unrelated file,
	// a bridge with our alias under another name.
	if err := os.WriteFile(filepath.Join(e.confDir, "90-samplecrd-nwaaaaaaaaaaaaa.conflist"), conf3, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.confDir, "10-other.conflist"), []byte(`{"name":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ns.addBridge(t, "renamed0", Alias("ns4/renamed"))

	keys, err := e.b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{k1, k2, k3}; !slices.Equal(keys, want) {
		t.Fatalf("List = %v, want %v", keys, want)
	}
	if a, err := e.b.Observe(ctx, k3); err != nil || a == nil || a.Bridge != "" || string(a.CNIConfig) != string(conf3) {
		t.Errorf("Observe of the orphaned configuration = %+v, %v", a, err)
	}
	if a, err := e.b.Observe(ctx, k2); err != nil || a == nil || a.Bridge == "" || a.CNIConfig != nil {
		t.Errorf("Observe of the orphaned bridge = %+v, %v", a, err)
	}

	for _, k := range []string{k1, k2, k3} {
		if err := e.b.Remove(ctx, k); err != nil {
			t.Fatalf("Remove(%s): %v", k, err)
		}
		if l := e.ns.link(t, netbackend.BridgeName(k)); l != nil {
			t.Errorf("Remove(%s) left the bridge", k)
		}
		if _, err := os.Stat(ConfPath(e.confDir, k)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Remove(%s) left the configuration: %v", k, err)
		}
		if a, err := e.b.Observe(ctx, k); a != nil || err != nil {
			t.Errorf("Observe(%s) after Remove = %+v, %v", k, a, err)
		}
	}
	if err := e.b.Remove(ctx, "ns9/never-existed"); err != nil {
		t.Errorf("Remove of nothing: %v", err)
	}
	if keys, err := e.b.List(ctx); err != nil || len(keys) != 0 {
		t.Errorf("List after Remove = %v, %v", keys, err)
	}
	// What was not ours is still there.
	if l := e.ns.link(t, "renamed0"); l == nil {
		t.Errorf("the bridge renamed0 was deleted")
	}
	if files := confFiles(t, e.confDir); !slices.Equal(files, []string{"10-other.conflist", "90-samplecrd-nwaaaaaaaaaaaaa.conflist"}) {
		t.Errorf("configuration directory after Remove: %v", files)
	}
}

// TestRemoveCleansHostLocalState: what host-local left for the network (lock, last reserved
// address, leases the runtime never released) goes with the Network; other networks' stay.
func TestRemoveCleansHostLocalState(t *testing.T) {
	e := newEnv(t)
	ipamDir := t.TempDir()
	e.b = e.newBackend(Config{IPAMDataDir: ipamDir})
	d := desired4("default/leases")
	e.ensure(d)
	mine := filepath.Join(ipamDir, NetworkName(d.Key))
	other := filepath.Join(ipamDir, NetworkName("default/other"))
	for _, dir := range []string{mine, other} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"lock", "last_reserved_ip.0", "10.99.0.7"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.b.Remove(context.Background(), d.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Errorf("host-local's directory %s after Remove: %v, want it gone", mine, err)
	}
	if _, err := os.Stat(filepath.Join(other, "10.99.0.7")); err != nil {
		t.Errorf("another network's lease went too: %v", err)
	}
}

// TestLeasesObservedAndCollected: Observe reports host-local's leases (a runtime's DEL removes
// the veth before it releases the address, so the controller waits for them), and a directory
// host-local left for a Network that is gone (a DEL that finished after the Network's removal
// recreates it with its lock file) is listed, observed and removed like any leftover of ours.
func TestLeasesObservedAndCollected(t *testing.T) {
	e := newEnv(t)
	ipamDir := t.TempDir()
	e.b = e.newBackend(Config{IPAMDataDir: ipamDir})
	ctx := context.Background()
	d := desired4("default/leases")
	e.ensure(d)
	mine := filepath.Join(ipamDir, NetworkName(d.Key))
	write := func(dir string, files ...string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("container\neth0"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(mine, "lock", "last_reserved_ip.0", "10.99.0.7", "10.99.0.9")
	a, err := e.b.Observe(ctx, d.Key)
	if err != nil || a == nil || !slices.Equal(a.Leases, []string{"10.99.0.7", "10.99.0.9"}) {
		t.Fatalf("Observe with two leases: %+v, %v; want leases 10.99.0.7, 10.99.0.9", a, err)
	}
	if leases, err := e.b.Leases(ctx, d.Key); err != nil || !slices.Equal(leases, a.Leases) {
		t.Fatalf("Leases: %v, %v; want what Observe reports, %v", leases, err, a.Leases)
	}
	if leases, err := e.b.Leases(ctx, "default/none"); err != nil || leases != nil {
		t.Fatalf("Leases of a Network without a directory: %v, %v; want none", leases, err)
	}

	// Only host-local's directory is left of a Network that is gone.
	gone := "default/gone"
	leftover := filepath.Join(ipamDir, NetworkName(gone))
	write(leftover, "lock")
	write(filepath.Join(ipamDir, "someone-elses-network"), "lock", "10.1.0.2")
	keys, err := e.b.List(ctx)
	if err != nil || !slices.Contains(keys, gone) || !slices.Contains(keys, d.Key) || len(keys) != 2 {
		t.Fatalf("List: %v, %v; want %s and %s", keys, err, d.Key, gone)
	}
	if a, err := e.b.Observe(ctx, gone); err != nil || a == nil || a.Bridge != "" || len(a.Leases) != 0 {
		t.Fatalf("Observe of a leftover directory: %+v, %v; want something of ours with no bridge and no leases", a, err)
	}
	if err := e.b.Remove(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover directory after Remove: %v", err)
	}
	if a, err := e.b.Observe(ctx, gone); err != nil || a != nil {
		t.Errorf("Observe after Remove: %+v, %v; want nothing", a, err)
	}
	if _, err := os.Stat(filepath.Join(ipamDir, "someone-elses-network", "10.1.0.2")); err != nil {
		t.Errorf("another network's lease: %v", err)
	}
}
