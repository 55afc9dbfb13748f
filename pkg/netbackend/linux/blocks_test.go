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
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// pluginDir returns a directory holding the bridge, host-local and portmap plugins: the
// pre-built ones in _output/bin/cni when they are there, else freshly built ones.
func pluginDir(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "..", "..", "_output", "bin", "cni"))
	if err == nil {
		found := true
		for _, p := range []string{"bridge", "host-local", "portmap"} {
			if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
				found = false
			}
		}
		if found {
			return dir
		}
	}
	return buildPlugins(t)
}

// cniPod attaches a new pod namespace to node's network with the configuration list at
// confPath, as a runtime would (libcni, plugins started from the node's namespace), and
// deletes it again when the test ends. It returns the pod, the result, and ADD's error.
func cniPod(t *testing.T, plugins string, node *testNS, confPath, id string) (*testNS, *types100.Result, error) {
	t.Helper()
	list, err := libcni.ConfListFromFile(confPath)
	if err != nil {
		t.Fatalf("loading %s: %v", confPath, err)
	}
	pod := newNS(t, "pod")
	cni := libcni.NewCNIConfigWithCacheDir([]string{plugins}, t.TempDir(), nil)
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: pod.path, IfName: "eth0"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var res *types100.Result
	err = inNS(node.path, func() error {
		r, err := cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		res, err = types100.NewResultFromResult(r)
		return err
	})
	t.Cleanup(func() {
		_ = inNS(node.path, func() error { return cni.DelNetworkList(context.Background(), list, rt) })
	})
	return pod, res, err
}

// resultAddr is the one address of a CNI result.
func resultAddr(t *testing.T, res *types100.Result) netip.Addr {
	t.Helper()
	if len(res.IPs) != 1 {
		t.Fatalf("CNI ADD result has %d addresses, want 1: %+v", len(res.IPs), res)
	}
	p, ok := prefixOf(res.IPs[0].Address.IP, 0)
	if !ok {
		t.Fatalf("CNI ADD result address %v", res.IPs[0].Address)
	}
	return p.Addr()
}

// defaultRoutes returns the default routes of the pod's eth0.
func defaultRoutes(t *testing.T, pod *testNS, family int) []netlink.Route {
	t.Helper()
	eth0 := pod.link(t, "eth0")
	if eth0 == nil {
		t.Fatal("the pod has no eth0")
	}
	routes, err := pod.nl.RouteList(eth0, family)
	if err != nil {
		t.Fatal(err)
	}
	var out []netlink.Route
	for _, r := range routes {
		if r.Dst == nil || r.Dst.IP.IsUnspecified() && func() bool { ones, _ := r.Dst.Mask.Size(); return ones == 0 }() {
			out = append(out, r)
		}
	}
	return out
}

func TestRenderConfigBlocks(t *testing.T) {
	d := desired4("default/blocks")
	d.Blocks = []netip.Prefix{netip.MustParsePrefix("10.99.0.0/28"), netip.MustParsePrefix("10.99.0.240/28"),
		netip.MustParsePrefix("10.99.0.64/26")}
	content, err := renderConfig(d, "", netbackend.BridgeMAC(d.Key), nil)
	if err != nil {
		t.Fatal(err)
	}
	ipam := parseConf(t, content).Bridge.IPAM
	want := [][]rangeConf{{
		{Subnet: "10.99.0.0/24", RangeStart: "10.99.0.1", RangeEnd: "10.99.0.15", Gateway: "10.99.0.1"},    // no network address
		{Subnet: "10.99.0.0/24", RangeStart: "10.99.0.240", RangeEnd: "10.99.0.254", Gateway: "10.99.0.1"}, // no broadcast
		{Subnet: "10.99.0.0/24", RangeStart: "10.99.0.64", RangeEnd: "10.99.0.127", Gateway: "10.99.0.1"},
	}}
	if len(ipam.Ranges) != 1 || !slices.Equal(ipam.Ranges[0], want[0]) {
		t.Errorf("ranges %+v, want one range set %+v", ipam.Ranges, want)
	}
	if len(ipam.Routes) != 0 || strings.Contains(string(content), `"routes"`) {
		t.Errorf("routes %+v without DefaultRoute, want none", ipam.Routes)
	}
	d.DefaultRoute = true
	content, _ = renderConfig(d, "", netbackend.BridgeMAC(d.Key), nil)
	if r := parseConf(t, content).Bridge.IPAM.Routes; len(r) != 1 || r[0].Dst != "0.0.0.0/0" {
		t.Errorf("routes %+v with DefaultRoute, want 0.0.0.0/0", r)
	}

	// IPv6: the last address of the prefix is an address like any other.
	d6 := netbackend.Desired{Key: "default/blocks6", Prefix: netip.MustParsePrefix("fd00:99::/64"), Gateway: netip.MustParseAddr("fd00:99::1"),
		Blocks: []netip.Prefix{netip.MustParsePrefix("fd00:99::/120"), netip.MustParsePrefix("fd00:99::ffff:ffff:ffff:ff00/120")}, DefaultRoute: true}
	content, err = renderConfig(d6, "", netbackend.BridgeMAC(d6.Key), nil)
	if err != nil {
		t.Fatal(err)
	}
	ipam = parseConf(t, content).Bridge.IPAM
	want6 := []rangeConf{
		{Subnet: "fd00:99::/64", RangeStart: "fd00:99::1", RangeEnd: "fd00:99::ff", Gateway: "fd00:99::1"},
		{Subnet: "fd00:99::/64", RangeStart: "fd00:99::ffff:ffff:ffff:ff00", RangeEnd: "fd00:99::ffff:ffff:ffff:ffff", Gateway: "fd00:99::1"},
	}
	if len(ipam.Ranges) != 1 || !slices.Equal(ipam.Ranges[0], want6) || len(ipam.Routes) != 1 || ipam.Routes[0].Dst != "::/0" {
		t.Errorf("IPv6 ranges %+v routes %+v, want %+v and ::/0", ipam.Ranges, ipam.Routes, want6)
	}

	// No block (or only blocks clipped away): no configuration at all.
	for _, blocks := range [][]netip.Prefix{{}, {netip.MustParsePrefix("10.99.0.0/32")}, {netip.MustParsePrefix("10.99.0.255/32")}} {
		d.Blocks = blocks
		if content, err := renderConfig(d, "", netbackend.BridgeMAC(d.Key), nil); err != nil || content != nil {
			t.Errorf("blocks %v: configuration %s, %v; want none", blocks, content, err)
		}
	}
	// nil Blocks: the whole prefix with a default route, exactly as before blocks existed.
	d.Blocks, d.DefaultRoute = nil, false
	content, _ = renderConfig(d, "", netbackend.BridgeMAC(d.Key), nil)
	ipam = parseConf(t, content).Bridge.IPAM
	if len(ipam.Ranges[0]) != 1 || ipam.Ranges[0][0] != (rangeConf{Subnet: "10.99.0.0/24", Gateway: "10.99.0.1"}) ||
		len(ipam.Routes) != 1 || ipam.Routes[0].Dst != "0.0.0.0/0" || strings.Contains(string(content), "rangeStart") {
		t.Errorf("without blocks: ranges %+v routes %+v", ipam.Ranges, ipam.Routes)
	}
}

func TestValidateBlocks(t *testing.T) {
	for name, blocks := range map[string][]netip.Prefix{
		"outside":     {netip.MustParsePrefix("10.98.0.0/28")},
		"larger":      {netip.MustParsePrefix("10.99.0.0/23")},
		"host bits":   {netip.MustParsePrefix("10.99.0.1/28")},
		"family":      {netip.MustParsePrefix("fd00::/120")},
		"overlapping": {netip.MustParsePrefix("10.99.0.0/28"), netip.MustParsePrefix("10.99.0.8/29")},
		"invalid":     {{}},
	} {
		d := desired4("default/v")
		d.Blocks = blocks
		if err := d.Validate(); err == nil {
			t.Errorf("%s: blocks %v accepted", name, blocks)
		}
	}
	d := desired4("default/v")
	d.Blocks = []netip.Prefix{netip.MustParsePrefix("10.99.0.0/28"), netip.MustParsePrefix("10.99.0.16/28")}
	if err := d.Validate(); err != nil {
		t.Errorf("disjoint blocks: %v", err)
	}
}

// TestBlocksTwoNodes realises one Network on two "nodes" with disjoint blocks, separate
// configuration and host-local data directories, and attaches pods with the real plugins until
// each node runs out: every address is one of its own node's blocks, never the gateway, no
// address is handed out twice across the nodes, and the pods get no default route.
func TestBlocksTwoNodes(t *testing.T) {
	requireRoot(t)
	plugins := pluginDir(t)
	d := desired4("default/blocks")
	blocks := map[string][]netip.Prefix{
		"a": {netip.MustParsePrefix("10.99.0.0/30"), netip.MustParsePrefix("10.99.0.8/31")},   // .2 .3 .8 .9 (.1 is the gateway)
		"b": {netip.MustParsePrefix("10.99.0.4/31"), netip.MustParsePrefix("10.99.0.254/31")}, // .4 .5 .254
	}
	capacity := map[string]int{"a": 4, "b": 3}
	seen := map[netip.Addr]string{}
	for _, node := range []string{"a", "b"} {
		e := newEnv(t)
		b := e.newBackend(Config{IPAMDataDir: t.TempDir()})
		nd := d
		nd.Blocks = blocks[node]
		if _, _, err := b.Ensure(context.Background(), nd); err != nil {
			t.Fatalf("node %s: Ensure: %v", node, err)
		}
		conf := ConfPath(e.confDir, d.Key)
		for i := 0; i <= capacity[node]; i++ {
			pod, res, err := cniPod(t, plugins, e.ns, conf, node+"-pod-"+string(rune('0'+i)))
			if i == capacity[node] {
				if err == nil {
					t.Errorf("node %s: pod %d got %v, but the node's blocks hold only %d addresses", node, i, res.IPs, capacity[node])
				}
				break
			}
			if err != nil {
				t.Fatalf("node %s: CNI ADD of pod %d: %v", node, i, err)
			}
			ip := resultAddr(t, res)
			if !slices.ContainsFunc(blocks[node], func(p netip.Prefix) bool { return p.Contains(ip) }) || ip == d.Gateway {
				t.Errorf("node %s: pod %d got %s, outside the node's blocks %v (or the gateway)", node, i, ip, blocks[node])
			}
			if other, dup := seen[ip]; dup {
				t.Errorf("node %s: pod %d got %s, already handed out on %s", node, i, ip, other)
			}
			seen[ip] = node
			if got := pod.globalAddrs(t, "eth0"); len(got) != 1 || got[0] != netip.PrefixFrom(ip, d.Prefix.Bits()) {
				t.Errorf("node %s: pod eth0 addresses %v, want %s with the whole prefix's length", node, got, ip)
			}
			if r := defaultRoutes(t, pod, netlink.FAMILY_V4); len(r) != 0 {
				t.Errorf("node %s: pod has default routes %v without DefaultRoute", node, r)
			}
		}
	}
	if len(seen) != capacity["a"]+capacity["b"] {
		t.Errorf("%d distinct addresses handed out, want %d", len(seen), capacity["a"]+capacity["b"])
	}
}

// TestBlocksDefaultRoute: with DefaultRoute a pod gets a default route via the gateway (IPv4
// and IPv6); an empty block list removes the configuration.
func TestBlocksDefaultRoute(t *testing.T) {
	requireRoot(t)
	plugins := pluginDir(t)
	for _, d := range []netbackend.Desired{
		{Key: "default/dr4", Prefix: netip.MustParsePrefix("10.99.0.0/24"), Gateway: netip.MustParseAddr("10.99.0.1"),
			Blocks: []netip.Prefix{netip.MustParsePrefix("10.99.0.16/28")}, DefaultRoute: true},
		{Key: "default/dr6", Prefix: netip.MustParsePrefix("fd00:99::/64"), Gateway: netip.MustParseAddr("fd00:99::1"),
			Blocks: []netip.Prefix{netip.MustParsePrefix("fd00:99::100/120")}, DefaultRoute: true},
	} {
		e := newEnv(t)
		e.ns.disableDAD(t)
		b := e.newBackend(Config{IPAMDataDir: t.TempDir()})
		if _, _, err := b.Ensure(context.Background(), d); err != nil {
			t.Fatalf("%s: Ensure: %v", d.Key, err)
		}
		pod, res, err := cniPod(t, plugins, e.ns, ConfPath(e.confDir, d.Key), "pod-dr")
		if err != nil {
			t.Fatalf("%s: CNI ADD: %v", d.Key, err)
		}
		if ip := resultAddr(t, res); !d.Blocks[0].Contains(ip) {
			t.Errorf("%s: pod got %s, outside %s", d.Key, ip, d.Blocks[0])
		}
		family := netlink.FAMILY_V4
		if d.Gateway.Is6() {
			family = netlink.FAMILY_V6
		}
		r := defaultRoutes(t, pod, family)
		if len(r) != 1 {
			t.Fatalf("%s: pod default routes %v, want one via %s", d.Key, r, d.Gateway)
		}
		if via, _ := netip.AddrFromSlice(r[0].Gw); via.Unmap() != d.Gateway {
			t.Errorf("%s: pod default route via %v, want %s", d.Key, r[0].Gw, d.Gateway)
		}
		// The node's last block is gone: the configuration goes, the bridge stays.
		d.Blocks = []netip.Prefix{}
		changes, _, err := b.Ensure(context.Background(), d)
		if err != nil {
			t.Fatalf("%s: Ensure without blocks: %v", d.Key, err)
		}
		if _, err := os.Stat(ConfPath(e.confDir, d.Key)); !os.IsNotExist(err) || len(changes) != 1 {
			t.Errorf("%s: without blocks the configuration is still there (%v), changes %q", d.Key, err, changes)
		}
		if e.ns.link(t, netbackend.BridgeName(d.Key)) == nil {
			t.Errorf("%s: the bridge went with the configuration", d.Key)
		}
		if changes, _, err := b.Ensure(context.Background(), d); err != nil || len(changes) != 0 {
			t.Errorf("%s: second Ensure without blocks: %q, %v; want no changes", d.Key, changes, err)
		}
	}
}
