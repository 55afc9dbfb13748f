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
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// The CNI configuration of a Network is the file <conf-dir>/90-samplecrd-<bridge>.conflist.
// It is ours when its name has that pattern and its top-level field KeyField records a key
// whose bridge name is <bridge>. libcni keeps unknown top-level fields of a configuration list
// to itself (it reads only cniVersion(s), name, plugins and its flags), so the field changes
// nothing for runtimes.
const (
	confPrefix = "90-samplecrd-"
	confSuffix = ".conflist"
	// KeyField is the top-level field of our configuration lists that records the Network key.
	KeyField = "samplecrd.k8s.io/network"
	// CNIVersion is the CNI specification version of the configuration lists (1.1 brings the
	// STATUS and GC verbs to runtimes). The lists say it in cniVersions, which runtimes on libcni
	// 1.2 or later read (and then use the highest version they support); older runtimes, such as
	// containerd 1.6 and 1.7, read cniVersion alone, so that stays BaseCNIVersion: they cannot
	// parse a plugin's 1.1.0 result ("unsupported CNI result version"), and every ADD would fail.
	CNIVersion = "1.1.0"
	// BaseCNIVersion is the configuration lists' cniVersion, for runtimes before CNI 1.1.
	BaseCNIVersion = "1.0.0"
	// DefaultIPAMDataDir is host-local's own default data directory.
	DefaultIPAMDataDir = "/var/lib/cni/networks"
)

// ConfPath is the path of key's configuration list in dir.
func ConfPath(dir, key string) string {
	return filepath.Join(dir, confPrefix+netbackend.BridgeName(key)+confSuffix)
}

// NetworkName is the CNI network name of key: "samplecrd_<namespace>_<name>". Kubernetes
// namespaces and names hold neither "_" nor "/", so this is unique for them; a key with other
// characters has them replaced and the bridge name appended to stay unique. The name is what
// host-local names its data directory after.
func NetworkName(key string) string {
	var b strings.Builder
	b.WriteString("samplecrd_")
	changed := false
	for _, r := range key {
		switch {
		case r == '/':
			b.WriteByte('_')
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
			changed = true
		}
	}
	if changed || strings.Count(key, "/") != 1 {
		b.WriteString("_" + netbackend.BridgeName(key))
	}
	return b.String()
}

type confList struct {
	CNIVersion  string   `json:"cniVersion"`
	CNIVersions []string `json:"cniVersions"`
	Name        string   `json:"name"`
	Key         string   `json:"samplecrd.k8s.io/network"`
	BridgeMAC   string   `json:"samplecrd.k8s.io/bridge-mac"`
	Plugins     []any    `json:"plugins"`
}

// MACField is the top-level field of our configuration lists that records the bridge's MAC, so
// that a repair or a restarted controller gives the bridge the MAC its pods know.
const MACField = "samplecrd.k8s.io/bridge-mac"

// recordedMAC returns the bridge MAC a configuration list of ours records.
func recordedMAC(content []byte) (net.HardwareAddr, bool) {
	var marker struct {
		MAC string `json:"samplecrd.k8s.io/bridge-mac"`
	}
	if content == nil || json.Unmarshal(content, &marker) != nil {
		return nil, false
	}
	mac, err := net.ParseMAC(marker.MAC)
	if err != nil || len(mac) != 6 || mac[0]&0x01 != 0 {
		return nil, false
	}
	return mac, true
}

type bridgeConf struct {
	Type        string   `json:"type"`
	Bridge      string   `json:"bridge"`
	IsGateway   bool     `json:"isGateway"`
	IPMasq      bool     `json:"ipMasq"`
	HairpinMode bool     `json:"hairpinMode"`
	MTU         int      `json:"mtu"`
	IPAM        ipamConf `json:"ipam"`
}

type portmapConf struct {
	Type         string          `json:"type"`
	Capabilities map[string]bool `json:"capabilities"`
	SNAT         bool            `json:"snat"`
}

type ipamConf struct {
	Type    string        `json:"type"`
	Ranges  [][]rangeConf `json:"ranges"`
	Routes  []routeConf   `json:"routes,omitempty"`
	DataDir string        `json:"dataDir,omitempty"`
}

type rangeConf struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart,omitempty"`
	RangeEnd   string `json:"rangeEnd,omitempty"`
	Gateway    string `json:"gateway"`
}

// blockRanges returns host-local's ranges for d.Blocks: one per block, each over the whole
// prefix (so the pod's address has the prefix's mask and the whole prefix is on-link) and
// limited to the block by rangeStart and rangeEnd. These are clipped to what host-local itself
// would hand out of the prefix (never the network address, nor the IPv4 broadcast address): an
// explicit rangeStart could otherwise be the network address. A block with nothing left after
// clipping gives no range. host-local keeps several ranges of one subnet in one range set
// apart by their start and end, and gives a pod one address per range set.
func blockRanges(d netbackend.Desired) []rangeConf {
	prefix := d.Prefix.Masked()
	lowest := prefix.Addr().Next()
	highest := lastAddr(prefix)
	if prefix.Addr().Is4() {
		highest = highest.Prev() // the broadcast address
	}
	var ranges []rangeConf
	for _, b := range d.Blocks {
		start, end := b.Masked().Addr(), lastAddr(b)
		if start.Less(lowest) {
			start = lowest
		}
		if highest.Less(end) {
			end = highest
		}
		if !start.IsValid() || !end.IsValid() || end.Less(start) {
			continue
		}
		ranges = append(ranges, rangeConf{Subnet: prefix.String(), RangeStart: start.String(), RangeEnd: end.String(), Gateway: d.Gateway.String()})
	}
	return ranges
}

// lastAddr is the highest address of p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	last, _ := netip.AddrFromSlice(a)
	return last
}

type routeConf struct {
	Dst string `json:"dst"`
}

// renderConfig returns the CNI configuration list for d: a "bridge" plugin on d's bridge
// (isGateway, hairpin mode so a pod reaches itself through a service, masquerading only when
// d.IPMasq, the bridge's MTU for the pods' interfaces) with "host-local" IPAM, then "portmap"
// with the portMappings capability (a pod's hostPorts). Without d.Blocks, host-local hands out
// the whole d.Prefix (never the gateway) with a default route; with d.Blocks, one range set
// of one range per block (see blockRanges) and a default route only if d.DefaultRoute. When
// the node has no address to hand out (d.Blocks empty but not nil, or every block clipped
// away) it returns nil: the node must have no configuration. ipamDataDir, when set, is
// host-local's dataDir. The list records bridgeMAC as the bridge's MAC (MACField). With attach,
// our plugin's entry comes first (Config.BridgeOnAttach). Equal inputs give equal bytes.
func renderConfig(d netbackend.Desired, ipamDataDir string, bridgeMAC net.HardwareAddr, attach *attachConf) ([]byte, error) {
	defaultRoute := "0.0.0.0/0"
	if d.Gateway.Is6() {
		defaultRoute = "::/0"
	}
	ranges := []rangeConf{{Subnet: d.Prefix.Masked().String(), Gateway: d.Gateway.String()}}
	routes := []routeConf{{Dst: defaultRoute}}
	if d.Blocks != nil {
		if ranges = blockRanges(d); len(ranges) == 0 {
			return nil, nil
		}
		if routes = nil; d.DefaultRoute {
			routes = []routeConf{{Dst: defaultRoute}}
		}
	}
	mtu := d.EffectiveMTU()
	list := confList{
		CNIVersion:  BaseCNIVersion,
		CNIVersions: []string{BaseCNIVersion, CNIVersion},
		Name:        NetworkName(d.Key),
		Key:         d.Key,
		BridgeMAC:   bridgeMAC.String(),
		Plugins: []any{
			bridgeConf{
				Type:        "bridge",
				Bridge:      netbackend.BridgeName(d.Key),
				IsGateway:   true,
				IPMasq:      d.IPMasq,
				HairpinMode: true,
				MTU:         mtu,
				IPAM: ipamConf{
					Type:    "host-local",
					Ranges:  [][]rangeConf{ranges},
					Routes:  routes,
					DataDir: ipamDataDir,
				},
			},
			portmapConf{Type: "portmap", Capabilities: map[string]bool{"portMappings": true}, SNAT: true},
		},
	}
	if attach != nil {
		list.Plugins = append([]any{*attach}, list.Plugins...)
	}
	out, err := json.MarshalIndent(list, "", "  ")
	if err != nil {
		return nil, err
	}
	out = append(out, '\n')
	// What we write must be what runtimes can load.
	if _, err := libcni.ConfListFromBytes(out); err != nil {
		return nil, fmt.Errorf("rendered CNI configuration for %s does not parse: %w", d.Key, err)
	}
	return out, nil
}

// configuredGateway returns the gateway a configuration list of ours gives the pods.
func configuredGateway(content []byte) (netip.Addr, bool) {
	var list struct {
		Plugins []struct {
			IPAM struct {
				Ranges [][]rangeConf `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if content == nil || json.Unmarshal(content, &list) != nil || len(list.Plugins) == 0 ||
		len(list.Plugins[0].IPAM.Ranges) == 0 || len(list.Plugins[0].IPAM.Ranges[0]) == 0 {
		return netip.Addr{}, false
	}
	gw, err := netip.ParseAddr(list.Plugins[0].IPAM.Ranges[0][0].Gateway)
	return gw, err == nil
}

// KeyOfConfig returns the key recorded in a configuration list, "" when it records none.
func KeyOfConfig(content []byte) string {
	var marker struct {
		Key string `json:"samplecrd.k8s.io/network"`
	}
	if json.Unmarshal(content, &marker) != nil {
		return ""
	}
	return marker.Key
}

type confState int

const (
	confAbsent confState = iota
	confOurs
	confForeign
)

// readConfig reads key's configuration list and tells whether it is ours.
func readConfig(dir, key string) ([]byte, confState, error) {
	content, err := os.ReadFile(ConfPath(dir, key))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, confAbsent, nil
	case err != nil:
		return nil, confAbsent, err
	case KeyOfConfig(content) != key:
		return content, confForeign, nil
	}
	return content, confOurs, nil
}

// readDirIfExists is os.ReadDir with a missing directory read as an empty one.
func readDirIfExists(dir string) ([]os.DirEntry, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return entries, err
}

// listConfigKeys returns the keys of our configuration lists in dir.
func listConfigKeys(dir string) ([]string, error) {
	entries, err := readDirIfExists(dir)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasPrefix(name, confPrefix) || !strings.HasSuffix(name, confSuffix) {
			continue
		}
		content, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed meanwhile
		}
		if err != nil {
			return nil, err
		}
		key := KeyOfConfig(content)
		if key != "" && name == confPrefix+netbackend.BridgeName(key)+confSuffix {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

// writeFileAtomic replaces path with content: a temporary file in the same directory (with an
// extension no CNI runtime loads), synced, then renamed over path. A reader sees the old or the
// new content, never a part, and after a crash path holds a whole content or none.
//
// replacing also syncs the directory after the rename, so that after a crash the old content
// cannot come back: it may name ranges the node has since given back (a released block), and a
// runtime reading it after a reboot, before the agent runs, would hand out addresses another
// node now owns. A configuration written where there was none needs no directory sync: after a
// crash there is then no file or the whole one, and the node still holds its blocks (they are
// released only after the file is durably removed), so a new Network costs one fsync, not two.
func writeFileAtomic(path string, content []byte, replacing bool) (err error) {
	fileWrites.WithLabelValues("write").Inc()
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err = f.Write(content); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp, path); err != nil {
		return err
	}
	if !replacing {
		return nil
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer func() { _ = d.Close() }()
	return d.Sync()
}

// prefixOf converts a netlink address to a netip.Prefix.
func prefixOf(ip []byte, ones int) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(ip)
	if !ok {
		return netip.Prefix{}, false
	}
	return netip.PrefixFrom(a.Unmap(), ones), true
}
