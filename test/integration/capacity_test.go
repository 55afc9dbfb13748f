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
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"reflect"
	"slices"
	"strconv"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// usableIn counts, address by address, the addresses of an IPv4 prefix inside any of blocks that
// are neither its network, broadcast nor gateway address: a second way to the server's count.
func usableIn(t *testing.T, cidr, gateway string, blocks []string) int {
	t.Helper()
	prefix, gw := netip.MustParsePrefix(cidr), netip.MustParseAddr(gateway)
	var parsed []netip.Prefix
	for _, b := range blocks {
		parsed = append(parsed, netip.MustParsePrefix(b))
	}
	count := 0
	first, last := prefix.Addr(), prefix.Addr()
	for a := prefix.Addr(); prefix.Contains(a); a = a.Next() {
		last = a
	}
	for a := first; prefix.Contains(a); a = a.Next() {
		if a == first || a == last || a == gw {
			continue
		}
		for _, p := range parsed {
			if p.Contains(a) {
				count++
				break
			}
		}
	}
	return count
}

// TestCapacityDerivedFromEntries writes node entries with blocks and leases through networks/status
// (PUT, merge patch, server-side apply) with made-up capacities, and reads back the capacity the
// server derives: the client's values never stay.
func TestCapacityDerivedFromEntries(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	created, err := networks.Create(ctx, newNetwork("cap", "10.24.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := &v1.NetworkCapacity{Total: "253", Allocated: "0", Used: "0", Available: "253"}
	if !reflect.DeepEqual(created.Status.Capacity, want) {
		t.Fatalf("capacity of a new /24 = %+v, want %+v", created.Status.Capacity, want)
	}

	claim := func(node string, count int) []string {
		var b *v1.BlockAllocation
		for range count {
			if b, err = networks.ClaimBlocks(ctx, "cap", &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for _, blk := range b.Blocks {
			out = append(out, blk.CIDR)
		}
		return out
	}
	n1Blocks, n2Blocks := claim("n1", 1), claim("n2", 2)
	gw := created.Spec.Gateway
	n1Alloc, n2Alloc := usableIn(t, "10.24.0.0/24", gw, n1Blocks), usableIn(t, "10.24.0.0/24", gw, n2Blocks)
	allAlloc := usableIn(t, "10.24.0.0/24", gw, append(slices.Clone(n1Blocks), n2Blocks...))
	t.Logf("gateway %s, n1 blocks %v (%d usable), n2 blocks %v (%d usable)", gw, n1Blocks, n1Alloc, n2Blocks, n2Alloc)

	entry := func(node string, blocks []string, leases int32) v1.NetworkNodeStatus {
		return v1.NetworkNodeStatus{NodeName: node, Ready: true, ObservedGeneration: 1, Blocks: blocks,
			IPAMMode: "Blocks", Leases: ptr.To(leases),
			Capacity: &v1.NodeCapacity{Allocated: "1000000", Used: "not a number"}}
	}
	check := func(step string, want *v1.NetworkCapacity, nodes map[string]*v1.NodeCapacity) *v1.Network {
		t.Helper()
		got, err := networks.Get(ctx, "cap", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got.Status.Capacity, want) {
			t.Errorf("%s: capacity = %+v, want %+v", step, got.Status.Capacity, want)
		}
		for _, e := range got.Status.Nodes {
			if w, ok := nodes[e.NodeName]; ok && !reflect.DeepEqual(e.Capacity, w) {
				t.Errorf("%s: node %s capacity = %+v, want %+v", step, e.NodeName, e.Capacity, w)
			}
		}
		return got
	}
	itoa := strconv.Itoa

	// PUT to networks/status, with a capacity the client made up.
	current, err := networks.Get(ctx, "cap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	current.Status.Nodes = []v1.NetworkNodeStatus{entry("n1", n1Blocks, 5), entry("n2", n2Blocks, 2)}
	current.Status.Capacity = &v1.NetworkCapacity{Total: "1", Allocated: "1", Used: "999", Available: "0"}
	if _, err := networks.UpdateStatus(ctx, current, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status PUT: %v", err)
	}
	check("PUT", &v1.NetworkCapacity{Total: "253", Allocated: itoa(allAlloc), Used: "7", Available: "246"},
		map[string]*v1.NodeCapacity{"n1": {Allocated: itoa(n1Alloc), Used: "5"}, "n2": {Allocated: itoa(n2Alloc), Used: "2"}})

	// The columns kubectl prints: USED and AVAILABLE, TOTAL and ALLOCATED under -o wide.
	resp := doRaw(t, httpClient(t, s), http.MethodGet, fmt.Sprintf("%s/apis/samplecrd.k8s.io/v1/namespaces/%s/networks/cap", s.URL, ns), "",
		"application/json;as=Table;v=v1;g=meta.k8s.io", nil)
	var table metav1.Table
	if err := json.Unmarshal(resp.Body, &table); resp.Code != http.StatusOK || err != nil || len(table.Rows) != 1 {
		t.Fatalf("table: %d %s %v", resp.Code, resp.Body, err)
	}
	cells := map[string]any{}
	for i, col := range table.ColumnDefinitions {
		cells[col.Name] = table.Rows[0].Cells[i]
	}
	if cells["Used"] != "7" || cells["Available"] != "246" || cells["Total"] != "253" || cells["Allocated"] != itoa(allAlloc) {
		t.Errorf("table cells %v", cells)
	}

	// A merge patch that only sets the capacity changes nothing.
	patch := []byte(`{"status":{"capacity":{"total":"5","available":"5"}}}`)
	if _, err := networks.Patch(ctx, "cap", types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("status merge patch: %v", err)
	}
	check("merge patch", &v1.NetworkCapacity{Total: "253", Allocated: itoa(allAlloc), Used: "7", Available: "246"}, nil)

	// A node's server-side apply that changes its leases moves used and available. It forces, as
	// agents do: the PUT above made integration.test an owner of n2's fields.
	apply, _ := json.Marshal(map[string]any{"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
		"metadata": map[string]any{"name": "cap"},
		"status": map[string]any{"nodes": []any{map[string]any{"nodeName": "n2", "ready": true, "observedGeneration": 1,
			"blocks": n2Blocks, "ipamMode": "Blocks", "leases": 40, "capacity": map[string]any{"allocated": "0"}}}}})
	if _, err := networks.Patch(ctx, "cap", types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "network-segment/n2", Force: ptr.To(true)}, "status"); err != nil {
		t.Fatalf("status apply: %v", err)
	}
	check("apply", &v1.NetworkCapacity{Total: "253", Allocated: itoa(allAlloc), Used: "45", Available: "208"},
		map[string]*v1.NodeCapacity{"n1": {Allocated: itoa(n1Alloc), Used: "5"}, "n2": {Allocated: itoa(n2Alloc), Used: "40"}})

	// A third node that reports no leases: used and available become unknown, not a lower bound.
	apply, _ = json.Marshal(map[string]any{"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network",
		"metadata": map[string]any{"name": "cap"},
		"status":   map[string]any{"nodes": []any{map[string]any{"nodeName": "n3", "ready": true, "observedGeneration": 1}}}})
	if _, err := networks.Patch(ctx, "cap", types.ApplyPatchType, apply, metav1.PatchOptions{FieldManager: "network-segment/n3"}, "status"); err != nil {
		t.Fatalf("status apply n3: %v", err)
	}
	check("entry without leases", &v1.NetworkCapacity{Total: "253", Allocated: itoa(allAlloc), NodesWithoutLeases: 1},
		map[string]*v1.NodeCapacity{"n3": {Allocated: "0"}})

	// v1beta1 shows the same capacity under the same names.
	beta, err := dynamicClient(t, s).Resource(v1beta1GVR).Namespace(ns).Get(ctx, "cap", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	betaCap, _, _ := unstructured.NestedMap(beta.Object, "status", "capacity")
	wantBeta := map[string]any{"total": "253", "allocated": itoa(allAlloc), "nodesWithoutLeases": int64(1)}
	if !reflect.DeepEqual(betaCap, wantBeta) {
		t.Errorf("v1beta1 status.capacity = %v, want %v", betaCap, wantBeta)
	}

	// An IPv6 /64: 2^64 - 2 usable addresses, beyond an int64, exact.
	v6, err := networks.Create(ctx, newNetwork("cap6", "fd00:24::/64", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want = &v1.NetworkCapacity{Total: "18446744073709551614", Allocated: "0", Used: "0", Available: "18446744073709551614"}
	if !reflect.DeepEqual(v6.Status.Capacity, want) {
		t.Errorf("capacity of a /64 = %+v, want %+v", v6.Status.Capacity, want)
	}
}
