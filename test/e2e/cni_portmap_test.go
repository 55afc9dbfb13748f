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
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	networkcontroller "github.com/samplecrd/network-apiserver/pkg/controller/network"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// TestRuntimeHostPortAndMasquerade drives the rest of the configuration list a runtime relies
// on, with traffic from off the node: a "remote" namespace joined to the node's namespace by a
// veth (192.0.2.0/24, the node at .1) stands for the rest of the network. It checks that
//   - a pod of a Network annotated samplecrd.k8s.io/ip-masq=true reaches the remote host as the
//     node's address (the bridge plugin's ipMasq), and a pod of a Network without it as itself;
//   - a pod attached with a portMappings capability argument (a hostPort) is reached from the
//     remote host at the node's address and host port (the portmap plugin), passes CHECK, and
//     after its DEL the host port is closed again.
//
// The iptables rules the plugins write live in the node's namespace, which the test creates.
func TestRuntimeHostPortAndMasquerade(t *testing.T) {
	netnstest.RequireRoot(t)
	pluginDir := requireCNIPlugins(t, "bridge", "host-local", "portmap", "loopback")
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Fatalf("the portmap and bridge plugins need iptables (make test-e2e installs it: hack/install-deps.sh iptables): %v", err)
	}
	nodeNS := netnstest.New(t, "node")
	nodeNS.DisableDAD(t)
	remote := netnstest.New(t, "remote")

	// The node's uplink to the remote host.
	nodeAddr, remoteAddr := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	uplink := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "uplink"}, PeerName: "eth0",
		PeerNamespace: netlink.NsFd(int(remote.Handle))}
	if err := nodeNS.Netlink.LinkAdd(uplink); err != nil {
		t.Fatalf("creating the uplink: %v", err)
	}
	for _, end := range []struct {
		ns   *netnstest.NS
		name string
		addr netip.Addr
	}{{nodeNS, "uplink", nodeAddr}, {remote, "eth0", remoteAddr}} {
		l, err := end.ns.Netlink.LinkByName(end.name)
		if err != nil {
			t.Fatal(err)
		}
		addr, _ := netlink.ParseAddr(end.addr.String() + "/24")
		if err := end.ns.Netlink.AddrAdd(l, addr); err != nil {
			t.Fatal(err)
		}
		if err := end.ns.Netlink.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	plainPrefix := netip.MustParsePrefix("10.125.0.0/24")
	// The remote host routes the un-masqueraded Network back through the node.
	if err := remote.Netlink.RouteAdd(&netlink.Route{Dst: prefixNet(plainPrefix), Gw: nodeAddr.AsSlice()}); err != nil {
		t.Fatalf("remote route to %s: %v", plainPrefix, err)
	}

	n := &node{t: t, ns: nodeNS, dataDir: t.TempDir(), confDir: t.TempDir(), ipamDir: t.TempDir(), port: freePort(t), pluginsD: pluginDir}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, t.TempDir(), nil)
	n.start()
	t.Cleanup(n.stop)
	ctx := context.Background()
	// The pods reach the remote host through the gateway: with blocks (issue 23) a pod gets a
	// default route only when its Network asks for one.
	defaultRoute := true
	for _, nw := range []*v1.Network{
		{ObjectMeta: metav1.ObjectMeta{Name: "masq", Annotations: map[string]string{networkcontroller.IPMasqAnnotation: "true"}},
			Spec: v1.NetworkSpec{CIDR: "10.124.0.0/24", DefaultRoute: &defaultRoute}},
		{ObjectMeta: metav1.ObjectMeta{Name: "plain"}, Spec: v1.NetworkSpec{CIDR: plainPrefix.String(), DefaultRoute: &defaultRoute}},
	} {
		if _, err := n.client.SamplecrdV1().Networks("default").Create(ctx, nw, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		n.waitReady(nw.Name, metav1.ConditionTrue)
	}

	// The remote host answers each connection with the address it came from.
	echo := listenIn(t, remote, netip.AddrPortFrom(remoteAddr, 9000), func(c net.Conn) string { return c.RemoteAddr().String() })
	masq := n.add("default/masq", "masq-pod")
	plain := n.add("default/plain", "plain-pod")
	for _, tc := range []struct {
		p    *pod
		want netip.Addr
		what string
	}{{masq, nodeAddr, "masqueraded to the node's address"}, {plain, plain.ip, "with its own address"}} {
		got, err := dialFrom(tc.p.ns, echo.String())
		if err != nil {
			t.Fatalf("%s (%s) connecting to the remote host: %v", tc.p.id, tc.p.ip, err)
		}
		from, err := netip.ParseAddrPort(got)
		if err != nil || from.Addr() != tc.want {
			t.Errorf("%s (%s): the remote host saw %q, want it %s, %s", tc.p.id, tc.p.ip, got, tc.what, tc.want)
		}
	}

	// A hostPort: 18080 on the node to 8080 in the pod.
	web := n.addWith("default/plain", "web-pod", map[string]any{"portMappings": []map[string]any{
		{"hostPort": 18080, "containerPort": 8080, "protocol": "tcp"},
	}})
	listenIn(t, web.ns, netip.AddrPortFrom(netip.IPv4Unspecified(), 8080), func(net.Conn) string { return "hello from web-pod" })
	if err := n.check(web); err != nil {
		t.Errorf("CNI CHECK of a pod with a host port: %v", err)
	}
	hostPort := netip.AddrPortFrom(nodeAddr, 18080).String()
	got, err := dialFrom(remote, hostPort)
	if err != nil || got != "hello from web-pod" {
		t.Fatalf("the remote host connecting to the host port %s: %q, %v", hostPort, got, err)
	}
	n.del(web)
	if got, err := dialFrom(remote, hostPort); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("the host port %s after the pod's DEL: %q, %v; want the connection refused", hostPort, got, err)
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// listenIn listens on TCP at addr inside ns and answers every connection with answer(conn)
// until the test ends. It returns the address listened on.
func listenIn(t *testing.T, ns *netnstest.NS, addr netip.AddrPort, answer func(net.Conn) string) netip.AddrPort {
	t.Helper()
	var ln net.Listener
	if err := netnstest.InNS(ns.Path, func() (err error) { ln, err = net.Listen("tcp4", addr.String()); return err }); err != nil {
		t.Fatalf("listening on %s in %s: %v", addr, ns.Name, err)
	}
	var serving sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); serving.Wait() })
	serving.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = io.WriteString(c, answer(c))
			_ = c.Close()
		}
	})
	return addr
}

// dialFrom connects from inside ns to addr over TCP and returns what the other end sent.
func dialFrom(ns *netnstest.NS, addr string) (string, error) {
	var got string
	err := netnstest.InNS(ns.Path, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp4", addr)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		b, err := io.ReadAll(c)
		got = strings.TrimSpace(string(b))
		if err != nil {
			return fmt.Errorf("reading from %s: %w", addr, err)
		}
		return nil
	})
	return got, err
}
