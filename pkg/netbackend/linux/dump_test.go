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
	"net/netip"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// The ports of a bridge come from a dump the kernel filters by master: with two bridges and
// their ports in the namespace, each bridge's dump holds its own ports (and the kernel sends
// nothing else), so Observe's cost does not grow with the namespace's other links.
func TestPortLinksAreTheBridgesOwn(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	a, b := desired4("default/a"), desired4("default/b")
	b.Prefix, b.Gateway = netip.MustParsePrefix("10.20.0.0/24"), netip.MustParseAddr("10.20.0.1")
	e.ensure(a)
	e.ensure(b)
	for _, p := range []struct{ port, key string }{{"pa1", a.Key}, {"pa2", a.Key}, {"pb1", b.Key}} {
		l := e.ns.addVeth(t, p.port, p.port+"peer", "")
		if err := e.ns.nl.LinkSetMaster(l, e.ns.link(t, netbackend.BridgeName(p.key))); err != nil {
			t.Fatal(err)
		}
	}
	e.b.mu.Lock()
	links, err := e.b.portLinks(e.ns.link(t, netbackend.BridgeName(a.Key)).Attrs().Index)
	e.b.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, l := range links {
		names = append(names, l.Attrs().Name)
	}
	slices.Sort(names)
	if strings.Join(names, ",") != "pa1,pa2" {
		t.Fatalf("the filtered dump of %s's bridge sent %v; want its ports pa1,pa2 and nothing else", a.Key, names)
	}
	for _, d := range []struct {
		key  string
		want string
	}{{a.Key, "pa1,pa2"}, {b.Key, "pb1"}} {
		got, err := e.b.Observe(context.Background(), d.key)
		if err != nil || strings.Join(got.Ports, ",") != d.want {
			t.Fatalf("Observe(%s) ports %v, %v; want %s", d.key, got, err, d.want)
		}
	}
}

// A link's addresses come from a dump the kernel filters by index: with two bridges, each
// bridge's dump holds its own gateway only.
func TestLinkAddrsAreTheLinksOwn(t *testing.T) {
	e := newEnv(t)
	e.ns.disableDAD(t)
	a, b := desired4("default/a"), desired4("default/b")
	b.Prefix, b.Gateway = netip.MustParsePrefix("10.20.0.0/24"), netip.MustParseAddr("10.20.0.1")
	e.ensure(a)
	e.ensure(b)
	for _, d := range []netbackend.Desired{a, b} {
		e.b.mu.Lock()
		got, err := e.b.linkAddrs(e.ns.link(t, netbackend.BridgeName(d.Key)).Attrs().Index, unix.AF_INET)
		e.b.mu.Unlock()
		if err != nil {
			t.Fatal(err)
		}
		if want := netip.PrefixFrom(d.Gateway, d.Prefix.Bits()); len(got) != 1 || got[0] != want {
			t.Fatalf("IPv4 addresses of %s's bridge: %v; want only %v", d.Key, got, want)
		}
	}
}
