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
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// These tests need no privileges.

func TestNetworkName(t *testing.T) {
	valid := regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`) // libcni's rule for network names
	seen := map[string]string{}
	for key, want := range map[string]string{
		"default/net1":         "samplecrd_default_net1",
		"kube-system/a-b":      "samplecrd_kube-system_a-b",
		"a/b_c":                "samplecrd_a_b-c_" + netbackend.BridgeName("a/b_c"),
		"a_b/c":                "samplecrd_a-b_c_" + netbackend.BridgeName("a_b/c"),
		"no-namespace":         "samplecrd_no-namespace_" + netbackend.BridgeName("no-namespace"),
		"ns/with space":        "samplecrd_ns_with-space_" + netbackend.BridgeName("ns/with space"),
		"ns/ünïcode":           "samplecrd_ns_-n-code_" + netbackend.BridgeName("ns/ünïcode"),
		"default/net1.v2":      "samplecrd_default_net1.v2",
		"default/UPPER-case-1": "samplecrd_default_UPPER-case-1",
	} {
		got := NetworkName(key)
		if got != want {
			t.Errorf("NetworkName(%q) = %q, want %q", key, got, want)
		}
		if !valid.MatchString(got) {
			t.Errorf("NetworkName(%q) = %q is not a valid CNI network name", key, got)
		}
		if other, dup := seen[got]; dup {
			t.Errorf("NetworkName(%q) = NetworkName(%q) = %q", key, other, got)
		}
		seen[got] = key
	}
}

func TestAlias(t *testing.T) {
	if got := Alias("default/net1"); got != "samplecrd.k8s.io/network=default/net1" {
		t.Errorf("Alias = %q", got)
	}
	for alias, want := range map[string]string{
		"samplecrd.k8s.io/network=default/net1": "default/net1",
		"samplecrd.k8s.io/network=":             "",
		"something else":                        "",
		"":                                      "",
	} {
		key, ok := KeyOfAlias(alias)
		if key != want || ok != (want != "") {
			t.Errorf("KeyOfAlias(%q) = %q, %v; want %q", alias, key, ok, want)
		}
	}
	// The longest key Kubernetes allows (63-character namespace and name) fits an alias.
	long := desired4(strings.Repeat("n", 63) + "/" + strings.Repeat("a", 63))
	if err := validate(long); err != nil {
		t.Errorf("a key of two 63-character names: %v", err)
	}
}

func TestRenderConfig(t *testing.T) {
	d := netbackend.Desired{Key: "default/net1", Prefix: netip.MustParsePrefix("10.99.0.7/24"), Gateway: netip.MustParseAddr("10.99.0.1"), MTU: 9000}
	a, err := renderConfig(d, "/var/lib/test-ipam", netbackend.BridgeMAC(d.Key), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := renderConfig(d, "/var/lib/test-ipam", netbackend.BridgeMAC(d.Key), nil)
	if string(a) != string(b) {
		t.Fatal("RenderConfig is not deterministic")
	}
	conf := parseConf(t, a)
	if conf.Key != d.Key || conf.Name != NetworkName(d.Key) || conf.Version != "1.1.0" {
		t.Errorf("key %q name %q version %q, want version 1.1.0", conf.Key, conf.Name, conf.Version)
	}
	// A runtime before CNI 1.1 (containerd 1.6, 1.7) reads only cniVersion: 1.0.0, whose results
	// it can parse; libcni 1.2 or later picks 1.1.0 from cniVersions (above).
	var raw struct {
		CNIVersion  string   `json:"cniVersion"`
		CNIVersions []string `json:"cniVersions"`
	}
	if err := json.Unmarshal(a, &raw); err != nil || raw.CNIVersion != "1.0.0" || !slices.Equal(raw.CNIVersions, []string{"1.0.0", "1.1.0"}) {
		t.Errorf("cniVersion %q, cniVersions %q (%v): want 1.0.0 and [1.0.0 1.1.0]", raw.CNIVersion, raw.CNIVersions, err)
	}
	if !conf.Bridge.HairpinMode || conf.Bridge.IPMasq || !conf.Bridge.IsGateway {
		t.Errorf("bridge plugin: hairpinMode %v ipMasq %v isGateway %v, want true, false (the default), true",
			conf.Bridge.HairpinMode, conf.Bridge.IPMasq, conf.Bridge.IsGateway)
	}
	masq := d
	masq.IPMasq = true
	if m, _ := renderConfig(masq, "/var/lib/test-ipam", netbackend.BridgeMAC(masq.Key), nil); !parseConf(t, m).Bridge.IPMasq {
		t.Errorf("ipMasq not set for a Network asking for it:\n%s", m)
	}
	ipam := conf.Bridge.IPAM
	if conf.Bridge.MTU != 9000 || ipam.DataDir != "/var/lib/test-ipam" ||
		ipam.Ranges[0][0] != (rangeConf{Subnet: "10.99.0.0/24", Gateway: "10.99.0.1"}) {
		t.Errorf("bridge configuration %+v", conf.Bridge)
	}
	// Without a data directory the field is absent, leaving host-local's default.
	c, _ := renderConfig(d, "", netbackend.BridgeMAC(d.Key), nil)
	if parseConf(t, c).Bridge.IPAM.DataDir != "" || regexp.MustCompile(`dataDir`).Match(c) {
		t.Errorf("dataDir present without being set:\n%s", c)
	}
	if string(c) == string(a) {
		t.Error("the data directory does not change the content")
	}
}

func TestWriteFileAtomicAndListConfigKeys(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "net.d") // created on demand
	if keys, err := listConfigKeys(dir); err != nil || len(keys) != 0 {
		t.Fatalf("listConfigKeys of a missing directory = %v, %v", keys, err)
	}
	d := desired4("default/net1")
	content, err := renderConfig(d, "", netbackend.BridgeMAC(d.Key), nil)
	if err != nil {
		t.Fatal(err)
	}
	path := ConfPath(dir, d.Key)
	if err := writeFileAtomic(path, []byte("old"), false); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(path, content, true); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, path); string(got) != string(content) {
		t.Fatalf("content %q", got)
	}
	if files := confFiles(t, dir); !slices.Equal(files, []string{filepath.Base(path)}) {
		t.Fatalf("directory holds %v", files)
	}
	// A key recorded in a file of another bridge's name, and a file without a key, are not ours.
	if err := os.WriteFile(filepath.Join(dir, "90-samplecrd-nwbbbbbbbbbbbbb.conflist"), content, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "90-samplecrd-nwccccccccccccc.conflist"), []byte("{"), 0o644); err != nil {
		t.Fatal(err)
	}
	if keys, err := listConfigKeys(dir); err != nil || !slices.Equal(keys, []string{d.Key}) {
		t.Fatalf("listConfigKeys = %v, %v", keys, err)
	}
	if _, state, err := readConfig(dir, d.Key); err != nil || state != confOurs {
		t.Fatalf("readConfig = %v, %v", state, err)
	}
	if _, state, err := readConfig(dir, "default/absent"); err != nil || state != confAbsent {
		t.Fatalf("readConfig of an absent key = %v, %v", state, err)
	}
}
