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

import "net/netip"

// The longest prefixes a Network may have: longer ones leave no usable address for the gateway.
const (
	MaxIPv4PrefixLength = 30
	MaxIPv6PrefixLength = 126
)

// MaxPrefixLength is the longest prefix a Network of addr's family may have.
func MaxPrefixLength(addr netip.Addr) int {
	if addr.Is4() {
		return MaxIPv4PrefixLength
	}
	return MaxIPv6PrefixLength
}

// SetDefaultGateway gives spec the default gateway of its cidr when it has none. The strategy
// calls it, and the template admission plugin to validate a template as it will be stored.
func SetDefaultGateway(spec *NetworkSpec) {
	if spec.Gateway == "" {
		spec.Gateway = DefaultGateway(spec.CIDR)
	}
}

// DefaultGateway returns the first usable address of cidr (the network address plus one), or ""
// when cidr is not a valid prefix or has no address after its network address (/32, /128).
func DefaultGateway(cidr string) string {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return ""
	}
	gw := p.Masked().Addr().Next()
	if !p.Contains(gw) {
		// Next is outside a /32 or /128, and is the invalid Addr ("invalid IP") after the last
		// address of the space.
		return ""
	}
	return gw.String()
}

// LastAddress returns the highest address of a prefix (its broadcast address for IPv4).
func LastAddress(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
