package samplecrd

import "net/netip"

// DefaultGateway returns the first usable address of cidr (the network address plus one), or ""
// when cidr is not a valid prefix or has no address after its network address (/32, /128). The
// strategy uses it to default spec.gateway.
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
