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
	"testing"
)

func TestPreferredBlockSize(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		want   int
	}{
		{"10.0.0.0/8", 26}, {"10.0.0.0/16", 26}, {"10.0.0.0/22", 26}, {"10.0.0.0/24", 28},
		{"10.0.0.0/28", 30}, {"10.0.0.0/29", 30}, {"10.0.0.0/30", 30},
		{"fd00::/48", 122}, {"fd00::/64", 122}, {"fd00::/120", 124}, {"fd00::/124", 126},
	} {
		if got := DefaultBlockSizes.Preferred(netip.MustParsePrefix(tc.prefix)); got != tc.want {
			t.Errorf("Preferred(%s) = /%d, want /%d", tc.prefix, got, tc.want)
		}
	}
	if got := (BlockSizes{IPv4: 24, IPv6: 64}).Preferred(netip.MustParsePrefix("10.0.0.0/16")); got != 24 {
		t.Errorf("flag /24 in a /16: /%d", got)
	}
}
