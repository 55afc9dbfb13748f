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
	"encoding/json"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// recordValues are values as Value writes them, and a few it never writes.
func recordValues() []string {
	owner := Owner{Namespace: "team-a", Name: "net-0000001", UID: "0b1c2d3e-aaaa-4bbb-8ccc-0123456789ab"}
	out := []string{
		Value(Allocation{Scope: ClusterScope, Prefix: netip.MustParsePrefix("10.0.0.0/28"), Owner: owner}),
		Value(Allocation{Scope: "u", Prefix: netip.MustParsePrefix("10.0.0.4/30"), Owner: owner, Node: "node-1", Role: RoleBlock}),
		Value(Allocation{Scope: "u", Prefix: netip.MustParsePrefix("10.0.0.1/32"), Owner: owner, Role: RoleGateway}),
		Value(Allocation{Scope: "u", Prefix: netip.MustParsePrefix("fd00::/64"), Owner: owner, Node: "n"}),
		Value(Allocation{Scope: ClusterScope, Prefix: netip.MustParsePrefix("10.1.0.0/24"), Owner: Owner{}}),
		// Strings json.Marshal escapes, and what encoding/json accepts but Marshal never writes.
		Value(Allocation{Scope: ClusterScope, Prefix: netip.MustParsePrefix("10.2.0.0/24"), Owner: Owner{Namespace: "a<b>&", Name: "é\x01\"\\", UID: "\u2028"}}),
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c","role":"gateway","node":"x"}`,
		`{"uid":"c","cidr":"10.0.0.0/24","namespace":"a","name":"b"}`,
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c","node":"","role":""}`,
		`{"CIDR":"10.0.0.0/24","namespace":"a","name":"b","uid":"c"}`,
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c"} `,
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c","extra":1}`,
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c"`,
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c"}}`,
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"\u0063"}`,
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c","cidr":"10.9.0.0/24"}`,
		`{"cidr":"10.0.0.0/24","namespace":"a","name":"b","uid":"c","role":"block"}`,
		"{\"cidr\":\"10.0.0.0/24\",\"namespace\":\"a\xff\",\"name\":\"b\",\"uid\":\"c\"}",
		`not json`, ``, `{}`, `null`,
	}
	return out
}

// FuzzDecodeCanonical: whatever decodeCanonical accepts, encoding/json decodes without error into
// the same record (the seeds run in every go test).
func FuzzDecodeCanonical(f *testing.F) {
	for _, v := range recordValues() {
		f.Add([]byte(v))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		got, ok := decodeCanonical(b)
		if !ok {
			return
		}
		var want record
		if err := json.Unmarshal(b, &want); err != nil {
			t.Fatalf("decodeCanonical accepted %q, which encoding/json refuses: %v", b, err)
		}
		if got != want {
			t.Fatalf("decodeCanonical read %q as %+v, encoding/json as %+v", b, got, want)
		}
	})
}

// TestDecodeReadsWhatValueWrites: decode reads back every value Value writes — through the
// canonical path when no string needs an escape, through encoding/json otherwise.
func TestDecodeReadsWhatValueWrites(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabets := []string{"abcdefghijklmnopqrstuvwxyz0123456789-.", "a<>&\"\\\x00\x1f\x7fé\u2028 ~"}
	str := func(alphabet string) string {
		r := []rune(alphabet)
		out := make([]rune, rng.IntN(12))
		for i := range out {
			out[i] = r[rng.IntN(len(r))]
		}
		return string(out)
	}
	canonical := 0
	for i := 0; i < 4000; i++ {
		alphabet := alphabets[i%2]
		al := Allocation{Scope: ClusterScope, Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 0}), 24),
			Owner: Owner{Namespace: str(alphabet), Name: str(alphabet), UID: str(alphabet)}, Node: str(alphabet)}
		if rng.IntN(2) == 0 {
			al.Role = RoleBlock
		}
		v := Value(al)
		r, p, err := decode([]byte(v))
		if err != nil {
			t.Fatalf("decode(%q): %v", v, err)
		}
		// Value writes valid UTF-8 only: the invalid rune of the second alphabet never occurs.
		if r.Owner != al.Owner || r.Node != al.Node || r.Role != al.Role || p != al.Prefix {
			t.Fatalf("decode(%q) = %+v %s, want %+v", v, r, p, al)
		}
		if _, ok := decodeCanonical([]byte(v)); ok {
			canonical++
		} else if i%2 == 0 {
			t.Fatalf("decodeCanonical refused %q, which needs no escape", v)
		}
	}
	if canonical < 2000 {
		t.Fatalf("only %d of 4000 values took the canonical path", canonical)
	}
}

// TestIsKey: isKey agrees with Key for every pair of scope and prefix tried, and refuses near misses.
func TestIsKey(t *testing.T) {
	a := New(nil, "/registry/allocations")
	scopes := []string{ClusterScope, "u-1234", "x"}
	prefixes := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/28"), netip.MustParsePrefix("10.0.0.7/32"),
		netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("fd00:1::/64"), netip.MustParsePrefix("::ffff:10.0.0.0/120"),
		netip.MustParsePrefix("10.0.0.16/28"), netip.MustParsePrefix("10.0.0.0/24")}
	for _, scope := range scopes {
		for _, p := range prefixes {
			key := a.Key(scope, p)
			for _, other := range scopes {
				for _, q := range prefixes {
					if got, want := a.isKey(key, other, q), a.Key(other, q) == key; got != want {
						t.Errorf("isKey(%q, %q, %s) = %v, want %v", key, other, q, got, want)
					}
				}
			}
			for _, near := range []string{key + "0", key[:len(key)-1], "x" + key, key[1:]} {
				if a.isKey(near, scope, p) {
					t.Errorf("isKey(%q, %q, %s) = true", near, scope, p)
				}
			}
		}
	}
}
