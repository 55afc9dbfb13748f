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
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// The gateway filter keeps a Network's gateway local to each node. Every node's bridge carries
// the same gateway address with the same MAC, so the segment must carry none of it: per Network
// with a segment, an nftables table "bridge samplecrd-<bridge name>" (base chains input,
// forward, output), where V is its VXLAN device, M the bridge's MAC and G the gateway:
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
// A table per Network keeps each check to the Network's own rules (a dump filtered by table and
// chain), however many Networks the node has. Each rule's user data records the Network key and
// a fingerprint of (V, M, G); a Network whose rules all carry the current fingerprint is left
// alone, otherwise its table is rewritten in one batch (atomically). The rules name V by name,
// so they are in place before V exists.

// filterTablePrefix starts the name of each Network's table.
const filterTablePrefix = "samplecrd-"

// filterTableName is the name of key's table.
func filterTableName(key string) string { return filterTablePrefix + netbackend.BridgeName(key) }

func filterTable(name string) *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyBridge, Name: name}
}

func filterChains(t *nftables.Table) []*nftables.Chain {
	return []*nftables.Chain{
		{Name: "input", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter},
		{Name: "forward", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter},
		{Name: "output", Table: t, Type: nftables.ChainTypeFilter, Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter},
	}
}

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

// tableRules returns the rules in the base chains of the table called name (none when it does
// not exist: a dump filtered by table and chain returns nothing then).
func tableRules(c *nftables.Conn, name string) ([]*nftables.Rule, error) {
	t := filterTable(name)
	var rules []*nftables.Rule
	for _, ch := range filterChains(t) {
		rs, err := c.GetRules(t, ch)
		if err != nil {
			return nil, err
		}
		rules = append(rules, rs...)
	}
	return rules, nil
}

// ensureGatewayFilter puts key's rules in place (see above) for its VXLAN device, bridge MAC
// and gateway, replacing rules made for other values.
func (b *Backend) ensureGatewayFilter(key string, mac net.HardwareAddr, gw netip.Addr) ([]string, error) {
	device := netbackend.SegmentDeviceName(key)
	name := filterTableName(key)
	c, err := b.nft()
	if err != nil {
		return nil, fail(err, "opening nftables")
	}
	rules, err := tableRules(c, name)
	if err != nil {
		return nil, fail(err, "listing nftables table bridge %s", name)
	}
	fp := filterFingerprint(device, mac, gw)
	want := filterRules(device, mac, gw)
	total := 0
	for _, rs := range want {
		total += len(rs)
	}
	current := len(rules) == total
	for _, r := range rules {
		if k, f, _ := keyOfRule(r); k != key || f != fp {
			current = false
		}
	}
	if current {
		return nil, nil
	}
	// One batch: the table and chains made if missing, emptied, and filled.
	t := filterTable(name)
	c.AddTable(t)
	chains := filterChains(t)
	for _, ch := range chains {
		c.AddChain(ch)
	}
	c.FlushTable(t)
	for _, ch := range chains {
		for _, exprs := range want[ch.Name] {
			c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: exprs, UserData: filterUserData(key, fp)})
		}
	}
	nftablesFlushes.Inc()
	if err := c.Flush(); err != nil {
		return nil, fail(err, "writing the gateway filter of network %s to nftables table bridge %s", key, name)
	}
	return []string{fmt.Sprintf("set the gateway filter of %s in nftables table bridge %s (gateway %s, MAC %s)", device, name, gw, mac)}, nil
}

// removeGatewayFilter deletes key's table; it reports whether there was one.
func (b *Backend) removeGatewayFilter(key string) (bool, error) {
	return b.removeFilterTable(key, filterTable(filterTableName(key)))
}

// filterKeys returns the keys of our bridge tables (the key their rules record).
func (b *Backend) filterKeys() ([]string, error) {
	return b.filterTableKeys(nftables.TableFamilyBridge, func(c *nftables.Conn, t *nftables.Table) ([]*nftables.Rule, error) {
		return tableRules(c, t.Name)
	})
}

// removeFilterTable deletes t, key's table of one family; it reports whether there was one.
func (b *Backend) removeFilterTable(key string, t *nftables.Table) (bool, error) {
	c, err := b.nft()
	if err != nil {
		return false, fail(err, "opening nftables")
	}
	family := familyName(t.Family)
	if _, err := c.ListTableOfFamily(t.Name, t.Family); errors.Is(err, unix.ENOENT) {
		return false, nil
	} else if err != nil {
		return false, fail(err, "looking up nftables table %s %s", family, t.Name)
	}
	c.DelTable(t)
	nftablesFlushes.Inc()
	if err := c.Flush(); err != nil {
		return false, fail(err, "deleting nftables table %s %s of network %s", family, t.Name, key)
	}
	return true, nil
}

// filterTableKeys returns the keys of our tables of family: those whose rules (read by rules)
// record the key the table is named after.
func (b *Backend) filterTableKeys(family nftables.TableFamily, rules func(*nftables.Conn, *nftables.Table) ([]*nftables.Rule, error)) ([]string, error) {
	c, err := b.nft()
	if err != nil {
		return nil, err
	}
	tables, err := c.ListTablesOfFamily(family)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, t := range tables {
		if !strings.HasPrefix(t.Name, filterTablePrefix) {
			continue
		}
		rs, err := rules(c, t)
		if err != nil {
			return nil, err
		}
		for _, r := range rs {
			if key, _, ok := keyOfRule(r); ok && filterTableName(key) == t.Name {
				keys = append(keys, key)
				break
			}
		}
	}
	return keys, nil
}

// familyName is how nft names a table family.
func familyName(f nftables.TableFamily) string {
	if f == nftables.TableFamilyINet {
		return "inet"
	}
	return "bridge"
}

// filterRuleCount returns how many rules of key its table has.
func (b *Backend) filterRuleCount(key string) (int, error) {
	c, err := b.nft()
	if err != nil {
		return 0, err
	}
	rules, err := tableRules(c, filterTableName(key))
	n := 0
	for _, r := range rules {
		if k, _, ok := keyOfRule(r); ok && k == key {
			n++
		}
	}
	return n, err
}

// nftUnsupported tells whether err says that the kernel has no nftables: then there are no
// rules of ours to list or remove.
func nftUnsupported(err error) bool {
	return errors.Is(err, unix.EPROTONOSUPPORT) || errors.Is(err, unix.EAFNOSUPPORT)
}
