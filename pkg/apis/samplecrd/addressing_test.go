package samplecrd

import "testing"

func TestDefaultGateway(t *testing.T) {
	tests := []struct {
		cidr string
		want string
	}{
		{"10.0.0.0/24", "10.0.0.1"},
		{"10.0.0.128/25", "10.0.0.129"},
		{"192.168.7.9/16", "192.168.0.1"}, // host bits are masked first
		{"0.0.0.0/0", "0.0.0.1"},
		{"10.0.0.0/30", "10.0.0.1"},
		{"fd00:1::/64", "fd00:1::1"},
		{"FD00:1::/64", "fd00:1::1"}, // the result is canonical
		{"::/0", "::1"},
		{"fd00::/126", "fd00::1"},
		// No usable address: nothing to default to.
		{"10.0.0.0/32", ""},
		{"255.255.255.255/32", ""},
		{"fd00::1/128", ""},
		{"ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff/128", ""},
		// Not a prefix.
		{"", ""},
		{"garbage", ""},
		{"10.0.0.1", ""},
		{"10.0.0.0/33", ""},
	}
	for _, tc := range tests {
		t.Run(tc.cidr, func(t *testing.T) {
			if got := DefaultGateway(tc.cidr); got != tc.want {
				t.Errorf("DefaultGateway(%q) = %q, want %q", tc.cidr, got, tc.want)
			}
		})
	}
}
