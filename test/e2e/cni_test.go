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
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/clientcmd"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// The runtime test: the built server with its bundled controller confined to a "node" network
// namespace, the reference CNI plugins (hack/build-tools.sh cni) driven through libcni the way a
// container runtime drives them, against the configuration lists the controller writes, and
// "pods" that are network namespaces of their own. Then the faults a node sees, each measured
// with a continuous ping.

const pingInterval = 20 * time.Millisecond

// node is the server process (restartable on the same data dir and port) and the namespace
// its controller manages.
type node struct {
	t        *testing.T
	ns       *netnstest.NS
	dataDir  string
	confDir  string
	ipamDir  string
	port     int
	cmd      *exec.Cmd
	exited   chan error
	log      *bytes.Buffer
	client   versioned.Interface
	cni      *libcni.CNIConfig
	pluginsD string
	args     []string // more flags for the server
}

func (n *node) start() {
	t := n.t
	t.Helper()
	n.log = &bytes.Buffer{}
	args := []string{"--data-dir", n.dataDir, "--bind-address", "127.0.0.1", "--secure-port", fmt.Sprint(n.port),
		"--backend-netns", n.ns.Path, "--cni-conf-dir", n.confDir, "--cni-ipam-data-dir", n.ipamDir,
		"--node-name", "e2e-node", "--controller-resync-period", "1s", "-v=2",
		// These tests look at a Network's bridge before any pod attaches: a bridge per Network
		// (TestRuntimeBridgeOnAttach passes the default back in n.args).
		"--bridge-on-attach=false"}
	n.cmd = exec.Command(tool(t, "SERVER", "network-apiserver"), append(args, n.args...)...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan error) { exited <- cmd.Wait() }(n.cmd, n.exited)
	kubeconfig := filepath.Join(n.dataDir, "admin.kubeconfig")
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-n.exited:
			n.exited <- err
			return false, fmt.Errorf("network-apiserver exited: %v", err)
		default:
		}
		if !strings.Contains(n.log.String(), "kubectl --kubeconfig "+kubeconfig) {
			return false, nil
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return false, nil
		}
		n.client, err = versioned.NewForConfig(cfg)
		if err != nil {
			return false, err
		}
		_, err = n.client.SamplecrdV1().Networks("default").List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("network-apiserver not ready: %v\n%s", err, tail(n.log))
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (n *node) stop() {
	t := n.t
	t.Helper()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.exited:
		if err != nil {
			t.Errorf("network-apiserver did not exit cleanly on SIGTERM: %v\n%s", err, tail(n.log))
		}
	case <-time.After(60 * time.Second):
		_ = n.cmd.Process.Kill()
		t.Errorf("network-apiserver still running 60s after SIGTERM")
	}
	n.cmd = nil
}

// waitReady waits until the Network's Ready condition is want for its latest generation.
func (n *node) waitReady(name string, want metav1.ConditionStatus) *v1.Network {
	n.t.Helper()
	return n.waitReason(name, want, "")
}

// waitReason waits until the Network's Ready condition is want, with reason unless it is "",
// for its latest generation.
func (n *node) waitReason(name string, want metav1.ConditionStatus, reason string) *v1.Network {
	n.t.Helper()
	var got *v1.Network
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		got, err = n.client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(got.Status.Conditions, "Ready")
		return c != nil && c.Status == want && (reason == "" || c.Reason == reason) && got.Status.ObservedGeneration == got.Generation, nil
	})
	if err != nil {
		n.t.Fatalf("network %s never became Ready=%s %s: %v; status %+v", name, want, reason, err, got)
	}
	return got
}

// pod is a network namespace attached to a Network through the CNI plugins.
type pod struct {
	id   string
	ns   *netnstest.NS
	ip   netip.Addr
	list *libcni.NetworkConfigList
	rt   *libcni.RuntimeConf
	up   bool
}

// confList loads the Network's configuration list from the directory the way a runtime does.
func (n *node) confList(key string) *libcni.NetworkConfigList {
	n.t.Helper()
	list, err := libcni.ConfListFromFile(linux.ConfPath(n.confDir, key))
	if err != nil {
		n.t.Fatalf("loading the configuration list of %s: %v", key, err)
	}
	return list
}

// inNode runs a CNI operation on a thread in the node's namespace: the plugins are started from
// it and inherit it, as they would be from a runtime on the node.
func (n *node) inNode(fn func(ctx context.Context) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return netnstest.InNS(n.ns.Path, func() error { return fn(ctx) })
}

var loopback = []byte(`{"cniVersion":"1.1.0","name":"cni-loopback","type":"loopback"}`)

// add creates a pod namespace and attaches it: loopback, then the Network's list (ADD).
func (n *node) add(key, id string) *pod {
	n.t.Helper()
	return n.addWith(key, id, nil)
}

// addWith is add with the runtime's capability arguments (portMappings, for example).
func (n *node) addWith(key, id string, capabilityArgs map[string]any) *pod {
	t := n.t
	t.Helper()
	ns := netnstest.New(t, "pod")
	ns.DisableDAD(t)
	p := &pod{id: id, ns: ns, list: n.confList(key), rt: &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path, IfName: "eth0", CapabilityArgs: capabilityArgs}}
	lo, err := libcni.ConfFromBytes(loopback)
	if err != nil {
		t.Fatal(err)
	}
	var res *types100.Result
	err = n.inNode(func(ctx context.Context) error {
		loRT := &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path, IfName: "lo"}
		if _, err := n.cni.AddNetwork(ctx, lo, loRT); err != nil {
			return fmt.Errorf("loopback: %w", err)
		}
		r, err := n.cni.AddNetworkList(ctx, p.list, p.rt)
		if err != nil {
			return err
		}
		res, err = types100.NewResultFromResult(r)
		return err
	})
	if err != nil {
		t.Fatalf("CNI ADD of %s to %s: %v", id, key, err)
	}
	p.up = true
	t.Cleanup(func() {
		if p.up {
			_ = n.inNode(func(ctx context.Context) error { return n.cni.DelNetworkList(ctx, p.list, p.rt) })
		}
	})
	if len(res.IPs) != 1 {
		t.Fatalf("ADD of %s: %d addresses, want 1: %+v", id, len(res.IPs), res)
	}
	p.ip, _ = netip.AddrFromSlice(res.IPs[0].Address.IP)
	p.ip = p.ip.Unmap()
	return p
}

func (n *node) check(p *pod) error {
	return n.inNode(func(ctx context.Context) error { return n.cni.CheckNetworkList(ctx, p.list, p.rt) })
}

func (n *node) del(p *pod) {
	n.t.Helper()
	if err := n.inNode(func(ctx context.Context) error { return n.cni.DelNetworkList(ctx, p.list, p.rt) }); err != nil {
		n.t.Fatalf("CNI DEL of %s: %v", p.id, err)
	}
	p.up = false
}

// pingOnce expects a short ping from p to dst to get answers.
func pingOnce(t *testing.T, what string, p *pod, dst netip.Addr) {
	t.Helper()
	pg := startPing(t, what, p.ns.Path, dst, pingInterval)
	var s pingStats
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		pg.mu.Lock()
		defer pg.mu.Unlock()
		return len(pg.reply) >= 5, nil
	})
	s = pg.stop()
	if err != nil {
		t.Fatalf("%s: ping %s -> %s: %v", what, p.ip, dst, s)
	}
}

type network struct {
	name, key string
	cidr      string
	gateway   netip.Addr
	pods      []*pod
}

func TestRuntimeAttachesPods(t *testing.T) {
	netnstest.RequireRoot(t)
	pluginDir := requireCNIPlugins(t, "bridge", "host-local", "portmap", "loopback")
	nodeNS := netnstest.New(t, "node")
	nodeNS.DisableDAD(t)
	n := &node{t: t, ns: nodeNS, dataDir: t.TempDir(), confDir: t.TempDir(), ipamDir: t.TempDir(), port: freePort(t), pluginsD: pluginDir}
	n.cni = libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, t.TempDir(), nil)
	n.start()
	t.Cleanup(n.stop)
	ctx := context.Background()

	nets := []*network{
		{name: "v4", cidr: "10.123.0.0/24", gateway: netip.MustParseAddr("10.123.0.1")},
		{name: "v6", cidr: "fd00:123::/64", gateway: netip.MustParseAddr("fd00:123::1")},
	}
	for _, nw := range nets {
		nw.key = "default/" + nw.name
		if _, err := n.client.SamplecrdV1().Networks("default").Create(ctx, &v1.Network{
			ObjectMeta: metav1.ObjectMeta{Name: nw.name}, Spec: v1.NetworkSpec{CIDR: nw.cidr},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, nw := range nets {
		n.waitReady(nw.name, metav1.ConditionTrue)
		// What a runtime checks before using a list: it parses, names plugins that exist and
		// support its version, and advertises portMappings.
		list := n.confList(nw.key)
		if list.CNIVersion != "1.1.0" {
			t.Errorf("%s: cniVersion %s, want 1.1.0", nw.key, list.CNIVersion)
		}
		var caps []string
		if err := n.inNode(func(ctx context.Context) (err error) { caps, err = n.cni.ValidateNetworkList(ctx, list); return err }); err != nil {
			t.Fatalf("%s: libcni validation: %v", nw.key, err)
		}
		if !strings.Contains(strings.Join(caps, ","), "portMappings") {
			t.Errorf("%s: capabilities %v lack portMappings", nw.key, caps)
		}
	}

	// ADD two pods per Network; CHECK every pod; each pod pings its gateway and its peer.
	for _, nw := range nets {
		for i := range 2 {
			p := n.add(nw.key, fmt.Sprintf("%s-pod%d", nw.name, i))
			prefix := netip.MustParsePrefix(nw.cidr)
			if !prefix.Contains(p.ip) || p.ip == nw.gateway {
				t.Fatalf("%s got %s: want an address of %s other than the gateway", p.id, p.ip, prefix)
			}
			nw.pods = append(nw.pods, p)
		}
	}
	for _, nw := range nets {
		// The bridge keeps its own fixed MAC whatever ports it has (a kernel-chosen one follows
		// the lowest port MAC, which breaks CHECK and the pods' neighbour entries).
		if l, err := nodeNS.Netlink.LinkByName(netbackend.BridgeName(nw.key)); err != nil || !bytes.Equal(l.Attrs().HardwareAddr, netbackend.BridgeMAC(nw.key)) {
			t.Errorf("%s: bridge MAC with pods attached: %v %v, want %s", nw.key, l, err, netbackend.BridgeMAC(nw.key))
		}
		for _, p := range nw.pods {
			if err := n.check(p); err != nil {
				t.Errorf("CNI CHECK of %s: %v", p.id, err)
			}
		}
		pingOnce(t, nw.name+" gateway", nw.pods[0], nw.gateway)
		pingOnce(t, nw.name+" peer", nw.pods[0], nw.pods[1].ip)
		pingOnce(t, nw.name+" peer back", nw.pods[1], nw.pods[0].ip)
	}

	// measure pings gateway and peer from every Network's first pod while fault runs, then for
	// two seconds more, and returns the worst of the measurements.
	measure := func(name string, fault func()) pingStats {
		t.Helper()
		var pingers []*pinger
		for _, nw := range nets {
			pingers = append(pingers,
				startPing(t, nw.name+" gateway", nw.pods[0].ns.Path, nw.gateway, pingInterval),
				startPing(t, nw.name+" peer", nw.pods[0].ns.Path, nw.pods[1].ip, pingInterval))
		}
		fault()
		after := time.Now().Add(2 * time.Second)
		defer func() {
			for _, pg := range pingers {
				pg.halt()
			}
		}()
		_ = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 3*time.Second, true, func(context.Context) (bool, error) {
			return time.Now().After(after), nil
		})
		var worst pingStats
		for _, pg := range pingers {
			pg.halt()
		}
		for _, pg := range pingers {
			s := pg.stop()
			t.Logf("%s: %s: %s", name, pg.what, s)
			worst.Sent += s.Sent
			worst.Lost += s.Lost
			worst.Outage = max(worst.Outage, s.Outage)
			if !s.LastOK {
				t.Errorf("%s: %s still lost pings at the end: %s", name, pg.what, s)
			}
		}
		t.Logf("FAULT %s: %s (over %d pingers)", name, worst, len(pingers))
		return worst
	}

	// Resync: the controller compares every Network with the node every second; 3s of it.
	if s := measure("resync", func() {
		deadline := time.Now().Add(3 * time.Second)
		_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
			return time.Now().After(deadline), nil
		})
	}); s.Lost != 0 {
		t.Errorf("resyncs lost pings: %s", s)
	}

	// A bridge deleted by hand: repaired, its ports attached again, the same MAC.
	if s := measure("bridge deleted by hand", func() {
		for _, nw := range nets {
			bridge := netbackend.BridgeName(nw.key)
			l, err := nodeNS.Netlink.LinkByName(bridge)
			if err != nil {
				t.Fatal(err)
			}
			if err := nodeNS.Netlink.LinkDel(l); err != nil {
				t.Fatal(err)
			}
		}
		for _, nw := range nets {
			waitPorts(t, nodeNS, nw.key, len(nw.pods))
		}
	}); s.Outage > 2*time.Second {
		t.Errorf("a hand-deleted bridge cut the pods off for %v, want at most 2s: %s", s.Outage, s)
	}
	for _, nw := range nets {
		n.waitReady(nw.name, metav1.ConditionTrue)
		l, _ := nodeNS.Netlink.LinkByName(netbackend.BridgeName(nw.key))
		if l == nil || !bytes.Equal(l.Attrs().HardwareAddr, netbackend.BridgeMAC(nw.key)) {
			t.Errorf("%s: bridge after the repair: %+v, want MAC %s", nw.key, l, netbackend.BridgeMAC(nw.key))
		}
		for _, p := range nw.pods {
			if err := n.check(p); err != nil {
				t.Errorf("CNI CHECK of %s after the repair: %v", p.id, err)
			}
		}
	}

	// A server restart (the controller with it): nothing on the node moves.
	if s := measure("server restart", func() {
		n.stop()
		n.start()
		for _, nw := range nets {
			n.waitReady(nw.name, metav1.ConditionTrue)
		}
	}); s.Lost != 0 {
		t.Errorf("a server restart lost pings: %s", s)
	}

	// A new gateway while pods are attached: the node keeps the old one (the pods' default route)
	// and says so; the pods lose nothing. It moves once the pods are gone (below).
	v4 := nets[0]
	newGateway := netip.MustParseAddr("10.123.0.254")
	if s := measure("gateway changed with pods attached", func() {
		nw, err := n.client.SamplecrdV1().Networks("default").Get(ctx, v4.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nw.Spec.Gateway = newGateway.String()
		if _, err := n.client.SamplecrdV1().Networks("default").Update(ctx, nw, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		blocked := n.waitReason(v4.name, metav1.ConditionFalse, netbackend.ReasonGatewayChangeBlocked)
		t.Logf("gateway change with pods attached: %+v", blocked.Status.Nodes)
	}); s.Lost != 0 {
		t.Errorf("a gateway change with pods attached lost pings: %s", s)
	}

	// DEL gives the addresses back.
	for _, nw := range nets {
		for _, p := range nw.pods {
			lease := filepath.Join(n.ipamDir, linux.NetworkName(nw.key), p.ip.String())
			if _, err := os.Stat(lease); err != nil {
				t.Errorf("host-local lease of %s: %v", p.id, err)
			}
			n.del(p)
			if _, err := os.Stat(lease); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("host-local lease of %s still there after DEL: %v", p.id, err)
			}
		}
	}

	// No pods left: the gateway moves.
	n.waitReady(v4.name, metav1.ConditionTrue)
	if l, err := nodeNS.Netlink.LinkByName(netbackend.BridgeName(v4.key)); err != nil {
		t.Fatal(err)
	} else if a, _ := nodeNS.Netlink.AddrList(l, netlink.FAMILY_V4); len(a) != 1 || a[0].IP.String() != newGateway.String() {
		t.Fatalf("bridge addresses after the pods left: %v, want %s", a, newGateway)
	}
	v4.gateway = newGateway

	// The reboot case: the configurations are on disk, the bridges are gone, and the runtime
	// attaches pods before the controller runs, so the bridge plugin creates the bridges. The
	// controller adopts them (not InterfaceNotOurs) and the pods keep working, measured from
	// before the controller starts.
	n.stop()
	made := map[string]netlink.Link{}
	for _, nw := range nets {
		bridge := netbackend.BridgeName(nw.key)
		if l, err := nodeNS.Netlink.LinkByName(bridge); err == nil {
			if err := nodeNS.Netlink.LinkDel(l); err != nil {
				t.Fatal(err)
			}
		}
		nw.pods = []*pod{n.add(nw.key, nw.name+"-boot-pod0"), n.add(nw.key, nw.name+"-boot-pod1")}
		l, err := nodeNS.Netlink.LinkByName(bridge)
		if err != nil || l.Attrs().Alias != "" {
			t.Fatalf("the bridge plugin did not create an unmarked bridge: %v %+v", err, l)
		}
		made[nw.key] = l
		pingOnce(t, nw.name+" before the controller runs", nw.pods[0], nw.gateway)
	}
	if s := measure("reboot: the controller adopts the plugin's bridges", func() {
		n.start()
		for _, nw := range nets {
			// The status said Ready=True before the reboot too: wait for the controller's mark.
			_ = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
				l, err := nodeNS.Netlink.LinkByName(netbackend.BridgeName(nw.key))
				return err == nil && l.Attrs().Alias != "", nil
			})
			n.waitReady(nw.name, metav1.ConditionTrue)
		}
	}); s.Lost != 0 {
		t.Errorf("adopting the bridges lost pings: %s", s)
	}
	for _, nw := range nets {
		adopted, err := nodeNS.Netlink.LinkByName(netbackend.BridgeName(nw.key))
		if err != nil || adopted.Attrs().Index != made[nw.key].Attrs().Index || adopted.Attrs().Alias != linux.Alias(nw.key) {
			t.Fatalf("after the controller ran: %v %+v; want the plugin's bridge (index %d) marked %q", err, adopted, made[nw.key].Attrs().Index, linux.Alias(nw.key))
		}
		// The adopted bridge keeps the MAC its pods know (their neighbour entries, their CNI
		// results): changing it would cut them off from the gateway until their entries expire.
		if !bytes.Equal(adopted.Attrs().HardwareAddr, made[nw.key].Attrs().HardwareAddr) {
			t.Errorf("adopted bridge MAC %s, want the plugin's %s", adopted.Attrs().HardwareAddr, made[nw.key].Attrs().HardwareAddr)
		}
		pingOnce(t, nw.name+" after adoption, peer", nw.pods[0], nw.pods[1].ip)
		// Every pod passes CHECK, attached before the adoption or after.
		late := n.add(nw.key, nw.name+"-boot-pod2")
		if err := n.check(late); err != nil {
			t.Errorf("CNI CHECK of a pod attached after the adoption: %v", err)
		}
		for _, p := range nw.pods {
			if err := n.check(p); err != nil {
				t.Errorf("CNI CHECK of %s, attached before the adoption: %v", p.id, err)
			}
		}
		nw.pods = append(nw.pods, late)
	}

	// Networks deleted with three pods attached each: kept (their finalizer), and so are their
	// bridges and configurations, so that the runtime can DEL the pods; then they go. Bridge,
	// configuration and host-local's leftover state go with each Network.
	for _, nw := range nets {
		if err := n.client.SamplecrdV1().Networks("default").Delete(ctx, nw.name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, nw := range nets {
		var held *v1.Network
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			var err error
			held, err = n.client.SamplecrdV1().Networks("default").Get(ctx, nw.name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			c := meta.FindStatusCondition(held.Status.Conditions, "Ready")
			return held.DeletionTimestamp != nil && len(held.Status.Nodes) == 1 && held.Status.Nodes[0].Attachments == 3 &&
				c != nil && c.Reason == "Terminating", nil
		})
		if err != nil {
			t.Fatalf("%s with pods attached, deleted: %v; %+v", nw.key, err, held)
		}
		t.Logf("%s deleted with pods attached: finalizers %v, node entry %+v", nw.key, held.Finalizers, held.Status.Nodes)
		if _, err := os.Stat(linux.ConfPath(n.confDir, nw.key)); err != nil {
			t.Fatalf("the configuration went while pods are attached: %v", err)
		}
		pingOnce(t, nw.name+" while the Network is being deleted", nw.pods[0], nw.pods[1].ip)
		if _, err := os.Stat(filepath.Join(n.ipamDir, linux.NetworkName(nw.key))); err != nil {
			t.Errorf("%s: host-local's directory: %v (the test expects leftovers to clean)", nw.key, err)
		}
	}
	for _, nw := range nets {
		for _, p := range nw.pods {
			n.del(p)
		}
	}
	detached := time.Now()
	for _, nw := range nets {
		dir := filepath.Join(n.ipamDir, linux.NetworkName(nw.key))
		var left []string
		var stored *v1.Network
		// The bound covers the controller's longest retry backoff (2 minutes): a release that
		// needed a retry still passes, one that never comes fails.
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 150*time.Second, true, func(ctx context.Context) (bool, error) {
			var getErr error
			stored, getErr = n.client.SamplecrdV1().Networks("default").Get(ctx, nw.name, metav1.GetOptions{})
			_, linkErr := nodeNS.Netlink.LinkByName(netbackend.BridgeName(nw.key))
			_, confErr := os.Stat(linux.ConfPath(n.confDir, nw.key))
			_, dirErr := os.Stat(dir)
			left = nil
			for what, gone := range map[string]bool{"the Network": apierrors.IsNotFound(getErr),
				"the bridge": errors.As(linkErr, new(netlink.LinkNotFoundError)), "the configuration": errors.Is(confErr, os.ErrNotExist),
				"host-local's state " + dir: errors.Is(dirErr, os.ErrNotExist)} {
				if !gone {
					left = append(left, what)
				}
			}
			return len(left) == 0, nil
		})
		if err != nil {
			t.Errorf("%s: %v left after the delete: %v\nthe Network: %+v\nlinks in the node: %s\nserver log:\n%s",
				nw.key, left, err, stored, describeLinks(nodeNS), tail(n.log))
			continue
		}
		t.Logf("%s: the Network and its bridge, configuration and host-local state gone %v after the pods' DEL",
			nw.key, time.Since(detached).Round(time.Millisecond))
	}
}

// waitPorts waits until key's bridge exists, marked, with want ports.
func waitPorts(t *testing.T, ns *netnstest.NS, key string, want int) {
	t.Helper()
	bridge := netbackend.BridgeName(key)
	var got int
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		br, err := ns.Netlink.LinkByName(bridge)
		if err != nil || br.Attrs().Alias != linux.Alias(key) {
			return false, nil
		}
		links, err := ns.Netlink.LinkList()
		if err != nil {
			return false, err
		}
		got = 0
		for _, l := range links {
			if l.Attrs().MasterIndex == br.Attrs().Index {
				got++
			}
		}
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("bridge %s of %s has %d ports, want %d: %v", bridge, key, got, want, err)
	}
}

// describeLinks lists the links of ns with their master's index, for a failure message.
func describeLinks(ns *netnstest.NS) string {
	links, err := ns.Netlink.LinkList()
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, l := range links {
		a := l.Attrs()
		fmt.Fprintf(&b, "\n  %d %s alias=%q master=%d state=%s", a.Index, a.Name, a.Alias, a.MasterIndex, a.OperState)
	}
	return b.String()
}
