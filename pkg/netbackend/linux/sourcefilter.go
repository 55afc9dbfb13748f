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
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// The source filter keeps a Network's segment to its peers. A VXLAN device takes every packet
// for its VNI that reaches the node's UDP port 4789, whoever sent it, and learns the sender's
// MACs behind the sender; so a node taken out of the others' peer lists (its entry removed,
// its Node deleted) whose device is still up would stay on the segment. Per Network with a
// segment, an nftables table "inet samplecrd-<bridge name>" holds
//
//	set peers { type ipv4_addr (ipv6_addr over an IPv6 underlay); elements: the peers }
//	chain input { type filter hook input priority filter; policy accept;
//	    meta nfproto ipv4 meta l4proto udp udp dport 4789 @th,96,24 <VNI>
//	        ip saddr != @peers counter drop }
//
// @th,96,24 is the VXLAN header's VNI: 8 bytes of UDP header, then flags (1 byte) and 3
// reserved bytes, then the VNI (3 bytes) and one reserved byte. The input hook sees only
// packets for the node itself (forwarded VXLAN is not the node's segment), after IPv4
// reassembly. The rule's user data records the key and a fingerprint of (VNI, family); the
// set's elements are compared with the peers. Anything else is rewritten in one batch (the
// table added, deleted and made again), so the admitted sources change atomically. Ensure
// writes the filter before it changes the flood list: a peer that leaves is refused before its
// flood entry and what was learnt behind it go (nothing it sends in between is learnt again),
// and a peer that joins is admitted before anything is sent to it.

const (
	sourceChainName = "input"
	sourceSetName   = "peers"
)

func sourceTable(name string) *nftables.Table {
	return &nftables.Table{Family: nftables.TableFamilyINet, Name: name}
}

func sourceChain(t *nftables.Table) *nftables.Chain {
	return &nftables.Chain{Name: sourceChainName, Table: t, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter}
}

func sourceSet(t *nftables.Table, v6 bool) *nftables.Set {
	s := &nftables.Set{Table: t, Name: sourceSetName, KeyType: nftables.TypeIPAddr}
	if v6 {
		s.KeyType = nftables.TypeIP6Addr
	}
	return s
}

// sourceRule returns the rule's expressions for vni over an underlay of v6's family, looking
// the source up in set.
func sourceRule(vni uint32, v6 bool, set *nftables.Set) []expr.Any {
	proto, saddr := []byte{unix.NFPROTO_IPV4}, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4}
	if v6 {
		proto, saddr = []byte{unix.NFPROTO_IPV6}, &expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 8, Len: 16}
	}
	var exprs []expr.Any
	exprs = append(exprs, meta(expr.MetaKeyNFPROTO, proto)...)
	exprs = append(exprs, meta(expr.MetaKeyL4PROTO, []byte{unix.IPPROTO_UDP})...)
	exprs = append(exprs, payload(expr.PayloadBaseTransportHeader, 2, 2, be16(netbackend.VXLANPort))...)
	exprs = append(exprs, payload(expr.PayloadBaseTransportHeader, 12, 3, []byte{byte(vni >> 16), byte(vni >> 8), byte(vni)})...)
	return append(exprs,
		saddr,
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID, Invert: true},
		&expr.Counter{},
		&expr.Verdict{Kind: expr.VerdictDrop})
}

func sourceFingerprint(vni uint32, v6 bool) string {
	sum := sha256.Sum256([]byte("vxlan-source/" + strconv.FormatUint(uint64(vni), 10) + "/" + strconv.FormatBool(v6)))
	return hex.EncodeToString(sum[:8])
}

// sourceFilterState returns what key's table holds: whether its one rule is key's with
// fingerprint fp in a base chain of ours, and the set's elements (sorted; nil without a set).
// A table that does not exist holds nothing.
func sourceFilterState(c *nftables.Conn, key string, v6 bool) (rule string, sources []netip.Addr, err error) {
	t := sourceTable(filterTableName(key))
	if _, err := c.ListTableOfFamily(t.Name, t.Family); errors.Is(err, unix.ENOENT) {
		return "", nil, nil
	} else if err != nil {
		return "", nil, err
	}
	ch, err := c.ListChain(t, sourceChainName)
	if err != nil || ch.Hooknum == nil || *ch.Hooknum != *nftables.ChainHookInput || ch.Type != nftables.ChainTypeFilter ||
		(ch.Policy != nil && *ch.Policy != nftables.ChainPolicyAccept) {
		return "", nil, nil // no chain of ours (ListChain reports a missing chain as a plain error)
	}
	rules, err := c.GetRules(t, ch)
	if err != nil {
		return "", nil, err
	}
	if len(rules) == 1 {
		if k, f, ok := keyOfRule(rules[0]); ok && k == key {
			rule = f
		}
	}
	set, err := c.GetSetByName(t, sourceSetName)
	if err != nil || set.KeyType.Bytes != sourceSet(t, v6).KeyType.Bytes {
		return rule, nil, nil
	}
	elems, err := c.GetSetElements(set)
	if err != nil {
		return "", nil, err
	}
	sources = []netip.Addr{}
	for _, e := range elems {
		if a, ok := netip.AddrFromSlice(e.Key); ok {
			sources = append(sources, a)
		}
	}
	slices.SortFunc(sources, netip.Addr.Compare)
	return rule, sources, nil
}

// ensureSourceFilter puts key's source filter in place for s (see above).
func (b *Backend) ensureSourceFilter(key string, s *netbackend.Segment) ([]string, error) {
	name := filterTableName(key)
	c, err := b.nft()
	if err != nil {
		return nil, fail(err, "opening nftables")
	}
	v6 := s.UnderlayAddress.Is6()
	peers := slices.Clone(s.Peers)
	slices.SortFunc(peers, netip.Addr.Compare)
	peers = slices.Compact(peers)
	fp := sourceFingerprint(s.VNI, v6)
	rule, have, err := sourceFilterState(c, key, v6)
	if err != nil {
		return nil, fail(err, "looking at nftables table inet %s", name)
	}
	if rule == fp && have != nil && slices.Equal(have, peers) {
		return nil, nil
	}
	// One batch: whatever the table holds is deleted (added first, so that deleting it cannot
	// fail) and it is made again.
	t := sourceTable(name)
	c.AddTable(t)
	c.DelTable(t)
	c.AddTable(t)
	set := sourceSet(t, v6)
	elems := make([]nftables.SetElement, 0, len(peers))
	for _, p := range peers {
		elems = append(elems, nftables.SetElement{Key: p.AsSlice()})
	}
	if err := c.AddSet(set, elems); err != nil {
		return nil, fail(err, "preparing the source filter of network %s", key)
	}
	ch := c.AddChain(sourceChain(t))
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: sourceRule(s.VNI, v6, set), UserData: filterUserData(key, fp)})
	nftablesFlushes.Inc()
	if err := c.Flush(); err != nil {
		return nil, fail(err, "writing the source filter of network %s to nftables table inet %s", key, name)
	}
	return []string{fmt.Sprintf("set the source filter of %s in nftables table inet %s: VNI %d accepted from %v only",
		netbackend.SegmentDeviceName(key), name, s.VNI, peers)}, nil
}

// removeSourceFilter deletes key's table; it reports whether there was one.
func (b *Backend) removeSourceFilter(key string) (bool, error) {
	return b.removeFilterTable(key, sourceTable(filterTableName(key)))
}

// sourceFilterKeys returns the keys of our inet tables (the key their rule records).
func (b *Backend) sourceFilterKeys() ([]string, error) {
	return b.filterTableKeys(nftables.TableFamilyINet, func(c *nftables.Conn, t *nftables.Table) ([]*nftables.Rule, error) {
		rules, err := c.GetRules(t, sourceChain(t))
		if err != nil {
			return nil, nil // no chain of ours
		}
		return rules, nil
	})
}

// observeSourceFilter returns whether key's rule for vni is in place and the sources its set
// admits.
func (b *Backend) observeSourceFilter(key string, vni uint32, v6 bool) (bool, []netip.Addr, error) {
	c, err := b.nft()
	if err != nil {
		return false, nil, err
	}
	rule, sources, err := sourceFilterState(c, key, v6)
	return rule == sourceFingerprint(vni, v6), sources, err
}
