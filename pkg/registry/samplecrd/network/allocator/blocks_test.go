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

package allocator

import (
	"context"
	"errors"
	"net/netip"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestNetworkValueUnchanged: the new record fields are omitted from a Network's own allocation,
// so its value is byte for byte what older versions wrote and compare.
func TestNetworkValueUnchanged(t *testing.T) {
	al := Allocation{Scope: "_cluster", Prefix: netip.MustParsePrefix("10.0.0.0/24"), Owner: Owner{Namespace: "a", Name: "b", UID: "c"}}
	if got, want := Value(al), `{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c"}`; got != want {
		t.Fatalf("Value = %s, want %s", got, want)
	}
	al.Node, al.Role = "n1", RoleBlock
	if got, want := Value(al), `{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c","node":"n1","role":"block"}`; got != want {
		t.Fatalf("Value of a block = %s, want %s", got, want)
	}
}

// TestSpanWithinStopsAtTheNetwork: a block's guards stop at its Network's prefix, so that a /128
// in a /64 fits etcd's 128 operations per transaction.
func TestSpanWithinStopsAtTheNetwork(t *testing.T) {
	a := New(nil, "/r/blocks")
	block := netip.MustParsePrefix("fd00::ffff:ffff:ffff:ffff/128")
	if got := len(a.spanWithin("uid", block, netip.MustParsePrefix("fd00::/64")).containers); got != 64 {
		t.Errorf("/128 within a /64: %d container keys, want 64", got)
	}
	if got := len(a.spanOf("uid", block).containers); got <= 64 {
		t.Errorf("/128 without a bound: %d container keys, want more than 64", got)
	}
	if got := len(a.spanWithin("uid", netip.MustParsePrefix("10.0.3.192/26"), netip.MustParsePrefix("10.0.0.0/22")).containers); got != 4 {
		t.Errorf("last /26 of a /22: %d container keys, want 4", got)
	}
}

// TestBlocksAgainstEtcd writes a gateway key and blocks in one scope as the claims do: picks
// skip the gateway, a block over the gateway is an overlap naming its role, and the records
// carry node and role.
func TestBlocksAgainstEtcd(t *testing.T) {
	ctx := context.Background()
	a := New(startEtcd(t), "/r/blocks")
	prefix := netip.MustParsePrefix("10.9.0.0/24")
	owner := Owner{Namespace: "ns", Name: "net", UID: "uid"}
	gw := Allocation{Scope: "uid", Prefix: netip.MustParsePrefix("10.9.0.1/32"), Owner: owner, Role: RoleGateway, Within: prefix}
	if _, err := a.Write(ctx, gw, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	first, err := a.PickBlock(ctx, "uid", prefix, 28)
	if err != nil || !first.IsValid() || first.Contains(gw.Prefix.Addr()) {
		t.Fatalf("PickBlock = %v, %v: must not contain the gateway", first, err)
	}
	over := Allocation{Scope: "uid", Prefix: netip.MustParsePrefix("10.9.0.0/28"), Owner: owner, Node: "n1", Role: RoleBlock, Within: prefix}
	_, err = a.Write(ctx, over, nil, nil, nil)
	var overlap *OverlapError
	if !errors.As(err, &overlap) || overlap.Other.Role != RoleGateway || overlap.Other.Prefix != gw.Prefix {
		t.Fatalf("block over the gateway: %v", err)
	}
	ok := over
	ok.Prefix = netip.MustParsePrefix("10.9.0.16/28")
	if _, err := a.Write(ctx, ok, nil, nil, nil); err != nil {
		t.Fatal(err)
	}
	stored, _, err := a.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	roles := map[string]string{}
	for _, s := range stored {
		roles[s.Prefix.String()] = s.Role + "/" + s.Node
	}
	if roles["10.9.0.1/32"] != "gateway/" || roles["10.9.0.16/28"] != "block/n1" || len(roles) != 2 {
		t.Fatalf("stored: %v", roles)
	}
	// Exhaust the /24 in /28s: 16 minus the one holding the gateway, minus the one taken.
	for range 14 {
		p, err := a.PickBlock(ctx, "uid", prefix, 28)
		if err != nil {
			t.Fatal(err)
		}
		b := ok
		b.Prefix = p
		if _, err := a.Write(ctx, b, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.PickBlock(ctx, "uid", prefix, 28); !errors.As(err, new(*ExhaustedError)) {
		t.Fatalf("PickBlock of a full prefix: %v", err)
	}
	if p, err := a.PickBlock(ctx, "uid", prefix, 29); err != nil || p != netip.MustParsePrefix("10.9.0.8/29") {
		t.Fatalf("PickBlock /29 = %v, %v; want the free half beside the gateway", p, err)
	}
}

// TestBlocksWithoutGatewayKey: with no gateway key (GatewayKeysNone) the claims' picks avoid
// the gateway they are given, and Guard checks a gateway against the blocks, commits the ops
// given with it and stores no key for it.
func TestBlocksWithoutGatewayKey(t *testing.T) {
	ctx := context.Background()
	client := startEtcd(t)
	a := New(client, "/r/blocks")
	prefix := netip.MustParsePrefix("10.9.0.0/24")
	owner := Owner{Namespace: "ns", Name: "net", UID: "uid"}
	gwAddr := netip.MustParseAddr("10.9.0.1")
	gw := Allocation{Scope: "uid", Prefix: netip.PrefixFrom(gwAddr, 32), Owner: owner, Role: RoleGateway, Within: prefix}
	if _, err := a.Guard(ctx, gw, nil, nil, nil, clientv3.OpPut("/r/other", "x")); err != nil {
		t.Fatal(err)
	}
	if resp, err := client.Get(ctx, "/r/", clientv3.WithPrefix()); err != nil || len(resp.Kvs) != 1 || string(resp.Kvs[0].Key) != "/r/other" {
		t.Fatalf("after Guard: %v, %v; want only the op given with it", resp, err)
	}
	block := Allocation{Scope: "uid", Owner: owner, Node: "n1", Role: RoleBlock, Within: prefix}
	for range 15 { // 16 /28s, less the one with the gateway
		p, err := a.PickBlock(ctx, "uid", prefix, 28, gwAddr)
		if err != nil {
			t.Fatal(err)
		}
		if p.Contains(gwAddr) {
			t.Fatalf("PickBlock = %v: contains the gateway %s", p, gwAddr)
		}
		block.Prefix = p
		if _, err := a.Write(ctx, block, nil, nil, nil); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := a.PickBlock(ctx, "uid", prefix, 28, gwAddr); !errors.As(err, new(*ExhaustedError)) {
		t.Fatalf("PickBlock of a full prefix = %v, %v", p, err)
	}
	if p, err := a.PickBlock(ctx, "uid", prefix, 29, gwAddr); err != nil || p != netip.MustParsePrefix("10.9.0.8/29") {
		t.Fatalf("PickBlock /29 = %v, %v; want the free half beside the gateway", p, err)
	}
	moved := gw
	moved.Prefix = netip.MustParsePrefix("10.9.0.70/32")
	_, err := a.Guard(ctx, moved, nil, nil, nil, clientv3.OpPut("/r/other", "y"))
	var overlap *OverlapError
	if !errors.As(err, &overlap) || overlap.Other.Role != RoleBlock || !overlap.Other.Prefix.Contains(moved.Prefix.Addr()) {
		t.Fatalf("Guard of a gateway inside a block: %v", err)
	}
	if resp, err := client.Get(ctx, "/r/other"); err != nil || string(resp.Kvs[0].Value) != "x" {
		t.Fatalf("the op given with a failed Guard was committed: %v, %v", resp, err)
	}
}
