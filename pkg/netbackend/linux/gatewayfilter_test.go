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
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// arpSocket is a packet socket receiving (every frame, of which it reads ARP) and sending ARP
// frames on one interface of a namespace.
type arpSocket struct {
	fd      int
	ifindex int
	mac     net.HardwareAddr
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

func openARPSocket(t *testing.T, ns *testNS, ifname string) *arpSocket {
	t.Helper()
	s := &arpSocket{}
	err := inNS(ns.path, func() error {
		iface, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		s.ifindex, s.mac = iface.Index, iface.HardwareAddr
		// ETH_P_ALL: a socket for one protocol on a bridge port would see nothing, as the
		// bridge takes the frames before protocol handlers get them; taps see them first.
		if s.fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_ALL))); err != nil {
			return err
		}
		return unix.Bind(s.fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ALL), Ifindex: s.ifindex})
	})
	if err != nil {
		t.Fatalf("packet socket on %s in %s: %v", ifname, ns.name, err)
	}
	t.Cleanup(func() { _ = unix.Close(s.fd) })
	tv := unix.NsecToTimeval((200 * time.Millisecond).Nanoseconds())
	if err := unix.SetsockoptTimeval(s.fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	return s
}

// arpFrame is the part of an ARP frame the tests look at.
type arpFrame struct {
	op       uint16
	sha      net.HardwareAddr
	spa, tpa netip.Addr
}

func (f arpFrame) String() string {
	return fmt.Sprintf("ARP op %d from %s (%s) for %s", f.op, f.spa, f.sha, f.tpa)
}

// request broadcasts "who has target, tell sender".
func (s *arpSocket) request(t *testing.T, sender, target netip.Addr) {
	t.Helper()
	f := make([]byte, 0, 42)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, s.mac...)
	f = binary.BigEndian.AppendUint16(f, unix.ETH_P_ARP)
	f = append(f, 0, 1, 8, 0, 6, 4, 0, 1)
	f = append(f, s.mac...)
	f = append(f, sender.AsSlice()...)
	f = append(f, 0, 0, 0, 0, 0, 0)
	f = append(f, target.AsSlice()...)
	to := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: s.ifindex, Halen: 6}
	copy(to.Addr[:], []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if err := unix.Sendto(s.fd, f, 0, to); err != nil {
		t.Fatalf("sending an ARP request for %s: %v", target, err)
	}
}

// receiveUntil reads incoming ARP frames until stop returns true for one (it returns the
// frames before it) or 5s passed (it fails the test).
func (s *arpSocket) receiveUntil(t *testing.T, what string, stop func(arpFrame) bool) []arpFrame {
	t.Helper()
	var seen []arpFrame
	buf := make([]byte, 2048)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			t.Fatal(err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		if n < 42 || binary.BigEndian.Uint16(buf[12:14]) != unix.ETH_P_ARP {
			continue
		}
		f := arpFrame{op: binary.BigEndian.Uint16(buf[20:22]), sha: bytes.Clone(buf[22:28])}
		f.spa, _ = netip.AddrFromSlice(buf[28:32])
		f.tpa, _ = netip.AddrFromSlice(buf[38:42])
		if stop(f) {
			return seen
		}
		seen = append(seen, f)
	}
	t.Fatalf("%s: not seen within 5s (saw %+v)", what, seen)
	return nil
}

// TestSegmentGatewayStaysLocal: a pod's ARP request for the gateway is answered by its own
// node's bridge and never reaches the other node, while a request for a pod on the other node
// does; nothing the node's bridge sends itself crosses the segment. A capture on the other
// node's VXLAN device counts the frames; a request for the remote pod, sent after the others,
// marks the end of what could have crossed.
func TestSegmentGatewayStaysLocal(t *testing.T) {
	nodes := newSegmentNodes(t, 2, false)
	plugins := pluginDir(t)
	d := desired4("default/gw")
	pods, addrs := segmentPods(t, plugins, nodes, d, 300, []netip.Prefix{netip.MustParsePrefix("10.99.0.0/26"), netip.MustParsePrefix("10.99.0.64/26")})
	mac := nodes[0].ns.link(t, netbackend.BridgeName(d.Key)).Attrs().HardwareAddr
	if remote := nodes[1].ns.link(t, netbackend.BridgeName(d.Key)).Attrs().HardwareAddr; !bytes.Equal(mac, remote) {
		t.Fatalf("the bridges have MACs %s and %s, want the Network's one on both", mac, remote)
	}

	remote := openARPSocket(t, nodes[1].ns, netbackend.SegmentDeviceName(d.Key))
	pod := openARPSocket(t, pods[0], "eth0")

	// The node's own stack resolving a remote pod: its request comes from the bridge's MAC.
	_ = inNS(nodes[0].ns.path, func() error {
		conn, err := (&net.Dialer{Timeout: 300 * time.Millisecond}).Dial("tcp4", netip.AddrPortFrom(addrs[1], 9).String())
		if err == nil {
			_ = conn.Close()
			t.Errorf("node 0 reached pod %s on node 1 through its bridge: the bridge's frames cross the segment", addrs[1])
		}
		return nil
	})
	pod.request(t, addrs[0], d.Gateway)
	pod.request(t, addrs[0], addrs[1])

	crossed := remote.receiveUntil(t, "the request for the remote pod on node 1's VXLAN device", func(f arpFrame) bool {
		return f.op == 1 && f.tpa == addrs[1] && f.spa == addrs[0]
	})
	for _, f := range crossed {
		if f.tpa == d.Gateway || f.spa == d.Gateway || bytes.Equal(f.sha, mac) {
			t.Errorf("node 1 received %+v over the segment: gateway resolution or the bridge's own frames crossed", f)
		}
	}
	// The pod's request was answered, by its own node's bridge.
	pod.receiveUntil(t, "the reply for the gateway in the pod", func(f arpFrame) bool {
		if f.op == 2 && f.spa == d.Gateway {
			if !bytes.Equal(f.sha, mac) {
				t.Errorf("the gateway's reply came from %s, want the bridge's %s", f.sha, mac)
			}
			return true
		}
		return false
	})

	// The rules are where nft shows them (when the binary is there).
	if nft, err := exec.LookPath("nft"); err == nil {
		var out []byte
		_ = inNS(nodes[0].ns.path, func() (err error) {
			out, err = exec.CommandContext(context.Background(), nft, "list", "table", "bridge", filterTableName(d.Key)).CombinedOutput()
			return err
		})
		for _, want := range []string{`arp daddr ip 10.99.0.1 drop`, `ether saddr ` + mac.String() + ` drop`} {
			if !strings.Contains(string(out), want) {
				t.Errorf("nft list table bridge %s lacks %q:\n%s", filterTableName(d.Key), want, out)
			}
		}
	}

	// Removing the segment removes the rules; Remove leaves none either.
	a, err := nodes[0].b.Observe(context.Background(), d.Key)
	if err != nil || a == nil || a.Segment == nil || !a.Segment.GatewayFilter {
		t.Errorf("Observe: %v; want the gateway filter reported", err)
	}
	// Rules flushed by hand come back with the next Ensure.
	c, err := nodes[0].b.nft()
	if err != nil {
		t.Fatal(err)
	}
	c.FlushTable(filterTable(filterTableName(d.Key)))
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	nd := desiredOn(d, nodes, 0, 300)
	nd.Blocks = []netip.Prefix{netip.MustParsePrefix("10.99.0.0/26")}
	if changes := nodes[0].ensure(nd); len(changes) != 1 || !strings.HasPrefix(changes[0], "set the gateway filter") {
		t.Errorf("Ensure after the rules were flushed: %q, want the filter set again", changes)
	}
	if n, err := nodes[0].b.filterRuleCount(d.Key); err != nil || n != 6 {
		t.Errorf("%d rules (%v), want 6", n, err)
	}
	if keys, err := nodes[0].b.filterKeys(); err != nil || !slices.Equal(keys, []string{d.Key}) {
		t.Errorf("filterKeys = %v, %v", keys, err)
	}
	if err := nodes[0].b.Remove(context.Background(), d.Key); err != nil {
		t.Fatal(err)
	}
	if keys, err := nodes[0].b.filterKeys(); err != nil || len(keys) != 0 {
		t.Errorf("after Remove the table is still there: %v, %v", keys, err)
	}
}

// ndFrame returns the ICMPv6 type and target of a neighbour solicitation or advertisement in an
// Ethernet frame (without IPv6 extension headers), and its source MAC.
func ndFrame(f []byte) (typ uint8, target netip.Addr, src net.HardwareAddr, ok bool) {
	if len(f) < 78 || binary.BigEndian.Uint16(f[12:14]) != unix.ETH_P_IPV6 || f[20] != unix.IPPROTO_ICMPV6 {
		return 0, netip.Addr{}, nil, false
	}
	typ = f[54]
	if typ != 135 && typ != 136 {
		return 0, netip.Addr{}, nil, false
	}
	target, _ = netip.AddrFromSlice(f[62:78])
	return typ, target, bytes.Clone(f[6:12]), true
}

// framesUntil reads incoming frames on s until stop returns true for one (it returns the
// frames before it) or 5s passed (it fails the test).
func (s *arpSocket) framesUntil(t *testing.T, what string, stop func([]byte) bool) [][]byte {
	t.Helper()
	var seen [][]byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, from, err := unix.Recvfrom(s.fd, buf, 0)
		if err != nil {
			if err == unix.EAGAIN || err == unix.EINTR {
				continue
			}
			t.Fatal(err)
		}
		if ll, ok := from.(*unix.SockaddrLinklayer); ok && ll.Pkttype == unix.PACKET_OUTGOING {
			continue
		}
		f := bytes.Clone(buf[:n])
		if stop(f) {
			return seen
		}
		seen = append(seen, f)
	}
	t.Fatalf("%s: not seen within 5s (%d other frames)", what, len(seen))
	return nil
}

// TestSegmentGatewayStaysLocalIPv6: a pod's neighbour solicitation for the IPv6 gateway stays on
// its node (it is answered there: the pod connects to the gateway), while one for a pod on the
// other node crosses, and nothing from the bridge's MAC does.
func TestSegmentGatewayStaysLocalIPv6(t *testing.T) {
	nodes := newSegmentNodes(t, 2, false)
	plugins := pluginDir(t)
	d := netbackend.Desired{Key: "default/gw6", Prefix: netip.MustParsePrefix("fd00:99::/64"), Gateway: netip.MustParseAddr("fd00:99::1")}
	pods, addrs := segmentPods(t, plugins, nodes, d, 301, []netip.Prefix{netip.MustParsePrefix("fd00:99::100/120"), netip.MustParsePrefix("fd00:99::200/120")})
	mac := nodes[0].ns.link(t, netbackend.BridgeName(d.Key)).Attrs().HardwareAddr
	remote := openARPSocket(t, nodes[1].ns, netbackend.SegmentDeviceName(d.Key))

	// The pod resolves the gateway (and reaches it: a listener on the node answers).
	var ln net.Listener
	if err := inNS(nodes[0].ns.path, func() (err error) {
		ln, err = net.Listen("tcp6", netip.AddrPortFrom(d.Gateway, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.Close()
		}
	}()
	if err := inNS(pods[0].path, func() error {
		c, err := (&net.Dialer{Timeout: 3 * time.Second}).Dial("tcp6", ln.Addr().String())
		if err == nil {
			_ = c.Close()
		}
		return err
	}); err != nil {
		t.Fatalf("the pod does not reach its gateway: %v", err)
	}
	// Then a pod on the other node: its solicitation crosses and ends the capture.
	_ = inNS(pods[0].path, func() error {
		c, err := (&net.Dialer{Timeout: 3 * time.Second}).Dial("tcp6", netip.AddrPortFrom(addrs[1], 9).String())
		if err == nil {
			_ = c.Close()
		}
		return nil
	})
	crossed := remote.framesUntil(t, "the solicitation for the remote pod on node 1's VXLAN device", func(f []byte) bool {
		typ, target, _, ok := ndFrame(f)
		return ok && typ == 135 && target == addrs[1]
	})
	for _, f := range crossed {
		if typ, target, _, ok := ndFrame(f); ok && target == d.Gateway {
			t.Errorf("node 1 received ICMPv6 type %d for the gateway %s over the segment", typ, target)
		}
		if bytes.Equal(f[6:12], mac) {
			t.Errorf("node 1 received a frame from the bridge's MAC %s over the segment: % x", mac, f[:min(len(f), 64)])
		}
	}
}
