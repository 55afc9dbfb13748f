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

package integration

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/cmd/agent"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// ctrlAgent is the Network controller running as an agent against a test server, confined to a
// network namespace the test created. Resync and garbage collection are an hour apart, so
// anything that happens within a test is the work of watches and of the start-up collection.
type ctrlAgent struct {
	cancel context.CancelFunc
	done   chan error
}

func ctrlStartAgent(t *testing.T, s *framework.Server, ns *netnstest.NS, confDir string) *ctrlAgent {
	t.Helper()
	o := agent.NewControllerOptions()
	o.NodeName, o.BackendNetNS, o.CNIConfDir = "node-it", ns.Path, confDir
	o.ResyncPeriod, o.GCInterval = time.Hour, time.Hour
	o.BridgeOnAttach = false // these tests look at each Network's bridge before any pod attaches
	ctx, cancel := context.WithCancel(context.Background())
	a := &ctrlAgent{cancel: cancel, done: make(chan error, 1)}
	go func() { a.done <- o.Run(ctx, s.Config, agent.Core{}) }()
	t.Cleanup(a.stop)
	return a
}

func (a *ctrlAgent) stop() {
	a.cancel()
	<-a.done
	a.done <- nil // later stops return at once
}

func ctrlWaitReady(t *testing.T, client versioned.Interface, name string, want metav1.ConditionStatus) *v1.Network {
	t.Helper()
	var n *v1.Network
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		n, err = client.SamplecrdV1().Networks("ctrl").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
		return c != nil && c.Status == want && n.Status.ObservedGeneration == n.Generation, nil
	})
	if err != nil {
		t.Fatalf("network %s never became Ready=%s: %v; status %+v", name, want, err, n.Status)
	}
	return n
}

func TestControllerRealisesNetworksInANamespace(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "ctrl")
	confDir := t.TempDir()
	s := framework.StartForTest(t)
	client := versioned.NewForConfigOrDie(s.Config)
	ctrlStartAgent(t, s, ns, confDir)
	ctx := context.Background()

	created, err := client.SamplecrdV1().Networks("ctrl").Create(ctx, &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1.NetworkSpec{CIDR: "10.77.0.0/24"},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := ctrlWaitReady(t, client, "web", metav1.ConditionTrue)
	bridge := netbackend.BridgeName("ctrl/web")
	if len(ready.Status.Nodes) != 1 || ready.Status.Nodes[0].NodeName != "node-it" || ready.Status.Nodes[0].Bridge != bridge {
		t.Fatalf("status.nodes %+v, want one ready entry for node-it with bridge %s", ready.Status.Nodes, bridge)
	}

	// The bridge: gateway address with the prefix length, MTU, up.
	link, err := ns.Netlink.LinkByName(bridge)
	if err != nil {
		t.Fatalf("bridge %s in the namespace: %v", bridge, err)
	}
	if link.Type() != "bridge" || link.Attrs().MTU != netbackend.DefaultMTU || link.Attrs().Flags&1 == 0 {
		t.Errorf("bridge %s: type %s mtu %d flags %v", bridge, link.Type(), link.Attrs().MTU, link.Attrs().Flags)
	}
	addrs, err := ns.Netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil || len(addrs) != 1 || addrs[0].IPNet.String() != "10.77.0.1/24" {
		t.Errorf("bridge addresses %v (err %v), want 10.77.0.1/24", addrs, err)
	}
	// The CNI configuration list parses and points at the bridge and the prefix.
	files, _ := filepath.Glob(filepath.Join(confDir, "*.conflist"))
	if len(files) != 1 {
		t.Fatalf("CNI configurations %v, want one", files)
	}
	conf, err := libcni.ConfListFromFile(files[0])
	if err != nil || len(conf.Plugins) == 0 || conf.Plugins[0].Network.Type != "bridge" {
		t.Fatalf("CNI configuration %s: %v %+v", files[0], err, conf)
	}
	raw, _ := os.ReadFile(files[0])
	for _, want := range []string{bridge, "10.77.0.0/24", "10.77.0.1", "host-local"} {
		if !bytes.Contains(raw, []byte(want)) {
			t.Errorf("CNI configuration lacks %q: %s", want, raw)
		}
	}

	// Drift: a bridge deleted by hand comes back through the netlink watch, not a resync.
	if err := ns.Netlink.LinkDel(link); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Netlink.LinkByIndex(link.Attrs().Index); err == nil {
		t.Fatal("the bridge is still there after deleting it")
	}
	start := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		l, err := ns.Netlink.LinkByName(bridge)
		if err != nil || l.Attrs().Index == link.Attrs().Index {
			return false, nil
		}
		a, _ := ns.Netlink.AddrList(l, netlink.FAMILY_V4)
		return len(a) == 1 && l.Attrs().Flags&1 != 0, nil
	})
	if err != nil {
		t.Fatalf("deleted bridge not repaired: %v", err)
	}
	t.Logf("bridge repaired %v after it was deleted", time.Since(start).Round(100*time.Microsecond))

	// A gateway change reaches the node and the status.
	ready.Spec.Gateway = "10.77.0.254"
	if _, err := client.SamplecrdV1().Networks("ctrl").Update(ctx, ready, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := ctrlWaitReady(t, client, "web", metav1.ConditionTrue); n.Generation != created.Generation+1 {
		t.Fatalf("generation %d after a spec change", n.Generation)
	}
	if a, _ := ns.Netlink.AddrList(mustLink(t, ns, bridge), netlink.FAMILY_V4); len(a) != 1 || a[0].IP.String() != "10.77.0.254" {
		t.Fatalf("addresses after the gateway change: %v", a)
	}
}

func TestControllerCollectsOrphansAfterDowntime(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "gc")
	confDir := t.TempDir()
	s := framework.StartForTest(t)
	client := versioned.NewForConfigOrDie(s.Config)
	agent := ctrlStartAgent(t, s, ns, confDir)
	ctx := context.Background()
	if _, err := client.SamplecrdV1().Networks("ctrl").Create(ctx, &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "old"}, Spec: v1.NetworkSpec{CIDR: "10.78.0.0/24"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ctrlWaitReady(t, client, "old", metav1.ConditionTrue)
	bridge := netbackend.BridgeName("ctrl/old")

	agent.stop()
	if err := client.SamplecrdV1().Networks("ctrl").Delete(ctx, "old", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ns.Netlink.LinkByName(bridge); err != nil {
		t.Fatalf("the bridge vanished while no controller ran: %v", err)
	}
	ctrlStartAgent(t, s, ns, confDir)
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, err := ns.Netlink.LinkByName(bridge)
		files, _ := filepath.Glob(filepath.Join(confDir, "*.conflist"))
		return errors.As(err, new(netlink.LinkNotFoundError)) && len(files) == 0, nil
	})
	if err != nil {
		t.Fatalf("orphaned bridge or configuration not collected at start: %v", err)
	}
}

func TestControllerReportsForeignInterface(t *testing.T) {
	netnstest.RequireRoot(t)
	ns := netnstest.New(t, "foreign")
	s := framework.StartForTest(t)
	client := versioned.NewForConfigOrDie(s.Config)
	// Someone else's bridge already has the name the Network's bridge would get.
	foreign := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: netbackend.BridgeName("ctrl/taken")}}
	if err := ns.Netlink.LinkAdd(foreign); err != nil {
		t.Fatal(err)
	}
	ctrlStartAgent(t, s, ns, t.TempDir())
	if _, err := client.SamplecrdV1().Networks("ctrl").Create(context.Background(), &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "taken"}, Spec: v1.NetworkSpec{CIDR: "10.79.0.0/24"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n := ctrlWaitReady(t, client, "taken", metav1.ConditionFalse)
	c := meta.FindStatusCondition(n.Status.Conditions, "Ready")
	if c.Reason != netbackend.ReasonNotOurs || len(n.Status.Nodes) != 1 || n.Status.Nodes[0].Reason != netbackend.ReasonNotOurs {
		t.Fatalf("Ready %+v nodes %+v, want reason %s", c, n.Status.Nodes, netbackend.ReasonNotOurs)
	}
	if l := mustLink(t, ns, foreign.Name); l.Attrs().Alias != "" {
		t.Errorf("the foreign bridge was changed: alias %q", l.Attrs().Alias)
	}
	if a, _ := ns.Netlink.AddrList(mustLink(t, ns, foreign.Name), netlink.FAMILY_V4); len(a) != 0 {
		t.Errorf("an address was put on the foreign bridge: %v", a)
	}
}

func mustLink(t *testing.T, ns *netnstest.NS, name string) netlink.Link {
	t.Helper()
	l, err := ns.Netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

// A bundled controller that fails (here: its --backend-netns does not exist) fails /livez, rather
// than leaving the server looking healthy with only a log line to tell; /readyz stays ok, so the
// API is still served.
func TestFailedControllerFailsLivez(t *testing.T) {
	dir := t.TempDir()
	s := framework.StartForTest(t, "--controllers=true", "--node-name", "node-it",
		"--backend-netns", filepath.Join(dir, "no-such-netns"), "--cni-conf-dir", filepath.Join(dir, "cni"))
	client := httpClient(t, s)
	var body string
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp := doRaw(t, client, http.MethodGet, s.URL+"/livez/network-controller", "", "", nil)
		body = string(resp.Body)
		return resp.Code == http.StatusInternalServerError, nil
	})
	if err != nil {
		t.Fatalf("/livez/network-controller never failed: %v; last answer %q", err, body)
	}
	if resp := doRaw(t, client, http.MethodGet, s.URL+"/livez", "", "", nil); resp.Code != http.StatusInternalServerError {
		t.Errorf("/livez answered %d with a failed controller, want 500: %s", resp.Code, resp.Body)
	}
	if resp := doRaw(t, client, http.MethodGet, s.URL+"/readyz", "", "", nil); resp.Code != http.StatusOK {
		t.Errorf("/readyz answered %d with a failed controller, want 200 (the API is still served): %s", resp.Code, resp.Body)
	}
	if _, err := os.Stat(filepath.Join(dir, "cni")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the failed controller created its CNI directory (%v)", err)
	}
}
