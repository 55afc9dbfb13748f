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
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

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
	// The bridge is created afresh (no port dump): its ports come from what was remembered.
	changes, outcome, err := e.b.Ensure(context.Background(), d)
	if err != nil {
		t.Fatalf("repair: %v", err)
	}
	if strings.Join(outcome.Ports, ",") != "pod1,pod2" {
		t.Errorf("repair outcome %+v, want ports pod1,pod2", outcome)
	}
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
	_, _, err = e.b.Ensure(context.Background(), d)
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
