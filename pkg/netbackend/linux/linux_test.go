package linux

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// parsedConf is what the tests read back from a written configuration list.
type parsedConf struct {
	Key     string
	Name    string
	Version string
	Bridge  bridgeConf
	Portmap portmapConf
}

// parseConf parses content the way runtimes do (libcni) and returns the fields we set.
func parseConf(t *testing.T, content []byte) parsedConf {
	t.Helper()
	list, err := libcni.ConfListFromBytes(content)
	if err != nil {
		t.Fatalf("libcni.ConfListFromBytes: %v\n%s", err, content)
	}
	if len(list.Plugins) != 2 {
		t.Fatalf("configuration has %d plugins, want 2 (bridge, portmap)", len(list.Plugins))
	}
	if list.Plugins[0].Network.Type != "bridge" || list.Plugins[1].Network.Type != "portmap" {
		t.Fatalf("plugin types %q, %q, want bridge, portmap", list.Plugins[0].Network.Type, list.Plugins[1].Network.Type)
	}
	if !list.Plugins[1].Network.Capabilities["portMappings"] {
		t.Fatalf("portmap without the portMappings capability: %s", list.Plugins[1].Bytes)
	}
	var br bridgeConf
	if err := json.Unmarshal(list.Plugins[0].Bytes, &br); err != nil {
		t.Fatalf("plugin configuration: %v", err)
	}
	var pm portmapConf
	if err := json.Unmarshal(list.Plugins[1].Bytes, &pm); err != nil {
		t.Fatalf("plugin configuration: %v", err)
	}
	return parsedConf{Key: KeyOfConfig(content), Name: list.Name, Version: list.CNIVersion, Bridge: br, Portmap: pm}
}

func inode(t *testing.T, path string) uint64 {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Sys().(*syscall.Stat_t).Ino
}

func hasChange(changes []string, substr string) bool {
	return slices.ContainsFunc(changes, func(c string) bool { return strings.Contains(c, substr) })
}

func TestEnsureCreatesBridgeAndConfig(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/net1")
	d.MTU = 1400
	bridge := netbackend.BridgeName(d.Key)

	changes := e.ensure(d)
	for _, want := range []string{"created bridge " + bridge, "added address 10.99.0.1/24", "set " + bridge + " up", "wrote CNI configuration"} {
		if !hasChange(changes, want) {
			t.Errorf("changes %q lack %q", changes, want)
		}
	}

	l := e.ns.link(t, bridge)
	if l == nil {
		t.Fatalf("bridge %s not created in the namespace", bridge)
	}
	if l.Type() != "bridge" {
		t.Errorf("link type %q, want bridge", l.Type())
	}
	if got, want := l.Attrs().Alias, "samplecrd.k8s.io/network=default/net1"; got != want {
		t.Errorf("alias %q, want %q", got, want)
	}
	if l.Attrs().MTU != 1400 {
		t.Errorf("MTU %d, want 1400", l.Attrs().MTU)
	}
	if l.Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("bridge is not up")
	}
	if got, want := e.ns.globalAddrs(t, bridge), []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24")}; !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v", got, want)
	}
	if hostHasLink(bridge) {
		t.Fatalf("bridge %s appeared in the test process's own namespace", bridge)
	}

	path := ConfPath(e.confDir, d.Key)
	if filepath.Base(path) != "90-samplecrd-"+bridge+".conflist" {
		t.Errorf("configuration file %s", path)
	}
	if files := confFiles(t, e.confDir); !slices.Equal(files, []string{filepath.Base(path)}) {
		t.Errorf("configuration directory holds %v, want only %s (no temporary files)", files, filepath.Base(path))
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o644 {
		t.Errorf("configuration file mode: %v, %v", fi, err)
	}
	conf := parseConf(t, mustRead(t, path))
	if conf.Version != "1.1.0" || conf.Name != "samplecrd_default_net1" || conf.Key != d.Key {
		t.Errorf("configuration version %q name %q key %q", conf.Version, conf.Name, conf.Key)
	}
	br := conf.Bridge
	if br.Bridge != bridge || !br.IsGateway || br.IPMasq || br.MTU != 1400 || br.IPAM.Type != "host-local" {
		t.Errorf("bridge plugin configuration %+v", br)
	}
	if len(br.IPAM.Ranges) != 1 || len(br.IPAM.Ranges[0]) != 1 ||
		br.IPAM.Ranges[0][0] != (rangeConf{Subnet: "10.99.0.0/24", Gateway: "10.99.0.1"}) {
		t.Errorf("IPAM ranges %+v", br.IPAM.Ranges)
	}
	if len(br.IPAM.Routes) != 1 || br.IPAM.Routes[0].Dst != "0.0.0.0/0" {
		t.Errorf("IPAM routes %+v", br.IPAM.Routes)
	}

	a, err := e.b.Observe(context.Background(), d.Key)
	if err != nil || a == nil {
		t.Fatalf("Observe = %v, %v", a, err)
	}
	if a.Bridge != bridge || !a.Up || a.MTU != 1400 || !slices.Equal(a.Addresses, []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24")}) ||
		string(a.CNIConfig) != string(mustRead(t, path)) {
		t.Errorf("Observe = %+v", a)
	}

	// A resync of the unchanged Network writes nothing.
	ino := inode(t, path)
	if changes := e.ensure(d); len(changes) != 0 {
		t.Fatalf("second Ensure changed %q, want nothing", changes)
	}
	if inode(t, path) != ino {
		t.Errorf("second Ensure rewrote the configuration file")
	}

	// A changed MTU changes the MTU and the configuration (the pods' MTU), nothing else.
	d.MTU = 0
	changes = e.ensure(d)
	if len(changes) != 2 || !hasChange(changes, "set MTU of "+bridge+" from 1400 to 1500") || !hasChange(changes, "wrote CNI configuration") {
		t.Errorf("changes after the MTU changed: %q", changes)
	}
	if l := e.ns.link(t, bridge); l.Attrs().MTU != 1500 {
		t.Errorf("MTU %d, want 1500", l.Attrs().MTU)
	}

	// A changed prefix replaces the address.
	d.Prefix, d.Gateway = netip.MustParsePrefix("10.98.0.0/16"), netip.MustParseAddr("10.98.0.254")
	changes = e.ensure(d)
	if !hasChange(changes, "removed stale address 10.99.0.1/24") || !hasChange(changes, "added address 10.98.0.254/16") || len(changes) != 3 {
		t.Errorf("changes after the prefix changed: %q", changes)
	}
	if got, want := e.ns.globalAddrs(t, bridge), []netip.Prefix{netip.MustParsePrefix("10.98.0.254/16")}; !slices.Equal(got, want) {
		t.Errorf("addresses %v, want %v", got, want)
	}
	if conf := parseConf(t, mustRead(t, path)); conf.Bridge.IPAM.Ranges[0][0] != (rangeConf{Subnet: "10.98.0.0/16", Gateway: "10.98.0.254"}) {
		t.Errorf("IPAM ranges after the prefix changed: %+v", conf.Bridge.IPAM.Ranges)
	}
	if changes := e.ensure(d); len(changes) != 0 {
		t.Fatalf("Ensure after the repair changed %q", changes)
	}
}

func TestEnsureRepairsConfigDrift(t *testing.T) {
	e := newEnv(t)
	d := desired4("default/net1")
	e.ensure(d)
	path := ConfPath(e.confDir, d.Key)
	want := mustRead(t, path)

	// Edited by hand (still recording the key): rewritten.
	edited := strings.Replace(string(want), `"ipMasq": false`, `"ipMasq": true`, 1)
	if edited == string(want) {
		t.Fatal("test bug: the edit changed nothing")
	}
	if err := os.WriteFile(path, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	if changes := e.ensure(d); len(changes) != 1 || !hasChange(changes, "wrote CNI configuration") {
		t.Errorf("changes after the edit: %q", changes)
	}
	if got := mustRead(t, path); string(got) != string(want) {
		t.Errorf("configuration after the repair:\n%s\nwant\n%s", got, want)
	}

	// Deleted by hand: written again.
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if changes := e.ensure(d); len(changes) != 1 || !hasChange(changes, "wrote CNI configuration") {
		t.Errorf("changes after the deletion: %q", changes)
	}
	if got := mustRead(t, path); string(got) != string(want) {
		t.Errorf("configuration after the repair differs")
	}
}

// TestWatchReportsDriftAndEnsureRepairs changes the bridge behind the backend's back, each time
// with a Watch started on the settled state, and checks that the Watch names the Network
// within 2s and that the next Ensure repairs exactly that.
func TestWatchReportsDriftAndEnsureRepairs(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	d := desired4("default/net1")
	bridge := netbackend.BridgeName(d.Key)
	gw := netip.MustParsePrefix("10.99.0.1/24")
	e.ensure(d)

	w := e.startWatch(e.b)
	w.expectNone(t, d.Key, 300*time.Millisecond, "nothing changed")
	w.stop(t)

	drifts := []struct {
		name  string
		drift func(l netlink.Link) error
		want  []string
	}{
		{"bridge deleted", func(l netlink.Link) error { return e.ns.nl.LinkDel(l) },
			[]string{"created bridge " + bridge, "added address 10.99.0.1/24", "set " + bridge + " up"}},
		{"MTU changed", func(l netlink.Link) error { return e.ns.nl.LinkSetMTU(l, 1300) },
			[]string{"set MTU of " + bridge + " from 1300 to 1500"}},
		{"gateway removed", func(l netlink.Link) error { return e.ns.nl.AddrDel(l, netlinkAddr(gw)) },
			[]string{"added address 10.99.0.1/24"}},
		{"stale address added", func(l netlink.Link) error {
			return e.ns.nl.AddrAdd(l, netlinkAddr(netip.MustParsePrefix("192.0.2.7/24")))
		}, []string{"removed stale address 192.0.2.7/24"}},
		{"set down", func(l netlink.Link) error { return e.ns.nl.LinkSetDown(l) },
			[]string{"set " + bridge + " up"}},
	}
	for _, dr := range drifts {
		w := e.startWatch(e.b)
		if err := dr.drift(e.ns.link(t, bridge)); err != nil {
			t.Fatalf("%s: %v", dr.name, err)
		}
		w.expect(t, d.Key, dr.name)
		w.stop(t)

		changes, _, err := e.b.Ensure(context.Background(), d)
		if err != nil {
			t.Fatalf("%s: Ensure: %v", dr.name, err)
		}
		// Only what drifted is repaired (the configuration, unchanged, is not rewritten).
		want := dr.want
		if len(changes) != len(want) {
			t.Fatalf("%s: changes %q, want %q", dr.name, changes, want)
		}
		for _, w := range want {
			if !hasChange(changes, w) {
				t.Fatalf("%s: changes %q lack %q", dr.name, changes, w)
			}
		}
		if changes := e.ensure(d); len(changes) != 0 {
			t.Fatalf("%s: Ensure after the repair changed %q", dr.name, changes)
		}
		if got := e.ns.globalAddrs(t, bridge); !slices.Equal(got, []netip.Prefix{gw}) {
			t.Fatalf("%s: addresses after the repair %v", dr.name, got)
		}
	}
}

// TestWatchAfterRestart is a Backend that did not create the bridge (the agent restarted): it
// still maps the bridge's deletion and a foreign interface taking the name to the key.
func TestWatchAfterRestart(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	d := desired4("default/net1")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)
	other := desired4("default/other")
	other.Prefix, other.Gateway = netip.MustParsePrefix("10.97.0.0/24"), netip.MustParseAddr("10.97.0.1")
	e.ensure(other)

	restarted := e.newBackend(Config{})
	w := e.startWatch(restarted)
	if err := e.ns.nl.LinkDel(e.ns.link(t, bridge)); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "bridge deleted")
	w.stop(t)

	// A foreign interface (no alias) takes the name: only the name maps it to the key.
	w = e.startWatch(restarted)
	e.ns.addVeth(t, bridge, "foreignpeer0", "")
	w.expect(t, d.Key, "foreign interface with the bridge's name")
	w.stop(t)

	_, _, err := restarted.Ensure(context.Background(), d)
	if netbackend.ReasonOf(err) != netbackend.ReasonNotOurs {
		t.Fatalf("Ensure with a foreign interface named %s: %v, want reason %s", bridge, err, netbackend.ReasonNotOurs)
	}
	// The other network's bridge was never touched.
	if changes, _, err := restarted.Ensure(context.Background(), other); err != nil || len(changes) != 0 {
		t.Fatalf("Ensure of the untouched network: %q, %v", changes, err)
	}
}

// TestWatchResubscribes makes the first subscription fail and the second end (as when the
// kernel drops a subscriber whose buffer overflowed): Watch subscribes again, notifies every
// key it knows (changes may have been missed), and keeps reporting changes.
func TestWatchResubscribes(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	d := desired4("default/net1")
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)

	calls := make(chan int, 16)
	drop := make(chan struct{})
	n := 0
	realSubscribe := e.b.subscribe
	e.b.subscribe = func(linkCh chan netlink.LinkUpdate, addrCh chan netlink.AddrUpdate, done <-chan struct{}, onError func(error)) error {
		n++
		calls <- n
		switch n {
		case 1:
			return errors.New("injected subscription failure")
		case 2:
			inner := make(chan struct{})
			go func() {
				select {
				case <-done:
				case <-drop:
				}
				close(inner)
			}()
			return realSubscribe(linkCh, addrCh, inner, onError)
		}
		return realSubscribe(linkCh, addrCh, done, onError)
	}

	w := e.startWatch(e.b) // returns after the second (first successful) subscription
	if got := []int{<-calls, <-calls}; !slices.Equal(got, []int{1, 2}) {
		t.Fatalf("subscription calls %v", got)
	}
	w.expect(t, d.Key, "resubscribed after a failure")

	close(drop) // the kernel side of the subscription goes away
	select {
	case c := <-calls:
		if c != 3 {
			t.Fatalf("subscription call %d, want 3", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Watch did not subscribe again within 5s after its subscription ended")
	}
	w.expect(t, d.Key, "resubscribed after the subscription ended")
	select {
	case <-e.subscribed:
	case <-time.After(5 * time.Second):
		t.Fatal("third subscription did not complete")
	}
	for len(w.keys) > 0 {
		<-w.keys
	}
	if err := e.ns.nl.LinkSetMTU(e.ns.link(t, bridge), 1280); err != nil {
		t.Fatal(err)
	}
	w.expect(t, d.Key, "MTU changed after resubscribing")
}

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

func TestGatewayInUseElsewhere(t *testing.T) {
	e := newEnv(t)
	e.ns.addVeth(t, "inuse0", "inuse1", "10.99.0.1/24")
	d := desired4("default/net1")
	changes, _, err := e.b.Ensure(context.Background(), d)
	if netbackend.ReasonOf(err) != netbackend.ReasonAddressInUse {
		t.Fatalf("Ensure: %v, want reason %s", err, netbackend.ReasonAddressInUse)
	}
	if !strings.Contains(err.Error(), "inuse0") {
		t.Errorf("message %q should name the interface holding the address", err)
	}
	if !hasChange(changes, "created bridge") {
		t.Errorf("changes so far %q should include the bridge", changes)
	}
	if addrs := e.ns.globalAddrs(t, netbackend.BridgeName(d.Key)); len(addrs) != 0 {
		t.Errorf("bridge got addresses %v", addrs)
	}
	if got := e.ns.globalAddrs(t, "inuse0"); !slices.Equal(got, []netip.Prefix{netip.MustParsePrefix("10.99.0.1/24")}) {
		t.Errorf("the other interface's addresses changed: %v", got)
	}
	// Once the address is free, Ensure completes.
	if err := e.ns.nl.LinkDel(e.ns.link(t, "inuse0")); err != nil {
		t.Fatal(err)
	}
	if changes := e.ensure(d); !hasChange(changes, "added address 10.99.0.1/24") {
		t.Errorf("changes once the address is free: %q", changes)
	}
}

func TestRemoveAndList(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t)
	k1, k2, k3 := "ns1/a", "ns2/b", "ns3/orphan"
	d2 := desired4(k2)
	d2.Prefix, d2.Gateway = netip.MustParsePrefix("10.97.0.0/24"), netip.MustParseAddr("10.97.0.1")
	e.ensure(desired4(k1))
	e.ensure(d2)

	// An orphaned configuration (its bridge gone) and an orphaned bridge (its configuration gone).
	d3 := desired4(k3)
	d3.Prefix, d3.Gateway = netip.MustParsePrefix("10.96.0.0/24"), netip.MustParseAddr("10.96.0.1")
	conf3, err := renderConfig(d3, "", netbackend.BridgeMAC(d3.Key))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ConfPath(e.confDir, k3), conf3, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ConfPath(e.confDir, k2)); err != nil {
		t.Fatal(err)
	}
	// Not ours: a file of our pattern recording a key of another bridge, an unrelated file,
	// a bridge with our alias under another name.
	if err := os.WriteFile(filepath.Join(e.confDir, "90-samplecrd-nwaaaaaaaaaaaaa.conflist"), conf3, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(e.confDir, "10-other.conflist"), []byte(`{"name":"x"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	e.ns.addBridge(t, "renamed0", Alias("ns4/renamed"))

	keys, err := e.b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{k1, k2, k3}; !slices.Equal(keys, want) {
		t.Fatalf("List = %v, want %v", keys, want)
	}
	if a, err := e.b.Observe(ctx, k3); err != nil || a == nil || a.Bridge != "" || string(a.CNIConfig) != string(conf3) {
		t.Errorf("Observe of the orphaned configuration = %+v, %v", a, err)
	}
	if a, err := e.b.Observe(ctx, k2); err != nil || a == nil || a.Bridge == "" || a.CNIConfig != nil {
		t.Errorf("Observe of the orphaned bridge = %+v, %v", a, err)
	}

	for _, k := range []string{k1, k2, k3} {
		if err := e.b.Remove(ctx, k); err != nil {
			t.Fatalf("Remove(%s): %v", k, err)
		}
		if l := e.ns.link(t, netbackend.BridgeName(k)); l != nil {
			t.Errorf("Remove(%s) left the bridge", k)
		}
		if _, err := os.Stat(ConfPath(e.confDir, k)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Remove(%s) left the configuration: %v", k, err)
		}
		if a, err := e.b.Observe(ctx, k); a != nil || err != nil {
			t.Errorf("Observe(%s) after Remove = %+v, %v", k, a, err)
		}
	}
	if err := e.b.Remove(ctx, "ns9/never-existed"); err != nil {
		t.Errorf("Remove of nothing: %v", err)
	}
	if keys, err := e.b.List(ctx); err != nil || len(keys) != 0 {
		t.Errorf("List after Remove = %v, %v", keys, err)
	}
	// What was not ours is still there.
	if l := e.ns.link(t, "renamed0"); l == nil {
		t.Errorf("the bridge renamed0 was deleted")
	}
	if files := confFiles(t, e.confDir); !slices.Equal(files, []string{"10-other.conflist", "90-samplecrd-nwaaaaaaaaaaaaa.conflist"}) {
		t.Errorf("configuration directory after Remove: %v", files)
	}
}

func TestIPv6Network(t *testing.T) {
	e := newEnv(t)
	d := netbackend.Desired{
		Key:     "default/v6",
		Prefix:  netip.MustParsePrefix("fd00:99::/64"),
		Gateway: netip.MustParseAddr("fd00:99::1"),
	}
	bridge := netbackend.BridgeName(d.Key)
	e.ensure(d)

	gw := netip.MustParsePrefix("fd00:99::1/64")
	if got := e.ns.globalAddrs(t, bridge); !slices.Equal(got, []netip.Prefix{gw}) {
		t.Fatalf("addresses %v, want %v", got, gw)
	}
	l := e.ns.link(t, bridge)
	addrs, err := e.ns.nl.AddrList(l, netlink.FAMILY_V6)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if a.IP.Equal(net.ParseIP("fd00:99::1")) && a.Flags&unix.IFA_F_TENTATIVE != 0 {
			t.Errorf("gateway is tentative (flags %#x); it should be usable at once", a.Flags)
		}
	}
	conf := parseConf(t, mustRead(t, ConfPath(e.confDir, d.Key)))
	if r := conf.Bridge.IPAM.Ranges[0][0]; r != (rangeConf{Subnet: "fd00:99::/64", Gateway: "fd00:99::1"}) {
		t.Errorf("IPAM range %+v", r)
	}
	if len(conf.Bridge.IPAM.Routes) != 1 || conf.Bridge.IPAM.Routes[0].Dst != "::/0" {
		t.Errorf("IPAM routes %+v", conf.Bridge.IPAM.Routes)
	}

	// The kernel gives the bridge, now up, an IPv6 link-local address: not ours to remove, so
	// the resync still changes nothing.
	if changes := e.ensure(d); len(changes) != 0 {
		t.Fatalf("second Ensure changed %q", changes)
	}
	a, err := e.b.Observe(context.Background(), d.Key)
	if err != nil || a == nil || !slices.Equal(a.Addresses, []netip.Prefix{gw}) {
		t.Fatalf("Observe = %+v, %v", a, err)
	}

	// Moving the Network from IPv4 to IPv6 swaps the addresses.
	v4 := desired4(d.Key)
	changes := e.ensure(v4)
	if !hasChange(changes, "removed stale address fd00:99::1/64") || !hasChange(changes, "added address 10.99.0.1/24") {
		t.Errorf("changes from IPv6 to IPv4: %q", changes)
	}
	changes = e.ensure(d)
	if !hasChange(changes, "removed stale address 10.99.0.1/24") || !hasChange(changes, "added address fd00:99::1/64") {
		t.Errorf("changes from IPv4 to IPv6: %q", changes)
	}
}

func TestEnsureRejectsInvalidDesired(t *testing.T) {
	e := newEnv(t)
	for name, d := range map[string]netbackend.Desired{
		"empty key":        {Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1")},
		"gateway outside":  {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.1.1")},
		"family mismatch":  {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("fd00::1")},
		"MTU out of range": {Key: "a/b", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1"), MTU: 70000},
		"key too long":     {Key: "a/" + strings.Repeat("x", 300), Prefix: netip.MustParsePrefix("10.0.0.0/24"), Gateway: netip.MustParseAddr("10.0.0.1")},
	} {
		if _, _, err := e.b.Ensure(context.Background(), d); err == nil {
			t.Errorf("%s: Ensure succeeded", name)
		}
	}
	if keys, err := e.b.List(context.Background()); err != nil || len(keys) != 0 {
		t.Errorf("invalid desires left %v, %v", keys, err)
	}
}

func TestNewFailsOnMissingNamespace(t *testing.T) {
	if _, err := New(Config{NetNSPath: "/var/run/netns/does-not-exist-netbackend", CNIConfDir: t.TempDir()}); err == nil {
		t.Fatal("New with a missing namespace succeeded")
	}
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a configuration directory succeeded")
	}
}
