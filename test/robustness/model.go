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
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apiserver"
)

// network is what the checks need of a stored Network.
type network struct {
	Namespace, Name, UID, CIDR string
	Labels, Annotations        map[string]string
	StatusMessages             []string // status.nodes[].message
	Nodes                      int      // len(status.nodes)
	Gateway                    string   // spec.gateway
	VNI                        int32    // status.vni
	Err                        string   // set when the stored value could not be decoded
}

// allocation is a stored allocation record.
type allocation struct {
	CIDR      string `json:"cidr"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// layout knows where the server keeps Networks and allocations under its etcd prefix.
type layout struct {
	Prefix       string // --etcd-prefix
	PerNamespace bool   // --overlap-scope=namespace
	// Blocks: the servers keep blocks, gateway keys and VNIs (every Network must have its
	// gateway key and VNI keys). Runs kept before blocks existed replay without it.
	Blocks bool `json:"blocks,omitempty"`
	// Lengths: the servers keep length records (<prefix>/allocation-lengths/<scope>/<family>/<length>),
	// which must hold every stored Network's prefix length at every revision.
	Lengths bool `json:"lengths,omitempty"`
	// NoGatewayKeys: the servers write no gateway keys (--gateway-keys=none), so a Network may
	// have none; one it has must still be its gateway's.
	NoGatewayKeys bool `json:"noGatewayKeys,omitempty"`
}

var decoder = apiserver.Codecs.UniversalDeserializer()

// kind of a key: "network" (namespace, name), "allocation", or "" for anything else.
func (l layout) classify(key string) (kind, ns, name string) {
	rest, ok := strings.CutPrefix(key, l.Prefix+"/")
	if !ok {
		return "", "", ""
	}
	switch {
	case strings.HasPrefix(rest, "allocations/"):
		return "allocation", "", ""
	case strings.HasPrefix(rest, "allocation-lengths/"):
		return "length", "", ""
	case strings.HasPrefix(rest, "blocks/"):
		return "block", "", ""
	case strings.HasPrefix(rest, "segments/"):
		return "segment", "", ""
	}
	// Networks are at <prefix>/networks/<ns>/<name>, BlockAllocations at
	// <prefix>/blockallocations/<ns>/<network>.<node> (the generic registry may put the group
	// before the resource; accept both).
	parts := strings.Split(rest, "/")
	if len(parts) >= 3 && parts[len(parts)-3] == "networks" {
		return "network", parts[len(parts)-2], parts[len(parts)-1]
	}
	if len(parts) >= 3 && parts[len(parts)-3] == "blockallocations" {
		return "blockallocation", parts[len(parts)-2], parts[len(parts)-1]
	}
	return "", "", ""
}

func decodeNetwork(value []byte) network {
	obj, _, err := decoder.Decode(value, nil, nil)
	if err != nil {
		return network{Err: err.Error()}
	}
	n, ok := obj.(*v1.Network)
	if !ok {
		return network{Err: fmt.Sprintf("stored object is a %T, not a v1 Network", obj)}
	}
	out := network{Namespace: n.Namespace, Name: n.Name, UID: string(n.UID), CIDR: n.Spec.CIDR,
		Labels: n.Labels, Annotations: n.Annotations, Nodes: len(n.Status.Nodes), Gateway: n.Spec.Gateway, VNI: n.Status.VNI}
	for _, s := range n.Status.Nodes {
		out.StatusMessages = append(out.StatusMessages, s.Message)
	}
	return out
}

var _ runtime.Object = &v1.Network{}

func decodeAllocation(value []byte) (allocation, error) {
	var a allocation
	err := json.Unmarshal(value, &a)
	return a, err
}

func (l layout) scope(ns string) string {
	if l.PerNamespace {
		return ns
	}
	return "_cluster"
}

// family is the part of an allocation or length key that names p's address family.
func family(p netip.Prefix) string {
	if p.Addr().Is4() {
		return "4"
	}
	return "6"
}

// allocationKey is the key the allocation of prefix p in namespace ns must have.
func (l layout) allocationKey(ns string, p netip.Prefix) string {
	return l.Prefix + "/allocations/" + l.scope(ns) + "/" + family(p) + "/" + hex.EncodeToString(p.Addr().AsSlice())
}

// lengthKey is the key that records the length of prefix p in namespace ns's scope.
func (l layout) lengthKey(ns string, p netip.Prefix) string {
	return l.Prefix + "/allocation-lengths/" + l.scope(ns) + "/" + family(p) + "/" + strconv.Itoa(p.Bits())
}

// state is the content of the prefix at one revision.
type state struct {
	networks    map[string]network // by etcd key
	allocations map[string][]byte
	blocks      map[string]blockKeyValue // <prefix>/blocks/<uid>/<family>/<hex>: block and gateway keys
	blockObjs   map[string]blockObject   // BlockAllocations, by etcd key
	segments    map[string]string        // <prefix>/segments/{vni,uid}/...
	lengths     map[string]bool          // <prefix>/allocation-lengths/<scope>/<family>/<length>
}

func newState() *state {
	return &state{networks: map[string]network{}, allocations: map[string][]byte{}, blocks: map[string]blockKeyValue{},
		blockObjs: map[string]blockObject{}, segments: map[string]string{}, lengths: map[string]bool{}}
}

// violations lists what breaks the invariant in s: every Network has exactly its allocation
// key with its own namespace, name, prefix and UID, there is no other allocation, and no two
// Networks of a scope overlap. Sorted, one line each.
func (l layout) violations(s *state) []string {
	var out []string
	expected := map[string]string{} // allocation key -> network key
	type placed struct {
		key string
		p   netip.Prefix
		n   network
	}
	byScope := map[string][]placed{}
	keys := make([]string, 0, len(s.networks))
	for key := range s.networks {
		keys = append(keys, key)
	}
	sort.Strings(keys)
	for _, key := range keys {
		n := s.networks[key]
		if n.Err != "" {
			out = append(out, fmt.Sprintf("network %s cannot be decoded: %s", key, n.Err))
			continue
		}
		p, err := netip.ParsePrefix(n.CIDR)
		if err != nil || p.Masked() != p {
			out = append(out, fmt.Sprintf("network %s/%s (uid %s) has no canonical cidr: %q", n.Namespace, n.Name, n.UID, n.CIDR))
			continue
		}
		akey := l.allocationKey(n.Namespace, p)
		if other, dup := expected[akey]; dup {
			out = append(out, fmt.Sprintf("networks %s and %s/%s both need allocation key %s", other, n.Namespace, n.Name, akey))
		}
		expected[akey] = n.Namespace + "/" + n.Name
		raw, ok := s.allocations[akey]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("network %s/%s %s (uid %s) has no allocation %s", n.Namespace, n.Name, n.CIDR, n.UID, akey))
		default:
			a, err := decodeAllocation(raw)
			want := allocation{CIDR: n.CIDR, Namespace: n.Namespace, Name: n.Name, UID: n.UID}
			if err != nil || a != want {
				out = append(out, fmt.Sprintf("allocation %s = %s, want %+v (network %s/%s)", akey, raw, want, n.Namespace, n.Name))
			}
		}
		sc := l.scope(n.Namespace)
		byScope[sc] = append(byScope[sc], placed{key: key, p: p, n: n})
		if l.Lengths && !s.lengths[l.lengthKey(n.Namespace, p)] {
			out = append(out, fmt.Sprintf("network %s/%s %s (uid %s): its length is not recorded (no key %s)", n.Namespace, n.Name, n.CIDR, n.UID, l.lengthKey(n.Namespace, p)))
		}
	}
	for akey, raw := range s.allocations {
		if _, ok := expected[akey]; !ok {
			out = append(out, fmt.Sprintf("orphan allocation %s = %s (no Network of its prefix)", akey, raw))
		}
	}
	for _, list := range byScope {
		sort.Slice(list, func(i, j int) bool { return list[i].key < list[j].key })
		for i := range list {
			for j := i + 1; j < len(list); j++ {
				if list[i].p.Overlaps(list[j].p) {
					a, b := list[i].n, list[j].n
					out = append(out, fmt.Sprintf("OVERLAP: %s/%s %s (uid %s) and %s/%s %s (uid %s)",
						a.Namespace, a.Name, a.CIDR, a.UID, b.Namespace, b.Name, b.CIDR, b.UID))
				}
			}
		}
	}
	out = append(out, l.blockViolations(s)...)
	sort.Strings(out)
	return out
}

// netChange is one change of a Network key in the history.
type netChange struct {
	Rev       int64
	Key       string
	Namespace string
	Name      string
	Type      string  // ADDED, MODIFIED, DELETED
	Obj       network // the new value; for DELETED the last value
}

// replay is the history of the prefix, revision by revision.
type replay struct {
	l          layout
	changes    []netChange           // Network changes in revision order
	byRev      map[int64][]netChange // the same, by revision
	byOp       map[string][]netChange
	blockPuts  map[blockPut]blockObject // BlockAllocations written, by revision and namespace/name
	blockLives []blockLife              // every block key, from its put to its delete
	// blockKeyPuts and maxBlockKeys are figures for the report: block and gateway keys
	// written, and the most held at one revision.
	blockKeyPuts, maxBlockKeys int
	violations                 []violationSpan
	final                      *state
	lastRev                    int64
	unordered                  []string
}

// violationSpan is one invariant violation and the revisions it held at.
type violationSpan struct {
	What     string `json:"what"`
	FirstRev int64  `json:"firstRev"`
	LastRev  int64  `json:"lastRev"` // the last revision it still held at
}

// opMarkers are where the traffic leaves its operation id in an object.
const (
	opAnnotation = "robustness.samplecrd.k8s.io/op"
	opLabel      = "robustness-op"
)

// replayHistory applies the events in order and checks the invariant after every revision.
func replayHistory(l layout, events []kvEvent) *replay {
	r := &replay{l: l, byRev: map[int64][]netChange{}, byOp: map[string][]netChange{}, blockPuts: map[blockPut]blockObject{}}
	s := newState()
	open := map[string]int64{}
	openBlocks := map[string]int{} // block key -> its index in r.blockLives
	var prevRev int64
	closeGone := func(now []string, rev int64) {
		cur := map[string]bool{}
		for _, v := range now {
			cur[v] = true
			if _, ok := open[v]; !ok {
				open[v] = rev
			}
		}
		for v, first := range open {
			if !cur[v] {
				r.violations = append(r.violations, violationSpan{What: v, FirstRev: first, LastRev: rev - 1})
				delete(open, v)
			}
		}
	}
	for i := 0; i < len(events); {
		rev := events[i].Rev
		if rev <= prevRev {
			r.unordered = append(r.unordered, fmt.Sprintf("history event at revision %d after revision %d", rev, prevRev))
		}
		for ; i < len(events) && events[i].Rev == rev; i++ {
			e := events[i]
			kind, ns, name := l.classify(e.Key)
			switch kind {
			case "allocation":
				if e.Delete {
					delete(s.allocations, e.Key)
				} else {
					s.allocations[e.Key] = e.Value
				}
			case "block":
				if i, ok := openBlocks[e.Key]; ok {
					r.blockLives[i].To = rev
					delete(openBlocks, e.Key)
				}
				if e.Delete {
					delete(s.blocks, e.Key)
				} else {
					b := l.parseBlockKey(e.Key, e.Value)
					s.blocks[e.Key] = b
					r.blockKeyPuts++
					if b.problem == "" && b.rec.Role == "block" {
						openBlocks[e.Key] = len(r.blockLives)
						r.blockLives = append(r.blockLives, blockLife{Network: b.rec.Namespace + "/" + b.rec.Name, UID: b.rec.UID, Node: b.rec.Node, Prefix: b.p, From: rev})
					}
				}
				r.maxBlockKeys = max(r.maxBlockKeys, len(s.blocks))
			case "length":
				if e.Delete {
					delete(s.lengths, e.Key)
				} else {
					s.lengths[e.Key] = true
				}
			case "segment":
				if e.Delete {
					delete(s.segments, e.Key)
				} else {
					s.segments[e.Key] = string(e.Value)
				}
			case "blockallocation":
				if e.Delete {
					delete(s.blockObjs, e.Key)
				} else {
					o := decodeBlockObject(e.Value)
					s.blockObjs[e.Key] = o
					r.blockPuts[blockPut{rev, ns + "/" + name}] = o
				}
			case "network":
				old, existed := s.networks[e.Key]
				c := netChange{Rev: rev, Key: e.Key, Namespace: ns, Name: name}
				switch {
				case e.Delete:
					if !existed {
						continue
					}
					delete(s.networks, e.Key)
					c.Type, c.Obj = "DELETED", old
				default:
					n := decodeNetwork(e.Value)
					s.networks[e.Key] = n
					c.Type, c.Obj = "MODIFIED", n
					if !existed {
						c.Type = "ADDED"
					}
				}
				r.changes = append(r.changes, c)
				r.byRev[rev] = append(r.byRev[rev], c)
				for _, id := range opIDs(c) {
					r.byOp[id] = append(r.byOp[id], c)
				}
			}
		}
		closeGone(l.violations(s), rev)
		prevRev = rev
	}
	for v, first := range open {
		r.violations = append(r.violations, violationSpan{What: v, FirstRev: first, LastRev: prevRev})
	}
	sort.Slice(r.violations, func(i, j int) bool {
		if r.violations[i].FirstRev != r.violations[j].FirstRev {
			return r.violations[i].FirstRev < r.violations[j].FirstRev
		}
		return r.violations[i].What < r.violations[j].What
	})
	r.final, r.lastRev = s, prevRev
	return r
}

// opIDs are the operation ids a change carries (creates and applies: the annotation; label
// updates: the label; status writes: a node entry's message). A DELETED change carries none.
func opIDs(c netChange) []string {
	if c.Type == "DELETED" {
		return nil
	}
	var ids []string
	if id := c.Obj.Annotations[opAnnotation]; id != "" {
		ids = append(ids, id)
	}
	if id := c.Obj.Labels[opLabel]; id != "" {
		ids = append(ids, id)
	}
	ids = append(ids, c.Obj.StatusMessages...)
	return ids
}

// networksAt is the set of Networks (namespace/name -> uid) stored at revision rev.
func (r *replay) networksAt(rev int64) map[string]string {
	out := map[string]string{}
	for _, c := range r.changes {
		if c.Rev > rev {
			break
		}
		k := c.Namespace + "/" + c.Name
		if c.Type == "DELETED" {
			delete(out, k)
		} else {
			out[k] = c.Obj.UID
		}
	}
	return out
}

var _ = samplecrd.Kind
