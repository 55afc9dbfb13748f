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
	"bufio"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// segNode is one "node" of a segment test: a namespace with an underlay interface "ul", a
// Backend and its configuration and host-local directories.
type segNode struct {
	*testEnv
	underlay netip.Addr
}

// newSegmentNodes makes n node namespaces joined through a "switch" namespace holding a bridge
// (each node's "ul" is a veth whose peer is a switch port), with underlay addresses
// 192.168.77.1, .2, … (or fd77::1, … when v6).
func newSegmentNodes(t *testing.T, n int, v6 bool) []*segNode {
	t.Helper()
	requireRoot(t)
	sw := newNS(t, "switch")
	swBridge := sw.addBridge(t, "sw", "")
	if err := sw.nl.LinkSetUp(swBridge); err != nil {
		t.Fatal(err)
	}
	var nodes []*segNode
	for i := range n {
		e := newEnv(t) // DAD stays on: a duplicate address on the segment would show
		e.b = e.newBackend(Config{IPAMDataDir: t.TempDir()})
		addr := netip.AddrFrom4([4]byte{192, 168, 77, byte(i + 1)})
		bits := 24
		if v6 {
			addr, bits = netip.MustParseAddr(fmt.Sprintf("fd77::%d", i+1)), 64
		}
		attrs := netlink.NewLinkAttrs()
		attrs.Name = "ul"
		port := fmt.Sprintf("p%d", i)
		if err := e.ns.nl.LinkAdd(&netlink.Veth{LinkAttrs: attrs, PeerName: port, PeerNamespace: netlink.NsFd(int(sw.handle))}); err != nil {
			t.Fatalf("creating the underlay veth of node %d: %v", i, err)
		}
		ul := e.ns.link(t, "ul")
		if err := e.ns.nl.AddrAdd(ul, netlinkAddr(netip.PrefixFrom(addr, bits))); err != nil {
			t.Fatal(err)
		}
		if err := e.ns.nl.LinkSetUp(ul); err != nil {
			t.Fatal(err)
		}
		p := sw.link(t, port)
		if err := sw.nl.LinkSetMaster(p, swBridge); err != nil {
			t.Fatal(err)
		}
		if err := sw.nl.LinkSetUp(p); err != nil {
			t.Fatal(err)
		}
		nodes = append(nodes, &segNode{testEnv: e, underlay: addr})
	}
	return nodes
}

// desiredOn returns d for node i of nodes: the segment with the others as peers.
func desiredOn(d netbackend.Desired, nodes []*segNode, i int, vni uint32) netbackend.Desired {
	s := &netbackend.Segment{VNI: vni, UnderlayAddress: nodes[i].underlay, UnderlayLink: "ul"}
	for j, n := range nodes {
		if j != i {
			s.Peers = append(s.Peers, n.underlay)
		}
	}
	d.Segment = s
	return d
}

// reach connects over TCP from the namespace from to a listener on addr in the namespace to,
// and checks that the listener saw from's address src. It returns the connection's error.
func reach(t *testing.T, from, to *testNS, src, addr netip.Addr) error {
	t.Helper()
	var ln net.Listener
	if err := inNS(to.path, func() (err error) {
		ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, to.name, err)
	}
	defer func() { _ = ln.Close() }()
	seen := make(chan string, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer func() { _ = conn.Close() }()
		seen <- conn.RemoteAddr().(*net.TCPAddr).IP.String()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		line, _ := bufio.NewReader(conn).ReadString('\n')
		_, _ = fmt.Fprint(conn, "pong "+line)
	}()
	return inNS(from.path, func() error {
		conn, err := (&net.Dialer{Timeout: 3 * time.Second}).Dial("tcp", ln.Addr().String())
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprint(conn, "ping\n"); err != nil {
			return err
		}
		reply, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			return err
		}
		if reply != "pong ping\n" {
			return fmt.Errorf("reply %q", reply)
		}
		if got := <-seen; got != src.String() {
			return fmt.Errorf("the listener saw %s, want %s", got, src)
		}
		return nil
	})
}

// fdb returns node's VXLAN device's own FDB entries as "mac dst".
func (e *testEnv) fdb(t *testing.T, key string) []string {
	t.Helper()
	vx := e.ns.link(t, netbackend.SegmentDeviceName(key))
	if vx == nil {
		t.Fatalf("no VXLAN device for %s", key)
	}
	entries, err := e.ns.nl.NeighList(vx.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range entries {
		if n.Flags&unix.NTF_SELF != 0 && n.IP != nil {
			out = append(out, n.HardwareAddr.String()+" "+n.IP.String())
		}
	}
	slices.Sort(out)
	return out
}

// TestSegmentDevice: Ensure with a segment makes the VXLAN device as a port of the bridge with
// a flood entry per peer; Observe reports it and leaves it out of the ports; a resync changes
// nothing; a peer that leaves takes its flood entry and the entries learnt for it; a device
// deleted by hand comes back; List and Remove handle a device left without its bridge.
func TestSegmentDevice(t *testing.T) {
	nodes := newSegmentNodes(t, 2, false)
	e := nodes[0].testEnv
	ctx := context.Background()
	d := desiredOn(desired4("default/seg"), nodes, 0, 4242)
	d.Blocks = []netip.Prefix{netip.MustParsePrefix("10.99.0.0/25")}
	d.Segment.Peers = append(d.Segment.Peers, netip.MustParseAddr("192.168.77.9"))
	e.ensure(d)
	name := netbackend.SegmentDeviceName(d.Key)
	vx, ok := e.ns.link(t, name).(*netlink.Vxlan)
	br := e.ns.link(t, netbackend.BridgeName(d.Key))
	if !ok {
		t.Fatalf("%s is not a VXLAN device: %v", name, e.ns.link(t, name))
	}
	if vx.VxlanId != 4242 || vx.Port != 4789 || !vx.SrcAddr.Equal(net.ParseIP("192.168.77.1")) || !vx.Learning ||
		vx.MasterIndex != br.Attrs().Index || vx.Flags&net.FlagUp == 0 || vx.Alias != Alias(d.Key) || vx.VtepDevIndex != e.ns.link(t, "ul").Attrs().Index {
		t.Errorf("VXLAN device %+v: want VNI 4242, port 4789, local 192.168.77.1 on ul, learning, up, a port of %s, our alias", vx, br.Attrs().Name)
	}
	if got, want := e.fdb(t, d.Key), []string{"00:00:00:00:00:00 192.168.77.2", "00:00:00:00:00:00 192.168.77.9"}; !slices.Equal(got, want) {
		t.Errorf("FDB %q, want %q", got, want)
	}
	a, err := e.b.Observe(ctx, d.Key)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Ports) != 0 {
		t.Errorf("Observe ports %v, want none: the VXLAN device is not a pod", a.Ports)
	}
	wantState := netbackend.SegmentState{Device: name, Enslaved: true, Up: true, VNI: 4242, Local: nodes[0].underlay, MTU: vx.MTU,
		Peers: []netip.Addr{netip.MustParseAddr("192.168.77.2"), netip.MustParseAddr("192.168.77.9")}}
	if a.Segment == nil || a.Segment.Device != wantState.Device || a.Segment.Enslaved != true || !a.Segment.Up || a.Segment.VNI != 4242 ||
		a.Segment.Local != wantState.Local || !slices.Equal(a.Segment.Peers, wantState.Peers) {
		t.Errorf("Observe segment %+v, want %+v", a.Segment, wantState)
	}
	if changes, outcome, err := e.b.Ensure(ctx, d); err != nil || len(changes) != 0 || len(outcome.Ports) != 0 {
		t.Errorf("resync: %q, %+v, %v; want no changes and no ports", changes, outcome, err)
	}

	// A peer leaves: its flood entry and what was learnt for it go; the other peer's stay.
	macOf9 := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x09}
	if err := e.ns.nl.NeighAppend(fdbEntry(vx, macOf9, netip.MustParseAddr("192.168.77.9"), unix.NUD_REACHABLE)); err != nil {
		t.Fatal(err)
	}
	macOf2 := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
	if err := e.ns.nl.NeighAppend(fdbEntry(vx, macOf2, netip.MustParseAddr("192.168.77.2"), unix.NUD_REACHABLE)); err != nil {
		t.Fatal(err)
	}
	d.Segment.Peers = d.Segment.Peers[:1]
	changes := e.ensure(d)
	if want := []string{"set the source filter of " + name + " in nftables table inet " + filterTableName(d.Key) + ": VNI 4242 accepted from [192.168.77.2] only",
		"removed peer 192.168.77.9 from " + name}; !slices.Equal(changes, want) {
		t.Errorf("changes %q, want %q: the peer refused, then removed", changes, want)
	}
	if got, want := e.fdb(t, d.Key), []string{"00:00:00:00:00:00 192.168.77.2", "02:00:00:00:00:02 192.168.77.2"}; !slices.Equal(got, want) {
		t.Errorf("FDB after the peer left %q, want %q", got, want)
	}

	// Deleted by hand, it comes back.
	if err := e.ns.nl.LinkDel(vx); err != nil {
		t.Fatal(err)
	}
	changes = e.ensure(d)
	if !slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, "created VXLAN device "+name) }) {
		t.Errorf("changes %q, want the device created again", changes)
	}
	if vx := e.ns.link(t, name); vx == nil || vx.Attrs().MasterIndex != br.Attrs().Index {
		t.Errorf("VXLAN device not back as a port of the bridge: %v", vx)
	}
	if got := e.fdb(t, d.Key); !slices.Equal(got, []string{"00:00:00:00:00:00 192.168.77.2"}) {
		t.Errorf("FDB of the recreated device %q", got)
	}

	// Another VNI recreates it.
	d.Segment.VNI = 4243
	e.ensure(d)
	if vx, _ := e.ns.link(t, name).(*netlink.Vxlan); vx == nil || vx.VxlanId != 4243 {
		t.Errorf("device after the VNI changed: %+v", vx)
	}

	// A missing underlay interface is SegmentDown, and leaves the rest of the Network alone.
	bad := d
	bad.Segment = &netbackend.Segment{VNI: 4243, UnderlayAddress: nodes[0].underlay, UnderlayLink: "nosuch"}
	if _, _, err := e.b.Ensure(ctx, bad); netbackend.ReasonOf(err) != netbackend.ReasonSegmentDown {
		t.Errorf("Ensure with a missing underlay interface: %v, want %s", err, netbackend.ReasonSegmentDown)
	}
	bad.Segment = &netbackend.Segment{VNI: 4243, UnderlayAddress: netip.MustParseAddr("192.168.78.1")}
	if _, _, err := e.b.Ensure(ctx, bad); netbackend.ReasonOf(err) != netbackend.ReasonSegmentDown {
		t.Errorf("Ensure with an underlay address not on the node: %v, want %s", err, netbackend.ReasonSegmentDown)
	}

	// Without a segment, the device goes.
	local := d
	local.Segment = nil
	e.ensure(local)
	if e.ns.link(t, name) != nil {
		t.Error("VXLAN device still there without a segment")
	}

	// A device left without its bridge is listed, and Remove deletes it.
	e.ensure(d)
	if err := e.ns.nl.LinkDel(e.ns.link(t, netbackend.BridgeName(d.Key))); err != nil {
		t.Fatal(err)
	}
	if err := e.b.Remove(ctx, d.Key); err != nil {
		t.Fatal(err)
	}
	e.ensure(d)
	if err := e.ns.nl.LinkDel(e.ns.link(t, netbackend.BridgeName(d.Key))); err != nil {
		t.Fatal(err)
	}
	if err := writeFileAtomic(ConfPath(e.confDir, d.Key), []byte("{}"), true); err != nil { // not ours any more
		t.Fatal(err)
	}
	if keys, err := e.b.List(ctx); err != nil || !slices.Contains(keys, d.Key) {
		t.Errorf("List = %v, %v; want %s, whose VXLAN device is left", keys, err, d.Key)
	}
	if err := e.b.Remove(ctx, d.Key); err != nil {
		t.Fatal(err)
	}
	if e.ns.link(t, name) != nil {
		t.Error("Remove left the VXLAN device")
	}
}

// segmentPods realises d on every node (block i of blocks on node i) and attaches one pod per
// node with the real plugins; it returns the pods and their addresses.
func segmentPods(t *testing.T, plugins string, nodes []*segNode, d netbackend.Desired, vni uint32, blocks []netip.Prefix) ([]*testNS, []netip.Addr) {
	t.Helper()
	var pods []*testNS
	var addrs []netip.Addr
	for i, n := range nodes {
		nd := desiredOn(d, nodes, i, vni)
		nd.Blocks = blocks[i : i+1]
		n.ensure(nd)
		pod, res, err := cniPod(t, plugins, n.ns, ConfPath(n.confDir, d.Key), fmt.Sprintf("%s-%d", netbackend.BridgeName(d.Key), i))
		if err != nil {
			t.Fatalf("node %d: CNI ADD for %s: %v", i, d.Key, err)
		}
		pods = append(pods, pod)
		addrs = append(addrs, resultAddr(t, res))
	}
	return pods, addrs
}

// TestSegmentPodsAcrossNodes: pods of one Network on three nodes (joined through a switch)
// reach each other over the segment, and pods of two Networks on the same nodes with different
// VNIs (and overlapping prefixes, so only the segment keeps them apart) do not.
func TestSegmentPodsAcrossNodes(t *testing.T) {
	nodes := newSegmentNodes(t, 3, false)
	plugins := pluginDir(t)
	red := desired4("default/red")
	pods, addrs := segmentPods(t, plugins, nodes, red, 100, []netip.Prefix{netip.MustParsePrefix("10.99.0.0/26"),
		netip.MustParsePrefix("10.99.0.64/27"), netip.MustParsePrefix("10.99.0.96/27")})
	checkSegmentMTU(t, nodes, pods, red.Key, 1450)
	for _, p := range [][2]int{{0, 1}, {1, 0}, {0, 2}, {2, 1}} {
		if err := reach(t, pods[p[0]], pods[p[1]], addrs[p[0]], addrs[p[1]]); err != nil {
			t.Errorf("pod %s on node %d does not reach pod %s on node %d: %v", addrs[p[0]], p[0], addrs[p[1]], p[1], err)
		}
	}

	blue := netbackend.Desired{Key: "default/blue", Prefix: netip.MustParsePrefix("10.99.0.0/24"), Gateway: netip.MustParseAddr("10.99.0.254")}
	bluePods, blueAddrs := segmentPods(t, plugins, nodes, blue, 101, []netip.Prefix{netip.MustParsePrefix("10.99.0.128/26"),
		netip.MustParsePrefix("10.99.0.192/27"), netip.MustParsePrefix("10.99.0.224/27")})
	if err := reach(t, bluePods[0], bluePods[1], blueAddrs[0], blueAddrs[1]); err != nil {
		t.Errorf("blue pods do not reach each other: %v", err)
	}
	if err := reach(t, pods[0], bluePods[1], addrs[0], blueAddrs[1]); err == nil {
		t.Errorf("red pod %s on node 0 reaches blue pod %s on node 1", addrs[0], blueAddrs[1])
	}
	if err := reach(t, bluePods[0], pods[2], blueAddrs[0], addrs[2]); err == nil {
		t.Errorf("blue pod %s on node 0 reaches red pod %s on node 2", blueAddrs[0], addrs[2])
	}
}

// checkSegmentMTU checks the MTU of key's bridge and VXLAN device on every node and of the
// pods' eth0.
func checkSegmentMTU(t *testing.T, nodes []*segNode, pods []*testNS, key string, mtu int) {
	t.Helper()
	for i, n := range nodes {
		for _, name := range []string{netbackend.BridgeName(key), netbackend.SegmentDeviceName(key)} {
			if l := n.ns.link(t, name); l == nil || l.Attrs().MTU != mtu {
				t.Errorf("node %d: %s has MTU %v, want %d", i, name, l, mtu)
			}
		}
	}
	for i, p := range pods {
		if l := p.link(t, "eth0"); l == nil || l.Attrs().MTU != mtu {
			t.Errorf("pod %d: eth0 MTU %v, want %d", i, l.Attrs().MTU, mtu)
		}
	}
}

// TestSegmentIPv6: over an IPv6 underlay, IPv6 pods on two nodes reach each other; each
// node's bridge has its own link-local address (the kernel's, derived from the shared MAC, would
// be the same on both) and the MTU leaves room for the IPv6 encapsulation.
func TestSegmentIPv6(t *testing.T) {
	nodes := newSegmentNodes(t, 2, true)
	plugins := pluginDir(t)
	d := netbackend.Desired{Key: "default/six", Prefix: netip.MustParsePrefix("fd00:99::/64"), Gateway: netip.MustParseAddr("fd00:99::1")}
	pods, addrs := segmentPods(t, plugins, nodes, d, 600, []netip.Prefix{netip.MustParsePrefix("fd00:99::100/120"), netip.MustParsePrefix("fd00:99::200/120")})
	checkSegmentMTU(t, nodes, pods, d.Key, 1430)
	var lls []netip.Prefix
	for i, n := range nodes {
		got, err := n.b.linkLocals(n.ns.link(t, netbackend.BridgeName(d.Key)))
		if err != nil {
			t.Fatal(err)
		}
		if want := SegmentLinkLocal(d.Key, n.underlay); len(got) != 1 || got[0] != want {
			t.Errorf("node %d: bridge link-local addresses %v, want only %s", i, got, want)
		}
		lls = append(lls, got...)
	}
	if len(lls) == 2 && lls[0] == lls[1] {
		t.Errorf("both bridges have link-local address %s", lls[0])
	}
	if err := reach(t, pods[0], pods[1], addrs[0], addrs[1]); err != nil {
		t.Errorf("pod %s on node 0 does not reach pod %s on node 1: %v", addrs[0], addrs[1], err)
	}
	if err := reach(t, pods[1], pods[0], addrs[1], addrs[0]); err != nil {
		t.Errorf("pod %s on node 1 does not reach pod %s on node 0: %v", addrs[1], addrs[0], err)
	}
	// A resync writes nothing; a link-local address added by hand goes again.
	for i, n := range nodes {
		nd := desiredOn(d, nodes, i, 600)
		nd.Blocks = []netip.Prefix{netip.MustParsePrefix("fd00:99::100/120"), netip.MustParsePrefix("fd00:99::200/120")}[i : i+1]
		if changes, _, err := n.b.Ensure(context.Background(), nd); err != nil || len(changes) != 0 {
			t.Errorf("node %d: resync %q, %v; want no changes", i, changes, err)
		}
	}
}

// TestSegmentWatch: a Watch started on a settled node with a segment names the Network when its
// VXLAN device is deleted by hand, a fresh Backend (a restarted agent) too, and the next Ensure
// brings the device back; the device is never reported as a port.
func TestSegmentWatch(t *testing.T) {
	nodes := newSegmentNodes(t, 2, false)
	e := nodes[0].testEnv
	d := desiredOn(desired4("default/watched"), nodes, 0, 77)
	e.ensure(d)
	name := netbackend.SegmentDeviceName(d.Key)
	// Settled: the bridge is operationally up once its VXLAN port has carrier, which the kernel
	// reports a moment after Ensure (linkwatch), as a change of the bridge.
	deadline := time.Now().Add(5 * time.Second)
	for e.ns.link(t, netbackend.BridgeName(d.Key)).Attrs().OperState != netlink.OperUp {
		if time.Now().After(deadline) {
			t.Fatal("the bridge did not become operationally up within 5s")
		}
		time.Sleep(20 * time.Millisecond) // polling the kernel's state
	}

	w := e.startWatch(e.b)
	w.expectNone(t, d.Key, 300*time.Millisecond, "nothing changed")
	w.stop(t)

	for _, b := range []*Backend{e.b, e.newBackend(Config{})} {
		w := e.startWatch(b)
		if err := e.ns.nl.LinkDel(e.ns.link(t, name)); err != nil {
			t.Fatal(err)
		}
		w.expect(t, d.Key, "VXLAN device deleted")
		w.stop(t)
		changes, outcome, err := b.Ensure(context.Background(), d)
		if err != nil || !slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, "created VXLAN device "+name) }) {
			t.Fatalf("Ensure after the device was deleted: %q, %v", changes, err)
		}
		if len(outcome.Ports) != 0 {
			t.Errorf("Ensure reports ports %v, want none", outcome.Ports)
		}
		if vx := e.ns.link(t, name); vx == nil || vx.Attrs().MasterIndex != e.ns.link(t, netbackend.BridgeName(d.Key)).Attrs().Index {
			t.Errorf("VXLAN device not back on the bridge: %v", vx)
		}
	}
}

// TestSegmentReplacesKernelLinkLocal: a bridge realised before its Network had a segment has
// the kernel's link-local address (from the shared MAC); when the segment comes, it is replaced
// by the node's own, and a resync then writes nothing.
func TestSegmentReplacesKernelLinkLocal(t *testing.T) {
	nodes := newSegmentNodes(t, 2, false)
	e := nodes[0].testEnv
	d := desired4("default/ll")
	e.ensure(d)
	bridge := e.ns.link(t, netbackend.BridgeName(d.Key))
	// A port with carrier, so that the bridge is operationally up and gets a link-local address.
	port := e.ns.addVeth(t, "p0", "p0peer", "")
	for _, l := range []netlink.Link{port, e.ns.link(t, "p0peer")} {
		if err := e.ns.nl.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.ns.nl.LinkSetMaster(port, bridge); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		lls, err := e.b.linkLocals(bridge)
		if err != nil {
			t.Fatal(err)
		}
		if len(lls) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the bridge got no link-local address within 5s")
		}
		time.Sleep(20 * time.Millisecond) // polling for the kernel's address
	}
	seg := desiredOn(d, nodes, 0, 78)
	changes := e.ensure(seg)
	want := SegmentLinkLocal(d.Key, nodes[0].underlay)
	if lls, _ := e.b.linkLocals(bridge); len(lls) != 1 || lls[0] != want {
		t.Errorf("link-local addresses %v, want only %s (changes %q)", lls, want, changes)
	}
	if !slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, "removed link-local address fe80::") }) {
		t.Errorf("changes %q, want the kernel's link-local address removed", changes)
	}
	if changes, _, err := e.b.Ensure(context.Background(), seg); err != nil || len(changes) != 0 {
		t.Errorf("resync: %q, %v; want no changes", changes, err)
	}
	// Down and up again (a link going down loses its IPv6 addresses): the kernel makes none,
	// Ensure puts ours back.
	if err := e.ns.nl.LinkSetDown(bridge); err != nil {
		t.Fatal(err)
	}
	e.ensure(seg)
	if lls, _ := e.b.linkLocals(bridge); len(lls) != 1 || lls[0] != want {
		t.Errorf("after down/up: link-local addresses %v, want only %s", lls, want)
	}
}

// TestSegmentMTUTooLarge: a segment MTU the underlay cannot carry is SegmentDown, naming the
// encapsulation.
func TestSegmentMTUTooLarge(t *testing.T) {
	nodes := newSegmentNodes(t, 2, false)
	d := desiredOn(desired4("default/big"), nodes, 0, 79)
	d.Segment.MTU = 1500 // the underlay's own MTU
	_, _, err := nodes[0].b.Ensure(context.Background(), d)
	if netbackend.ReasonOf(err) != netbackend.ReasonSegmentDown || !strings.Contains(err.Error(), "encapsulation") {
		t.Errorf("Ensure with segment MTU 1500 over a 1500 underlay: %v, want %s", err, netbackend.ReasonSegmentDown)
	}
	d.Segment.MTU = 1400
	if _, _, err := nodes[0].b.Ensure(context.Background(), d); err != nil {
		t.Errorf("Ensure with segment MTU 1400: %v", err)
	}
}
