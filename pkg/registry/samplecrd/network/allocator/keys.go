package allocator

import (
	"encoding/hex"
	"math/big"
	"net/netip"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// An allocation is stored under <root>/<scope>/<family>/<key>, where the key is the start
// address with every bit inverted, in fixed-width hex. Keys therefore sort in *descending*
// address order within a family: the allocations starting inside a range are one contiguous key
// range, and the nearest allocation starting below an address is the first key after it. etcd
// serves "first key at or after K" from its index in O(log n), whereas a descending read
// ("last key before K") makes it load and sort the whole range; that read made every create
// O(n) in the number of Networks.

func familyOf(a netip.Addr) string {
	if a.Is4() {
		return "ipv4"
	}
	return "ipv6"
}

// addrKey is the key part of an allocation starting at a.
func addrKey(a netip.Addr) string {
	b := a.AsSlice()
	for i := range b {
		b[i] = ^b[i]
	}
	return hex.EncodeToString(b)
}

// lastAddr is the highest address of a prefix.
var lastAddr = samplecrd.LastAddress

func addrToInt(a netip.Addr) *big.Int { return new(big.Int).SetBytes(a.AsSlice()) }

func intToAddr(i *big.Int, is4 bool) netip.Addr {
	size := 16
	if is4 {
		size = 4
	}
	b := make([]byte, size)
	i.FillBytes(b)
	a, _ := netip.AddrFromSlice(b)
	return a
}
