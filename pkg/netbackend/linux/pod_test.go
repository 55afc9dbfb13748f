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
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// buildPlugins builds the CNI bridge, host-local and portmap plugins from the module pinned in
// hack/tools/cmd/cni into a temporary directory.
func buildPlugins(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", "..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(root, "hack", "tools", "cmd", "cni")
	if _, err := os.Stat(filepath.Join(tools, "go.mod")); err != nil {
		t.Fatalf("hack/tools/cmd/cni module not found: %v", err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, goBin, "build", "-C", tools, "-o", dir+string(filepath.Separator),
		"github.com/containernetworking/plugins/plugins/main/bridge",
		"github.com/containernetworking/plugins/plugins/ipam/host-local",
		"github.com/containernetworking/plugins/plugins/meta/portmap")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the CNI plugins: %v\n%s", err, out)
	}
	for _, p := range []string{"bridge", "host-local", "portmap"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			t.Fatalf("plugin %s not built: %v", p, err)
		}
	}
	t.Logf("built the CNI plugins in %v", time.Since(start).Round(time.Millisecond))
	return dir
}

// TestPodCanUseTheNetwork realises a Network, then attaches a "pod" (a second namespace) with
// the real CNI plugins through libcni and the configuration the backend wrote: the pod gets an
// address of the network and a default route via the gateway, reaches a TCP listener on the
// gateway, and CNI DEL gives the address back.
func TestPodCanUseTheNetwork(t *testing.T) {
	requireRoot(t)
	pluginDir := buildPlugins(t)

	e := newEnv(t)
	dataDir := t.TempDir()
	b := e.newBackend(Config{IPAMDataDir: dataDir})
	d := desired4("default/podnet")
	gateway := d.Gateway
	ctx := context.Background()
	if _, _, err := b.Ensure(ctx, d); err != nil {
		t.Fatal(err)
	}
	bridge := netbackend.BridgeName(d.Key)
	pod := newNS(t, "pod")

	// Loaded from the file, as a runtime does.
	list, err := libcni.ConfListFromFile(ConfPath(e.confDir, d.Key))
	if err != nil {
		t.Fatalf("loading the written configuration: %v", err)
	}
	cni := libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, t.TempDir(), nil)
	rt := &libcni.RuntimeConf{ContainerID: "pod-1", NetNS: pod.path, IfName: "eth0"}

	// The plugins run in the node's namespace (the backend's): libcni starts them from a thread
	// in that namespace, and a child process inherits the namespace of the thread that forks it.
	cniCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var res *types100.Result
	err = inNS(e.ns.path, func() error {
		r, err := cni.AddNetworkList(cniCtx, list, rt)
		if err != nil {
			return err
		}
		res, err = types100.NewResultFromResult(r)
		return err
	})
	if err != nil {
		t.Fatalf("CNI ADD: %v", err)
	}
	deleted := false
	t.Cleanup(func() {
		if !deleted { // give the address back even when the test failed half-way
			_ = inNS(e.ns.path, func() error { return cni.DelNetworkList(context.Background(), list, rt) })
		}
	})

	if len(res.IPs) != 1 {
		t.Fatalf("CNI ADD result has %d addresses, want 1: %+v", len(res.IPs), res)
	}
	podPrefix, ok := prefixOf(res.IPs[0].Address.IP, 0)
	podIP := podPrefix.Addr()
	if !ok || !d.Prefix.Contains(podIP) || podIP == gateway {
		t.Fatalf("pod address %v: want an address of %s other than the gateway", res.IPs[0].Address, d.Prefix)
	}
	if gw, _ := netip.AddrFromSlice(res.IPs[0].Gateway); gw.Unmap() != gateway {
		t.Errorf("result gateway %v, want %v", res.IPs[0].Gateway, gateway)
	}

	// In the pod: eth0 with the address, and the default route via the gateway.
	eth0 := pod.link(t, "eth0")
	if eth0 == nil {
		t.Fatal("the pod has no eth0")
	}
	want := netip.PrefixFrom(podIP, d.Prefix.Bits())
	if got := pod.globalAddrs(t, "eth0"); len(got) != 1 || got[0] != want {
		t.Errorf("pod eth0 addresses %v, want %v", got, want)
	}
	if eth0.Attrs().MTU != netbackend.DefaultMTU {
		t.Errorf("pod eth0 MTU %d, want %d", eth0.Attrs().MTU, netbackend.DefaultMTU)
	}
	routes, err := pod.nl.RouteList(eth0, netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	defaultVia := netip.Addr{}
	for _, r := range routes {
		if r.Dst == nil || r.Dst.String() == "0.0.0.0/0" {
			defaultVia, _ = netip.AddrFromSlice(r.Gw)
			defaultVia = defaultVia.Unmap()
		}
	}
	if defaultVia != gateway {
		t.Errorf("pod default route via %v, want via %v (routes %v)", defaultVia, gateway, routes)
	}

	// On the node: the pod's veth is a port of the bridge, and the backend and the bridge plugin
	// agree: a resync changes nothing.
	br := e.ns.link(t, bridge)
	links, err := e.ns.nl.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	ports := 0
	for _, l := range links {
		if l.Attrs().MasterIndex == br.Attrs().Index {
			ports++
		}
	}
	if ports != 1 {
		t.Errorf("bridge %s has %d ports, want 1", bridge, ports)
	}
	if changes, outcome, err := b.Ensure(ctx, d); err != nil || len(changes) != 0 {
		t.Errorf("Ensure with a pod attached: %q, %v; want no changes", changes, err)
	} else if len(outcome.Ports) != 1 || outcome.Created {
		t.Errorf("Ensure with a pod attached found %+v; want its one port, not created", outcome)
	}

	// The pod reaches the gateway: a TCP listener on 10.99.0.1 in the node's namespace.
	var ln net.Listener
	if err := inNS(e.ns.path, func() (err error) {
		ln, err = net.Listen("tcp4", netip.AddrPortFrom(gateway, 0).String())
		return err
	}); err != nil {
		t.Fatalf("listening on the gateway: %v", err)
	}
	defer func() { _ = ln.Close() }()
	served := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		if err != nil {
			served <- err
			return
		}
		remote := conn.RemoteAddr().(*net.TCPAddr).IP.String()
		_, err = fmt.Fprintf(conn, "pong %s %s", remote, line)
		served <- err
	}()
	var reply string
	err = inNS(pod.path, func() error {
		dialer := net.Dialer{Timeout: 5 * time.Second}
		conn, err := dialer.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(conn, "ping\n"); err != nil {
			return err
		}
		reply, err = bufio.NewReader(conn).ReadString('\n')
		return err
	})
	if err != nil {
		t.Fatalf("connecting from the pod to %s: %v", ln.Addr(), err)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("gateway listener: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gateway listener did not finish within 10s")
	}
	if want := "pong " + podIP.String() + " ping\n"; reply != want {
		t.Fatalf("reply %q, want %q (the listener must see the pod's address)", reply, want)
	}

	// host-local recorded the allocation under the network's name; DEL releases it.
	lease := filepath.Join(dataDir, NetworkName(d.Key), podIP.String())
	if content, err := os.ReadFile(lease); err != nil || !strings.Contains(string(content), rt.ContainerID) {
		t.Fatalf("host-local lease %s: %q, %v", lease, content, err)
	}
	err = inNS(e.ns.path, func() error { return cni.DelNetworkList(cniCtx, list, rt) })
	if err != nil {
		t.Fatalf("CNI DEL: %v", err)
	}
	deleted = true
	if _, err := os.Stat(lease); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("host-local lease %s still there after DEL: %v", lease, err)
	}
	if pod.link(t, "eth0") != nil {
		t.Errorf("the pod's eth0 is still there after DEL")
	}
	if changes, _, err := b.Ensure(ctx, d); err != nil || len(changes) != 0 {
		t.Errorf("Ensure after the pod left: %q, %v; want no changes", changes, err)
	}
}
