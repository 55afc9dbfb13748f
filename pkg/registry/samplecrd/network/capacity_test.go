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

package network

import (
	"context"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

type capNode struct {
	blocks []string
	leases *int32
	reason string
}

func capNetwork(cidr, gateway string, nodes ...capNode) *samplecrd.Network {
	n := &samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "net", Namespace: "default", Generation: 1},
		Spec:       samplecrd.NetworkSpec{CIDR: cidr, Gateway: gateway},
	}
	for i, node := range nodes {
		n.Status.Nodes = append(n.Status.Nodes, samplecrd.NetworkNodeStatus{
			NodeName: string(rune('a' + i)), Blocks: node.blocks, Leases: node.leases, Reason: node.reason,
			ObservedGeneration: 1, Ready: true,
		})
	}
	return n
}

func TestDeriveCapacity(t *testing.T) {
	tests := []struct {
		name  string
		n     *samplecrd.Network
		want  *samplecrd.NetworkCapacity
		nodes []*samplecrd.NodeCapacity
	}{
		{
			name: "IPv4 /24 without nodes: all 253 available",
			n:    capNetwork("10.0.0.0/24", "10.0.0.1"),
			want: &samplecrd.NetworkCapacity{Total: "253", Allocated: "0", Used: "0", Available: "253"},
		},
		{
			name: "IPv4 /24, two nodes; the first block holds the network and gateway addresses, the last the broadcast",
			n: capNetwork("10.0.0.0/24", "10.0.0.1",
				capNode{blocks: []string{"10.0.0.0/26"}, leases: ptr.To[int32](5)},
				capNode{blocks: []string{"10.0.0.192/26", "10.0.0.64/27"}, leases: ptr.To[int32](0)}),
			// 10.0.0.0/26 without network and gateway (62), 10.0.0.192/26 without broadcast (63), 10.0.0.64/27 (32).
			want:  &samplecrd.NetworkCapacity{Total: "253", Allocated: "157", Used: "5", Available: "248"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "62", Used: "5"}, {Allocated: "95", Used: "0"}},
		},
		{
			name: "a block two nodes report (a move in flight) is counted once in the Network's allocated",
			n: capNetwork("10.0.0.0/24", "10.0.0.254",
				capNode{blocks: []string{"10.0.0.64/26"}, leases: ptr.To[int32](1)},
				capNode{blocks: []string{"10.0.0.64/26", "10.0.0.64/27"}, leases: ptr.To[int32](2)}),
			want:  &samplecrd.NetworkCapacity{Total: "253", Allocated: "64", Used: "3", Available: "250"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "64", Used: "1"}, {Allocated: "64", Used: "2"}},
		},
		{
			name: "an entry without leases makes used and available unknown, not a lower bound",
			n: capNetwork("10.0.0.0/24", "10.0.0.1",
				capNode{blocks: []string{"10.0.0.128/26"}, leases: ptr.To[int32](7)},
				capNode{blocks: []string{"10.0.0.64/26"}}),
			want:  &samplecrd.NetworkCapacity{Total: "253", Allocated: "128", NodesWithoutLeases: 1},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "64", Used: "7"}, {Allocated: "64"}},
		},
		{
			name: "an entry whose controller cannot run realises nothing: zero, not unknown",
			n: capNetwork("10.0.0.0/24", "10.0.0.1",
				capNode{blocks: []string{"10.0.0.128/26"}, leases: ptr.To[int32](7)},
				capNode{reason: samplecrd.ReasonControllerNeedsNetAdmin}),
			want:  &samplecrd.NetworkCapacity{Total: "253", Allocated: "64", Used: "7", Available: "246"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "64", Used: "7"}, {Allocated: "0"}},
		},
		{
			name: "blocks outside the prefix, of the other family or unparsable count nothing",
			n: capNetwork("10.0.0.0/24", "10.0.0.1",
				capNode{blocks: []string{"10.0.1.0/26", "fd00::/120", "junk", "10.0.0.128/25"}, leases: ptr.To[int32](1)}),
			want:  &samplecrd.NetworkCapacity{Total: "253", Allocated: "127", Used: "1", Available: "252"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "127", Used: "1"}},
		},
		{
			name:  "a block wider than the prefix is clipped to it",
			n:     capNetwork("10.0.0.0/28", "10.0.0.1", capNode{blocks: []string{"10.0.0.0/24"}, leases: ptr.To[int32](2)}),
			want:  &samplecrd.NetworkCapacity{Total: "13", Allocated: "13", Used: "2", Available: "11"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "13", Used: "2"}},
		},
		{
			name: "IPv4 /30: one address besides the gateway",
			n:    capNetwork("10.0.0.0/30", "10.0.0.1"),
			want: &samplecrd.NetworkCapacity{Total: "1", Allocated: "0", Used: "0", Available: "1"},
		},
		{
			name:  "IPv4 /31 (validation refuses it): network and broadcast leave nothing, no negative count",
			n:     capNetwork("10.0.0.0/31", "10.0.0.1", capNode{blocks: []string{"10.0.0.0/31"}, leases: ptr.To[int32](0)}),
			want:  &samplecrd.NetworkCapacity{Total: "0", Allocated: "0", Used: "0", Available: "0"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "0", Used: "0"}},
		},
		{
			name: "IPv4 /32 (validation refuses it): the one address is the network address",
			n:    capNetwork("10.0.0.7/32", "10.0.0.7"),
			want: &samplecrd.NetworkCapacity{Total: "0", Allocated: "0", Used: "0", Available: "0"},
		},
		{
			name: "IPv6 /64: 2^64 - 2 (network and gateway; no broadcast), beyond int64",
			n: capNetwork("fd00:1::/64", "fd00:1::1",
				capNode{blocks: []string{"fd00:1::/120"}, leases: ptr.To[int32](10)},
				capNode{blocks: []string{"fd00:1::ffff:ffff:ffff:ff00/120"}, leases: ptr.To[int32](3)}),
			want:  &samplecrd.NetworkCapacity{Total: "18446744073709551614", Allocated: "510", Used: "13", Available: "18446744073709551601"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "254", Used: "10"}, {Allocated: "256", Used: "3"}},
		},
		{
			name:  "IPv6 /120: 254, the last address usable",
			n:     capNetwork("fd00:2::/120", "fd00:2::ff", capNode{blocks: []string{"fd00:2::80/121"}, leases: ptr.To[int32](1)}),
			want:  &samplecrd.NetworkCapacity{Total: "254", Allocated: "127", Used: "1", Available: "253"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "127", Used: "1"}},
		},
		{
			name: "IPv6 /8 (a server pool's size): exact past 2^64",
			n:    capNetwork("fd00::/8", "fd00::1"),
			want: &samplecrd.NetworkCapacity{Total: "1329227995784915872903807060280344574", Allocated: "0", Used: "0", Available: "1329227995784915872903807060280344574"},
		},
		{
			name:  "used above total (a bad report) gives available 0, never negative",
			n:     capNetwork("10.0.0.0/30", "10.0.0.1", capNode{leases: ptr.To[int32](4)}),
			want:  &samplecrd.NetworkCapacity{Total: "1", Allocated: "0", Used: "4", Available: "0"},
			nodes: []*samplecrd.NodeCapacity{{Allocated: "0", Used: "4"}},
		},
		{
			name: "no prefix yet: no capacity",
			n:    capNetwork("", ""),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			// A client-sent capacity is replaced.
			tc.n.Status.Capacity = &samplecrd.NetworkCapacity{Total: "1", Used: "999"}
			for i := range tc.n.Status.Nodes {
				tc.n.Status.Nodes[i].Capacity = &samplecrd.NodeCapacity{Allocated: "x"}
			}
			deriveCapacity(tc.n)
			if !reflect.DeepEqual(tc.n.Status.Capacity, tc.want) {
				t.Errorf("capacity = %+v, want %+v", tc.n.Status.Capacity, tc.want)
			}
			for i, node := range tc.n.Status.Nodes {
				var want *samplecrd.NodeCapacity
				if tc.want != nil {
					want = &samplecrd.NodeCapacity{Allocated: "0"}
					if i < len(tc.nodes) {
						want = tc.nodes[i]
					}
				}
				if !reflect.DeepEqual(node.Capacity, want) {
					t.Errorf("node %s capacity = %+v, want %+v", node.NodeName, node.Capacity, want)
				}
			}
		})
	}
}

// TestStatusWriteDerivesCapacity: the status strategy replaces a client's capacity on every write.
func TestStatusWriteDerivesCapacity(t *testing.T) {
	old := capNetwork("10.0.0.0/24", "10.0.0.1")
	old.ResourceVersion = "5"
	n := capNetwork("10.0.0.0/24", "10.0.0.1", capNode{blocks: []string{"10.0.0.64/26"}, leases: ptr.To[int32](3)})
	n.ResourceVersion = "5"
	n.Status.Capacity = &samplecrd.NetworkCapacity{Total: "1000", Used: "0", Available: "1000"}
	s := NewStatusStrategy(nil)
	s.PrepareForUpdate(context.Background(), n, old)
	if errs := s.ValidateUpdate(context.Background(), n, old); len(errs) != 0 {
		t.Fatalf("ValidateUpdate: %v", errs)
	}
	s.Canonicalize(n)
	want := &samplecrd.NetworkCapacity{Total: "253", Allocated: "64", Used: "3", Available: "250"}
	if !reflect.DeepEqual(n.Status.Capacity, want) {
		t.Errorf("capacity = %+v, want %+v", n.Status.Capacity, want)
	}
	// A create derives it too: a new Network shows its total at once.
	created := capNetwork("fd00:1::/64", "fd00:1::1")
	NewStrategy(nil).PrepareForCreate(context.Background(), created)
	NewStrategy(nil).Canonicalize(created)
	if c := created.Status.Capacity; c == nil || c.Available != "18446744073709551614" || c.Used != "0" {
		t.Errorf("capacity after create = %+v, want available 2^64-2 and used 0", c)
	}
}
