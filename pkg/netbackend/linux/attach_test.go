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
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// attachPlugins returns a directory with the reference plugins and ours (cmd/samplecrd-bridge,
// built from this module), as a node that runs the agent with bridges made on attach has them.
func attachPlugins(t *testing.T) string {
	t.Helper()
	reference := pluginDir(t)
	dir := t.TempDir()
	for _, p := range []string{"bridge", "host-local", "portmap"} {
		if err := os.Symlink(filepath.Join(reference, p), filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", filepath.Join(dir, AttachPluginType), "./cmd/samplecrd-bridge")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", AttachPluginType, err, out)
	}
	return dir
}

// pluginTypes returns the types of the plugins of the configuration list at path, in order.
func pluginTypes(t *testing.T, path string) []string {
	t.Helper()
	var list struct {
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(mustRead(t, path), &list); err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, p := range list.Plugins {
		types = append(types, p.Type)
	}
	return types
}

// TestBridgeOnAttach: with BridgeOnAttach, Ensure writes the list alone (our plugin first)
// and makes no interface; the first pod's ADD on each node makes the bridge and the segment's
// VXLAN device exactly as Ensure makes them (a resync after it changes nothing, so the MAC, MTU,
// gateway, link-local address, filters and flood entries are all as the agent would have
// them); the pods on two nodes reach each other at once; and a DEL leaves the bridge to the
// agent, which removes it with the Network.
func TestBridgeOnAttach(t *testing.T) {
	nodes := newSegmentNodes(t, 2, false)
	plugins := attachPlugins(t)
	d := desired4("default/lazy")
	blocks := []netip.Prefix{netip.MustParsePrefix("10.99.0.0/26"), netip.MustParsePrefix("10.99.0.64/26")}
	ctx := context.Background()
	var pods []*testNS
	var addrs []netip.Addr
	for i, n := range nodes {
		n.b = n.newBackend(Config{IPAMDataDir: t.TempDir(), BridgeOnAttach: true})
		nd := desiredOn(d, nodes, i, 300)
		nd.Blocks = blocks[i : i+1]
		changes, outcome, err := n.b.Ensure(ctx, nd)
		if err != nil || !outcome.Created || !outcome.AwaitsAttach || len(changes) != 1 || !strings.HasPrefix(changes[0], "wrote CNI configuration") {
			t.Fatalf("node %d: Ensure = %q, %+v, %v; want the list written and nothing else", i, changes, outcome, err)
		}
		if got := pluginTypes(t, ConfPath(n.confDir, d.Key)); strings.Join(got, ",") != AttachPluginType+",bridge,portmap" {
			t.Fatalf("node %d: the list's plugins are %v", i, got)
		}
		if n.ns.link(t, netbackend.BridgeName(d.Key)) != nil || n.ns.link(t, netbackend.SegmentDeviceName(d.Key)) != nil {
			t.Fatalf("node %d: Ensure made an interface before any pod", i)
		}
		if changes, outcome, err := n.b.Ensure(ctx, nd); err != nil || len(changes) != 0 || !outcome.AwaitsAttach {
			t.Fatalf("node %d: a resync without pods: %q, %+v, %v; want no changes, still awaiting the first ADD", i, changes, outcome, err)
		}
		if a, err := n.b.Observe(ctx, d.Key); err != nil || a == nil || a.Bridge != "" || a.CNIConfig == nil {
			t.Fatalf("node %d: Observe = %+v, %v; want the list without a bridge", i, a, err)
		}
	}
	for i, n := range nodes {
		pod, res, err := cniPod(t, plugins, n.ns, ConfPath(n.confDir, d.Key), fmt.Sprintf("lazy-%d", i))
		if err != nil {
			t.Fatalf("node %d: the first ADD: %v", i, err)
		}
		pods = append(pods, pod)
		addrs = append(addrs, resultAddr(t, res))
		br := n.ns.link(t, netbackend.BridgeName(d.Key))
		if br == nil || !isOurs(br, d.Key) || !bytes.Equal(br.Attrs().HardwareAddr, netbackend.BridgeMAC(d.Key)) || br.Attrs().Flags&net.FlagUp == 0 {
			t.Fatalf("node %d: after the first ADD the bridge is %+v; want ours, up, with MAC %s", i, br, netbackend.BridgeMAC(d.Key))
		}
	}
	checkSegmentMTU(t, nodes, pods, d.Key, 1450)
	if err := reach(t, pods[0], pods[1], addrs[0], addrs[1]); err != nil {
		t.Errorf("the pods on the two nodes do not reach each other right after their ADDs: %v", err)
	}
	for i, n := range nodes {
		nd := desiredOn(d, nodes, i, 300)
		nd.Blocks = blocks[i : i+1]
		if changes, outcome, err := n.b.Ensure(ctx, nd); err != nil || len(changes) != 0 || len(outcome.Ports) != 1 || outcome.AwaitsAttach {
			t.Errorf("node %d: Ensure after the plugin made the bridge: %q, %+v, %v; want no changes and the pod's port", i, changes, outcome, err)
		}
	}

	// A DEL leaves the bridge (the agent's); Remove takes it with the list.
	list, err := libcni.ConfListFromFile(ConfPath(nodes[0].confDir, d.Key))
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{plugins}, t.TempDir(), nil)
	if err := inNS(nodes[0].ns.path, func() error {
		return cni.DelNetworkList(ctx, list, &libcni.RuntimeConf{ContainerID: "lazy-0", NetNS: pods[0].path, IfName: "eth0"})
	}); err != nil {
		t.Fatalf("DEL: %v", err)
	}
	if nodes[0].ns.link(t, netbackend.BridgeName(d.Key)) == nil {
		t.Fatal("DEL removed the bridge")
	}
	if err := nodes[0].b.Remove(ctx, d.Key); err != nil {
		t.Fatal(err)
	}
	if nodes[0].ns.link(t, netbackend.BridgeName(d.Key)) != nil || nodes[0].ns.link(t, netbackend.SegmentDeviceName(d.Key)) != nil {
		t.Error("Remove left the bridge or the VXLAN device")
	}
}

// TestBridgeOnAttachConcurrentFirstADDs: pods attached at once to a Network that has no bridge
// on the node all get their address, on the one bridge, made as Ensure makes it.
func TestBridgeOnAttachConcurrentFirstADDs(t *testing.T) {
	plugins := attachPlugins(t)
	e := newEnv(t)
	b := e.newBackend(Config{IPAMDataDir: t.TempDir(), BridgeOnAttach: true})
	d := desired4("default/rush")
	ctx := context.Background()
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatal(err)
	}
	list, err := libcni.ConfListFromFile(ConfPath(e.confDir, d.Key))
	if err != nil {
		t.Fatal(err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{plugins}, t.TempDir(), nil)
	const n = 4
	var pods []*testNS
	for range n {
		pods = append(pods, newNS(t, "pod"))
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, pod := range pods {
		rt := &libcni.RuntimeConf{ContainerID: fmt.Sprintf("rush-%d", i), NetNS: pod.path, IfName: "eth0"}
		t.Cleanup(func() {
			_ = inNS(e.ns.path, func() error { return cni.DelNetworkList(context.Background(), list, rt) })
		})
		wg.Go(func() {
			errs[i] = inNS(e.ns.path, func() error {
				_, err := cni.AddNetworkList(ctx, list, rt)
				return err
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("ADD %d: %v", i, err)
		}
	}
	links, err := e.ns.nl.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	bridges := 0
	for _, l := range links {
		if l.Type() == "bridge" {
			bridges++
		}
	}
	if bridges != 1 {
		t.Errorf("%d bridges after %d first ADDs at once, want 1", bridges, n)
	}
	if changes, outcome, err := b.Ensure(ctx, d); err != nil || len(changes) != 0 || len(outcome.Ports) != n {
		t.Errorf("Ensure after the ADDs: %q, %+v, %v; want no changes and %d ports", changes, outcome, err, n)
	}
}

// TestBridgeOnAttachFinishesABridgeLeftDown: a bridge of ours that is down is what a creation
// stopped part way left; both our plugin (in the next ADD) and the agent's Ensure finish it.
func TestBridgeOnAttachFinishesABridgeLeftDown(t *testing.T) {
	e := newEnv(t)
	b := e.newBackend(Config{IPAMDataDir: t.TempDir(), BridgeOnAttach: true})
	d := desired4("default/halfway")
	ctx := context.Background()
	mac := netbackend.BridgeMAC(d.Key)
	r := AttachRequest{Desired: d, MAC: mac, LockDir: e.confDir}

	e.ns.addBridge(t, netbackend.BridgeName(d.Key), Alias(d.Key))
	if err := b.CheckForAttach(r); err == nil {
		t.Fatal("CHECK passed a bridge that is down")
	}
	changes, err := b.EnsureForAttach(ctx, r)
	if err != nil || len(changes) == 0 {
		t.Fatalf("EnsureForAttach on a bridge left down: %q, %v; want it finished", changes, err)
	}
	if err := b.CheckForAttach(r); err != nil {
		t.Fatalf("CHECK after it: %v", err)
	}
	if changes, err := b.EnsureForAttach(ctx, r); err != nil || len(changes) != 0 {
		t.Fatalf("EnsureForAttach on a complete bridge: %q, %v; want it left alone", changes, err)
	}

	other := desired4("default/halfway-too")
	other.Gateway, other.Prefix = netip.MustParseAddr("10.98.0.1"), netip.MustParsePrefix("10.98.0.0/24")
	e.ns.addBridge(t, netbackend.BridgeName(other.Key), Alias(other.Key))
	if changes, _, err := b.Ensure(ctx, other); err != nil || !strings.Contains(strings.Join(changes, ";"), "set "+netbackend.BridgeName(other.Key)+" up") {
		t.Fatalf("Ensure on a bridge left down: %q, %v; want it finished and up", changes, err)
	}
	if changes, _, err := b.Ensure(ctx, other); err != nil || len(changes) != 0 {
		t.Fatalf("a resync after it: %q, %v", changes, err)
	}

	// While a maker holds the lock (a first ADD in another process), the agent waits for it
	// before it touches a bridge of ours that is down.
	third := desired4("default/halfway-three")
	third.Gateway, third.Prefix = netip.MustParseAddr("10.97.0.1"), netip.MustParsePrefix("10.97.0.0/24")
	e.ns.addBridge(t, netbackend.BridgeName(third.Key), Alias(third.Key))
	unlock, err := lockDir(e.confDir)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, _, err := b.Ensure(ctx, third)
		done <- err
	}()
	select {
	case err := <-done:
		unlock()
		t.Fatalf("Ensure went ahead (%v) on a bridge that is down while the lock was held", err)
	case <-time.After(300 * time.Millisecond):
	}
	unlock()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if l := e.ns.link(t, netbackend.BridgeName(third.Key)); l == nil || l.Attrs().Flags&net.FlagUp == 0 {
		t.Fatal("the bridge is not up after the lock was released")
	}
}

// TestParseAttachConf: our plugin's entry as Ensure renders it reads back as the Desired it
// came from; a broken one is refused with the field named.
func TestParseAttachConf(t *testing.T) {
	d := desired4("default/parse")
	d.Segment = &netbackend.Segment{VNI: 7, UnderlayAddress: netip.MustParseAddr("192.168.1.1"), UnderlayLink: "eth0",
		Peers: []netip.Addr{netip.MustParseAddr("192.168.1.2")}}
	mac := netbackend.BridgeMAC(d.Key)
	attach := newAttachConf(d, "/var/lib/ipam", "/etc/cni/net.d", mac)
	content, err := renderConfig(d, "/var/lib/ipam", mac, &attach)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := libcni.ConfListFromBytes(content); err != nil {
		t.Fatalf("the list does not load: %v", err)
	}
	var list struct {
		Plugins []json.RawMessage `json:"plugins"`
	}
	if err := json.Unmarshal(content, &list); err != nil {
		t.Fatal(err)
	}
	r, err := ParseAttachConf(list.Plugins[0])
	if err != nil {
		t.Fatal(err)
	}
	want := d
	want.MTU = d.EffectiveMTU()
	if r.Desired.Key != want.Key || r.Desired.Prefix != want.Prefix || r.Desired.Gateway != want.Gateway || r.Desired.MTU != want.MTU ||
		r.Desired.Segment == nil || fmt.Sprint(*r.Desired.Segment) != fmt.Sprint(*want.Segment) ||
		!bytes.Equal(r.MAC, mac) || r.IPAMDataDir != "/var/lib/ipam" || r.LockDir != "/etc/cni/net.d" {
		t.Fatalf("parsed %+v (segment %+v); want %+v (segment %+v)", r, r.Desired.Segment, want, want.Segment)
	}
	for _, tc := range []struct{ mangle, want string }{
		{`"prefix": "10.99.0.0/24"`, `"prefix"`},
		{`"gateway": "10.99.0.1"`, `"gateway"`},
		{`"underlayAddress": "192.168.1.1"`, `"segment.underlayAddress"`},
		{`"type": "samplecrd-bridge"`, "not \"samplecrd-bridge\""},
	} {
		broken := bytes.Replace(list.Plugins[0], []byte(tc.mangle), []byte(strings.SplitN(tc.mangle, ":", 2)[0]+`: "x"`), 1)
		if bytes.Equal(broken, list.Plugins[0]) {
			t.Fatalf("%s not in %s", tc.mangle, list.Plugins[0])
		}
		if _, err := ParseAttachConf(broken); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("with %s broken: %v; want an error naming %s", tc.mangle, err, tc.want)
		}
	}
}

// TestBridgeOnAttachEchoes: with BridgeOnAttach, an Ensure that writes the list alone (no
// bridge to settle) is not reported back by Watch, on a create or a resync, so the controller
// does not reconcile the Network again and again; the bridge a pod's first ADD makes is.
func TestBridgeOnAttachEchoes(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	e.b = e.newBackend(Config{IPAMDataDir: t.TempDir(), BridgeOnAttach: true})
	// The fence: a bridge of another Network, made as a first ADD makes it.
	other := netbackend.Desired{Key: "default/fence", Prefix: netip.MustParsePrefix("10.98.0.0/24"), Gateway: netip.MustParseAddr("10.98.0.1")}
	e.ensure(other)
	if _, err := e.b.EnsureForAttach(context.Background(), AttachRequest{Desired: other, MAC: netbackend.BridgeMAC(other.Key), LockDir: e.confDir}); err != nil {
		t.Fatal(err)
	}
	w := e.startWatch(e.b)
	defer w.stop(t)

	d := desired4("default/listonly")
	for _, what := range []string{"create", "resync"} {
		e.ensure(d)
		if seen := fence(t, e, w, other.Key); slices.Contains(seen, d.Key) {
			t.Fatalf("%s: Watch notified %s for an Ensure that wrote the list alone (notified: %q)", what, d.Key, seen)
		}
	}
	plugin := e.newBackend(Config{IPAMDataDir: t.TempDir()}) // our plugin's, in its own process
	if _, err := plugin.EnsureForAttach(context.Background(), AttachRequest{Desired: d, MAC: netbackend.BridgeMAC(d.Key), LockDir: e.confDir}); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "the bridge a first ADD made")
}

// TestBridgeOnAttachWithoutTheLockDir: when the list's lock directory does not exist where the
// plugin runs (the agent sees the configuration directory under another path), the first ADD
// still makes the bridge, the plugins locking their own binary instead.
func TestBridgeOnAttachWithoutTheLockDir(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/elsewhere")
	r := AttachRequest{Desired: d, MAC: netbackend.BridgeMAC(d.Key), LockDir: filepath.Join(t.TempDir(), "not-here")}
	if _, err := e.b.EnsureForAttach(context.Background(), r); err != nil {
		t.Fatalf("EnsureForAttach without its lock directory: %v", err)
	}
	if err := e.b.CheckForAttach(r); err != nil {
		t.Fatal(err)
	}
}
