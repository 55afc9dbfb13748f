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
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// sourceDrops returns the packets key's source filter on e dropped (its rule's counter).
func (e *testEnv) sourceDrops(t *testing.T, key string) uint64 {
	t.Helper()
	c, err := e.b.nft()
	if err != nil {
		t.Fatal(err)
	}
	tbl := sourceTable(filterTableName(key))
	rules, err := c.GetRules(tbl, sourceChain(tbl))
	if err != nil {
		t.Fatalf("rules of table inet %s: %v", tbl.Name, err)
	}
	var n uint64
	for _, r := range rules {
		for _, x := range r.Exprs {
			if ctr, ok := x.(*expr.Counter); ok {
				n += ctr.Packets
			}
		}
	}
	return n
}

// TestSegmentSourceFilter: a node accepts the segment's VXLAN packets from its peers only. Three
// nodes, one pod each; node 2 believes the others are its peers, but they do not (yet) list it:
// its pod does not reach node 0's pod (node 0's filter drops its packets, where the VXLAN device
// alone would take them and learn its pod's MAC), node 1's pod does. Once node 2 is a peer of
// both, its pod reaches node 0's. When node 0 drops node 1 from its peers while node 1 keeps it
// (an entry removed while the node still runs), node 1's pod no longer reaches node 0's, node
// 2's still does. A resync changes nothing; the table deleted or a source added by hand is
// repaired; without a segment and on Remove the table goes.
func TestSegmentSourceFilter(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("v6=%v", v6), func(t *testing.T) { testSegmentSourceFilter(t, v6) })
	}
}

func testSegmentSourceFilter(t *testing.T, v6 bool) {
	ctx := context.Background()
	nodes := newSegmentNodes(t, 3, v6)
	plugins := pluginDir(t)
	d := desired4("default/src")
	blocks := []netip.Prefix{netip.MustParsePrefix("10.99.0.0/26"), netip.MustParsePrefix("10.99.0.64/26"), netip.MustParsePrefix("10.99.0.128/26")}
	if v6 {
		d = netbackend.Desired{Key: "default/src", Prefix: netip.MustParsePrefix("fd00:98::/64"), Gateway: netip.MustParseAddr("fd00:98::1")}
		blocks = []netip.Prefix{netip.MustParsePrefix("fd00:98::100/120"), netip.MustParsePrefix("fd00:98::200/120"), netip.MustParsePrefix("fd00:98::300/120")}
	}
	const vni = 310
	ul := func(i int) netip.Addr { return nodes[i].underlay }
	// on returns d on node i with peers, and block i.
	on := func(i int, peers ...int) netbackend.Desired {
		nd := d
		nd.Blocks = blocks[i : i+1]
		nd.Segment = &netbackend.Segment{VNI: vni, UnderlayAddress: ul(i), UnderlayLink: "ul"}
		for _, p := range peers {
			nd.Segment.Peers = append(nd.Segment.Peers, ul(p))
		}
		return nd
	}
	views := [][]int{{1}, {0}, {0, 1}}
	var pods []*testNS
	var addrs []netip.Addr
	for i, n := range nodes {
		nd := on(i, views[i]...)
		changes := n.ensure(nd)
		if !slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, "set the source filter of ") }) {
			t.Errorf("node %d: changes %q, want the source filter set", i, changes)
		}
		pod, res, err := cniPod(t, plugins, n.ns, ConfPath(n.confDir, d.Key), fmt.Sprintf("%s-%d", netbackend.BridgeName(d.Key), i))
		if err != nil {
			t.Fatalf("node %d: CNI ADD: %v", i, err)
		}
		pods, addrs = append(pods, pod), append(addrs, resultAddr(t, res))
	}
	n0 := nodes[0]
	a, err := n0.b.Observe(ctx, d.Key)
	if err != nil || a == nil || a.Segment == nil || !a.Segment.SourceFilter || !slices.Equal(a.Segment.Sources, []netip.Addr{ul(1)}) {
		t.Fatalf("Observe on node 0: %+v, %v; want the source filter admitting %s only", a, err, ul(1))
	}

	// Node 2 is no peer of node 0.
	if err := reach(t, pods[1], pods[0], addrs[1], addrs[0]); err != nil {
		t.Errorf("node 1's pod (a peer's) does not reach node 0's pod: %v", err)
	}
	before := n0.sourceDrops(t, d.Key)
	if err := reach(t, pods[2], pods[0], addrs[2], addrs[0]); err == nil {
		t.Errorf("node 2's pod reaches node 0's pod, though node 2 is no peer of node 0")
	}
	if after := n0.sourceDrops(t, d.Key); after == before {
		t.Errorf("node 0's source filter dropped nothing of node 2's (counter %d)", after)
	}

	// Node 2 joins: every node lists the others.
	views = [][]int{{1, 2}, {0, 2}, {0, 1}}
	for i, n := range nodes[:2] {
		n.ensure(on(i, views[i]...))
	}
	if err := reach(t, pods[2], pods[0], addrs[2], addrs[0]); err != nil {
		t.Errorf("node 2's pod does not reach node 0's pod once it is a peer: %v", err)
	}
	for i, n := range nodes {
		if changes, _, err := n.b.Ensure(ctx, on(i, views[i]...)); err != nil || len(changes) != 0 {
			t.Errorf("node %d: resync %q, %v; want no changes", i, changes, err)
		}
	}

	// Node 0 drops node 1; node 1 (still running) keeps node 0.
	changes := n0.ensure(on(0, 2))
	wantChanges := []string{
		fmt.Sprintf("set the source filter of %s in nftables table inet %s: VNI %d accepted from [%s] only",
			netbackend.SegmentDeviceName(d.Key), filterTableName(d.Key), vni, ul(2)),
		fmt.Sprintf("removed peer %s from %s", ul(1), netbackend.SegmentDeviceName(d.Key)),
	}
	if !slices.Equal(changes, wantChanges) {
		t.Errorf("changes %q, want %q", changes, wantChanges)
	}
	if err := reach(t, pods[1], pods[0], addrs[1], addrs[0]); err == nil {
		t.Errorf("node 1's pod still reaches node 0's pod after node 0 dropped node 1")
	}
	if err := reach(t, pods[2], pods[0], addrs[2], addrs[0]); err != nil {
		t.Errorf("node 2's pod (still a peer) does not reach node 0's pod: %v", err)
	}

	// Repairs: a source added by hand, then the whole table deleted by hand.
	c, err := n0.b.nft()
	if err != nil {
		t.Fatal(err)
	}
	tbl := sourceTable(filterTableName(d.Key))
	set, err := c.GetSetByName(tbl, sourceSetName)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SetAddElements(set, []nftables.SetElement{{Key: ul(1).AsSlice()}}); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatalf("adding %s to the set by hand: %v", ul(1), err)
	}
	if a, err := n0.b.Observe(ctx, d.Key); err != nil || a.Segment == nil || !slices.Equal(a.Segment.Sources, []netip.Addr{ul(1), ul(2)}) {
		t.Errorf("Observe after a source was added by hand: %+v, %v", a.Segment, err)
	}
	if changes := n0.ensure(on(0, 2)); len(changes) != 1 || !strings.HasPrefix(changes[0], "set the source filter of ") {
		t.Errorf("Ensure after a source was added by hand: %q, want the filter rewritten", changes)
	}
	c.DelTable(tbl)
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if a, err := n0.b.Observe(ctx, d.Key); err != nil || a.Segment == nil || a.Segment.SourceFilter || a.Segment.Sources != nil {
		t.Errorf("Observe after the table was deleted by hand: %+v, %v; want no filter", a.Segment, err)
	}
	if changes := n0.ensure(on(0, 2)); len(changes) != 1 || !strings.HasPrefix(changes[0], "set the source filter of ") {
		t.Errorf("Ensure after the table was deleted by hand: %q, want the filter back", changes)
	}
	if a, err := n0.b.Observe(ctx, d.Key); err != nil || a.Segment == nil || !a.Segment.SourceFilter || !slices.Equal(a.Segment.Sources, []netip.Addr{ul(2)}) {
		t.Errorf("Observe after the repair: %+v, %v", a.Segment, err)
	}
	if err := reach(t, pods[1], pods[0], addrs[1], addrs[0]); err == nil {
		t.Errorf("node 1's pod reaches node 0's pod after the repair")
	}

	// Without a segment the table goes; Remove takes it too.
	local := on(0)
	local.Segment = nil
	if changes := n0.ensure(local); !slices.Contains(changes, "removed the source filter of "+netbackend.SegmentDeviceName(d.Key)) {
		t.Errorf("changes without a segment %q, want the source filter removed", changes)
	}
	if _, err := c.ListTableOfFamily(tbl.Name, tbl.Family); !errors.Is(err, unix.ENOENT) {
		t.Errorf("table inet %s after the segment went: %v, want none", tbl.Name, err)
	}
	n0.ensure(on(0, 2))
	if keys, err := n0.b.sourceFilterKeys(); err != nil || !slices.Equal(keys, []string{d.Key}) {
		t.Errorf("sourceFilterKeys = %v, %v; want %s (List names the key of a table left behind)", keys, err, d.Key)
	}
	if err := n0.b.Remove(ctx, d.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListTableOfFamily(tbl.Name, tbl.Family); !errors.Is(err, unix.ENOENT) {
		t.Errorf("table inet %s after Remove: %v, want none", tbl.Name, err)
	}
}

// nftIn runs nft with args in ns (another process: Watch skips this process's own changes).
func nftIn(t *testing.T, ns *testNS, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", ns.name, "nft"}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s in %s: %v\n%s", strings.Join(args, " "), ns.name, err, out)
	}
}

// TestSegmentFilterWatch: Watch names the Network when another process deletes its source
// filter's table, deletes its rule, or flushes the whole ruleset (as a firewall service's
// reload does), and the next Ensure puts the filters back; the backend's own rewrite of the
// filter (a peer leaving) is not reported back.
func TestSegmentFilterWatch(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("no nft binary to change the rules from another process")
	}
	nodes := newSegmentNodes(t, 2, false)
	e := nodes[0].testEnv
	d := desiredOn(desired4("default/nftwatch"), nodes, 0, 88)
	e.ensure(d)
	table := filterTableName(d.Key)
	// Settled: the bridge is operationally up once its VXLAN port has carrier, which the kernel
	// reports as a change of the bridge a moment after Ensure.
	deadline := time.Now().Add(5 * time.Second)
	for e.ns.link(t, netbackend.BridgeName(d.Key)).Attrs().OperState != netlink.OperUp {
		if time.Now().After(deadline) {
			t.Fatal("the bridge did not become operationally up within 5s")
		}
		time.Sleep(20 * time.Millisecond) // polling the kernel's state
	}
	w := e.startWatch(e.b)
	defer w.stop(t)

	less := d
	less.Segment = &netbackend.Segment{VNI: 88, UnderlayAddress: nodes[0].underlay, UnderlayLink: "ul"}
	if changes := e.ensure(less); len(changes) == 0 {
		t.Fatal("Ensure without the peer changed nothing")
	}
	w.expectNone(t, d.Key, 300*time.Millisecond, "the backend's own rewrite of the source filter")

	nftIn(t, e.ns, "delete", "table", "inet", table)
	w.expect(t, d.Key, "source filter table deleted by another process")
	if a, err := e.b.Observe(context.Background(), d.Key); err != nil || a.Segment == nil || a.Segment.SourceFilter {
		t.Fatalf("Observe after the table was deleted: %+v, %v", a, err)
	}
	if changes := e.ensure(less); len(changes) != 1 || !strings.HasPrefix(changes[0], "set the source filter of ") {
		t.Errorf("Ensure after the table was deleted: %q, want the filter back", changes)
	}

	nftIn(t, e.ns, "flush", "chain", "inet", table, sourceChainName)
	w.expect(t, d.Key, "source filter rule deleted by another process")
	e.ensure(less)

	nftIn(t, e.ns, "flush", "ruleset")
	w.expect(t, d.Key, "ruleset flushed by another process")
	changes := e.ensure(less)
	for _, want := range []string{"set the gateway filter of ", "set the source filter of "} {
		if !slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, want) }) {
			t.Errorf("Ensure after the ruleset was flushed: %q, want %q…", changes, want)
		}
	}
	if a, err := e.b.Observe(context.Background(), d.Key); err != nil || a.Segment == nil || !a.Segment.SourceFilter || !a.Segment.GatewayFilter {
		t.Errorf("Observe after the repair: %+v, %v; want both filters", a.Segment, err)
	}
}
