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
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

func netOf(name, cidr string) *v1.Network {
	return &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NetworkSpec{CIDR: cidr}}
}

// More of the 3-node runtime e2e (docs/design/cross-node.md §8): IPv6 across nodes, what the
// underlay sees of the gateway, two Networks on the same nodes, the pods' MTU when a node joins,
// and concurrent ADDs and first claims.

// vxFrame is an inner Ethernet frame seen on the underlay in a VXLAN packet.
type vxFrame struct {
	vni   uint32
	inner []byte
}

// innerSource is the inner frame's source MAC.
func (f vxFrame) innerSource() net.HardwareAddr { return net.HardwareAddr(f.inner[6:12]) }

// underlayCapture reads every frame on every interface of a namespace (a packet socket of protocol
// ETH_P_ALL bound to no interface) and keeps the VXLAN packets' inner frames.
type underlayCapture struct {
	fd     int
	mu     sync.Mutex
	frames []vxFrame
	total  int
	done   chan struct{}
	stopc  chan struct{}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// startUnderlayCapture opens the packet socket in the namespace at nsPath (it stays there).
func startUnderlayCapture(t *testing.T, nsPath string) *underlayCapture {
	t.Helper()
	c := &underlayCapture{done: make(chan struct{}), stopc: make(chan struct{})}
	err := netnstest.InNS(nsPath, func() (err error) {
		c.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL)))
		return err
	})
	if err != nil {
		t.Fatalf("packet socket in %s: %v", nsPath, err)
	}
	tv := unix.Timeval{Usec: 100000}
	if err := unix.SetsockoptTimeval(c.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	if err := unix.SetsockoptInt(c.fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20); err != nil {
		t.Fatal(err)
	}
	go c.read()
	t.Cleanup(func() { c.stop() })
	return c
}

func (c *underlayCapture) read() {
	defer close(c.done)
	buf := make([]byte, 65536)
	for {
		select {
		case <-c.stopc:
			return
		default:
		}
		n, _, err := unix.Recvfrom(c.fd, buf, 0)
		if err != nil {
			continue // the receive timeout: look at stopc again
		}
		f, ok := parseVXLAN(buf[:n])
		c.mu.Lock()
		c.total++
		if ok {
			c.frames = append(c.frames, f)
		}
		c.mu.Unlock()
	}
}

// stop ends the capture and returns the VXLAN frames seen. It is idempotent.
func (c *underlayCapture) stop() []vxFrame {
	select {
	case <-c.stopc:
	default:
		close(c.stopc)
		<-c.done
		_ = unix.Close(c.fd)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.frames
}

// parseVXLAN returns the inner frame of an IPv4 UDP packet to port 4789 in the Ethernet frame b.
func parseVXLAN(b []byte) (vxFrame, bool) {
	if len(b) < 14+20 || binary.BigEndian.Uint16(b[12:14]) != unix.ETH_P_IP {
		return vxFrame{}, false
	}
	ip := b[14:]
	ihl := int(ip[0]&0x0f) * 4
	if ip[9] != unix.IPPROTO_UDP || len(ip) < ihl+8+8+14 {
		return vxFrame{}, false
	}
	udp := ip[ihl:]
	if binary.BigEndian.Uint16(udp[2:4]) != netbackend.VXLANPort {
		return vxFrame{}, false
	}
	vx := udp[8:]
	vni := uint32(vx[4])<<16 | uint32(vx[5])<<8 | uint32(vx[6])
	return vxFrame{vni: vni, inner: bytes.Clone(vx[8:])}, true
}

// resolves tells whether the inner frame is an ARP packet or an IPv6 neighbour solicitation or
// advertisement about addr (as target or as sender).
func (f vxFrame) resolves(addr netip.Addr) bool {
	in := f.inner
	if len(in) < 14 {
		return false
	}
	switch binary.BigEndian.Uint16(in[12:14]) {
	case unix.ETH_P_ARP:
		if len(in) < 14+28 || !addr.Is4() {
			return false
		}
		sender, _ := netip.AddrFromSlice(in[14+14 : 14+18])
		target, _ := netip.AddrFromSlice(in[14+24 : 14+28])
		return sender == addr || target == addr
	case unix.ETH_P_IPV6:
		if len(in) < 14+40+24 || !addr.Is6() || in[14+6] != unix.IPPROTO_ICMPV6 {
			return false
		}
		icmpType := in[14+40]
		if icmpType != 135 && icmpType != 136 {
			return false
		}
		target, _ := netip.AddrFromSlice(in[14+40+8 : 14+40+24])
		return target == addr
	}
	return false
}

// macOf returns the MAC of the pod's eth0.
func (p *mnPod) mac(t *testing.T) net.HardwareAddr {
	t.Helper()
	l, err := p.ns.Netlink.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().HardwareAddr
}

// mtu returns the MTU of the pod's eth0.
func (p *mnPod) mtu(t *testing.T) int {
	t.Helper()
	l, err := p.ns.Netlink.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	return l.Attrs().MTU
}

// crossPing expects every pod to get answers from every pod on another node.
func crossPing(t *testing.T, pods []*mnPod) {
	t.Helper()
	for _, src := range pods {
		for _, dst := range pods {
			if src.node != dst.node {
				pingOnceNS(t, fmt.Sprintf("%s(%s) -> %s(%s)", src.id, src.ip, dst.id, dst.ip), src.ns.Path, dst.ip)
			}
		}
	}
}

// TestMultiNodeIPv6AndGatewayLocal: an IPv6 and an IPv4 Network on three nodes; pods ping each
// other across the nodes and their gateway. A packet socket in the underlay's namespace sees
// every frame between the nodes: the VXLAN packets carry the pods' neighbour resolution (so the
// capture sees the segment) but never an ARP or ND packet for a gateway nor a frame from a
// bridge's MAC; each Network's frames carry its own VNI.
func TestMultiNodeIPv6AndGatewayLocal(t *testing.T) {
	c := newMNCluster(t, 3, "--underlay-interface", "eth0")
	capt := startUnderlayCapture(t, c.ul.ns.Path)
	type network struct {
		name, key string
		gateway   netip.Addr
		vni       uint32
		pods      []*mnPod
	}
	nets := []*network{{name: "sixes"}, {name: "fours"}}
	nets[0].key = c.createNetwork(nets[0].name, "fd66:77::/64")
	nets[1].key = c.createNetwork(nets[1].name, "10.66.0.0/24")
	for _, nw := range nets {
		for _, n := range c.nodes {
			n.waitConfList(nw.key)
		}
		got := c.waitSegment(nw.name, c.nodes...)
		nw.gateway = netip.MustParseAddr(got.Spec.Gateway)
		nw.vni = uint32(got.Status.VNI)
		for _, n := range c.nodes {
			nw.pods = append(nw.pods, n.pod(nw.key, n.name+"-"+nw.name))
		}
	}
	if nets[0].vni == nets[1].vni {
		t.Errorf("both Networks have VNI %d", nets[0].vni)
	}
	for _, nw := range nets {
		for _, p := range nw.pods {
			if p.ip.Is6() != (nw.name == "sixes") {
				t.Fatalf("%s got %s", p.id, p.ip)
			}
			if m := p.mtu(t); m != 1450 {
				t.Errorf("%s has MTU %d, want 1450", p.id, m)
			}
		}
		crossPing(t, nw.pods)
		for _, p := range nw.pods {
			pingOnceNS(t, p.id+" -> its gateway "+nw.gateway.String(), p.ns.Path, nw.gateway)
		}
	}
	frames := capt.stop()

	podMACs := map[string]uint32{} // pod MAC → its Network's VNI
	for _, nw := range nets {
		for _, p := range nw.pods {
			podMACs[p.mac(t).String()] = nw.vni
		}
	}
	resolutions := map[uint32]int{}
	for _, f := range frames {
		src := f.innerSource()
		if vni, ok := podMACs[src.String()]; ok && vni != f.vni {
			t.Errorf("a frame from pod MAC %s (VNI %d) carried VNI %d", src, vni, f.vni)
		}
		for _, nw := range nets {
			if bytes.Equal(src, netbackend.BridgeMAC(nw.key)) {
				t.Errorf("the underlay carried a frame from %s's bridge MAC %s (VNI %d, %d bytes)", nw.name, src, f.vni, len(f.inner))
			}
			if f.resolves(nw.gateway) {
				t.Errorf("the underlay carried ARP/ND for %s's gateway %s (VNI %d, from %s)", nw.name, nw.gateway, f.vni, src)
			}
			for _, p := range nw.pods {
				if f.resolves(p.ip) {
					resolutions[f.vni]++
				}
			}
		}
	}
	t.Logf("captured %d frames on the underlay, %d of them VXLAN; pod address resolution frames per VNI: %v", capt.total, len(frames), resolutions)
	for _, nw := range nets {
		if resolutions[nw.vni] == 0 {
			t.Errorf("the capture saw no resolution of %s's pods (VNI %d) on the underlay: it would not see a gateway's either", nw.name, nw.vni)
		}
	}
}

// TestMultiNodeTwoNetworks: two Networks created at once on three nodes (every node's first
// claims of both race each other and the other nodes'); each node gets its own blocks of each,
// never overlapping, the Networks have different VNIs, and a pod of one cannot reach a pod of the
// other on another node even when both pods route the other's prefix onto their link: the other
// Network's segment never carries its frames.
func TestMultiNodeTwoNetworks(t *testing.T) {
	c := newMNCluster(t, 3, "--underlay-interface", "eth0")
	ctx := context.Background()
	names := []string{"red", "blue"}
	cidrs := []string{"10.66.0.0/24", "10.67.0.0/24"}
	keys := make([]string, 2)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range names {
		wg.Go(func() {
			_, errs[i] = c.client.SamplecrdV1().Networks("default").Create(ctx, netOf(names[i], cidrs[i]), metav1.CreateOptions{})
		})
		keys[i] = "default/" + names[i]
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	vnis := make([]int64, 2)
	for i := range names {
		for _, n := range c.nodes {
			n.waitConfList(keys[i])
		}
		vnis[i] = int64(c.waitSegment(names[i], c.nodes...).Status.VNI)
	}
	if vnis[0] == vnis[1] {
		t.Fatalf("both Networks have VNI %d", vnis[0])
	}
	// The kernel's devices carry them.
	for _, n := range c.nodes {
		for i := range names {
			l, err := n.ns.Netlink.LinkByName(netbackend.SegmentDeviceName(keys[i]))
			if err != nil {
				t.Fatalf("%s's VXLAN device on %s: %v", names[i], n.name, err)
			}
			if vx, ok := l.(*netlink.Vxlan); !ok || int64(vx.VxlanId) != vnis[i] {
				t.Errorf("%s's VXLAN device on %s: %+v, want VNI %d", names[i], n.name, l, vnis[i])
			}
		}
	}
	for i := range names {
		blocks := map[string][]netip.Prefix{}
		list, err := c.client.SamplecrdV1().BlockAllocations("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("network", names[i]).String()})
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range list.Items {
			for _, b := range a.Blocks {
				blocks[a.NodeName] = append(blocks[a.NodeName], netip.MustParsePrefix(b.CIDR))
			}
		}
		if len(list.Items) != len(c.nodes) {
			t.Errorf("%s: %d BlockAllocations, want one per node: %+v", names[i], len(list.Items), list.Items)
		}
		assertDisjoint(t, names[i], blocks)
	}

	a1 := c.nodes[0].pod(keys[0], "red-n1")
	b2 := c.nodes[1].pod(keys[1], "blue-n2")
	a2 := c.nodes[1].pod(keys[0], "red-n2")
	// The route is what a misconfigured or hostile pod could add: red's a1 puts blue's prefix on
	// its link and blue's b2 red's, so each resolves the other directly on its segment.
	for _, r := range []struct {
		p   *mnPod
		dst string
	}{{a1, cidrs[1]}, {b2, cidrs[0]}} {
		l, err := r.p.ns.Netlink.LinkByName("eth0")
		if err != nil {
			t.Fatal(err)
		}
		if err := r.p.ns.Netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Dst: prefixNet(netip.MustParsePrefix(r.dst)),
			Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatal(err)
		}
	}
	cross := startPing(t, "red n1 -> blue n2", a1.ns.Path, b2.ip, pingInterval)
	same := startPing(t, "red n1 -> red n2", a1.ns.Path, a2.ip, pingInterval)
	start := time.Now()
	// The control: the same pod reaches a pod of its own Network on that node meanwhile.
	if err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return same.answering(10, start) && time.Since(start) > 2*time.Second, nil
	}); err != nil {
		t.Fatalf("red n1 -> red n2 not answering: %s", same.stop())
	}
	s := cross.stop()
	if s.Lost != s.Sent {
		t.Errorf("a pod of red reached a pod of blue on another node: %s", s)
	}
	t.Logf("red n1 -> blue n2 (%s, on-link routes both ways): %s; red n1 -> red n2: %s", b2.ip, s, same.stop())
}

func assertDisjoint(t *testing.T, what string, blocks map[string][]netip.Prefix) {
	t.Helper()
	for a, as := range blocks {
		for b, bs := range blocks {
			for i, x := range as {
				for j, y := range bs {
					if (a != b || i != j) && x.Overlaps(y) {
						t.Errorf("%s: block %s of %s overlaps block %s of %s", what, x, a, y, b)
					}
				}
			}
		}
	}
}

// TestMultiNodeMTUOnJoin: a pod attached while its node is the Network's only one has the MTU
// the segment carries (1500 − 50) before and after a second node joins, and a packet of exactly
// that size (don't fragment) crosses to the second node's pod and back.
func TestMultiNodeMTUOnJoin(t *testing.T) {
	c := newMNCluster(t, 1, "--underlay-interface", "eth0")
	key := c.createNetwork("alone", "10.66.0.0/24")
	n1 := c.nodes[0]
	n1.waitConfList(key)
	c.waitSegment("alone", n1)
	p1 := n1.pod(key, "n1-a")
	before := p1.mtu(t)
	n2 := c.addNode()
	n2.waitConfList(key)
	c.waitSegment("alone", n1, n2)
	p2 := n2.pod(key, "n2-a")
	after, other := p1.mtu(t), p2.mtu(t)
	t.Logf("pod MTU on n1 before n2 joined %d, after %d; n2's pod %d", before, after, other)
	if before != 1450 || after != before || other != before {
		t.Errorf("pod MTUs: n1 %d before n2 joined, %d after, n2's pod %d; want 1450 throughout", before, after, other)
	}
	pingOnceNS(t, "n1 -> n2", p1.ns.Path, p2.ip)
	for _, pair := range [][2]*mnPod{{p1, p2}, {p2, p1}} {
		if err := pingDF(pair[0].ns.Path, pair[1].ip, before); err != nil {
			t.Errorf("%s -> %s, %d bytes, don't fragment: %v", pair[0].id, pair[1].id, before, err)
		}
	}
	// One byte more does not leave the pod whole: the pod's MTU is the limit, not the segment.
	if err := pingDF(p1.ns.Path, p2.ip, before+1); err == nil {
		t.Errorf("a %d-byte packet with don't-fragment left a pod of MTU %d", before+1, before)
	}
}

// pingDF sends IPv4 echo requests of size bytes (IP header included) with don't-fragment from
// the namespace at nsPath to dst and waits up to 5 s for an answer.
func pingDF(nsPath string, dst netip.Addr, size int) error {
	var fd int
	err := netnstest.InNS(nsPath, func() (err error) {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_ICMP)
		return err
	})
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE); err != nil {
		return err
	}
	tv := unix.Timeval{Usec: 200000}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return err
	}
	pingID++
	id := pingID & 0xffff
	payload := bytes.Repeat([]byte{0x5a}, size-20-8)
	to := &unix.SockaddrInet4{Addr: dst.As4()}
	buf := make([]byte, 65536)
	deadline := time.Now().Add(5 * time.Second)
	for seq := 0; time.Now().Before(deadline); seq++ {
		b, err := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: payload}}).Marshal(nil)
		if err != nil {
			return err
		}
		if err := unix.Sendto(fd, b, 0, to); err != nil {
			return fmt.Errorf("send: %w", err)
		}
		for until := time.Now().Add(200 * time.Millisecond); time.Now().Before(until); {
			n, _, err := unix.Recvfrom(fd, buf, 0)
			if err != nil {
				break
			}
			ihl := int(buf[0]&0x0f) * 4
			m, err := icmp.ParseMessage(1, buf[ihl:n])
			if err != nil || m.Type != ipv4.ICMPTypeEchoReply {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id && len(e.Data) == len(payload) {
				return nil
			}
		}
	}
	return errors.New("no answer")
}

// TestMultiNodeAddRace: 3 nodes × 50 pod ADDs at once on one /22. Every ADD succeeds (the first
// block and the headroom cover the burst), and no address is leased twice, read from every
// node's host-local lease files.
func TestMultiNodeAddRace(t *testing.T) {
	c := newMNCluster(t, 3, "--underlay-interface", "eth0")
	const name, perNode = "burst", 50
	key := c.createNetwork(name, "10.66.0.0/22")
	for _, n := range c.nodes {
		n.waitConfList(key)
	}
	podNS := make([]*netnstest.NS, len(c.nodes)*perNode)
	for i := range podNS {
		podNS[i] = netnstest.New(t, "pod")
	}
	errs := make([]error, len(podNS))
	ips := make([]netip.Addr, len(podNS))
	var wg sync.WaitGroup
	start := time.Now()
	for i := range podNS {
		n := c.nodes[i/perNode]
		wg.Go(func() {
			p, err := n.add(key, fmt.Sprintf("%s-pod%d", n.name, i%perNode), podNS[i])
			if err == nil {
				ips[i] = p.ip
			}
			errs[i] = err
		})
	}
	wg.Wait()
	took := time.Since(start)
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("%v", err)
			}
		}
	}
	if failed > 0 {
		t.Errorf("%d of %d ADDs failed", failed, len(errs))
	}
	leasedBy := map[netip.Addr]string{}
	for _, n := range c.nodes {
		leases := n.leases(key)
		if len(leases) != perNode {
			t.Errorf("%s holds %d leases, want %d", n.name, len(leases), perNode)
		}
		for _, a := range leases {
			if other, ok := leasedBy[a]; ok {
				t.Errorf("%s leased on %s and on %s", a, other, n.name)
			}
			leasedBy[a] = n.name
		}
	}
	seen := map[netip.Addr]int{}
	for i, ip := range ips {
		if !ip.IsValid() {
			continue
		}
		if j, ok := seen[ip]; ok {
			t.Errorf("ADD %d and ADD %d both got %s", j, i, ip)
		}
		seen[ip] = i
	}
	// What the nodes hold once the agents have seen the burst (they claim after it).
	ctx := context.Background()
	blocks := map[string][]netip.Prefix{}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		nw, err := c.client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, n := range c.nodes {
			if e := entryOf(nw, n.name); e == nil || e.Leases == nil || *e.Leases != perNode || !e.Ready {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Errorf("the entries never reported %d leases each and ready", perNode)
	}
	list, err := c.client.SamplecrdV1().BlockAllocations("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Items {
		for _, b := range a.Blocks {
			blocks[a.NodeName] = append(blocks[a.NodeName], netip.MustParsePrefix(b.CIDR))
		}
	}
	assertDisjoint(t, name, blocks)
	t.Logf("%d ADDs (%d per node, all at once) took %v; %d failed; blocks afterwards: %v", len(podNS), perNode, took, failed, blocks)
}

// TestMultiNodeAddRaceSmallBlocks: the same burst with blocks of 16 addresses (server flag
// --block-prefix-length-v4=28), so the burst outruns what a node holds: an ADD never waits for a
// claim, so some fail with host-local's "no IP addresses available" and nothing else; the agent
// claims more blocks as leases appear, and each failed ADD, deleted and retried as a runtime
// does, succeeds. No address is leased twice.
func TestMultiNodeAddRaceSmallBlocks(t *testing.T) {
	c := newMNClusterWith(t, []string{"--block-prefix-length-v4=28"}, 3, "--underlay-interface", "eth0")
	const name, perNode = "smallblocks", 50
	key := c.createNetwork(name, "10.66.0.0/22")
	for _, n := range c.nodes {
		n.waitConfList(key)
	}
	podNS := make([]*netnstest.NS, len(c.nodes)*perNode)
	for i := range podNS {
		podNS[i] = netnstest.New(t, "pod")
	}
	heldBefore := map[string]int{}
	ctx := context.Background()
	list, err := c.client.SamplecrdV1().BlockAllocations("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range list.Items {
		heldBefore[a.NodeName] = len(a.Blocks)
	}
	ids := make([]string, len(podNS))
	errs := make([]error, len(podNS))
	var wg sync.WaitGroup
	for i := range podNS {
		n := c.nodes[i/perNode]
		ids[i] = fmt.Sprintf("%s-pod%d", n.name, i%perNode)
		wg.Go(func() { _, errs[i] = n.add(key, ids[i], podNS[i]) })
	}
	wg.Wait()
	failedOn := map[string]int{}
	for i, err := range errs {
		if err == nil {
			continue
		}
		n := c.nodes[i/perNode]
		failedOn[n.name]++
		if !strings.Contains(err.Error(), "no IP addresses available") {
			t.Errorf("ADD %s failed otherwise than host-local running out: %v", ids[i], err)
		}
	}
	// Retry each failed ADD as a runtime does (DEL, then ADD again with the conflist as it is
	// now) until it succeeds: the agents claim behind the leases.
	retries := 0
	for i, err := range errs {
		if err == nil {
			continue
		}
		n := c.nodes[i/perNode]
		werr := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
			retries++
			list, lerr := libcni.ConfListFromFile(linux.ConfPath(n.confDir, key))
			if lerr != nil {
				return false, lerr
			}
			_ = netnstest.InNS(n.ns.Path, func() error {
				return n.cni.DelNetworkList(ctx, list, &libcni.RuntimeConf{ContainerID: ids[i], NetNS: podNS[i].Path, IfName: "eth0"})
			})
			_, err = n.add(key, ids[i], podNS[i])
			return err == nil, nil
		})
		if werr != nil {
			t.Errorf("ADD %s never succeeded: %v", ids[i], err)
		}
	}
	leasedBy := map[netip.Addr]string{}
	for _, n := range c.nodes {
		leases := n.leases(key)
		if len(leases) != perNode {
			t.Errorf("%s holds %d leases, want %d", n.name, len(leases), perNode)
		}
		for _, a := range leases {
			if other, ok := leasedBy[a]; ok {
				t.Errorf("%s leased on %s and on %s", a, other, n.name)
			}
			leasedBy[a] = n.name
		}
	}
	list, err = c.client.SamplecrdV1().BlockAllocations("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string][]netip.Prefix{}
	for _, a := range list.Items {
		for _, b := range a.Blocks {
			blocks[a.NodeName] = append(blocks[a.NodeName], netip.MustParsePrefix(b.CIDR))
		}
	}
	assertDisjoint(t, name, blocks)
	for _, n := range c.nodes {
		t.Logf("%s: %d blocks before the burst, %d after; %d of %d ADDs failed at first", n.name, heldBefore[n.name], len(blocks[n.name]), failedOn[n.name], perNode)
	}
	failed := 0
	for _, err := range errs {
		if err != nil {
			failed++
		}
	}
	t.Logf("%d retry attempts for the %d failed ADDs", retries, failed)
}
