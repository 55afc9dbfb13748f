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
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

func TestNotOursIsLeftAlone(t *testing.T) {
	ctx := context.Background()
	t.Run("interface that is not a bridge", func(t *testing.T) {
		e := newEnv(t)
		d := desired4("default/net1")
		bridge := netbackend.BridgeName(d.Key)
		attrs := netlink.NewLinkAttrs()
		attrs.Name = bridge
		kind := "dummy"
		if err := e.ns.nl.LinkAdd(&netlink.Dummy{LinkAttrs: attrs}); err != nil {
			// Some kernels are built without the dummy driver; a veth is as foreign.
			t.Logf("cannot create a dummy interface (%v); using a veth", err)
			kind = "veth"
			e.ns.addVeth(t, bridge, "foreignpeer0", "")
		}
		checkLeftAlone(t, e, d, kind, "")
	})
	t.Run("bridge with another alias", func(t *testing.T) {
		e := newEnv(t)
		d := desired4("default/net1")
		alias := "samplecrd.k8s.io/network=default/someone-else"
		e.ns.addBridge(t, netbackend.BridgeName(d.Key), alias)
		checkLeftAlone(t, e, d, "bridge", alias)
	})
	t.Run("bridge without alias", func(t *testing.T) {
		e := newEnv(t)
		d := desired4("default/net1")
		e.ns.addBridge(t, netbackend.BridgeName(d.Key), "")
		checkLeftAlone(t, e, d, "bridge", "")
	})
	t.Run("configuration file not recording the key", func(t *testing.T) {
		e := newEnv(t)
		d := desired4("default/net1")
		path := ConfPath(e.confDir, d.Key)
		foreign := []byte(`{"cniVersion":"1.0.0","name":"hand-made","plugins":[{"type":"bridge"}]}`)
		if err := os.WriteFile(path, foreign, 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := e.b.Ensure(ctx, d)
		if netbackend.ReasonOf(err) != netbackend.ReasonNotOurs || !strings.Contains(err.Error(), path) {
			t.Fatalf("Ensure: %v, want reason %s naming %s", err, netbackend.ReasonNotOurs, path)
		}
		if l := e.ns.link(t, netbackend.BridgeName(d.Key)); l != nil {
			t.Errorf("Ensure created the bridge although the configuration is not ours")
		}
		if err := e.b.Remove(ctx, d.Key); err != nil {
			t.Fatalf("Remove: %v", err)
		}
		if got := mustRead(t, path); string(got) != string(foreign) {
			t.Errorf("a foreign configuration file was changed: %s", got)
		}
		if a, err := e.b.Observe(ctx, d.Key); a != nil || err != nil {
			t.Errorf("Observe = %+v, %v; want nothing", a, err)
		}
		if keys, err := e.b.List(ctx); err != nil || len(keys) != 0 {
			t.Errorf("List = %v, %v; want none", keys, err)
		}
	})
}

// checkLeftAlone checks that Ensure refuses the foreign interface with d's bridge name and
// that nothing (Ensure, Remove) changes it.
func checkLeftAlone(t *testing.T, e *testEnv, d netbackend.Desired, kind, alias string) {
	t.Helper()
	ctx := context.Background()
	bridge := netbackend.BridgeName(d.Key)
	before := e.ns.link(t, bridge)
	changes, _, err := e.b.Ensure(ctx, d)
	if netbackend.ReasonOf(err) != netbackend.ReasonNotOurs {
		t.Fatalf("Ensure: %v, want reason %s", err, netbackend.ReasonNotOurs)
	}
	if len(changes) != 0 {
		t.Errorf("Ensure reported changes %q", changes)
	}
	msg := err.Error()
	if !strings.Contains(msg, bridge) || !strings.Contains(msg, "not the bridge of network "+d.Key) || !strings.Contains(msg, kind) {
		t.Errorf("message %q should name the interface, its kind (%s) and the network", msg, kind)
	}
	if err := e.b.Remove(ctx, d.Key); err != nil {
		t.Fatalf("Remove: %v", err)
	}
	after := e.ns.link(t, bridge)
	if after == nil {
		t.Fatalf("the foreign interface %s was deleted", bridge)
	}
	if after.Attrs().Index != before.Attrs().Index || after.Type() != kind || after.Attrs().Alias != alias ||
		after.Attrs().MTU != before.Attrs().MTU || after.Attrs().Flags&net.FlagUp != 0 {
		t.Errorf("the foreign interface changed: before %+v, after %+v", before.Attrs(), after.Attrs())
	}
	if addrs := e.ns.globalAddrs(t, bridge); len(addrs) != 0 {
		t.Errorf("the foreign interface got addresses %v", addrs)
	}
	if files := confFiles(t, e.confDir); len(files) != 0 {
		t.Errorf("configuration files written: %v", files)
	}
	if a, err := e.b.Observe(ctx, d.Key); a != nil || err != nil {
		t.Errorf("Observe = %+v, %v; want nothing of ours", a, err)
	}
	if keys, err := e.b.List(ctx); err != nil || len(keys) != 0 {
		t.Errorf("List = %v, %v; want none", keys, err)
	}
}

// TestInterruptedCreation is what a creation stopped between its steps leaves: a bridge under
// the staging name, without or with the alias. Ensure removes it and creates the bridge; List
// names its key and Remove deletes it; a foreign interface with the staging name is refused.
func TestInterruptedCreation(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	d := desired4("default/net1")
	staging := stagingName(d.Key)
	if len(staging) != len(netbackend.BridgeName(d.Key)) || staging == netbackend.BridgeName(d.Key) {
		t.Fatalf("staging name %q", staging)
	}

	e.ns.addBridge(t, staging, "")
	changes := e.ensure(d)
	if !hasChange(changes, "deleted "+staging) || !hasChange(changes, "created bridge") {
		t.Errorf("changes %q", changes)
	}
	if e.ns.link(t, staging) != nil {
		t.Errorf("%s is still there", staging)
	}
	if l := e.ns.link(t, netbackend.BridgeName(d.Key)); l == nil || l.Attrs().Alias != Alias(d.Key) {
		t.Fatalf("bridge after Ensure: %v", l)
	}
	if err := e.b.Remove(ctx, d.Key); err != nil {
		t.Fatal(err)
	}

	e.ns.addBridge(t, staging, Alias(d.Key))
	if keys, err := e.b.List(ctx); err != nil || !slices.Equal(keys, []string{d.Key}) {
		t.Fatalf("List with a staged bridge = %v, %v", keys, err)
	}
	if err := e.b.Remove(ctx, d.Key); err != nil {
		t.Fatal(err)
	}
	if e.ns.link(t, staging) != nil {
		t.Errorf("Remove left %s", staging)
	}

	e.ns.addVeth(t, staging, "stagingpeer0", "")
	_, _, err := e.b.Ensure(ctx, d)
	if netbackend.ReasonOf(err) != netbackend.ReasonNotOurs || !strings.Contains(err.Error(), staging) {
		t.Fatalf("Ensure with a foreign %s: %v, want reason %s", staging, err, netbackend.ReasonNotOurs)
	}
	if l := e.ns.link(t, staging); l == nil || l.Type() != "veth" {
		t.Errorf("the foreign %s was touched: %v", staging, l)
	}
	if err := e.b.Remove(ctx, d.Key); err != nil {
		t.Fatal(err)
	}
	if l := e.ns.link(t, staging); l == nil {
		t.Errorf("Remove deleted the foreign %s", staging)
	}
}

// TestBridgeHasAFixedMAC: the bridge's MAC is derived from the Network and set, so it does not
// follow its ports (a pod leaving used to move it and cut the other pods off for ~30s), and a
// bridge recreated after a deletion gets the same MAC back.
func TestBridgeHasAFixedMAC(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/mac")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)
	want := netbackend.BridgeMAC(d.Key)
	if want[0]&0x01 != 0 || want[0]&0x02 == 0 {
		t.Fatalf("BridgeMAC %s is not a locally administered unicast address", want)
	}
	if got := e.ns.link(t, bridge).Attrs().HardwareAddr; !bytes.Equal(got, want) {
		t.Fatalf("bridge MAC %s, want %s", got, want)
	}
	// A port with a lower MAC comes and goes: a bridge with a kernel-chosen MAC would take it.
	port := e.ns.addVeth(t, "port0", "port0peer", "")
	if err := e.ns.nl.LinkSetHardwareAddr(port, net.HardwareAddr{0x02, 0, 0, 0, 0, 1}); err != nil {
		t.Fatal(err)
	}
	if err := e.ns.nl.LinkSetMaster(port, e.ns.link(t, bridge)); err != nil {
		t.Fatal(err)
	}
	if err := e.ns.nl.LinkSetUp(port); err != nil {
		t.Fatal(err)
	}
	if got := e.ns.link(t, bridge).Attrs().HardwareAddr; !bytes.Equal(got, want) {
		t.Fatalf("bridge MAC %s after a port joined, want %s", got, want)
	}
	if err := e.ns.nl.LinkDel(port); err != nil {
		t.Fatal(err)
	}
	if got := e.ns.link(t, bridge).Attrs().HardwareAddr; !bytes.Equal(got, want) {
		t.Fatalf("bridge MAC %s after the port left, want %s", got, want)
	}
	// Repaired after a deletion, and after a MAC changed by hand: the same MAC.
	if err := e.ns.nl.LinkDel(e.ns.link(t, bridge)); err != nil {
		t.Fatal(err)
	}
	e.ensure(d)
	if got := e.ns.link(t, bridge).Attrs().HardwareAddr; !bytes.Equal(got, want) {
		t.Fatalf("bridge MAC %s after a repair, want %s", got, want)
	}
	if err := e.ns.nl.LinkSetHardwareAddr(e.ns.link(t, bridge), net.HardwareAddr{0x02, 9, 9, 9, 9, 9}); err != nil {
		t.Fatal(err)
	}
	if changes := e.ensure(d); !hasChange(changes, "set MAC of "+bridge) {
		t.Fatalf("changes %q after the MAC was changed by hand, want it set back", changes)
	}
	if got := e.ns.link(t, bridge).Attrs().HardwareAddr; !bytes.Equal(got, want) {
		t.Fatalf("bridge MAC %s, want %s", got, want)
	}
	// Another Network, another MAC.
	if other := netbackend.BridgeMAC("default/other"); bytes.Equal(other, want) {
		t.Fatalf("two Networks share MAC %s", want)
	}
}

// TestAdoptsTheBridgeThePluginMade is the reboot case: the configuration is on disk, the bridge
// is gone, and the runtime attaches a pod before the controller runs, so the CNI bridge plugin
// creates the bridge: no alias, exactly the gateway. Ensure marks it as ours instead of
// reporting it as foreign, keeps its ports, and a bridge with anything else stays foreign.
func TestAdoptsTheBridgeThePluginMade(t *testing.T) {
	ctx := context.Background()
	t.Run("exactly the gateway", func(t *testing.T) {
		e := newEnv(t)
		d := desired4("default/adopt")
		bridge := netbackend.BridgeName(d.Key)
		br := e.ns.addBridge(t, bridge, "")
		if err := e.ns.nl.AddrAdd(br, netlinkAddr(netip.MustParsePrefix("10.99.0.1/24"))); err != nil {
			t.Fatal(err)
		}
		port := e.ns.addVeth(t, "pod0", "pod0peer", "")
		if err := e.ns.nl.LinkSetMaster(port, br); err != nil {
			t.Fatal(err)
		}
		known := e.ns.link(t, bridge).Attrs().HardwareAddr // what the pod's CNI result recorded
		changes, _, err := e.b.Ensure(ctx, d)
		if err != nil {
			t.Fatalf("Ensure: %v", err)
		}
		if !hasChange(changes, netbackend.AdoptedPrefix+bridge) {
			t.Errorf("changes %q, want one starting %q", changes, netbackend.AdoptedPrefix+bridge)
		}
		l := e.ns.link(t, bridge)
		if l.Attrs().Index != br.Attrs().Index || l.Attrs().Alias != Alias(d.Key) {
			t.Fatalf("bridge index %d alias %q, want the same bridge (%d) marked %q", l.Attrs().Index, l.Attrs().Alias, br.Attrs().Index, Alias(d.Key))
		}
		// The MAC the pods know stays, fixed from now on and recorded: a port with a lower MAC
		// does not move it, and a repair or a restarted backend restores it.
		if !bytes.Equal(l.Attrs().HardwareAddr, known) {
			t.Errorf("adopted bridge MAC %s, want the one it had, %s", l.Attrs().HardwareAddr, known)
		}
		if got, ok := recordedMAC(mustRead(t, ConfPath(e.confDir, d.Key))); !ok || !bytes.Equal(got, known) {
			t.Errorf("configuration records MAC %s, want %s", got, known)
		}
		low := e.ns.addVeth(t, "pod9", "pod9peer", "")
		if err := e.ns.nl.LinkSetHardwareAddr(low, net.HardwareAddr{0x02, 0, 0, 0, 0, 1}); err != nil {
			t.Fatal(err)
		}
		if err := e.ns.nl.LinkSetMaster(low, l); err != nil {
			t.Fatal(err)
		}
		if got := e.ns.link(t, bridge).Attrs().HardwareAddr; !bytes.Equal(got, known) {
			t.Errorf("adopted bridge MAC %s after a port joined, want %s", got, known)
		}
		if err := e.ns.nl.LinkDel(low); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if err := e.ns.nl.LinkDel(e.ns.link(t, bridge)); err != nil {
				t.Fatal(err)
			}
			e.b = e.newBackend(Config{}) // a restarted controller
			e.ensure(d)
			if got := e.ns.link(t, bridge).Attrs().HardwareAddr; !bytes.Equal(got, known) {
				t.Errorf("MAC %s after a repair by a restarted backend, want %s", got, known)
			}
		}()
		if p := e.ns.link(t, "pod0"); p.Attrs().MasterIndex != br.Attrs().Index {
			t.Errorf("the pod's veth lost its bridge")
		}
		a, err := e.b.Observe(ctx, d.Key)
		if err != nil || a == nil || len(a.Ports) != 1 || a.Ports[0] != "pod0" {
			t.Fatalf("Observe = %+v, %v; want the bridge with port pod0", a, err)
		}
		if changes := e.ensure(d); len(changes) != 0 {
			t.Errorf("second Ensure changed %q", changes)
		}
	})
	t.Run("another address too", func(t *testing.T) {
		e := newEnv(t)
		d := desired4("default/adopt")
		br := e.ns.addBridge(t, netbackend.BridgeName(d.Key), "")
		for _, p := range []string{"10.99.0.1/24", "192.0.2.1/24"} {
			if err := e.ns.nl.AddrAdd(br, netlinkAddr(netip.MustParsePrefix(p))); err != nil {
				t.Fatal(err)
			}
		}
		if _, _, err := e.b.Ensure(ctx, d); netbackend.ReasonOf(err) != netbackend.ReasonNotOurs {
			t.Fatalf("Ensure: %v, want %s", err, netbackend.ReasonNotOurs)
		}
		if l := e.ns.link(t, netbackend.BridgeName(d.Key)); l.Attrs().Alias != "" {
			t.Errorf("a bridge that is not the plugin's was marked: %q", l.Attrs().Alias)
		}
	})
	t.Run("another prefix length", func(t *testing.T) {
		e := newEnv(t)
		d := desired4("default/adopt")
		br := e.ns.addBridge(t, netbackend.BridgeName(d.Key), "")
		if err := e.ns.nl.AddrAdd(br, netlinkAddr(netip.MustParsePrefix("10.99.0.1/16"))); err != nil {
			t.Fatal(err)
		}
		if _, _, err := e.b.Ensure(ctx, d); netbackend.ReasonOf(err) != netbackend.ReasonNotOurs {
			t.Fatalf("Ensure: %v, want %s", err, netbackend.ReasonNotOurs)
		}
	})
}
