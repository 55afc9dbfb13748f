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
