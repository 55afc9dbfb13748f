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
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// The multi-node harness: an underlay "switch" namespace holding bridge sw, node namespaces
// each joined to it by a veth (eth0, 192.168.77.<i>/24), one standalone server without its
// bundled controller, and one `network-apiserver agent` per node confined to its namespace with
// its own CNI configuration and host-local directories. Pods are namespaces ADDed with libcni
// from the node's own configuration list, as a runtime on that node would.

// underlay is the switch namespace.
type underlay struct {
	ns *netnstest.NS
	sw netlink.Link
}

func newUnderlay(t *testing.T) *underlay {
	t.Helper()
	ns := netnstest.New(t, "ul")
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: "sw", MTU: 1500}}
	if err := ns.Netlink.LinkAdd(br); err != nil {
		t.Fatalf("underlay bridge: %v", err)
	}
	if err := ns.Netlink.LinkSetUp(br); err != nil {
		t.Fatal(err)
	}
	sw, err := ns.Netlink.LinkByName("sw")
	if err != nil {
		t.Fatal(err)
	}
	return &underlay{ns: ns, sw: sw}
}

// mnNode is one node: its namespace, its agent and its files.
type mnNode struct {
	t        *testing.T
	name     string
	ns       *netnstest.NS
	underlay netip.Addr
	confDir  string
	ipamDir  string
	cni      *libcni.CNIConfig
	cmd      *exec.Cmd
	exited   chan error
	log      *syncBuffer
	// binary, when set, is the network-apiserver binary the agent runs (default: make's).
	binary string
}

// addNode makes node i: namespace, eth0 on the switch with 192.168.77.<i>/24.
func (u *underlay) addNode(t *testing.T, i int, pluginDir string) *mnNode {
	t.Helper()
	ns := netnstest.New(t, fmt.Sprintf("n%d", i))
	ns.DisableDAD(t)
	peer := fmt.Sprintf("n%d", i)
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth0", MTU: 1500}, PeerName: peer,
		PeerNamespace: netlink.NsFd(int(u.ns.Handle))}
	if err := ns.Netlink.LinkAdd(veth); err != nil {
		t.Fatalf("node %d's eth0: %v", i, err)
	}
	p, err := u.ns.Netlink.LinkByName(peer)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.ns.Netlink.LinkSetMaster(p, u.sw); err != nil {
		t.Fatal(err)
	}
	if err := u.ns.Netlink.LinkSetUp(p); err != nil {
		t.Fatal(err)
	}
	eth0, err := ns.Netlink.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	addr := netip.AddrFrom4([4]byte{192, 168, 77, byte(i)})
	if err := ns.Netlink.AddrAdd(eth0, &netlink.Addr{IPNet: prefixNet(netip.PrefixFrom(addr, 24))}); err != nil {
		t.Fatal(err)
	}
	for _, l := range []string{"eth0", "lo"} {
		link, err := ns.Netlink.LinkByName(l)
		if err != nil {
			t.Fatal(err)
		}
		if err := ns.Netlink.LinkSetUp(link); err != nil {
			t.Fatal(err)
		}
	}
	return &mnNode{t: t, name: fmt.Sprintf("n%d", i), ns: ns, underlay: addr, confDir: t.TempDir(), ipamDir: t.TempDir(),
		cni: libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, t.TempDir(), nil)}
}

// startAgent runs `network-apiserver agent` for the node against kubeconfig, with extra flags.
func (n *mnNode) startAgent(kubeconfig string, extra ...string) {
	t := n.t
	t.Helper()
	n.log = &syncBuffer{}
	args := []string{"agent",
		"--kubeconfig", kubeconfig, "--node-name", n.name, "--backend-netns", n.ns.Path,
		"--cni-conf-dir", n.confDir, "--cni-ipam-data-dir", n.ipamDir,
		"--metrics-bind-address", "", "--controller-resync-period", "2s", "-v=2"}
	binary := n.binary
	if binary == "" {
		binary = tool(t, "SERVER", "network-apiserver")
		// The multi-node tests look at bridges and segments before pods attach: a bridge per
		// Network on every node, as the old release (n.binary) always makes (extra may turn
		// the default back on).
		args = append(args, "--bridge-on-attach=false")
	}
	n.cmd = exec.Command(binary, append(args, extra...)...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan error) { exited <- cmd.Wait() }(n.cmd, n.exited)
	t.Cleanup(n.stopAgent)
}

func (n *mnNode) stopAgent() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-n.exited:
		if err != nil {
			n.t.Errorf("agent of %s did not exit cleanly: %v\n%s", n.name, err, n.log.tail())
		}
	case <-time.After(60 * time.Second):
		_ = n.cmd.Process.Kill()
		n.t.Errorf("agent of %s still running 60s after SIGTERM", n.name)
	}
	n.cmd = nil
}

// waitConfList waits for the node's configuration list of key and loads it.
func (n *mnNode) waitConfList(key string) *libcni.NetworkConfigList {
	n.t.Helper()
	var list *libcni.NetworkConfigList
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		var err error
		list, err = libcni.ConfListFromFile(linux.ConfPath(n.confDir, key))
		return err == nil, nil
	})
	if err != nil {
		n.t.Fatalf("%s never wrote the configuration list of %s: %v\nagent log:\n%s", n.name, key, err, n.log.tail())
	}
	return list
}

// mnPod is a pod namespace attached on a node.
type mnPod struct {
	node *mnNode
	id   string
	ns   *netnstest.NS
	ip   netip.Addr
}

// add attaches a new pod namespace (created by the caller, on the test goroutine) to key with
// the node's configuration list as it is now; safe to call concurrently.
func (n *mnNode) add(key, id string, ns *netnstest.NS) (*mnPod, error) {
	list, err := libcni.ConfListFromFile(linux.ConfPath(n.confDir, key))
	if err != nil {
		return nil, err
	}
	rt := &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path, IfName: "eth0"}
	lo, err := libcni.ConfFromBytes(loopback)
	if err != nil {
		return nil, err
	}
	var res *types100.Result
	err = netnstest.InNS(n.ns.Path, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := n.cni.AddNetwork(ctx, lo, &libcni.RuntimeConf{ContainerID: id, NetNS: ns.Path, IfName: "lo"}); err != nil {
			return fmt.Errorf("loopback: %w", err)
		}
		r, err := n.cni.AddNetworkList(ctx, list, rt)
		if err != nil {
			return err
		}
		res, err = types100.NewResultFromResult(r)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("CNI ADD of %s on %s: %w", id, n.name, err)
	}
	n.t.Cleanup(func() {
		_ = netnstest.InNS(n.ns.Path, func() error {
			return n.cni.DelNetworkList(context.Background(), list, rt)
		})
	})
	if len(res.IPs) != 1 {
		return nil, fmt.Errorf("ADD of %s on %s: %d addresses, want 1", id, n.name, len(res.IPs))
	}
	ip, _ := netip.AddrFromSlice(res.IPs[0].Address.IP)
	return &mnPod{node: n, id: id, ns: ns, ip: ip.Unmap()}, nil
}

// leases returns the addresses host-local leased on the node for key (its files).
func (n *mnNode) leases(key string) []netip.Addr {
	n.t.Helper()
	dir := filepath.Join(n.ipamDir, linux.NetworkName(key))
	entries, err := os.ReadDir(dir)
	if err != nil {
		n.t.Fatalf("reading %s's leases: %v", n.name, err)
	}
	var out []netip.Addr
	for _, e := range entries {
		if a, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, a)
		}
	}
	return out
}
