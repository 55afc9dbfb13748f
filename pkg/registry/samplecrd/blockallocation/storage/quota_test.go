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

package storage

import (
	"context"
	"net/netip"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/authentication/user"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func TestCheckQuota(t *testing.T) {
	prefix, gateway := netip.MustParsePrefix("10.0.0.0/22"), netip.MustParseAddr("10.0.0.1")
	agent := &user.DefaultInfo{Name: nodeidentity.DefaultAgentServiceAccount, Extra: map[string][]string{nodeidentity.NodeNameExtra: {"node1"}}}
	admin := &user.DefaultInfo{Name: "admin", Groups: []string{"system:masters"}}
	blocks := func(cidrs ...string) *samplecrd.BlockAllocation {
		a := &samplecrd.BlockAllocation{NodeName: "node1"}
		for _, c := range cidrs {
			a.Blocks = append(a.Blocks, samplecrd.Block{CIDR: c})
		}
		return a
	}
	leases := func(n int32) *int32 { return &n }
	net := func(entries ...samplecrd.NetworkNodeStatus) *samplecrd.Network {
		return &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "web", Namespace: "default"}, Status: samplecrd.NetworkStatus{Nodes: entries}}
	}
	q := &Quota{Identity: nodeidentity.Identity{Agents: nodeidentity.DefaultAgents}, MaxFree: 128}
	cases := []struct {
		name  string
		quota *Quota
		user  user.Info
		n     *samplecrd.Network
		held  *samplecrd.BlockAllocation
		want  string // "" allowed
	}{
		{name: "first block", quota: q, user: agent, n: net(), held: blocks()},
		{name: "one block, no entry: 63 free", quota: q, user: agent, n: net(), held: blocks("10.0.0.0/26")},
		{name: "two blocks, 127 free", quota: q, user: agent, n: net(), held: blocks("10.0.0.0/26", "10.0.3.192/26")},
		{name: "three blocks, 190 free, no entry", quota: q, user: agent, n: net(), held: blocks("10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26"),
			want: "node node1 may not claim another block of network default/web: its 3 blocks hold 190 free addresses (190 usable, no status.nodes entry), and a node claims only below 128 free"},
		{name: "three blocks, 70 leased", quota: q, user: agent, n: net(samplecrd.NetworkNodeStatus{NodeName: "node1", Leases: leases(70), Attachments: 60}),
			held: blocks("10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26")},
		{name: "three blocks, 63 attached, leases unknown", quota: q, user: agent, n: net(samplecrd.NetworkNodeStatus{NodeName: "node1", Attachments: 63}),
			held: blocks("10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26")},
		{name: "three blocks, 60 leased", quota: q, user: agent, n: net(samplecrd.NetworkNodeStatus{NodeName: "node1", Leases: leases(60), Attachments: 2},
			samplecrd.NetworkNodeStatus{NodeName: "node2", Leases: leases(500)}),
			held: blocks("10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26"), want: "hold 130 free addresses (190 usable, 60 leases, 2 attachments in its status.nodes entry)"},
		{name: "three blocks, 62 attached: 128 free", quota: q, user: agent, n: net(samplecrd.NetworkNodeStatus{NodeName: "node1", Attachments: 62}),
			held: blocks("10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26"), want: "hold 128 free addresses (190 usable, 62 attachments in its status.nodes entry)"},
		{name: "an admin's claim is not bounded", quota: q, user: admin, n: net(), held: blocks("10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26")},
		{name: "quota off", quota: &Quota{Identity: q.Identity}, user: agent, n: net(), held: blocks("10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26")},
		{name: "no quota", user: agent, n: net(), held: blocks("10.0.0.0/26", "10.0.0.64/26", "10.0.0.128/26")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := genericapirequest.WithUser(context.Background(), tc.user)
			err := tc.quota.checkQuota(ctx, tc.n, prefix, gateway, tc.held)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.want != "" && (!apierrors.IsForbidden(err) || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("got %v, want 403 with %q", err, tc.want)
			}
		})
	}
}

func TestUsableIn(t *testing.T) {
	prefix, gateway := netip.MustParsePrefix("10.0.0.0/22"), netip.MustParseAddr("10.0.0.1")
	for block, want := range map[string]int64{"10.0.0.0/26": 62, "10.0.0.64/26": 64, "10.0.3.192/26": 63, "10.0.0.0/22": 1021, "10.0.0.1/32": 0} {
		if got := usableIn(netip.MustParsePrefix(block), prefix, gateway); got != want {
			t.Errorf("usableIn(%s) = %d, want %d", block, got, want)
		}
	}
	if got := usableIn(netip.MustParsePrefix("fd00::/64"), netip.MustParsePrefix("fd00::/48"), netip.MustParseAddr("fd00::1")); got != 1<<40 {
		t.Errorf("a /64 of IPv6: %d", got)
	}
}
