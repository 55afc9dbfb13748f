package samplecrd

import "net/netip"

// DefaultGateway returns the first usable address of cidr (the network address plus one), or ""
// when cidr is not a valid prefix. The strategy uses it to default spec.gateway.
func DefaultGateway(cidr string) string {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return ""
	}
	return p.Masked().Addr().Next().String()
}
