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

package linux

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// The gateway filter keeps a Network's gateway local to each node. Every node's bridge carries
// the same gateway address with the same MAC, so the segment must carry none of it: in the
// nftables table "bridge samplecrd" (base chains input, forward, output), per Network with a
// segment, where V is its VXLAN device, M the bridge's MAC and G the gateway:
//
//	output:  oifname V ether saddr M drop            nothing the bridge itself sends (ARP and
//	                                                 ND replies, DAD, MLD, its own traffic)
//	                                                 leaves through the segment
//	forward: oifname V arp request for G drop        a pod's resolution of the gateway stays
//	         oifname V ND solicitation for G drop    on its node (ND target matched in the
//	                                                 ICMPv6 payload)
//	         iifname V ether saddr M drop            and nothing claiming to be a gateway comes
//	         iifname V arp reply from G drop         in from the segment (a misconfigured or
//	         iifname V ND advertisement for G drop   hostile peer)
//	input:   the same three iifname rules
//
// Each rule's user data records the Network key and a fingerprint of (V, M, G); a Network whose
// rules all carry the current fingerprint is left alone, otherwise its rules are replaced in
// one batch (atomically). The rules name V by name, so they are in place before V exists.

const filterTableName = "samplecrd"

var (
	filterTable  = &nftables.Table{Family: nftables.TableFamilyBridge, Name: filterTableName}
	filterChains = []*nftables.Chain{
		{Name: "input", Table: filterTable, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter},
		{Name: "forward", Table: filterTable, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter},
		{Name: "output", Table: filterTable, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter},
	}
)

// filterUserData marks a rule as key's with the fingerprint of what it was made from.
func filterUserData(key, fingerprint string) []byte {
	return []byte(Alias(key) + "\x00" + fingerprint)
}

// keyOfRule returns the key and fingerprint a rule's user data records.
func keyOfRule(r *nftables.Rule) (string, string, bool) {
	alias, fp, ok := strings.Cut(string(r.UserData), "\x00")
	if !ok {
		return "", "", false
	}
	key, ok := KeyOfAlias(alias)
	return key, fp, ok
}

func (b *Backend) nft() (*nftables.Conn, error) {
	var opts []nftables.ConnOption
	if b.ns.IsOpen() {
		opts = append(opts, nftables.WithNetNSFd(int(b.ns)))
	}
	return nftables.New(opts...)
}

func ifnameData(name string) []byte {
	d := make([]byte, unix.IFNAMSIZ)
	copy(d, name)
	return d
}

func be16(v uint16) []byte { return binary.BigEndian.AppendUint16(nil, v) }

func meta(key expr.MetaKey, data []byte) []expr.Any {
	return []expr.Any{&expr.Meta{Key: key, Register: 1}, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data}}
}

func payload(base expr.PayloadBase, offset, length uint32, data []byte) []expr.Any {
	return []expr.Any{
		&expr.Payload{DestRegister: 1, Base: base, Offset: offset, Len: length},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: data},
	}
}

func rule(parts ...[]expr.Any) []expr.Any {
	var out []expr.Any
	for _, p := range parts {
		out = append(out, p...)
	}
	return append(out, &expr.Verdict{Kind: expr.VerdictDrop})
}

// filterRules returns the rules (chain name -> rules' expressions) for device, mac and gw.
func filterRules(device string, mac net.HardwareAddr, gw netip.Addr) map[string][][]expr.Any {
	oif, iif := meta(expr.MetaKeyOIFNAME, ifnameData(device)), meta(expr.MetaKeyIIFNAME, ifnameData(device))
	fromBridge := payload(expr.PayloadBaseLLHeader, 6, 6, mac)
	var resolve, claim []expr.Any
	if gw.Is4() {
		arp := payload(expr.PayloadBaseLLHeader, 12, 2, be16(unix.ETH_P_ARP))
		// ARP for IPv4 over Ethernet: operation at 6, sender address at 14, target at 24.
		resolve = rule(oif, arp, payload(expr.PayloadBaseNetworkHeader, 6, 2, be16(1)), payload(expr.PayloadBaseNetworkHeader, 24, 4, gw.AsSlice()))
		claim = rule(iif, arp, payload(expr.PayloadBaseNetworkHeader, 6, 2, be16(2)), payload(expr.PayloadBaseNetworkHeader, 14, 4, gw.AsSlice()))
	} else {
		icmp6 := append(payload(expr.PayloadBaseLLHeader, 12, 2, be16(unix.ETH_P_IPV6)), meta(expr.MetaKeyL4PROTO, []byte{unix.IPPROTO_ICMPV6})...)
		// ICMPv6 type at 0; the target of a solicitation or advertisement at 8.
		resolve = rule(oif, icmp6, payload(expr.PayloadBaseTransportHeader, 0, 1, []byte{135}), payload(expr.PayloadBaseTransportHeader, 8, 16, gw.AsSlice()))
		claim = rule(iif, icmp6, payload(expr.PayloadBaseTransportHeader, 0, 1, []byte{136}), payload(expr.PayloadBaseTransportHeader, 8, 16, gw.AsSlice()))
	}
	return map[string][][]expr.Any{
		"output":  {rule(oif, fromBridge)},
		"forward": {resolve, rule(iif, fromBridge), claim},
		"input":   {rule(iif, fromBridge), claim},
	}
}

func filterFingerprint(device string, mac net.HardwareAddr, gw netip.Addr) string {
	sum := sha256.Sum256([]byte(device + "/" + mac.String() + "/" + gw.String()))
	return hex.EncodeToString(sum[:8])
}

// filterState lists the table's chains and rules: whether the table with all its base chains
// exists, and the rules per key.
func filterState(c *nftables.Conn) (bool, map[string][]*nftables.Rule, error) {
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyBridge)
	if err != nil {
		return false, nil, err
	}
	rules := map[string][]*nftables.Rule{}
	found := 0
	for _, ch := range chains {
		if ch.Table.Name != filterTableName || !slices.ContainsFunc(filterChains, func(f *nftables.Chain) bool { return f.Name == ch.Name }) {
			continue
		}
		found++
		rs, err := c.GetRules(filterTable, ch)
		if err != nil {
			return false, nil, err
		}
		for _, r := range rs {
			if key, _, ok := keyOfRule(r); ok {
				r.Chain = ch
				rules[key] = append(rules[key], r)
			}
		}
	}
	return found == len(filterChains), rules, nil
}

// ensureGatewayFilter puts key's rules in place (see above) for its VXLAN device, bridge MAC
// and gateway, replacing rules made for other values.
func (b *Backend) ensureGatewayFilter(key string, mac net.HardwareAddr, gw netip.Addr) ([]string, error) {
	device := netbackend.SegmentDeviceName(key)
	c, err := b.nft()
	if err != nil {
		return nil, fail(err, "opening nftables")
	}
	complete, rules, err := filterState(c)
	if err != nil {
		return nil, fail(err, "listing nftables table bridge %s", filterTableName)
	}
	fp := filterFingerprint(device, mac, gw)
	want := filterRules(device, mac, gw)
	total := 0
	for _, rs := range want {
		total += len(rs)
	}
	current := len(rules[key]) == total
	for _, r := range rules[key] {
		if _, f, _ := keyOfRule(r); f != fp {
			current = false
		}
	}
	if complete && current {
		return nil, nil
	}
	var changes []string
	if !complete {
		c.AddTable(filterTable)
		for _, ch := range filterChains {
			c.AddChain(ch)
		}
		changes = append(changes, fmt.Sprintf("created nftables table bridge %s", filterTableName))
	}
	for _, r := range rules[key] {
		if err := c.DelRule(r); err != nil {
			return nil, fail(err, "deleting an nftables rule of network %s", key)
		}
	}
	for _, ch := range filterChains {
		for _, exprs := range want[ch.Name] {
			c.AddRule(&nftables.Rule{Table: filterTable, Chain: ch, Exprs: exprs, UserData: filterUserData(key, fp)})
		}
	}
	if err := c.Flush(); err != nil {
		return nil, fail(err, "writing the gateway filter of network %s to nftables table bridge %s", key, filterTableName)
	}
	return append(changes, fmt.Sprintf("set the gateway filter of %s on %s (gateway %s, MAC %s)", key, device, gw, mac)), nil
}

// removeGatewayFilter deletes key's rules; it reports whether there were any.
func (b *Backend) removeGatewayFilter(key string) (bool, error) {
	c, err := b.nft()
	if err != nil {
		return false, fail(err, "opening nftables")
	}
	_, rules, err := filterState(c)
	if err != nil {
		return false, fail(err, "listing nftables table bridge %s", filterTableName)
	}
	if len(rules[key]) == 0 {
		return false, nil
	}
	for _, r := range rules[key] {
		if err := c.DelRule(r); err != nil {
			return false, fail(err, "deleting an nftables rule of network %s", key)
		}
	}
	if err := c.Flush(); err != nil {
		return false, fail(err, "deleting the gateway filter of network %s", key)
	}
	return true, nil
}

// filterKeys returns the keys with rules in the table.
func (b *Backend) filterKeys() ([]string, error) {
	c, err := b.nft()
	if err != nil {
		return nil, err
	}
	_, rules, err := filterState(c)
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(rules))
	for k := range rules {
		keys = append(keys, k)
	}
	return keys, nil
}

// filterRuleCount returns how many rules key has in the table.
func (b *Backend) filterRuleCount(key string) (int, error) {
	c, err := b.nft()
	if err != nil {
		return 0, err
	}
	_, rules, err := filterState(c)
	return len(rules[key]), err
}

// nftUnsupported tells whether err says that the kernel has no nftables: then there are no
// rules of ours to list or remove.
func nftUnsupported(err error) bool {
	return errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT)
}
