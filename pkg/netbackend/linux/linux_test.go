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
	"encoding/json"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/containernetworking/cni/libcni"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// parsedConf is what the tests read back from a written configuration list.
type parsedConf struct {
	Key     string
	Name    string
	Version string
	Bridge  bridgeConf
	Portmap portmapConf
}

// parseConf parses content the way runtimes do (libcni) and returns the fields we set.
func parseConf(t *testing.T, content []byte) parsedConf {
	t.Helper()
	list, err := libcni.ConfListFromBytes(content)
	if err != nil {
		t.Fatalf("libcni.ConfListFromBytes: %v\n%s", err, content)
	}
	if len(list.Plugins) != 2 {
		t.Fatalf("configuration has %d plugins, want 2 (bridge, portmap)", len(list.Plugins))
	}
	if list.Plugins[0].Network.Type != "bridge" || list.Plugins[1].Network.Type != "portmap" {
		t.Fatalf("plugin types %q, %q, want bridge, portmap", list.Plugins[0].Network.Type, list.Plugins[1].Network.Type)
	}
	if !list.Plugins[1].Network.Capabilities["portMappings"] {
		t.Fatalf("portmap without the portMappings capability: %s", list.Plugins[1].Bytes)
	}
	var br bridgeConf
	if err := json.Unmarshal(list.Plugins[0].Bytes, &br); err != nil {
		t.Fatalf("plugin configuration: %v", err)
	}
	var pm portmapConf
	if err := json.Unmarshal(list.Plugins[1].Bytes, &pm); err != nil {
		t.Fatalf("plugin configuration: %v", err)
	}
	return parsedConf{Key: KeyOfConfig(content), Name: list.Name, Version: list.CNIVersion, Bridge: br, Portmap: pm}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func hasChange(changes []string, substr string) bool {
	return slices.ContainsFunc(changes, func(c string) bool { return strings.Contains(c, substr) })
}

func TestEnsureCreatesBridgeAndConfig(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/net1")
	d.MTU = 1400
	bridge := netbackend.BridgeName(d.Key)

	changes := e.ensure(d)
	for _, want := range []string{"created bridge " + bridge, "added address 10.99.0.1/24", "set " + bridge + " up", "wrote CNI configuration"} {
		if !hasChange(changes, want) {
			t.Errorf("changes %q lack %q", changes, want)
		}
	}

	l := e.ns.link(t, bridge)
	if l == nil {
		t.Fatalf("bridge %s not created in the namespace", bridge)
	}
	if l.Type() != "bridge" {
		t.Errorf("link type %q, want bridge", l.Type())
	}
	if got, want := l.Attrs().Alias, "samplecrd.k8s.io/network=default/net1"; got != want {
		t.Errorf("alias %q, want %q", got, want)
	}
	if l.Attrs().MTU != 1400 {
		t.Errorf("MTU %d, want 1400", l.Attrs().MTU)
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("bridge is not up")
	}
	if got, want := e.ns.globalAddrs(t, bridge), []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24")}; !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v", got, want)
	}
	if hostHasLink(bridge) {
		t.Fatalf("bridge %s appeared in the test process's own namespace", bridge)
	}

	path := ConfPath(e.confDir, d.Key)
	if filepath.Base(path) != "90-samplecrd-"+bridge+".conflist" {
		t.Errorf("configuration file %s", path)
	}
	if files := confFiles(t, e.confDir); !slices.Equal(files, []string{filepath.Base(path)}) {
		t.Errorf("configuration directory holds %v, want only %s (no temporary files)", files, filepath.Base(path))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("configuration file mode: %v, %v", fi, err)
	}
	conf := parseConf(t, mustRead(t, path))
	if conf.Version != "1.1.0" || conf.Name != "samplecrd_default_net1" || conf.Key != d.Key {
		t.Errorf("configuration version %q name %q key %q", conf.Version, conf.Name, conf.Key)
	}
	br := conf.Bridge
	if br.Bridge != bridge || !br.IsGateway || br.IPMasq || br.MTU != 1400 || br.IPAM.Type != "host-local" {
		t.Errorf("bridge plugin configuration %+v", br)
	}
	if len(br.IPAM.Ranges) != 1 || len(br.IPAM.Ranges[0]) != 1 ||
		br.IPAM.Ranges[0][0] != (rangeConf{Subnet: "10.99.0.0/24", Gateway: "10.99.0.1"}) {
		t.Errorf("IPAM ranges %+v", br.IPAM.Ranges)
	}
	if len(br.IPAM.Routes) != 1 || br.IPAM.Routes[0].Dst != "0.0.0.0/0" {
		t.Errorf("IPAM routes %+v", br.IPAM.Routes)
	}

	a, err := e.b.Observe(context.Background(), d.Key)
	if err != nil || a == nil {
		t.Fatalf("Observe = %v, %v", a, err)
	}
	if a.Bridge != bridge || !a.Up || a.MTU != 1400 || !slices.Equal(a.Addresses, []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24")}) ||
		string(a.CNIConfig) != string(mustRead(t, path)) {
		t.Errorf("Observe = %+v", a)
	}

	// A resync of the unchanged Network writes nothing.
	ino := inode(t, path)
	if changes := e.ensure(d); len(changes) != 0 {
		t.Fatalf("second Ensure changed %q, want nothing", changes)
	}
	if inode(t, path) != ino {
		t.Errorf("second Ensure rewrote the configuration file")
	}

	// A changed MTU changes the MTU and the configuration (the pods' MTU), nothing else.
	d.MTU = 0
	changes = e.ensure(d)
	if len(changes) != 2 || !hasChange(changes, "set MTU of "+bridge+" from 1400 to 1500") || !hasChange(changes, "wrote CNI configuration") {
		t.Errorf("changes after the MTU changed: %q", changes)
	}
	if l := e.ns.link(t, bridge); l.Attrs().MTU != 1500 {
		t.Errorf("MTU %d, want 1500", l.Attrs().MTU)
	}

	// A changed prefix replaces the address.
	d.Prefix, d.Gateway = netip.MustParsePrefix("10.98.0.0/16"), netip.MustParseAddr("10.98.0.254")
	changes = e.ensure(d)
	if !hasChange(changes, "removed stale address 10.99.0.1/24") || !hasChange(changes, "added address 10.98.0.254/16") || len(changes) != 3 {
		t.Errorf("changes after the prefix changed: %q", changes)
	}
	if got, want := e.ns.globalAddrs(t, bridge), []netip.Prefix{netip.MustParsePrefix("10.98.0.254/16")}; !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v", got, want)
	}
	if conf := parseConf(t, mustRead(t, path)); conf.Bridge.IPAM.Ranges[0][0] != (rangeConf{Subnet: "10.98.0.0/16", Gateway: "10.98.0.254"}) {
		t.Errorf("IPAM ranges after the prefix changed: %+v", conf.Bridge.IPAM.Ranges)
	}
	if changes := e.ensure(d); len(changes) != 0 {
		t.Fatalf("Ensure after the repair changed %q", changes)
	}
}

func TestEnsureRepairsConfigDrift(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/net1")
	e.ensure(d)
	path := ConfPath(e.confDir, d.Key)
	want := mustRead(t, path)

	// Edited by hand (still recording the key): rewritten.
	edited := strings.Replace(string(want), `"ipMasq": false`, `"ipMasq": true`, 1)
	if edited == string(want) {
		t.Fatal("test bug: the edit changed nothing")
	}
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if changes := e.ensure(d); len(changes) != 1 || !hasChange(changes, "wrote CNI configuration") {
		t.Errorf("changes after the edit: %q", changes)
	}
	if got := mustRead(t, path); string(got) != string(want) {
		t.Errorf("configuration after the repair:\n%s\nwant\n%s", got, want)
	}

	// Deleted by hand: written again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if changes := e.ensure(d); len(changes) != 1 || !hasChange(changes, "wrote CNI configuration") {
		t.Errorf("changes after the deletion: %q", changes)
	}
	if got := mustRead(t, path); string(got) != string(want) {
		t.Errorf("configuration after the repair differs")
	}
}

func TestEnsureRejectsInvalidDesired(t *testing.T) {
	e := newEnv(t)
	for name, d := range map[string]netbackend.Desired{
		"empty key":        {Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1")},
		"gateway outside":  {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.1.1")},
		"family mismatch":  {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("fd00::1")},
		"MTU out of range": {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1"), MTU: 70000},
		"key too long":     {Key: "a/" + strings.Repeat("x", 300), Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1")},
	} {
		if _, _, err := e.b.Ensure(context.Background(), d); err == nil {
			t.Errorf("%s: Ensure succeeded", name)
		}
	}
	if keys, err := e.b.List(context.Background()); err != nil || len(keys) != 0 {
		t.Errorf("invalid desires left %v, %v", keys, err)
	}
}

func TestNewFailsOnMissingNamespace(t *testing.T) {
	if _, err := New(Config{NetNSPath: "/var/run/netns/does-not-exist-netbackend", CNIConfDir: t.TempDir()}); err == nil {
		t.Fatal("New with a missing namespace succeeded")
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a configuration directory succeeded")
	}
}
