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
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

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

// The IPv4 gateway check asks the FIB instead of dumping every address: it must still find an
// address on a link that is up or down, ignore the bridge's own and a local route of a whole
// prefix, and agree with the dump (addressHolder) on each.
func TestGatewayHolder(t *testing.T) {
	e := newEnv(t)
	gw := netip.MustParseAddr("10.98.0.1")
	check := func(what string, index int, want string) {
		t.Helper()
		got, err := e.b.gatewayHolder(gw, index)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		dumped, err := e.b.addressHolder(gw, index)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if got != want || dumped != want {
			t.Errorf("%s: holder %q (the dump says %q), want %q", what, got, dumped, want)
		}
	}
	check("nothing holds it, no route", 0, "")
	lo, err := e.ns.nl.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := e.ns.nl.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}
	anyIP := &netlink.Route{LinkIndex: lo.Attrs().Index, Table: unix.RT_TABLE_LOCAL, Type: unix.RTN_LOCAL,
		Scope: netlink.SCOPE_HOST, Dst: &net.IPNet{IP: net.IP{10, 98, 0, 0}, Mask: net.CIDRMask(24, 32)}}
	if err := e.ns.nl.RouteAdd(anyIP); err != nil {
		t.Fatal(err)
	}
	check("a local route of the whole prefix", 0, "")
	held := e.ns.addVeth(t, "held0", "held1", "10.98.0.1/24")
	check("on a link that is down", 0, "held0")
	check("on the link asked about", held.Attrs().Index, "")
	if err := e.ns.nl.LinkSetUp(held); err != nil {
		t.Fatal(err)
	}
	check("on a link that is up", 0, "held0")
	if err := e.ns.nl.LinkDel(held); err != nil {
		t.Fatal(err)
	}
	check("after the link is gone", 0, "")
}
