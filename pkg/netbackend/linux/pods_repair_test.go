package linux

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

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

// TestRepairReattachesPorts: a bridge deleted by hand loses its ports (the pods' veths stay,
// without a master). The repair attaches them again, with hairpin mode; a port detached by hand
// is attached again; a port taken by another bridge is PortsDetached.
func TestRepairReattachesPorts(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	d := desired4("default/ports")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)
	var ports []netlink.Link
	for _, name := range []string{"pod1", "pod2"} {
		p := e.ns.addVeth(t, name, name+"peer", "")
		if err := e.ns.nl.LinkSetMaster(p, e.ns.link(t, bridge)); err != nil {
			t.Fatal(err)
		}
		if err := e.ns.nl.LinkSetUp(p); err != nil {
			t.Fatal(err)
		}
		ports = append(ports, p)
	}
	// What the controller does on the port notifications.
	if changes := e.ensure(d); len(changes) != 0 {
		t.Fatalf("Ensure with two pods attached changed %q", changes)
	}
	if a, err := e.b.Observe(context.Background(), d.Key); err != nil || strings.Join(a.Ports, ",") != "pod1,pod2" {
		t.Fatalf("Observe ports %v, %v; want pod1,pod2", a, err)
	}

	if err := e.ns.nl.LinkDel(e.ns.link(t, bridge)); err != nil {
		t.Fatal(err)
	}
	if p := e.ns.link(t, "pod1"); p.Attrs().MasterIndex != 0 {
		t.Fatalf("pod1 still has master %d after the bridge was deleted", p.Attrs().MasterIndex)
	}
	changes := e.ensure(d)
	for _, want := range []string{"created bridge " + bridge, "attached port pod1 to " + bridge + " again", "attached port pod2 to " + bridge + " again"} {
		if !hasChange(changes, want) {
			t.Errorf("repair changes %q lack %q", changes, want)
		}
	}
	br := e.ns.link(t, bridge)
	for _, name := range []string{"pod1", "pod2"} {
		p := e.ns.link(t, name)
		if p.Attrs().MasterIndex != br.Attrs().Index {
			t.Errorf("%s has master %d after the repair, want the new bridge %d", name, p.Attrs().MasterIndex, br.Attrs().Index)
		}
		if pi := p.Attrs().Protinfo; pi != nil && !pi.Hairpin {
			t.Errorf("%s: hairpin mode off after the repair", name)
		}
	}

	// Detached by hand: attached again.
	if err := e.ns.nl.LinkSetNoMaster(e.ns.link(t, "pod2")); err != nil {
		t.Fatal(err)
	}
	if changes := e.ensure(d); !hasChange(changes, "attached port pod2 to "+bridge+" again") {
		t.Errorf("changes %q after pod2 was detached", changes)
	}
	// Taken by another bridge: reported, not stolen.
	other := e.ns.addBridge(t, "otherbr", "")
	if err := e.ns.nl.LinkSetMaster(e.ns.link(t, "pod2"), other); err != nil {
		t.Fatal(err)
	}
	_, _, err := e.b.Ensure(context.Background(), d)
	if netbackend.ReasonOf(err) != netbackend.ReasonPortsDetached || !strings.Contains(err.Error(), "pod2") {
		t.Fatalf("Ensure with pod2 on another bridge: %v, want %s naming pod2", err, netbackend.ReasonPortsDetached)
	}
	// The pod goes away: forgotten, the Network is fine again.
	if err := e.ns.nl.LinkDel(e.ns.link(t, "pod2")); err != nil {
		t.Fatal(err)
	}
	if changes := e.ensure(d); len(changes) != 0 {
		t.Errorf("Ensure after pod2 left changed %q", changes)
	}
	_ = ports
}

// TestWatchReportsPorts: a pod's veth joining or leaving one of our bridges notifies the key, so
// the controller keeps the attachments (and the ports to re-attach) current.
func TestWatchReportsPorts(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/watchports")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)
	w := e.startWatch(e.b)
	p := e.ns.addVeth(t, "podw", "podwpeer", "")
	w.expectNone(t, d.Key, 200*time.Millisecond, "a veth not on our bridge")
	if err := e.ns.nl.LinkSetMaster(p, e.ns.link(t, bridge)); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "a port joined")
	if _, err := e.b.Observe(context.Background(), d.Key); err != nil {
		t.Fatal(err)
	}
	if err := e.ns.nl.LinkSetNoMaster(e.ns.link(t, "podw")); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "a port left")
}

// TestGatewayChangeWaitsForPods: a new spec.gateway is not carried out while pods are attached
// (each has the configured gateway as its default route): Ensure keeps the old address and
// configuration and reports GatewayChangeBlocked; once the pods are gone it moves the gateway.
// A new gateway that host-local leased to a pod is AddressInUse.
func TestGatewayChangeWaitsForPods(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	ipamDir := t.TempDir()
	e.b = e.newBackend(Config{IPAMDataDir: ipamDir})
	d := desired4("default/gw")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)
	confBefore := mustRead(t, ConfPath(e.confDir, d.Key))
	port := e.ns.addVeth(t, "podgw", "podgwpeer", "")
	if err := e.ns.nl.LinkSetMaster(port, e.ns.link(t, bridge)); err != nil {
		t.Fatal(err)
	}

	moved := d
	moved.Gateway = netip.MustParseAddr("10.99.0.254")
	_, _, err := e.b.Ensure(ctx, moved)
	if netbackend.ReasonOf(err) != netbackend.ReasonGatewayChangeBlocked || !strings.Contains(err.Error(), "podgw") {
		t.Fatalf("Ensure with a pod attached: %v, want %s naming podgw", err, netbackend.ReasonGatewayChangeBlocked)
	}
	if got := e.ns.globalAddrs(t, bridge); len(got) != 1 || got[0] != netip.MustParsePrefix("10.99.0.1/24") {
		t.Errorf("bridge addresses %v while blocked, want the old gateway only", got)
	}
	if got := mustRead(t, ConfPath(e.confDir, d.Key)); !bytes.Equal(got, confBefore) {
		t.Errorf("configuration rewritten while blocked:\n%s", got)
	}

	// host-local leased the new gateway to a pod meanwhile: refused.
	if err := e.ns.nl.LinkDel(e.ns.link(t, "podgw")); err != nil {
		t.Fatal(err)
	}
	leases := filepath.Join(ipamDir, NetworkName(d.Key))
	if err := os.MkdirAll(leases, 0o755); err != nil {
		t.Fatal(err)
	}
	lease := filepath.Join(leases, "10.99.0.254")
	if err := os.WriteFile(lease, []byte("pod-7\r\neth0"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.b.Ensure(ctx, moved)
	if netbackend.ReasonOf(err) != netbackend.ReasonAddressInUse || !strings.Contains(err.Error(), "pod-7") {
		t.Fatalf("Ensure onto a leased gateway: %v, want %s naming pod-7", err, netbackend.ReasonAddressInUse)
	}
	if err := os.Remove(lease); err != nil {
		t.Fatal(err)
	}
	changes, _, err := e.b.Ensure(ctx, moved)
	if err != nil || !hasChange(changes, "added address 10.99.0.254/24") || !hasChange(changes, "wrote CNI configuration") {
		t.Fatalf("Ensure with no pods attached: %q, %v; want the gateway moved", changes, err)
	}
	if gw, _ := configuredGateway(mustRead(t, ConfPath(e.confDir, d.Key))); gw != moved.Gateway {
		t.Errorf("configured gateway %v, want %v", gw, moved.Gateway)
	}
}

// TestRemoveCleansHostLocalState: what host-local left for the network (lock, last reserved
// address, leases the runtime never released) goes with the Network; other networks' stay.
func TestRemoveCleansHostLocalState(t *testing.T) {
	e := newEnv(t)
	ipamDir := t.TempDir()
	e.b = e.newBackend(Config{IPAMDataDir: ipamDir})
	d := desired4("default/leases")
	e.ensure(d)
	mine := filepath.Join(ipamDir, NetworkName(d.Key))
	other := filepath.Join(ipamDir, NetworkName("default/other"))
	for _, dir := range []string{mine, other} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"lock", "last_reserved_ip.0", "10.99.0.7"} {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := e.b.Remove(context.Background(), d.Key); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(mine); !os.IsNotExist(err) {
		t.Errorf("host-local's directory %s after Remove: %v, want it gone", mine, err)
	}
	if _, err := os.Stat(filepath.Join(other, "10.99.0.7")); err != nil {
		t.Errorf("another network's lease went too: %v", err)
	}
}

// TestLeasesObservedAndCollected: Observe reports host-local's leases (a runtime's DEL removes
// the veth before it releases the address, so the controller waits for them), and a directory
// host-local left for a Network that is gone (a DEL that finished after the Network's removal
// recreates it with its lock file) is listed, observed and removed like any leftover of ours.
func TestLeasesObservedAndCollected(t *testing.T) {
	e := newEnv(t)
	ipamDir := t.TempDir()
	e.b = e.newBackend(Config{IPAMDataDir: ipamDir})
	ctx := context.Background()
	d := desired4("default/leases")
	e.ensure(d)
	mine := filepath.Join(ipamDir, NetworkName(d.Key))
	write := func(dir string, files ...string) {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if err := os.WriteFile(filepath.Join(dir, f), []byte("container\neth0"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	write(mine, "lock", "last_reserved_ip.0", "10.99.0.7", "10.99.0.9")
	a, err := e.b.Observe(ctx, d.Key)
	if err != nil || a == nil || !slices.Equal(a.Leases, []string{"10.99.0.7", "10.99.0.9"}) {
		t.Fatalf("Observe with two leases: %+v, %v; want leases 10.99.0.7, 10.99.0.9", a, err)
	}

	// Only host-local's directory is left of a Network that is gone.
	gone := "default/gone"
	leftover := filepath.Join(ipamDir, NetworkName(gone))
	write(leftover, "lock")
	write(filepath.Join(ipamDir, "someone-elses-network"), "lock", "10.1.0.2")
	keys, err := e.b.List(ctx)
	if err != nil || !slices.Contains(keys, gone) || !slices.Contains(keys, d.Key) || len(keys) != 2 {
		t.Fatalf("List: %v, %v; want %s and %s", keys, err, d.Key, gone)
	}
	if a, err := e.b.Observe(ctx, gone); err != nil || a == nil || a.Bridge != "" || len(a.Leases) != 0 {
		t.Fatalf("Observe of a leftover directory: %+v, %v; want something of ours with no bridge and no leases", a, err)
	}
	if err := e.b.Remove(ctx, gone); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("leftover directory after Remove: %v", err)
	}
	if a, err := e.b.Observe(ctx, gone); err != nil || a != nil {
		t.Errorf("Observe after Remove: %+v, %v; want nothing", a, err)
	}
	if _, err := os.Stat(filepath.Join(ipamDir, "someone-elses-network", "10.1.0.2")); err != nil {
		t.Errorf("another network's lease: %v", err)
	}
}
