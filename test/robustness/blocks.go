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

package robustness

import (
	"cmp"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// The block and segment part of the invariant. Per Network, at every revision: its block keys
// (<prefix>/blocks/<uid>/<family>/<hex>, role "block") are exactly the blocks its
// BlockAllocations list, each with the Network's namespace, name, UID and the listing object's
// node; every block is inside the Network's prefix; no two overlap; none contains the gateway,
// whose key (role "gateway"; none where the servers write none) is the only other key of the
// scope; the VNI keys
// (<prefix>/segments/vni/<vni> = uid, <prefix>/segments/uid/<uid> = vni) agree with each other
// and with status.vni. No block key, BlockAllocation or VNI key belongs to a Network that is not
// stored (a deleted Network leaves none).

// Kinds of block and segment violations: each message starts with "<kind>: ".
const (
	vBlockOrphan   = "block-orphan"  // a block key or BlockAllocation of no stored Network, or no listed block
	vBlockMissing  = "block-missing" // a listed block without its key
	vBlockOwner    = "block-owner"   // a block key of another namespace, name, UID or node than its listing
	vBlockOutside  = "block-outside" // a block outside its Network's prefix, or not a canonical prefix
	vBlockOverlap  = "block-overlap" // two blocks of one Network overlap
	vGatewayBlock  = "gateway-in-block"
	vGatewayKey    = "gateway-key"    // the gateway key missing, stale, or more than one
	vSegmentOrphan = "segment-orphan" // a VNI key of no stored Network
	vSegment       = "segment"        // VNI keys that disagree, or a Network without them
	vBlockOther    = "block-other"    // undecodable values, keys not where their value says
)

var blockViolationKinds = map[string]bool{vBlockOrphan: true, vBlockMissing: true, vBlockOwner: true, vBlockOutside: true,
	vBlockOverlap: true, vGatewayBlock: true, vGatewayKey: true, vSegmentOrphan: true, vSegment: true, vBlockOther: true}

// blockObject is what the checks need of a stored BlockAllocation.
type blockObject struct {
	Namespace, Name, UID          string
	Network, NetworkUID, NodeName string
	Blocks                        []string
	Err                           string
}

func decodeBlockObject(value []byte) blockObject {
	obj, _, err := decoder.Decode(value, nil, nil)
	if err != nil {
		return blockObject{Err: err.Error()}
	}
	b, ok := obj.(*v1.BlockAllocation)
	if !ok {
		return blockObject{Err: fmt.Sprintf("stored object is a %T, not a v1 BlockAllocation", obj)}
	}
	out := blockObject{Namespace: b.Namespace, Name: b.Name, UID: string(b.UID), Network: b.Network, NetworkUID: b.NetworkUID, NodeName: b.NodeName}
	for _, bl := range b.Blocks {
		out.Blocks = append(out.Blocks, bl.CIDR)
	}
	return out
}

// blockPut indexes the BlockAllocations the history wrote.
type blockPut struct {
	Rev int64
	Key string // namespace/name
}

// blockLife is one block key of the history: held at revisions From..To-1 (To 0: to the end).
type blockLife struct {
	Network, UID, Node string // namespace/name
	Prefix             netip.Prefix
	From, To           int64
}

// heldDuring says whether the block was held at some revision in [lo, hi].
func (b blockLife) heldDuring(lo, hi int64) bool { return b.From <= hi && (b.To == 0 || b.To-1 >= lo) }

// blockRecord is the value of a block or gateway key.
type blockRecord struct {
	CIDR      string `json:"cidr"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
	Node      string `json:"node,omitempty"`
	Role      string `json:"role,omitempty"`
}

// blockKey is where a block (or gateway) p of the Network with UID uid is stored.
func (l layout) blockKey(uid string, p netip.Prefix) string {
	return l.Prefix + "/blocks/" + uid + "/" + family(p) + "/" + hex.EncodeToString(p.Masked().Addr().AsSlice())
}

func (l layout) vniKey(v int64) string       { return fmt.Sprintf("%s/segments/vni/%08d", l.Prefix, v) }
func (l layout) vniUIDKey(uid string) string { return l.Prefix + "/segments/uid/" + uid }

// blockKeyValue is a block or gateway key as stored, decoded once when it is written.
type blockKeyValue struct {
	storedBlock
	raw     []byte
	uid     string // the Network UID in the key
	problem string // why it cannot be checked further: undecodable, or not the key of its cidr
}

func (l layout) parseBlockKey(key string, raw []byte) blockKeyValue {
	b := blockKeyValue{storedBlock: storedBlock{key: key}, raw: raw}
	b.uid, _, _ = strings.Cut(strings.TrimPrefix(key, l.Prefix+"/blocks/"), "/")
	if err := json.Unmarshal(raw, &b.rec); err != nil {
		b.problem = "cannot be decoded: " + err.Error()
		return b
	}
	p, err := netip.ParsePrefix(b.rec.CIDR)
	if err != nil || p.Masked() != p || l.blockKey(b.uid, p) != key {
		b.problem = "is not the key of its cidr"
	}
	b.p = p
	return b
}

// storedBlock is a block key as read.
type storedBlock struct {
	key string
	rec blockRecord
	p   netip.Prefix
}

// listedBlock is a block as a BlockAllocation lists it.
type listedBlock struct {
	p      netip.Prefix
	node   string
	object string // namespace/name
}

func describeNet(n network) string {
	return fmt.Sprintf("%s/%s %s (uid %s)", n.Namespace, n.Name, n.CIDR, n.UID)
}

// blockViolations checks the block and segment invariant in s. Unsorted.
func (l layout) blockViolations(s *state) []string {
	var out []string
	add := func(kind, format string, args ...any) { out = append(out, kind+": "+fmt.Sprintf(format, args...)) }
	byUID := map[string]network{}
	byName := map[string]network{}
	for _, n := range s.networks {
		if n.Err == "" && n.UID != "" {
			byUID[n.UID] = n
			byName[n.Namespace+"/"+n.Name] = n
		}
	}
	// Block and gateway keys, by the Network UID of their key.
	keysOf := map[string][]storedBlock{}
	for key, b := range s.blocks {
		switch {
		case b.problem != "":
			add(vBlockOther, "block key %s = %s %s", key, b.raw, b.problem)
			continue
		case byUID[b.uid].UID == "":
			add(vBlockOrphan, "block key %s = %s: no stored Network has uid %s", key, b.raw, b.uid)
			continue
		}
		keysOf[b.uid] = append(keysOf[b.uid], b.storedBlock)
	}
	// BlockAllocations, by the UID of their Network.
	objectsOf := map[string][]blockObject{}
	for key, o := range s.blockObjs {
		if o.Err != "" {
			add(vBlockOther, "block allocation %s cannot be decoded: %s", key, o.Err)
			continue
		}
		n, ok := byName[o.Namespace+"/"+o.Network]
		if !ok || n.UID != o.NetworkUID {
			add(vBlockOrphan, "block allocation %s/%s lists blocks %v of network %s uid %s, which is not stored", o.Namespace, o.Name, o.Blocks, o.Network, o.NetworkUID)
			continue
		}
		if !strings.HasSuffix(key, "/"+o.Namespace+"/"+o.Network+"."+o.NodeName) {
			add(vBlockOwner, "block allocation %s holds node %s of network %s", key, o.NodeName, o.Network)
		}
		objectsOf[o.NetworkUID] = append(objectsOf[o.NetworkUID], o)
	}
	uids := make([]string, 0, len(byUID))
	for uid := range byUID {
		uids = append(uids, uid)
	}
	sort.Strings(uids)
	for _, uid := range uids {
		out = append(out, l.networkBlockViolations(byUID[uid], keysOf[uid], objectsOf[uid])...)
	}
	return append(out, l.segmentViolations(s, byUID)...)
}

func (l layout) networkBlockViolations(n network, keys []storedBlock, objects []blockObject) []string {
	var out []string
	add := func(kind, format string, args ...any) { out = append(out, kind+": "+fmt.Sprintf(format, args...)) }
	prefix, err := netip.ParsePrefix(n.CIDR)
	if err != nil || prefix.Masked() != prefix {
		return nil // reported by the Network check
	}
	gw, gwErr := netip.ParseAddr(n.Gateway)
	hasGateway := gwErr == nil && prefix.Contains(gw)
	var listed []listedBlock
	for _, o := range objects {
		for _, b := range o.Blocks {
			p, err := netip.ParsePrefix(b)
			if err != nil || p.Masked() != p {
				add(vBlockOutside, "block allocation %s/%s of network %s lists %q, not a canonical prefix", o.Namespace, o.Name, describeNet(n), b)
				continue
			}
			listed = append(listed, listedBlock{p: p, node: o.NodeName, object: o.Namespace + "/" + o.Name})
		}
	}
	slices.SortFunc(listed, func(x, y listedBlock) int {
		return cmp.Or(x.p.Addr().Compare(y.p.Addr()), cmp.Compare(x.p.Bits(), y.p.Bits()))
	})
	byPrefix := map[netip.Prefix]listedBlock{}
	var open []listedBlock
	for _, b := range listed {
		if b.p.Addr().Is4() != prefix.Addr().Is4() || b.p.Bits() < prefix.Bits() || !prefix.Contains(b.p.Addr()) {
			add(vBlockOutside, "block %s of node %s is outside network %s", b.p, b.node, describeNet(n))
		}
		if hasGateway && b.p.Contains(gw) {
			add(vGatewayBlock, "the gateway %s of network %s is inside block %s of node %s", gw, describeNet(n), b.p, b.node)
		}
		// Sorted by start address: a block overlaps an earlier one only if that one contains
		// its start.
		open = slices.DeleteFunc(open, func(o listedBlock) bool { return !o.p.Contains(b.p.Addr()) })
		for _, o := range open {
			add(vBlockOverlap, "blocks %s of node %s (%s) and %s of node %s (%s) of network %s overlap", o.p, o.node, o.object, b.p, b.node, b.object, describeNet(n))
		}
		open = append(open, b)
		byPrefix[b.p] = b
	}
	seen := map[netip.Prefix]bool{}
	gatewayKeys := 0
	for _, k := range keys {
		owned := k.rec.Namespace == n.Namespace && k.rec.Name == n.Name && k.rec.UID == n.UID
		switch k.rec.Role {
		case "gateway":
			gatewayKeys++
			if !hasGateway || k.p != netip.PrefixFrom(gw, gw.BitLen()) || !owned || k.rec.Node != "" {
				add(vGatewayKey, "gateway key %s = %+v of network %s, whose gateway is %q", k.key, k.rec, describeNet(n), n.Gateway)
			}
		case "block":
			b, ok := byPrefix[k.p]
			switch {
			case !ok:
				add(vBlockOrphan, "block key %s (%s of node %s) of network %s is listed by no block allocation", k.key, k.p, k.rec.Node, describeNet(n))
			case !owned || k.rec.Node != b.node:
				seen[k.p] = true
				add(vBlockOwner, "block key %s = %+v, but %s lists %s for node %s of network %s", k.key, k.rec, b.object, k.p, b.node, describeNet(n))
			default:
				seen[k.p] = true
			}
		default:
			add(vBlockOther, "key %s = %+v in the block scope of network %s has role %q", k.key, k.rec, describeNet(n), k.rec.Role)
		}
	}
	for _, b := range listed {
		if !seen[b.p] {
			add(vBlockMissing, "block %s of node %s listed by %s has no key (network %s)", b.p, b.node, b.object, describeNet(n))
		}
	}
	switch {
	case gatewayKeys > 1:
		add(vGatewayKey, "network %s has %d gateway keys", describeNet(n), gatewayKeys)
	case gatewayKeys == 0 && hasGateway && l.Blocks && !l.NoGatewayKeys:
		add(vGatewayKey, "network %s has no key for its gateway %s", describeNet(n), gw)
	}
	return out
}

// segmentViolations: each VNI key names a stored Network whose UID key names the VNI back, or
// (the single layout, --vni-keys=single) a Network without a uid key whose status.vni is the VNI;
// each UID key names a VNI whose key names it; status.vni is the VNI of the keys; with l.Blocks,
// every Network has them.
func (l layout) segmentViolations(s *state, byUID map[string]network) []string {
	var out []string
	add := func(kind, format string, args ...any) { out = append(out, kind+": "+fmt.Sprintf(format, args...)) }
	vniOwner := map[int64]string{} // vni -> uid
	uidVNI := map[string]int64{}   // uid -> vni
	vniRoot, uidRoot := l.Prefix+"/segments/vni/", l.Prefix+"/segments/uid/"
	for key, value := range s.segments {
		switch {
		case strings.HasPrefix(key, vniRoot):
			v, err := strconv.ParseInt(strings.TrimPrefix(key, vniRoot), 10, 64)
			if err != nil || l.vniKey(v) != key {
				add(vBlockOther, "segment key %s is not a VNI key", key)
				continue
			}
			vniOwner[v] = value
		case strings.HasPrefix(key, uidRoot):
			v, err := strconv.ParseInt(value, 10, 64)
			if err != nil {
				add(vBlockOther, "segment key %s = %q is no VNI", key, value)
				continue
			}
			uidVNI[strings.TrimPrefix(key, uidRoot)] = v
		default:
			add(vBlockOther, "unexpected segment key %s = %q", key, value)
		}
	}
	for v, uid := range vniOwner {
		if _, ok := byUID[uid]; !ok {
			add(vSegmentOrphan, "VNI key %s names uid %s: no stored Network has it", l.vniKey(v), uid)
		} else if back, ok := uidVNI[uid]; ok && back != v || !ok && int64(byUID[uid].VNI) != v {
			add(vSegment, "VNI key %s names network %s, whose uid key holds %d (present: %v), status.vni %d", l.vniKey(v), describeNet(byUID[uid]), back, ok, byUID[uid].VNI)
		}
	}
	for uid, v := range uidVNI {
		if _, ok := byUID[uid]; !ok {
			add(vSegmentOrphan, "uid key %s (VNI %d): no stored Network has uid %s", l.vniUIDKey(uid), v, uid)
		} else if owner, ok := vniOwner[v]; !ok || owner != uid {
			add(vSegment, "uid key %s of network %s holds VNI %d, whose key names %q", l.vniUIDKey(uid), describeNet(byUID[uid]), v, owner)
		}
	}
	for uid, n := range byUID {
		v, ok := uidVNI[uid]
		if !ok && n.VNI != 0 && vniOwner[int64(n.VNI)] == uid {
			v, ok = int64(n.VNI), true // the single layout
		}
		switch {
		case !ok && (l.Blocks || n.VNI != 0):
			add(vSegment, "network %s (status.vni %d) has no VNI keys", describeNet(n), n.VNI)
		case ok && n.VNI != int32(v):
			add(vSegment, "network %s has status.vni %d, its keys VNI %d", describeNet(n), n.VNI, v)
		}
	}
	return out
}
