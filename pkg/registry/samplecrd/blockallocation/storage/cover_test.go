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
	"net/netip"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

func blockOf(cidr, node string) allocator.Allocation {
	role := allocator.RoleBlock
	if node == "" {
		role = allocator.RoleGateway
	}
	return allocator.Allocation{Prefix: netip.MustParsePrefix(cidr), Node: node, Role: role}
}

func TestCoverPick(t *testing.T) {
	// A /24 (preferred /28) whose gateway is 10.66.0.1, n2 holding 10.66.0.32/28 and 10.66.0.64/30.
	taken := []allocator.Allocation{blockOf("10.66.0.1/32", ""), blockOf("10.66.0.32/28", "n2"), blockOf("10.66.0.64/30", "n2")}
	for _, tc := range []struct {
		lease, want, conflict string
	}{
		// The /28 around .2 holds the gateway: the largest aligned block beside it is .2/31.
		{"10.66.0.2", "10.66.0.2/31", ""},
		{"10.66.0.7", "10.66.0.4/30", ""},
		{"10.66.0.9", "10.66.0.8/29", ""},
		{"10.66.0.20", "10.66.0.16/28", ""},
		// Inside n2's blocks: a conflict naming the block, never a block.
		{"10.66.0.40", "", "10.66.0.32/28"},
		{"10.66.0.66", "", "10.66.0.64/30"},
		// The /28 and /29 around .70 hold n2's /30: .68/30 is free.
		{"10.66.0.70", "10.66.0.68/30", ""},
		// The gateway itself is never covered.
		{"10.66.0.1", "", "10.66.0.1/32"},
	} {
		block, other := coverPick(netip.MustParseAddr(tc.lease), 28, taken)
		switch {
		case tc.conflict != "" && (other == nil || other.Prefix.String() != tc.conflict):
			t.Errorf("lease %s: block %v, conflict %v, want a conflict with %s", tc.lease, block, other, tc.conflict)
		case tc.conflict == "" && (other != nil || block.String() != tc.want):
			t.Errorf("lease %s: block %v, conflict %v, want %s", tc.lease, block, other, tc.want)
		}
	}
	// Down to the single address: every neighbour taken.
	tight := []allocator.Allocation{blockOf("10.66.0.4/32", "n2"), blockOf("10.66.0.1/32", "")}
	if block, other := coverPick(netip.MustParseAddr("10.66.0.5"), 28, tight); other != nil || block.String() != "10.66.0.5/32" {
		t.Errorf("lease beside n2's /32: %v %v, want 10.66.0.5/32", block, other)
	}
	// IPv6: the preferred /124 when free.
	if block, other := coverPick(netip.MustParseAddr("fd00::23"), 124, nil); other != nil || block.String() != "fd00::20/124" {
		t.Errorf("IPv6 lease: %v %v, want fd00::20/124", block, other)
	}
}

func TestWaitingForUpgrade(t *testing.T) {
	n := &samplecrd.Network{Status: samplecrd.NetworkStatus{Nodes: []samplecrd.NetworkNodeStatus{
		{NodeName: "n1", IPAMMode: samplecrd.IPAMModeBlocks, Ready: true},
		{NodeName: "n2", Ready: true},                          // an agent from before blocks
		{NodeName: "n3", IPAMMode: samplecrd.IPAMModeLegacy},   // a new agent whose leases are not covered yet
		{NodeName: "n4", Reason: "NodeNotReady", IPAMMode: ""}, // a dead old node
		{NodeName: "n5", IPAMMode: samplecrd.IPAMModeBlocks, Ready: true},
	}}}
	legacy := legacyNodes(n, "n5")
	if len(legacy) != 3 || legacy[0].NodeName != "n2" || legacy[1].NodeName != "n3" || legacy[2].NodeName != "n4" {
		t.Fatalf("legacy nodes: %+v, want n2, n3, n4", legacy)
	}
	// The claiming node's own entry never holds it back (it is the one upgrading).
	if got := legacyNodes(n, "n2"); len(got) != 2 {
		t.Errorf("legacy nodes for n2's own claim: %+v, want n3 and n4", got)
	}
	err := waitingForUpgrade("web", netip.MustParsePrefix("10.66.0.0/24"), "n5", legacy)
	status, ok := err.(apierrors.APIStatus)
	if !ok || status.Status().Code != 409 || status.Status().Reason != ReasonWaitingForUpgrade {
		t.Fatalf("answer %v, want a 409 WaitingForUpgrade", err)
	}
	for _, want := range []string{"n2 (no ipamMode: an agent from before blocks)", "n3 (ipamMode Legacy)", "n4 (no ipamMode: an agent from before blocks, NodeNotReady)", "10.66.0.0/24"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("message %q lacks %q", err.Error(), want)
		}
	}
	n.Status.Nodes = n.Status.Nodes[:1]
	if got := legacyNodes(n, "n5"); len(got) != 0 {
		t.Errorf("once the old entries are gone: %+v, want none", got)
	}
}

func TestValidateClaimCover(t *testing.T) {
	for _, tc := range []struct {
		cover []string
		want  string
	}{
		{[]string{"10.66.0.2", "fd00::1"}, ""},
		{[]string{"10.66.0.2", "10.66.0.300"}, "cover[1]: Invalid value"},
		{[]string{"fe80::1%eth0"}, "cover[0]: Invalid value"},
		{[]string{"::ffff:10.66.0.2"}, "cover[0]: Invalid value"},
		{[]string{"fd00:0::1"}, "cover[0]: Invalid value"},
		{make([]string, maxCover+1), "cover: Too many"},
	} {
		errs := validateClaim(&samplecrd.BlockClaim{NodeName: "n1", Cover: tc.cover}, "web")
		got := errs.ToAggregate()
		switch {
		case tc.want == "" && got != nil:
			t.Errorf("cover %v: %v, want valid", tc.cover, got)
		case tc.want != "" && (got == nil || !strings.Contains(got.Error(), tc.want)):
			t.Errorf("cover %.40v: %v, want %q", tc.cover, got, tc.want)
		}
	}
}
