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

package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// wantErr describes one expected error: its type, its exact field path, and a substring of its
// detail ("" to not check the detail).
type wantErr struct {
	typ    field.ErrorType
	field  string
	detail string
}

func checkErrors(t *testing.T, got field.ErrorList, want []wantErr) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d errors, want %d:\n%s", len(got), len(want), dump(got))
	}
	for i, w := range want {
		g := got[i]
		if g.Type != w.typ || g.Field != w.field || !strings.Contains(g.Detail, w.detail) {
			t.Errorf("error %d = {%s %s %q}, want {%s %s detail containing %q}", i, g.Type, g.Field, g.Detail, w.typ, w.field, w.detail)
		}
	}
}

func dump(errs field.ErrorList) string {
	var b strings.Builder
	for _, e := range errs {
		b.WriteString("  " + e.Error() + "\n")
	}
	return b.String()
}

func network(cidr, gateway string) *samplecrd.Network {
	return &samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "net1", Namespace: "default", ResourceVersion: "7", Generation: 2},
		Spec:       samplecrd.NetworkSpec{CIDR: cidr, Gateway: gateway},
	}
}

const (
	cidrInvalid = "must be an IPv4 or IPv6 prefix"
	gwInvalid   = "must be an IPv4 or IPv6 address"
)

func TestValidateNetworkSpec(t *testing.T) {
	tests := []struct {
		name    string
		cidr    string
		gateway string
		want    []wantErr
	}{
		// Valid networks.
		{name: "IPv4 /24 with gateway", cidr: "10.0.0.0/24", gateway: "10.0.0.1"},
		{name: "IPv4 without gateway", cidr: "10.0.0.0/24"},
		{name: "IPv4 gateway last usable", cidr: "10.0.0.0/24", gateway: "10.0.0.254"},
		{name: "IPv4 /16", cidr: "192.168.0.0/16", gateway: "192.168.255.254"},
		{name: "IPv4 /30 is the longest", cidr: "10.0.0.0/30", gateway: "10.0.0.2"},
		{name: "IPv4 /0", cidr: "0.0.0.0/0", gateway: "0.0.0.1"},
		{name: "IPv6 /64 with gateway", cidr: "fd00:1::/64", gateway: "fd00:1::1"},
		{name: "IPv6 without gateway", cidr: "fd00:1::/64"},
		{name: "IPv6 last address is not a broadcast", cidr: "fd00:1::/64", gateway: "fd00:1::ffff:ffff:ffff:ffff"},
		{name: "IPv6 /126 is the longest", cidr: "fd00::/126", gateway: "fd00::3"},
		{name: "IPv6 /0", cidr: "::/0", gateway: "::1"},

		// spec.cidr.
		{name: "missing cidr", cidr: "", want: []wantErr{{field.ErrorTypeRequired, "spec.cidr", ""}}},
		{name: "host bits set", cidr: "192.168.0.1/16", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", `canonical form "192.168.0.0/16"`}}},
		{name: "IPv4 /31", cidr: "10.0.0.0/31", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", "a /31 prefix leaves no address for a gateway; use /30 or shorter"}}},
		{name: "IPv4 /32", cidr: "10.0.0.1/32", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", "a /32 prefix leaves no address"}}},
		{name: "IPv6 /127", cidr: "fd00::/127", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", "a /127 prefix leaves no address for a gateway; use /126 or shorter"}}},
		{name: "IPv6 /128", cidr: "fd00::1/128", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", "a /128 prefix leaves no address"}}},
		{name: "IPv6 upper case", cidr: "FD00::/64", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", `canonical form "fd00::/64"`}}},
		{name: "IPv6 zero group not compressed", cidr: "fd00:0::/64", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", `canonical form "fd00::/64"`}}},
		{name: "IPv6 host bits set", cidr: "fd00:1::1/64", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", `canonical form "fd00:1::/64"`}}},
		{name: "IPv4-mapped IPv6", cidr: "::ffff:10.0.0.0/120", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", "IPv4-mapped"}}},
		{name: "garbage", cidr: "not-a-cidr", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", cidrInvalid}}},
		{name: "address without length", cidr: "10.0.0.0", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", cidrInvalid}}},
		{name: "length too long", cidr: "10.0.0.0/33", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", cidrInvalid}}},
		{name: "length with leading zero", cidr: "10.0.0.0/024", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", cidrInvalid}}},
		{name: "octet with leading zero", cidr: "010.0.0.0/24", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", cidrInvalid}}},
		{name: "trailing space", cidr: "10.0.0.0/24 ", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", cidrInvalid}}},
		{name: "IPv6 zone", cidr: "fd00::%eth0/64", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", cidrInvalid}}},

		// spec.gateway.
		{name: "gateway outside", cidr: "10.0.0.0/24", gateway: "10.0.1.1", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "must be inside spec.cidr 10.0.0.0/24"}}},
		{name: "IPv6 gateway outside", cidr: "fd00:1::/64", gateway: "fd00:2::1", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "must be inside spec.cidr fd00:1::/64"}}},
		{name: "gateway is the network address", cidr: "10.0.0.0/24", gateway: "10.0.0.0", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "must not be the network address of 10.0.0.0/24"}}},
		{name: "IPv6 gateway is the network address", cidr: "fd00:1::/64", gateway: "fd00:1::", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "must not be the network address"}}},
		{name: "gateway is the IPv4 broadcast", cidr: "10.0.0.0/24", gateway: "10.0.0.255", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "must not be the broadcast address of 10.0.0.0/24"}}},
		{name: "gateway is the /30 broadcast", cidr: "10.0.0.0/30", gateway: "10.0.0.3", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "broadcast"}}},
		{name: "gateway is the /0 broadcast", cidr: "0.0.0.0/0", gateway: "255.255.255.255", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "broadcast"}}},
		{name: "IPv6 gateway in IPv4 network", cidr: "10.0.0.0/24", gateway: "fd00::1", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "must be an IPv4 address, the family of spec.cidr 10.0.0.0/24"}}},
		{name: "IPv4 gateway in IPv6 network", cidr: "fd00:1::/64", gateway: "10.0.0.1", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "must be an IPv6 address"}}},
		{name: "IPv4-mapped gateway in IPv6 network", cidr: "::/0", gateway: "::ffff:10.0.0.1", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "IPv4-mapped"}}},
		{name: "garbage gateway", cidr: "10.0.0.0/24", gateway: "router", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", gwInvalid}}},
		{name: "gateway octet out of range", cidr: "10.0.0.0/24", gateway: "10.0.0.256", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", gwInvalid}}},
		{name: "gateway with prefix length", cidr: "10.0.0.0/24", gateway: "10.0.0.1/24", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", gwInvalid}}},
		{name: "gateway with leading zero", cidr: "10.0.0.0/24", gateway: "10.0.0.01", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", gwInvalid}}},
		{name: "gateway with zone", cidr: "fe80::/64", gateway: "fe80::1%eth0", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", gwInvalid}}},
		{name: "gateway upper case", cidr: "fd00:1::/64", gateway: "FD00:1::1", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", `canonical form "fd00:1::1"`}}},
		{name: "gateway zero group not compressed", cidr: "fd00:1::/64", gateway: "fd00:1:0::1", want: []wantErr{{field.ErrorTypeInvalid, "spec.gateway", `canonical form "fd00:1::1"`}}},

		// Both fields: a gateway is only compared with a valid cidr, but always checked on its own.
		{name: "missing cidr, plausible gateway", cidr: "", gateway: "10.0.0.1", want: []wantErr{{field.ErrorTypeRequired, "spec.cidr", ""}}},
		{name: "invalid cidr, gateway outside it", cidr: "10.0.0.0/31", gateway: "192.168.0.1", want: []wantErr{{field.ErrorTypeInvalid, "spec.cidr", "/31"}}},
		{name: "missing cidr, garbage gateway", cidr: "", gateway: "router", want: []wantErr{
			{field.ErrorTypeRequired, "spec.cidr", ""},
			{field.ErrorTypeInvalid, "spec.gateway", gwInvalid},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			checkErrors(t, ValidateNetwork(network(tc.cidr, tc.gateway)), tc.want)
		})
	}
}

func TestValidatePrefixLength(t *testing.T) {
	tests := []struct {
		name   string
		cidr   string
		length int32
		want   []wantErr
	}{
		{name: "unset", cidr: "10.0.0.0/24", length: 0},
		{name: "matches IPv4 cidr", cidr: "10.0.0.0/24", length: 24},
		{name: "matches IPv6 cidr", cidr: "fd00:1::/64", length: 64},
		{name: "matches /0", cidr: "0.0.0.0/0", length: 0},
		{name: "differs from cidr", cidr: "10.0.0.0/24", length: 25, want: []wantErr{
			{field.ErrorTypeInvalid, "spec.prefixLength", "must equal the length of spec.cidr 10.0.0.0/24"},
		}},
		{name: "out of range with a cidr", cidr: "10.0.0.0/24", length: 127, want: []wantErr{
			{field.ErrorTypeInvalid, "spec.prefixLength", "must be between 1 and 126"},
		}},
		{name: "negative", cidr: "10.0.0.0/24", length: -1, want: []wantErr{
			{field.ErrorTypeInvalid, "spec.prefixLength", "must be between 1 and 126"},
		}},
		// Allocation fills spec.cidr before validation; a length alone never passes validation.
		{name: "length without cidr", cidr: "", length: 24, want: []wantErr{
			{field.ErrorTypeRequired, "spec.cidr", "spec.prefixLength"},
		}},
		{name: "bad length without cidr", cidr: "", length: 200, want: []wantErr{
			{field.ErrorTypeRequired, "spec.cidr", ""},
			{field.ErrorTypeInvalid, "spec.prefixLength", "between 1 and 126"},
		}},
		{name: "not compared with an invalid cidr", cidr: "10.0.0.1/24", length: 16, want: []wantErr{
			{field.ErrorTypeInvalid, "spec.cidr", `canonical form "10.0.0.0/24"`},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := network(tc.cidr, "")
			n.Spec.PrefixLength = tc.length
			checkErrors(t, ValidateNetwork(n), tc.want)
		})
	}
}

func TestValidateNetworkErrorValues(t *testing.T) {
	// The rejected value is reported as sent, so that the 422 shows the client its own input.
	errs := ValidateNetwork(network("192.168.0.1/16", "192.168.0.0"))
	if len(errs) != 1 || errs[0].BadValue != "192.168.0.1/16" {
		t.Fatalf("errors = %v, want one error with bad value 192.168.0.1/16", errs)
	}
	errs = ValidateNetwork(network("10.0.0.0/24", "10.0.0.255"))
	if len(errs) != 1 || errs[0].BadValue != "10.0.0.255" {
		t.Fatalf("errors = %v, want one error with bad value 10.0.0.255", errs)
	}
}

func TestValidateNetworkMetadata(t *testing.T) {
	tests := []struct {
		name      string
		objName   string
		namespace string
		want      []wantErr
	}{
		{name: "lower case", objName: "net-1", namespace: "default"},
		{name: "63 characters", objName: strings.Repeat("a", 63), namespace: "default"},
		{name: "upper case", objName: "Net1", namespace: "default", want: []wantErr{{field.ErrorTypeInvalid, "metadata.name", "lowercase"}}},
		{name: "dots", objName: "net.one", namespace: "default", want: []wantErr{{field.ErrorTypeInvalid, "metadata.name", ""}}},
		{name: "64 characters", objName: strings.Repeat("a", 64), namespace: "default", want: []wantErr{{field.ErrorTypeInvalid, "metadata.name", "no more than 63 characters"}}},
		{name: "leading dash", objName: "-net", namespace: "default", want: []wantErr{{field.ErrorTypeInvalid, "metadata.name", ""}}},
		{name: "missing name", objName: "", namespace: "default", want: []wantErr{{field.ErrorTypeRequired, "metadata.name", ""}}},
		{name: "missing namespace", objName: "net1", namespace: "", want: []wantErr{{field.ErrorTypeRequired, "metadata.namespace", ""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := network("10.0.0.0/24", "10.0.0.1")
			n.Name, n.Namespace = tc.objName, tc.namespace
			checkErrors(t, ValidateNetwork(n), tc.want)
		})
	}
}

func TestValidateNetworkUpdate(t *testing.T) {
	tests := []struct {
		name   string
		old    *samplecrd.Network
		update func(n *samplecrd.Network)
		want   []wantErr
	}{
		{
			name:   "no change",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(*samplecrd.Network) {},
		},
		{
			name:   "gateway changed",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(n *samplecrd.Network) { n.Spec.Gateway = "10.0.0.254" },
		},
		{
			name:   "cidr changed",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(n *samplecrd.Network) { n.Spec = samplecrd.NetworkSpec{CIDR: "10.0.1.0/24", Gateway: "10.0.1.1"} },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.cidr", "immutable"}},
		},
		{
			name:   "cidr changed to another family",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(n *samplecrd.Network) { n.Spec = samplecrd.NetworkSpec{CIDR: "fd00:1::/64", Gateway: "fd00:1::1"} },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.cidr", "immutable"}},
		},
		{
			name:   "cidr removed",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(n *samplecrd.Network) { n.Spec.CIDR = "" },
			want: []wantErr{
				{field.ErrorTypeRequired, "spec.cidr", ""},
				{field.ErrorTypeInvalid, "spec.cidr", "immutable"},
			},
		},
		{
			name:   "cidr changed to an invalid prefix",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(n *samplecrd.Network) { n.Spec.CIDR = "10.0.0.1/24" },
			want: []wantErr{
				{field.ErrorTypeInvalid, "spec.cidr", `canonical form "10.0.0.0/24"`},
				{field.ErrorTypeInvalid, "spec.cidr", "immutable"},
			},
		},
		{
			name:   "cidr set on an object stored without one",
			old:    network("", ""),
			update: func(n *samplecrd.Network) { n.Spec = samplecrd.NetworkSpec{CIDR: "10.0.0.0/24", Gateway: "10.0.0.1"} },
		},
		{
			name:   "spec validated on update",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(n *samplecrd.Network) { n.Spec.Gateway = "10.0.0.255" },
			want:   []wantErr{{field.ErrorTypeInvalid, "spec.gateway", "broadcast"}},
		},
		{
			name:   "name changed",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(n *samplecrd.Network) { n.Name = "net2" },
			want:   []wantErr{{field.ErrorTypeInvalid, "metadata.name", "immutable"}},
		},
		{
			name:   "no resourceVersion",
			old:    network("10.0.0.0/24", "10.0.0.1"),
			update: func(n *samplecrd.Network) { n.ResourceVersion = "" },
			want:   []wantErr{{field.ErrorTypeInvalid, "metadata.resourceVersion", ""}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := tc.old.DeepCopy()
			tc.update(n)
			checkErrors(t, ValidateNetworkUpdate(n, tc.old), tc.want)
		})
	}
}

func readyCondition() metav1.Condition {
	return metav1.Condition{
		Type:               samplecrd.ConditionReady,
		Status:             metav1.ConditionTrue,
		ObservedGeneration: 2,
		LastTransitionTime: metav1.NewTime(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)),
		Reason:             "Realised",
		Message:            "bridge and CNI configuration are in place",
	}
}

func TestValidateNetworkStatusUpdate(t *testing.T) {
	tests := []struct {
		name   string
		update func(n *samplecrd.Network)
		want   []wantErr
	}{
		{
			name: "valid status",
			update: func(n *samplecrd.Network) {
				n.Status = samplecrd.NetworkStatus{ObservedGeneration: 2, Conditions: []metav1.Condition{readyCondition()}}
			},
		},
		{
			name:   "empty status",
			update: func(n *samplecrd.Network) { n.Status = samplecrd.NetworkStatus{} },
		},
		{
			name: "spec is not validated by a status write",
			update: func(n *samplecrd.Network) {
				n.Spec.CIDR = "garbage"
				n.Status.ObservedGeneration = 2
			},
		},
		{
			name:   "negative observedGeneration",
			update: func(n *samplecrd.Network) { n.Status.ObservedGeneration = -1 },
			want:   []wantErr{{field.ErrorTypeInvalid, "status.observedGeneration", "must not be negative"}},
		},
		{
			name: "condition with unknown status",
			update: func(n *samplecrd.Network) {
				c := readyCondition()
				c.Status = "Maybe"
				n.Status.Conditions = []metav1.Condition{c}
			},
			want: []wantErr{{field.ErrorTypeNotSupported, "status.conditions[0].status", ""}},
		},
		{
			name: "condition without reason and time",
			update: func(n *samplecrd.Network) {
				c := readyCondition()
				c.Reason, c.LastTransitionTime = "", metav1.Time{}
				n.Status.Conditions = []metav1.Condition{c}
			},
			want: []wantErr{
				{field.ErrorTypeRequired, "status.conditions[0].lastTransitionTime", ""},
				{field.ErrorTypeRequired, "status.conditions[0].reason", ""},
			},
		},
		{
			name: "condition with invalid type and reason",
			update: func(n *samplecrd.Network) {
				c := readyCondition()
				c.Type, c.Reason = "not a type!", "not a reason"
				n.Status.Conditions = []metav1.Condition{readyCondition(), c}
			},
			want: []wantErr{
				{field.ErrorTypeInvalid, "status.conditions[1].type", ""},
				{field.ErrorTypeInvalid, "status.conditions[1].reason", ""},
			},
		},
		{
			name: "condition with negative observedGeneration",
			update: func(n *samplecrd.Network) {
				c := readyCondition()
				c.ObservedGeneration = -3
				n.Status.Conditions = []metav1.Condition{c}
			},
			want: []wantErr{{field.ErrorTypeInvalid, "status.conditions[0].observedGeneration", ""}},
		},
		{
			name: "duplicate condition type",
			update: func(n *samplecrd.Network) {
				n.Status.Conditions = []metav1.Condition{readyCondition(), readyCondition()}
			},
			want: []wantErr{{field.ErrorTypeDuplicate, "status.conditions[1]", ""}},
		},
		{
			name: "both observedGeneration and a condition",
			update: func(n *samplecrd.Network) {
				c := readyCondition()
				c.Status = ""
				n.Status = samplecrd.NetworkStatus{ObservedGeneration: -1, Conditions: []metav1.Condition{c}}
			},
			want: []wantErr{
				{field.ErrorTypeInvalid, "status.observedGeneration", ""},
				{field.ErrorTypeRequired, "status.conditions[0].status", ""},
			},
		},
		{
			name: "valid node entries",
			update: func(n *samplecrd.Network) {
				n.Status.Nodes = []samplecrd.NetworkNodeStatus{
					{NodeName: "node-a", Bridge: "nw1", Ready: true, ObservedGeneration: 2},
					{NodeName: "node-b.example.com", Reason: "BridgeMissing", Message: "no bridge", ObservedGeneration: 1},
				}
			},
		},
		{
			name: "node entry without a name",
			update: func(n *samplecrd.Network) {
				n.Status.Nodes = []samplecrd.NetworkNodeStatus{{Ready: true}}
			},
			want: []wantErr{{field.ErrorTypeRequired, "status.nodes[0].nodeName", ""}},
		},
		{
			name: "two entries for one node",
			update: func(n *samplecrd.Network) {
				n.Status.Nodes = []samplecrd.NetworkNodeStatus{{NodeName: "node-a"}, {NodeName: "node-b"}, {NodeName: "node-a"}}
			},
			want: []wantErr{{field.ErrorTypeDuplicate, "status.nodes[2].nodeName", ""}},
		},
		{
			name: "node name that is not a DNS subdomain",
			update: func(n *samplecrd.Network) {
				n.Status.Nodes = []samplecrd.NetworkNodeStatus{{NodeName: "Node_A"}}
			},
			want: []wantErr{{field.ErrorTypeInvalid, "status.nodes[0].nodeName", ""}},
		},
		{
			name: "node with negative observedGeneration and a huge message",
			update: func(n *samplecrd.Network) {
				n.Status.Nodes = []samplecrd.NetworkNodeStatus{
					{NodeName: "node-a"},
					{NodeName: "node-b", ObservedGeneration: -1, Message: strings.Repeat("x", 32*1024+1)},
				}
			},
			want: []wantErr{
				{field.ErrorTypeInvalid, "status.nodes[1].observedGeneration", "must not be negative"},
				{field.ErrorTypeTooLong, "status.nodes[1].message", ""},
			},
		},
		{
			name: "node with negative attachments",
			update: func(n *samplecrd.Network) {
				n.Status.Nodes = []samplecrd.NetworkNodeStatus{{NodeName: "node-a", Attachments: -2}}
			},
			want: []wantErr{{field.ErrorTypeInvalid, "status.nodes[0].attachments", "must not be negative"}},
		},
		{
			name:   "metadata is validated",
			update: func(n *samplecrd.Network) { n.Namespace = "other" },
			want:   []wantErr{{field.ErrorTypeInvalid, "metadata.namespace", "immutable"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := network("10.0.0.0/24", "10.0.0.1")
			n := old.DeepCopy()
			tc.update(n)
			checkErrors(t, ValidateNetworkStatusUpdate(n, old), tc.want)
		})
	}
}

// A defaulted gateway must be valid for every valid prefix, in particular at the /30 and /126
// boundaries and for /0.
func TestDefaultGatewayIsValidForValidPrefixes(t *testing.T) {
	for _, cidr := range []string{"10.0.0.0/30", "10.0.0.0/24", "0.0.0.0/0", "fd00::/126", "fd00:1::/64", "::/0", "255.255.255.252/30"} {
		if errs := ValidateNetwork(network(cidr, samplecrd.DefaultGateway(cidr))); len(errs) != 0 {
			t.Errorf("%s with its default gateway %q: %v", cidr, samplecrd.DefaultGateway(cidr), errs)
		}
	}
}

func TestValidateNodeSegmentFields(t *testing.T) {
	neg, zero := int32(-1), int32(0)
	entry := func(mod func(e *samplecrd.NetworkNodeStatus)) func(n *samplecrd.Network) {
		return func(n *samplecrd.Network) {
			e := samplecrd.NetworkNodeStatus{NodeName: "node1", UnderlayAddress: "192.168.77.2", VXLAN: "vx0123456789abc",
				Blocks: []string{"10.0.0.64/26", "10.0.0.128/27"}, MTU: 1450, IPAMMode: samplecrd.IPAMModeBlocks, Leases: &zero}
			mod(&e)
			n.Status.Nodes = []samplecrd.NetworkNodeStatus{e}
		}
	}
	tests := []struct {
		name   string
		update func(n *samplecrd.Network)
		want   []wantErr
	}{
		{"valid entry", entry(func(*samplecrd.NetworkNodeStatus) {}), nil},
		{"unknown leases", entry(func(e *samplecrd.NetworkNodeStatus) { e.Leases = nil }), nil},
		{"vni", func(n *samplecrd.Network) { n.Status.VNI = MaxVNI + 1 },
			[]wantErr{{field.ErrorTypeInvalid, "status.vni", "must be between 0 and"}}},
		{"underlay not an address", entry(func(e *samplecrd.NetworkNodeStatus) { e.UnderlayAddress = "node1" }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].underlayAddress", "must be an IPv4 or IPv6 address"}}},
		{"underlay not canonical", entry(func(e *samplecrd.NetworkNodeStatus) { e.UnderlayAddress = "fd00:0::1" }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].underlayAddress", `canonical form "fd00::1"`}}},
		{"block not canonical", entry(func(e *samplecrd.NetworkNodeStatus) { e.Blocks = []string{"10.0.0.65/26"} }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].blocks[0]", `canonical form "10.0.0.64/26"`}}},
		{"block not a prefix", entry(func(e *samplecrd.NetworkNodeStatus) { e.Blocks = []string{"x", "10.0.0.0/26"} }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].blocks[0]", "must be an IPv4 or IPv6 prefix"}}},
		{"block outside cidr", entry(func(e *samplecrd.NetworkNodeStatus) { e.Blocks = []string{"10.0.1.0/26"} }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].blocks[0]", "must be inside spec.cidr 10.0.0.0/24"}}},
		{"block containing cidr", entry(func(e *samplecrd.NetworkNodeStatus) { e.Blocks = []string{"10.0.0.0/23"} }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].blocks[0]", "must be inside spec.cidr"}}},
		{"block of the other family", entry(func(e *samplecrd.NetworkNodeStatus) { e.Blocks = []string{"fd00::/122"} }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].blocks[0]", "must be inside spec.cidr"}}},
		{"overlapping blocks", entry(func(e *samplecrd.NetworkNodeStatus) { e.Blocks = []string{"10.0.0.64/26", "10.0.0.96/27"} }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].blocks[1]", "overlaps block 10.0.0.64/26"}}},
		{"mtu", entry(func(e *samplecrd.NetworkNodeStatus) { e.MTU = 20 }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].mtu", "between 68 and 65535"}}},
		{"ipamMode", entry(func(e *samplecrd.NetworkNodeStatus) { e.IPAMMode = "Whole" }),
			[]wantErr{{field.ErrorTypeNotSupported, "status.nodes[0].ipamMode", ""}}},
		{"negative leases", entry(func(e *samplecrd.NetworkNodeStatus) { e.Leases = &neg }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].leases", "must not be negative"}}},
		{"leaseReclaim on", entry(func(e *samplecrd.NetworkNodeStatus) { e.LeaseReclaim = samplecrd.LeaseReclaimContainerRuntime }), nil},
		{"leaseReclaim off", entry(func(e *samplecrd.NetworkNodeStatus) { e.LeaseReclaim = "Off: no container runtime endpoint" }), nil},
		{"leaseReclaim unknown", entry(func(e *samplecrd.NetworkNodeStatus) { e.LeaseReclaim = "Maybe" }),
			[]wantErr{{field.ErrorTypeInvalid, "status.nodes[0].leaseReclaim", `must be "ContainerRuntime" or start with "Off: "`}}},
		{"leaseReclaim too long", entry(func(e *samplecrd.NetworkNodeStatus) { e.LeaseReclaim = "Off: " + strings.Repeat("x", 200) }),
			[]wantErr{{field.ErrorTypeTooLong, "status.nodes[0].leaseReclaim", ""}}},
		{"vxlan name too long", entry(func(e *samplecrd.NetworkNodeStatus) { e.VXLAN = "vx0123456789abcdef" }),
			[]wantErr{{field.ErrorTypeTooLong, "status.nodes[0].vxlan", ""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			old := network("10.0.0.0/24", "10.0.0.1")
			n := old.DeepCopy()
			tc.update(n)
			checkErrors(t, ValidateNetworkStatusUpdate(n, old), tc.want)
		})
	}
}

func TestValidateNodeSelector(t *testing.T) {
	n := network("10.0.0.0/24", "10.0.0.1")
	n.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"zone": "a"}}
	checkErrors(t, ValidateNetwork(n), nil)
	n.Spec.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"bad key!": "a"}}
	checkErrors(t, ValidateNetwork(n), []wantErr{{field.ErrorTypeInvalid, "spec.nodeSelector.matchLabels", "name part must consist of"}})
	n.Spec.NodeSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "zone", Operator: "Near"}}}
	checkErrors(t, ValidateNetwork(n), []wantErr{{field.ErrorTypeInvalid, "spec.nodeSelector.matchExpressions[0].operator", "not a valid selector operator"}})
}
