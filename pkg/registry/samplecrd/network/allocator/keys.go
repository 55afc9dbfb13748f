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

package allocator

import (
	"encoding/hex"
	"math/big"
	"net/netip"
	"strings"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// An allocation is stored under <root>/<scope>/<family>/<start address as fixed-width hex>, so
// keys sort in address order within a family and "every allocation starting inside a range" is
// one contiguous key range.
//
// Two CIDR prefixes are either disjoint or nested, so an allocation overlapping p either starts
// inside p or contains p; one that contains p starts at the start address of one of p's shorter
// prefixes. A claim therefore reads one (normally empty) range and a few single keys. It never
// reads "the nearest key below p": etcd answers a range read, even with a limit, by visiting
// every key of the range to count them, which would make each create O(n).

func familyOf(a netip.Addr) string {
	if a.Is4() {
		return "4"
	}
	return "6"
}

func addrHex(a netip.Addr) string { return hex.EncodeToString(a.AsSlice()) }

// isKey says whether key is Key(scope, p), without building that string: the verifier checks
// every allocation key it reads.
func (a *Allocator) isKey(key, scope string, p netip.Prefix) bool {
	for _, part := range [...]string{a.root, "/", scope, "/", familyOf(p.Addr()), "/"} {
		var ok bool
		if key, ok = strings.CutPrefix(key, part); !ok {
			return false
		}
	}
	var buf [32]byte
	var n int
	if addr := p.Masked().Addr(); addr.Is4() {
		b := addr.As4()
		n = hex.Encode(buf[:], b[:])
	} else {
		b := addr.As16()
		n = hex.Encode(buf[:], b[:])
	}
	return key == string(buf[:n])
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
