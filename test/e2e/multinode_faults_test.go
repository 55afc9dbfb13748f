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

package e2e

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// The fault test of the 3-node runtime (docs/design/cross-node.md §8): pods on three nodes of
// one Network ping each other every 20 ms while, in turn, an agent is killed and started again,
// the Network's bridge and then its VXLAN device are deleted by hand on n2, a fourth node joins
// and a node is removed. Each fault gets fresh pingers; the test asserts that every pair answers
// again after the fault and that the pairs not involving the faulted node lose nothing, and it
// logs per fault the lost pings and the longest outage (docs/controller.md keeps the figures).

// mnCluster is a standalone server with node namespaces on one underlay, each running an agent.
type mnCluster struct {
	t         *testing.T
	s         *standalone
	client    versioned.Interface
	ul        *underlay
	nodes     []*mnNode
	pluginDir string
	agentArgs []string
}

// newMNCluster starts the server and nodes n1..n<count>, each agent with agentArgs.
func newMNCluster(t *testing.T, count int, agentArgs ...string) *mnCluster {
	t.Helper()
	return newMNClusterWith(t, nil, count, agentArgs...)
}

// newMNClusterWith is newMNCluster with more server flags.
func newMNClusterWith(t *testing.T, serverArgs []string, count int, agentArgs ...string) *mnCluster {
	t.Helper()
	netnstest.RequireRoot(t)
	pluginDir := requireCNIPlugins(t, "bridge", "host-local", "loopback")
	s := startStandalone(t, append([]string{"--controllers=false"}, serverArgs...)...)
	c := &mnCluster{t: t, s: s, client: s.clientset(t), ul: newUnderlay(t), pluginDir: pluginDir, agentArgs: agentArgs}
	for i := 1; i <= count; i++ {
		c.addNode()
	}
	return c
}

// addNode adds the next node and starts its agent.
func (c *mnCluster) addNode() *mnNode {
	c.t.Helper()
	n := c.ul.addNode(c.t, len(c.nodes)+1, c.pluginDir)
	n.startAgent(c.s.kubeconfig, c.agentArgs...)
	c.nodes = append(c.nodes, n)
	return n
}

// createNetwork creates a Network of cidr in default and returns its key.
func (c *mnCluster) createNetwork(name, cidr string) string {
	c.t.Helper()
	if _, err := c.client.SamplecrdV1().Networks("default").Create(context.Background(), &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NetworkSpec{CIDR: cidr},
	}, metav1.CreateOptions{}); err != nil {
		c.t.Fatal(err)
	}
	return "default/" + name
}

// waitSegment waits until the Network has a VNI and every entry of nodes is ready with its
// VXLAN device and underlay address, and returns the Network.
func (c *mnCluster) waitSegment(name string, nodes ...*mnNode) *v1.Network {
	c.t.Helper()
	var nw *v1.Network
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		if nw, err = c.client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{}); err != nil {
			return false, nil
		}
		if nw.Status.VNI == 0 {
			return false, nil
		}
		for _, n := range nodes {
			e := entryOf(nw, n.name)
			if e == nil || !e.Ready || e.VXLAN == "" || e.UnderlayAddress == "" {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		c.t.Fatalf("network %s: never a VNI and ready entries with a segment on %d nodes: vni %d, entries %+v", name, len(nodes), nw.Status.VNI, nw.Status.Nodes)
	}
	return nw
}

func entryOf(nw *v1.Network, node string) *v1.NetworkNodeStatus {
	for i := range nw.Status.Nodes {
		if nw.Status.Nodes[i].NodeName == node {
			return &nw.Status.Nodes[i]
		}
	}
	return nil
}

// pod makes a pod namespace and attaches it on n to key.
func (n *mnNode) pod(key, id string) *mnPod {
	n.t.Helper()
	ns := netnstest.New(n.t, "pod")
	ns.DisableDAD(n.t)
	p, err := n.add(key, id, ns)
	if err != nil {
		n.t.Fatalf("%v\nagent log:\n%s", err, n.log.tail())
	}
	return p
}

// killAgent kills the node's agent (SIGKILL: no chance to clean up) and waits for it to be gone.
func (n *mnNode) killAgent() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Kill()
	<-n.exited
	n.cmd = nil
}

// waitLog waits for the node's agent log to contain s.
func (n *mnNode) waitLog(s string) {
	n.t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		return strings.Contains(n.log.String(), s), nil
	})
	if err != nil {
		n.t.Fatalf("agent of %s never logged %q:\n%s", n.name, s, n.log.tail())
	}
}

// floodPeers returns the destinations of the flood entries of key's VXLAN device on the node.
func (n *mnNode) floodPeers(key string) []netip.Addr {
	n.t.Helper()
	link, err := n.ns.Netlink.LinkByName(netbackend.SegmentDeviceName(key))
	if err != nil {
		return nil
	}
	entries, err := n.ns.Netlink.NeighList(link.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		n.t.Fatalf("FDB of %s on %s: %v", link.Attrs().Name, n.name, err)
	}
	var out []netip.Addr
	for _, e := range entries {
		if e.HardwareAddr.String() == "00:00:00:00:00:00" && e.IP != nil {
			a, _ := netip.AddrFromSlice(e.IP)
			out = append(out, a.Unmap())
		}
	}
	return out
}

// answering reports whether the last k pings sent at least 100 ms ago, all sent after since,
// were answered.
func (p *pinger) answering(k int, since time.Time) bool {
	return p.lastAll(k, since, 100*time.Millisecond, true)
}

// silent reports whether the last k pings sent at least 500 ms ago, all sent after since, went
// unanswered.
func (p *pinger) silent(k int, since time.Time) bool {
	return p.lastAll(k, since, 500*time.Millisecond, false)
}

// lastAll reports whether the last k pings sent at least settle ago, all sent after since, were
// all answered (answered true) or all unanswered (answered false).
func (p *pinger) lastAll(k int, since time.Time, settle time.Duration, answered bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	cutoff := time.Now().Add(-settle)
	end := len(p.sent)
	for end > 0 && p.sent[end-1].After(cutoff) {
		end--
	}
	if end < k || p.sent[end-k].Before(since) {
		return false
	}
	for seq := end - k; seq < end; seq++ {
		if p.reply[seq&0xffff] != answered {
			return false
		}
	}
	return true
}

// firstAnswered returns when the first answered ping was sent.
func (p *pinger) firstAnswered() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for seq, at := range p.sent {
		if p.reply[seq&0xffff] {
			return at, true
		}
	}
	return time.Time{}, false
}

// lastAnswered returns when the last answered ping was sent, and the next ping after it.
func (p *pinger) lastAnswered() (time.Time, time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for seq := len(p.sent) - 1; seq >= 0; seq-- {
		if p.reply[seq&0xffff] {
			var next time.Time
			if seq+1 < len(p.sent) {
				next = p.sent[seq+1]
			}
			return p.sent[seq], next, true
		}
	}
	return time.Time{}, time.Time{}, false
}

// podPair is a ping from one pod to another; affected marks the pairs a fault may interrupt.
type podPair struct {
	src, dst *mnPod
	affected bool
	pg       *pinger
	stats    pingStats
}

func (p *podPair) String() string {
	return fmt.Sprintf("%s(%s) -> %s(%s)", p.src.node.name, p.src.ip, p.dst.node.name, p.dst.ip)
}

// faultRow is one line of the fault table.
type faultRow struct {
	fault string
	// pairs, sent, lost and outage over the affected pairs; unaffectedLost over the others.
	pairs, sent, lost int
	outage            time.Duration
	unaffected        int
	unaffectedLost    int
	// repaired is what the node itself shows: from the fault until the agent had put back what
	// the fault took (or the other measure the note names).
	repaired string
	note     string
}

// crossPairs returns both directions between every two pods on different nodes; a pair is
// affected when either end is on a node of affected.
func crossPairs(pods []*mnPod, affected ...*mnNode) []*podPair {
	var out []*podPair
	for _, a := range pods {
		for _, b := range pods {
			if a.node == b.node {
				continue
			}
			hit := false
			for _, n := range affected {
				hit = hit || a.node == n || b.node == n
			}
			out = append(out, &podPair{src: a, dst: b, affected: hit})
		}
	}
	return out
}

// startPairs starts a pinger per pair and waits until each answers.
func startPairs(t *testing.T, pairs []*podPair) {
	t.Helper()
	start := time.Now()
	for _, p := range pairs {
		p.pg = startPing(t, p.String(), p.src.ns.Path, p.dst.ip, pingInterval)
	}
	waitPairs(t, pairs, start, "before the fault")
}

// waitPairs waits (generously: recovery is measured, not bounded tightly) until every pair's
// last ten pings sent after since were answered.
func waitPairs(t *testing.T, pairs []*podPair, since time.Time, what string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		for _, p := range pairs {
			if !p.pg.answering(10, since) {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		for _, p := range pairs {
			if !p.pg.answering(10, since) {
				t.Errorf("%s: %s not answering", what, p)
			}
		}
		t.FailNow()
	}
}

// pollFast polls cond every millisecond (generous bound) and returns how long after start it
// held: a measurement of a repair on a node, whose figures go to the table. start is taken
// before the fault's netlink request: the kernel tells listeners of a deleted link before it
// answers the request that deleted it (it still waits for the link's last references then),
// so an agent can have repaired it by the time the request returns.
func pollFast(t *testing.T, what string, start time.Time, cond func() bool) time.Duration {
	t.Helper()
	polls := 0
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		polls++
		return cond(), nil
	})
	t.Logf("%s: %d polls, %v", what, polls, time.Since(start))
	if err != nil {
		t.Fatalf("never: %s", what)
	}
	return time.Since(start)
}

// faultSettle is how long pairs keep pinging after they all answer again: it measures any second
// interruption (a late repair, the next resync), it synchronises nothing.
const faultSettle = 3 * time.Second

// measure injects a fault while pairs ping (inject returns what the node showed of the repair),
// waits until all answer again, keeps pinging for faultSettle, stops them and checks that the
// unaffected pairs lost nothing.
func measureFault(t *testing.T, fault string, pairs []*podPair, inject func() string) faultRow {
	t.Helper()
	startPairs(t, pairs)
	at := time.Now()
	row := faultRow{fault: fault, repaired: inject()}
	waitPairs(t, pairs, at, "after "+fault)
	time.Sleep(faultSettle)
	stopPairs(pairs)
	for _, p := range pairs {
		t.Logf("%s: %s: %s", fault, p, p.stats)
		if !p.stats.LastOK {
			t.Errorf("%s: %s lost pings at the end: %s", fault, p, p.stats)
		}
		if !p.affected {
			row.unaffected++
			row.unaffectedLost += p.stats.Lost
			if p.stats.Lost > 0 {
				t.Errorf("%s: %s does not involve the faulted node but lost pings: %s", fault, p, p.stats)
			}
			continue
		}
		row.pairs++
		row.sent += p.stats.Sent
		row.lost += p.stats.Lost
		row.outage = max(row.outage, p.stats.Outage)
	}
	return row
}

// stopPairs stops the pairs' pingers (at once: each stop waits a second for late answers).
func stopPairs(pairs []*podPair) {
	for _, p := range pairs {
		p.pg.halt()
	}
	for _, p := range pairs {
		p.stats = p.pg.stop()
	}
}

// signedMS is fmtMS with a sign.
func signedMS(d time.Duration) string {
	if d < 0 {
		return "-" + fmtMS(-d)
	}
	return "+" + fmtMS(d)
}

func fmtMS(d time.Duration) string {
	if d < 10*time.Millisecond {
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// masterOf returns the index of the master of the node's link name (0: none or no such link).
func (n *mnNode) masterOf(name string) int {
	l, err := n.ns.Netlink.LinkByName(name)
	if err != nil {
		return 0
	}
	return l.Attrs().MasterIndex
}

// portsOf returns the names of the links attached to the node's bridge.
func (n *mnNode) portsOf(bridge string) []string {
	n.t.Helper()
	br, err := n.ns.Netlink.LinkByName(bridge)
	if err != nil {
		n.t.Fatalf("bridge %s on %s: %v", bridge, n.name, err)
	}
	links, err := n.ns.Netlink.LinkList()
	if err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

// hasPeers tells whether the node's flood list of key holds every one of want (and, with
// exact, nothing else).
func (n *mnNode) hasPeers(key string, exact bool, want ...netip.Addr) bool {
	have := n.floodPeers(key)
	for _, w := range want {
		if !slices.Contains(have, w) {
			return false
		}
	}
	return !exact || len(have) == len(want)
}

// fdbDsts returns the destinations of every entry (flood and learnt) of key's VXLAN device.
func (n *mnNode) fdbDsts(key string) []netip.Addr {
	n.t.Helper()
	link, err := n.ns.Netlink.LinkByName(netbackend.SegmentDeviceName(key))
	if err != nil {
		return nil
	}
	entries, err := n.ns.Netlink.NeighList(link.Attrs().Index, unix.AF_BRIDGE)
	if err != nil {
		n.t.Fatalf("FDB of %s on %s: %v", link.Attrs().Name, n.name, err)
	}
	var out []netip.Addr
	for _, e := range entries {
		if e.Flags&unix.NTF_SELF != 0 && e.IP != nil {
			a, _ := netip.AddrFromSlice(e.IP)
			out = append(out, a.Unmap())
		}
	}
	return out
}

// sources returns the underlay addresses the node's source filter of key admits (the set
// "peers" of nftables table inet samplecrd-<bridge>), sorted; nil without one.
func (n *mnNode) sources(key string) []netip.Addr {
	n.t.Helper()
	c, err := nftables.New(nftables.WithNetNSFd(int(n.ns.Handle)))
	if err != nil {
		n.t.Fatalf("nftables in %s: %v", n.name, err)
	}
	t := &nftables.Table{Family: nftables.TableFamilyINet, Name: "samplecrd-" + netbackend.BridgeName(key)}
	set, err := c.GetSetByName(t, "peers")
	if err != nil {
		return nil
	}
	elems, err := c.GetSetElements(set)
	if err != nil {
		return nil
	}
	out := []netip.Addr{}
	for _, e := range elems {
		a, _ := netip.AddrFromSlice(e.Key)
		out = append(out, a)
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// admits tells whether the node's source filter of key admits exactly want.
func (n *mnNode) admits(key string, want ...netip.Addr) bool {
	want = slices.Clone(want)
	slices.SortFunc(want, netip.Addr.Compare)
	return slices.Equal(n.sources(key), want)
}

func TestMultiNodeFaults(t *testing.T) {
	c := newMNCluster(t, 3, "--underlay-interface", "eth0")
	n1, n2, n3 := c.nodes[0], c.nodes[1], c.nodes[2]
	const name = "faults"
	key := c.createNetwork(name, "10.66.0.0/24")
	var pods []*mnPod
	for _, n := range c.nodes {
		n.waitConfList(key)
		pods = append(pods, n.pod(key, n.name+"-a"))
	}
	c.waitSegment(name, c.nodes...)
	ctx := context.Background()
	bridge, vx := netbackend.BridgeName(key), netbackend.SegmentDeviceName(key)
	var rows []faultRow

	// 1. The agent of n2 is killed and started again: the data path does not need it, and the
	// new agent finds everything in place.
	rows = append(rows, measureFault(t, "agent of n2 killed (SIGKILL) and started again", crossPairs(pods, n2), func() string {
		n2.killAgent()
		start := time.Now()
		n2.startAgent(c.s.kubeconfig, c.agentArgs...)
		n2.waitLog("Starting network controller")
		return "agent start → controller started " + fmtMS(time.Since(start))
	}))
	if strings.Contains(n2.log.String(), "Converged network") {
		t.Errorf("the restarted agent changed the node, which was in order:\n%s", n2.log.tail())
	}

	// 2. The Network's bridge deleted by hand on n2: the pod's veth and the VXLAN device lose
	// their master; the agent makes the bridge again and attaches both.
	rows = append(rows, measureFault(t, "bridge deleted by hand on n2", crossPairs(pods, n2), func() string {
		ports := n2.portsOf(bridge)
		if len(ports) != 2 {
			t.Fatalf("%s on n2 has ports %v, want the pod's veth and %s", bridge, ports, vx)
		}
		link, err := n2.ns.Netlink.LinkByName(bridge)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := n2.ns.Netlink.LinkDel(link); err != nil {
			t.Fatal(err)
		}
		deleted := time.Since(start)
		took := pollFast(t, "n2's bridge made again with its ports", start, func() bool {
			br, err := n2.ns.Netlink.LinkByName(bridge)
			if err != nil || br.Attrs().Flags&net.FlagUp == 0 {
				return false
			}
			for _, p := range ports {
				if n2.masterOf(p) != br.Attrs().Index {
					return false
				}
			}
			return true
		})
		return fmt.Sprintf("bridge back, up, both ports attached %s after the delete request (which took %s)", fmtMS(took), fmtMS(deleted))
	}))

	// 3. The VXLAN device deleted by hand on n2: the agent makes it again with its flood list.
	rows = append(rows, measureFault(t, "VXLAN device deleted by hand on n2", crossPairs(pods, n2), func() string {
		link, err := n2.ns.Netlink.LinkByName(vx)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if err := n2.ns.Netlink.LinkDel(link); err != nil {
			t.Fatal(err)
		}
		deleted := time.Since(start)
		took := pollFast(t, "n2's VXLAN device made again, attached, up, with both peers", start, func() bool {
			l, err := n2.ns.Netlink.LinkByName(vx)
			br, err2 := n2.ns.Netlink.LinkByName(bridge)
			return err == nil && err2 == nil && l.Attrs().Flags&net.FlagUp != 0 && l.Attrs().MasterIndex == br.Attrs().Index &&
				n2.hasPeers(key, true, n1.underlay, n3.underlay)
		})
		return fmt.Sprintf("device back, attached, up, both flood entries %s after the delete request (which took %s)", fmtMS(took), fmtMS(deleted))
	}))

	// 4. A fourth node joins while the three ping each other (they lose nothing): time from its
	// agent's start until its pod and a pod on n1 answer each other, and until the other nodes
	// flood to it (learning alone carries the first answers; the flood list is what a pod of
	// n1 needs to resolve n4's pods by itself).
	base := crossPairs(pods)
	startPairs(t, base)
	joinStart := time.Now()
	n4 := c.addNode()
	known := make(chan time.Duration, 1)
	go func() {
		for time.Since(joinStart) < 90*time.Second {
			if n1.hasPeers(key, false, n4.underlay) && n2.hasPeers(key, false, n4.underlay) && n3.hasPeers(key, false, n4.underlay) &&
				n4.hasPeers(key, true, n1.underlay, n2.underlay, n3.underlay) {
				known <- time.Since(joinStart)
				return
			}
			time.Sleep(time.Millisecond)
		}
		close(known)
	}()
	n4.waitConfList(key)
	confAt := time.Since(joinStart)
	p4 := n4.pod(key, "n4-a")
	podAt := time.Since(joinStart)
	join := []*podPair{{src: p4, dst: pods[0], affected: true}, {src: pods[0], dst: p4, affected: true}}
	for _, p := range join {
		p.pg = startPing(t, p.String(), p.src.ns.Path, p.dst.ip, pingInterval)
	}
	waitPairs(t, join, joinStart, "4th node joining")
	var answered [2]time.Duration
	for i, p := range join {
		first, _ := p.pg.firstAnswered()
		answered[i] = first.Sub(joinStart)
	}
	floodAt, ok := <-known
	if !ok {
		t.Errorf("n4 never in every other node's flood list with them in its own: n1 %v, n2 %v, n3 %v, n4 %v",
			n1.floodPeers(key), n2.floodPeers(key), n3.floodPeers(key), n4.floodPeers(key))
	}
	time.Sleep(faultSettle)
	stopPairs(append(base, join...))
	row := faultRow{fault: "4th node (n4) joins",
		repaired: fmt.Sprintf("agent start → n4's pod answers n1's %s, n1's answers n4's %s", fmtMS(answered[0]), fmtMS(answered[1]))}
	for _, p := range base {
		t.Logf("4th node joins: %s: %s", p, p.stats)
		row.unaffected++
		row.unaffectedLost += p.stats.Lost
		if p.stats.Lost > 0 {
			t.Errorf("4th node joins: %s lost pings: %s", p, p.stats)
		}
	}
	for _, p := range join {
		t.Logf("4th node joins: %s: %s", p, p.stats)
	}
	row.note = fmt.Sprintf("agent start → conflist %s, → pod ADDed %s, → n4 in all flood lists (and they in its) %s",
		fmtMS(confAt), fmtMS(podAt), fmtMS(floodAt))
	rows = append(rows, row)
	pods = append(pods, p4)
	c.waitSegment(name, c.nodes...)

	// 5. n3 removed: its agent stopped, its entry removed through the API. The others keep
	// pinging each other without a loss, refuse n3's VXLAN packets and drop it from their flood
	// lists (and what they learnt behind it), so n3's pod is out of the segment: n1's pings to
	// it go unanswered, and so do its pings to n1's pod although n3's segment is untouched (its
	// agent is only stopped) and still sends to n1: n1's source filter drops them, where the
	// VXLAN device alone would take them, learn n3's pod behind n3 and answer.
	var rest []*mnPod
	for _, p := range pods {
		if p.node != n3 {
			rest = append(rest, p)
		}
	}
	out := &podPair{src: pods[0], dst: pods[2]}
	back := &podPair{src: pods[2], dst: pods[0]}
	var removedAt time.Time
	row = measureFault(t, "n3 removed (agent stopped, entry removed via the API)", crossPairs(rest), func() string {
		for _, p := range []*podPair{out, back} {
			p.pg = startPing(t, p.String(), p.src.ns.Path, p.dst.ip, pingInterval)
		}
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return out.pg.answering(5, time.Time{}) && back.pg.answering(5, time.Time{}), nil
		}); err != nil {
			t.Fatalf("%s or %s never answered before the removal", out, back)
		}
		n3.stopAgent()
		removedAt = time.Now()
		var removeTook time.Duration
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			nw, err := c.client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			var keep []v1.NetworkNodeStatus
			for _, e := range nw.Status.Nodes {
				if e.NodeName != n3.name {
					keep = append(keep, e)
				}
			}
			nw.Status.Nodes = keep
			start := time.Now()
			_, err = c.client.SamplecrdV1().Networks("default").UpdateStatus(ctx, nw, metav1.UpdateOptions{})
			removedAt, removeTook = start, time.Since(start)
			return err
		})
		if err != nil {
			t.Fatalf("removing n3's entry: %v", err)
		}
		took := pollFast(t, "n3 gone from the source filters and flood lists of n1, n2, n4", removedAt, func() bool {
			// The flood lists first (cheap to poll); each agent writes its source filter before.
			return n1.hasPeers(key, true, n2.underlay, n4.underlay) && n2.hasPeers(key, true, n1.underlay, n4.underlay) &&
				n4.hasPeers(key, true, n1.underlay, n2.underlay) &&
				n1.admits(key, n2.underlay, n4.underlay) && n2.admits(key, n1.underlay, n4.underlay) && n4.admits(key, n1.underlay, n2.underlay)
		})
		return fmt.Sprintf("status update sent → n3 gone from the others' source filters and flood lists %s (the update's answer took %s)", fmtMS(took), fmtMS(removeTook))
	})
	for _, p := range []*podPair{out, back} {
		if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return p.pg.silent(10, removedAt), nil
		}); err != nil {
			t.Errorf("%s still answered after n3 left the segment", p)
		}
	}
	// Where n3's pod was cut off: its last answered ping and the next one, by when they were
	// sent relative to the status update (negative: before it).
	cut := "none answered"
	if at, next, ok := back.pg.lastAnswered(); ok {
		cut = fmt.Sprintf("its last answered ping sent at %s, the next (unanswered) at %s, relative to the update being sent",
			signedMS(at.Sub(removedAt)), signedMS(next.Sub(removedAt)))
	}
	if slices.Contains(n1.fdbDsts(key), n3.underlay) {
		t.Errorf("n1's %s still sends to n3 (%s) after the removal: FDB %v", netbackend.SegmentDeviceName(key), n3.underlay, n1.fdbDsts(key))
	}
	row.note = fmt.Sprintf("%s after the removal: %s; %s after the removal: %s, %s", out, out.pg.stop(), back, back.pg.stop(), cut)
	t.Logf("n3 removed: %s", row.note)
	rows = append(rows, row)

	var b strings.Builder
	fmt.Fprintf(&b, "\n| fault | affected pairs | lost pings (of sent) | longest outage | on the node | unaffected pairs: lost | note |\n|---|---|---|---|---|---|---|\n")
	for _, r := range rows {
		lost, outage := "—", "—"
		if r.pairs > 0 {
			lost, outage = fmt.Sprintf("%d (of %d)", r.lost, r.sent), fmtMS(r.outage)
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %d pairs: %d | %s |\n", r.fault, r.pairs, lost, outage,
			r.repaired, r.unaffected, r.unaffectedLost, r.note)
	}
	t.Log(b.String())
	for _, n := range []*mnNode{n2} {
		for _, l := range strings.Split(n.log.String(), "\n") {
			if strings.Contains(l, "Converged network") {
				t.Logf("%s: %s", n.name, l)
			}
		}
	}
}
