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
	"fmt"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"
)

// findings are the violations of one run, by check.
type findings struct {
	byCheck map[string][]string
}

func (f *findings) add(check, format string, args ...any) {
	if f.byCheck == nil {
		f.byCheck = map[string][]string{}
	}
	f.byCheck[check] = append(f.byCheck[check], fmt.Sprintf(format, args...))
}

func (f *findings) total() int {
	n := 0
	for _, v := range f.byCheck {
		n += len(v)
	}
	return n
}

func (f *findings) checks() []string {
	var out []string
	for k := range f.byCheck {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Check names, as the report prints them.
const (
	checkInvariant  = "invariant"       // allocations = Networks (scope, prefix, name, UID), no overlap, at every revision
	checkHistory    = "history"         // the recorded history is ordered and complete
	checkAcked      = "acknowledged"    // every acknowledged write is in the history, at its resourceVersion
	checkFailed     = "failed-write"    // no refused write left anything
	checkOrder      = "real-time-order" // acknowledged writes' revisions respect real time
	checkExists     = "existence"       // 409 AlreadyExists and 404 NotFound agree with the history
	checkRefused    = "refused-overlap" // a 422 on a create had something to overlap
	checkRefusedGw  = "refused-gateway" // a 422 on a gateway move had a block or a prefix to refuse it
	checkLinear     = "linearizability" // each name's answers are linearizable (porcupine)
	checkStatus     = "status-codes"    // no 500; 503/504 only during an etcd outage; no unexpected code
	checkWatch      = "watch"           // ordered, unique, gap-free, resumable, lists match the history
	checkInformer   = "informer"        // each informer's final cache equals a fresh LIST
	checkFinalLists = "final-list"      // each replica's final LIST equals the history
)

// outageGrace is how long after a fault's recovery 503/504 answers and transport errors are
// still put down to it (a request may have been waiting for etcd when it came back).
const outageGrace = 5 * time.Second

// validate checks the run's history, operations and watch records.
func validate(l layout, r *replay, ops []op, watches []watchRecord, faults []fault) *findings {
	f := &findings{}
	for _, u := range r.unordered {
		f.add(checkHistory, "%s", u)
	}
	// The request that created each incarnation, to name it next to a violation.
	createdBy := map[string]string{}
	for _, o := range ops {
		if o.Code == http.StatusCreated && o.UID != "" && o.Kind != "claim" {
			createdBy[o.UID] = o.String()
		}
	}
	for _, v := range r.violations {
		msg := fmt.Sprintf("revisions %d..%d: %s", v.FirstRev, v.LastRev, v.What)
		for _, m := range uidPattern.FindAllStringSubmatch(v.What, -1) {
			if by, ok := createdBy[m[1]]; ok {
				msg += "\n      uid " + m[1] + " created by " + by
			}
		}
		f.add(invariantCheck(v.What), "%s", msg)
	}
	checkOps(f, r, ops, faults)
	checkOrdering(f, ops)
	checkExistence(f, r, ops)
	checkRefusedOverlaps(f, l, r, ops)
	checkRefusedGateways(f, r, ops)
	checkWatches(f, r, watches)
	return f
}

var uidPattern = regexp.MustCompile(`(?:uid |UID:)([0-9a-f]{8}-[0-9a-f-]{27})`)

// invariantCheck sorts an invariant violation into its kind, so that the summary shows each.
func invariantCheck(what string) string {
	if kind, _, ok := strings.Cut(what, ": "); ok && blockViolationKinds[kind] {
		return checkInvariant + "/" + kind
	}
	switch {
	case strings.HasPrefix(what, "OVERLAP"):
		return checkInvariant + "/overlap"
	case strings.HasPrefix(what, "orphan"):
		return checkInvariant + "/orphan-allocation"
	case strings.Contains(what, "has no allocation"):
		return checkInvariant + "/network-without-allocation"
	case strings.HasPrefix(what, "allocation "):
		return checkInvariant + "/allocation-mismatch"
	case strings.Contains(what, "its length is not recorded"):
		return checkInvariant + "/unrecorded-length"
	}
	return checkInvariant + "/other"
}

func inWindow(o op, faults []fault, match func(fault) bool) bool {
	for _, ft := range faults {
		end := ft.Ready
		if end == 0 {
			end = ft.Restored
		}
		if match(ft) && o.Start <= end+int64(outageGrace) && o.End >= ft.Start {
			return true
		}
	}
	return false
}

// expectedCodes are the answers each kind of request may get without anything being wrong.
var expectedCodes = map[string][]int{
	"create":         {http.StatusCreated, http.StatusConflict, http.StatusUnprocessableEntity},
	"create-v1beta1": {http.StatusCreated, http.StatusConflict, http.StatusUnprocessableEntity},
	"create-auto":    {http.StatusCreated, http.StatusConflict},
	"apply":          {http.StatusOK, http.StatusCreated, http.StatusConflict, http.StatusUnprocessableEntity},
	"delete":         {http.StatusOK, http.StatusNotFound, http.StatusConflict},
	"label":          {http.StatusOK, http.StatusNotFound, http.StatusConflict},
	"status":         {http.StatusOK, http.StatusNotFound, http.StatusConflict},
	"unreport":       {http.StatusOK, http.StatusNotFound, http.StatusConflict},
	// 409: AddressesExhausted, or every block picked was taken first.
	"claim":   {http.StatusOK, http.StatusCreated, http.StatusNotFound, http.StatusConflict},
	"gateway": {http.StatusOK, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity},
}

func checkOps(f *findings, r *replay, ops []op, faults []fault) {
	etcdOutage := func(ft fault) bool { return ft.EtcdOutage }
	for _, o := range ops {
		replicaDown := func(ft fault) bool { return ft.Replica == o.Replica || ft.EtcdOutage }
		switch {
		case o.Err != "":
			if !inWindow(o, faults, replicaDown) {
				f.add(checkStatus, "%s: no answer outside any fault on its replica or etcd", o)
			}
			continue
		case o.Code == http.StatusInternalServerError:
			f.add(checkStatus, "%s: 500 %s", o, o.Message)
			continue
		case o.Code == http.StatusServiceUnavailable || o.Code == http.StatusGatewayTimeout:
			// A replica that is shutting down (SIGTERM) answers the requests that still reach
			// it with 503 and Retry-After, as the generic apiserver does.
			shuttingDown := func(ft fault) bool {
				return ft.Kind == faultRestart && ft.Replica == o.Replica && o.Code == http.StatusServiceUnavailable
			}
			// A partition is an etcd outage for the replica cut off only.
			partitioned := func(ft fault) bool { return ft.Kind == faultPartition && ft.Replica == o.Replica }
			if !inWindow(o, faults, etcdOutage) && !inWindow(o, faults, shuttingDown) && !inWindow(o, faults, partitioned) {
				f.add(checkStatus, "%s: %d outside any etcd outage: %s", o, o.Code, o.Message)
			}
			continue
		case o.Code >= 500 || !slices.Contains(expectedCodes[o.Kind], o.Code):
			f.add(checkStatus, "%s: unexpected %d: %s", o, o.Code, o.Message)
			continue
		}
		key := o.Namespace + "/" + o.Name
		if o.Kind == "claim" {
			checkClaim(f, r, o)
			continue
		}
		if !o.ok() {
			// A definite refusal: the write must have left nothing.
			if cs := r.byOp[o.ID]; len(cs) > 0 {
				f.add(checkFailed, "%s: refused, yet revision %d stored %s %s uid %s carrying the op", o, cs[0].Rev, cs[0].Type, key, cs[0].Obj.UID)
			}
			continue
		}
		var want string
		switch {
		case o.Kind == "delete":
			want = "DELETED"
		case o.Code == http.StatusCreated:
			want = "ADDED"
		default:
			want = "MODIFIED"
		}
		var found *netChange
		for i, c := range r.byRev[o.RV] {
			if c.Namespace+"/"+c.Name == key {
				found = &r.byRev[o.RV][i]
			}
		}
		if o.Kind == "unreport" {
			// Nothing carries its op id: the answer's revision stored this uid without entries
			// (a removal that changed nothing answers the revision of the last change).
			switch {
			case found == nil:
				f.add(checkAcked, "%s: acknowledged, but the history has no change of %s at revision %d", o, key, o.RV)
			case found.Type == "DELETED" || found.Obj.UID != o.UID || found.Obj.Nodes != 0:
				f.add(checkAcked, "%s: acknowledged, but revision %d %s %s uid %s with %d node entries", o, o.RV, found.Type, key, found.Obj.UID, found.Obj.Nodes)
			}
			continue
		}
		if o.Kind == "delete" && o.RV == 0 {
			// The answer is a Status with the deleted object's uid but no resourceVersion:
			// that object's deletion must be in the history.
			found = nil
			for i, c := range r.changes {
				if c.Type == "DELETED" && c.Obj.UID == o.UID && c.Namespace+"/"+c.Name == key {
					found = &r.changes[i]
				}
			}
			if found == nil {
				f.add(checkAcked, "%s: acknowledged, but the history never deleted %s uid %s", o, key, o.UID)
			}
			continue
		}
		switch {
		case found == nil:
			f.add(checkAcked, "%s: acknowledged, but the history has no change of %s at revision %d", o, key, o.RV)
		case found.Type != want:
			f.add(checkAcked, "%s: acknowledged, but revision %d %s %s (want %s)", o, o.RV, found.Type, key, want)
		case found.Obj.UID != o.UID:
			f.add(checkAcked, "%s: acknowledged uid %s, but revision %d stored uid %s", o, o.UID, o.RV, found.Obj.UID)
		case o.Kind != "delete" && !slices.Contains(opIDs(*found), o.ID):
			f.add(checkAcked, "%s: revision %d of %s does not carry the op", o, o.RV, key)
		}
		if found != nil && o.Kind == "gateway" && found.Obj.Gateway != o.Gateway {
			f.add(checkAcked, "%s: revision %d stored gateway %s", o, o.RV, found.Obj.Gateway)
		}
		if found != nil && o.Kind == "create-auto" && o.Code == http.StatusCreated {
			p, err := netip.ParsePrefix(found.Obj.CIDR)
			if err != nil || fmt.Sprintf("/%d", p.Bits()) != o.CIDR {
				f.add(checkAcked, "%s: allocated %q, not a %s", o, found.Obj.CIDR, o.CIDR)
			}
		}
		if found != nil && o.Code == http.StatusCreated && o.Kind != "create-auto" && found.Obj.CIDR != o.CIDR {
			f.add(checkAcked, "%s: stored cidr %s", o, found.Obj.CIDR)
		}
	}
}

// checkClaim: an acknowledged claim is in the history at its resourceVersion: the node's
// BlockAllocation written there, of the Network uid it answered, listing the blocks it answered.
// (Refused claims leave nothing the history could show; the invariant covers what they wrote.)
func checkClaim(f *findings, r *replay, o op) {
	if !o.ok() {
		return
	}
	got, ok := r.blockPuts[blockPut{o.RV, o.Namespace + "/" + o.Name + "." + o.Node}]
	switch {
	case !ok:
		f.add(checkAcked, "%s: acknowledged, but the history wrote no block allocation %s.%s at revision %d", o, o.Name, o.Node, o.RV)
	case got.NetworkUID != o.UID || !slices.Equal(got.Blocks, o.Blocks) || got.NodeName != o.Node:
		f.add(checkAcked, "%s: revision %d stored blocks %v of network uid %s for node %s", o, o.RV, got.Blocks, got.NetworkUID, got.NodeName)
	case len(o.Blocks) == 0:
		f.add(checkAcked, "%s: acknowledged without a block", o)
	}
}

// checkOrdering: if an acknowledged write ended before another started, its revision is lower
// (the servers may not acknowledge a write before etcd committed it, nor reorder them).
func checkOrdering(f *findings, ops []op) {
	var acked []op
	for _, o := range ops {
		if o.servedAt() {
			acked = append(acked, o)
		}
	}
	byEnd := slices.Clone(acked)
	sort.Slice(byEnd, func(i, j int) bool { return byEnd[i].End < byEnd[j].End })
	// maxBefore[i] is the op with the highest revision among byEnd[:i+1].
	maxBefore := make([]int, len(byEnd))
	for i := range byEnd {
		maxBefore[i] = i
		if i > 0 && byEnd[maxBefore[i-1]].RV > byEnd[i].RV {
			maxBefore[i] = maxBefore[i-1]
		}
	}
	for _, b := range acked {
		n := sort.Search(len(byEnd), func(i int) bool { return byEnd[i].End >= b.Start })
		if n == 0 {
			continue
		}
		if a := byEnd[maxBefore[n-1]]; a.RV >= b.RV {
			f.add(checkOrder, "%s ended before %s started, but its revision %d is not below %d", a, b, a.RV, b.RV)
		}
	}
}

// checkExistence: a create refused with AlreadyExists saw its name taken, and a delete, label
// or status write answered NotFound saw it free, at some revision the request could have been
// served at. That revision lies between the highest revision acknowledged to a request that
// ended before it started and the lowest acknowledged to one that started after it ended
// (revisions respect real time, which checkOrdering verifies).
func checkExistence(f *findings, r *replay, ops []op) {
	// Each key's changes, in order.
	perKey := map[string][]netChange{}
	for _, c := range r.changes {
		k := c.Namespace + "/" + c.Name
		perKey[k] = append(perKey[k], c)
	}
	w := newWindows(ops)
	for _, o := range ops {
		var wantExists bool
		switch {
		case o.Err != "":
			continue
		case o.Code == http.StatusConflict && o.Reason == "AlreadyExists" && strings.HasPrefix(o.Kind, "create"):
			wantExists = true
		case o.Code == http.StatusNotFound && o.Kind != "apply" && !strings.HasPrefix(o.Kind, "create"):
			wantExists = false
		default:
			continue
		}
		lo, hi := w.bounds(o)
		changes := perKey[o.Namespace+"/"+o.Name]
		// exists at lo, and whenever a change in (lo, hi] makes it so.
		i := sort.Search(len(changes), func(i int) bool { return changes[i].Rev > lo })
		existsAt := i > 0 && changes[i-1].Type != "DELETED"
		possible := existsAt == wantExists
		for ; !possible && i < len(changes) && changes[i].Rev <= hi; i++ {
			possible = (changes[i].Type != "DELETED") == wantExists
		}
		if !possible {
			state := "absent"
			if !wantExists {
				state = "present"
			}
			f.add(checkExists, "%s: but %s/%s was %s at every revision from %d to %d", o, o.Namespace, o.Name, state, lo, hi)
		}
	}
}

// windows bound the revision a request was served at: at least the highest revision
// acknowledged to a request that ended before it started, below the lowest acknowledged to one
// that started after it ended.
type windows struct {
	byEnd, byStart []op
	maxRV, minRV   []int64
}

func newWindows(ops []op) *windows {
	var acked []op
	for _, o := range ops {
		if o.servedAt() {
			acked = append(acked, o)
		}
	}
	w := &windows{byEnd: slices.Clone(acked), byStart: slices.Clone(acked)}
	sort.Slice(w.byEnd, func(i, j int) bool { return w.byEnd[i].End < w.byEnd[j].End })
	sort.Slice(w.byStart, func(i, j int) bool { return w.byStart[i].Start < w.byStart[j].Start })
	w.maxRV = make([]int64, len(acked))
	for i, o := range w.byEnd {
		w.maxRV[i] = o.RV
		if i > 0 {
			w.maxRV[i] = max(w.maxRV[i], w.maxRV[i-1])
		}
	}
	w.minRV = make([]int64, len(acked)) // minRV[i]: lowest revision among byStart[i:]
	for i := len(acked) - 1; i >= 0; i-- {
		w.minRV[i] = w.byStart[i].RV
		if i+1 < len(acked) {
			w.minRV[i] = min(w.minRV[i], w.minRV[i+1])
		}
	}
	return w
}

func (w *windows) bounds(o op) (lo, hi int64) {
	if n := sort.Search(len(w.byEnd), func(i int) bool { return w.byEnd[i].End >= o.Start }); n > 0 {
		lo = w.maxRV[n-1]
	}
	hi = int64(1) << 62
	if n := sort.Search(len(w.byStart), func(i int) bool { return w.byStart[i].Start > o.End }); n < len(w.byStart) {
		hi = w.minRV[n] - 1
	}
	return lo, hi
}

// checkRefusedOverlaps: a create or apply with an explicit prefix answered 422 must, at some
// revision it could have been served at, have found its prefix overlapped by a Network of its
// scope, or its name taken (the prefix is immutable).
func checkRefusedOverlaps(f *findings, l layout, r *replay, ops []op) {
	w := newWindows(ops)
	type pending struct {
		o      op
		p      netip.Prefix
		lo, hi int64
	}
	var todo []pending
	for _, o := range ops {
		if o.Err != "" || o.Code != http.StatusUnprocessableEntity || !(strings.HasPrefix(o.Kind, "create") || o.Kind == "apply") {
			continue
		}
		p, err := netip.ParsePrefix(o.CIDR)
		if err != nil {
			continue
		}
		lo, hi := w.bounds(o)
		todo = append(todo, pending{o, p, lo, hi})
	}
	sort.Slice(todo, func(i, j int) bool { return todo[i].lo < todo[j].lo })
	state := map[string]network{} // namespace/name -> the Network, at revision `at`
	next := 0
	explains := func(pd pending, key string, n network) bool {
		if key == pd.o.Namespace+"/"+pd.o.Name {
			return true
		}
		q, err := netip.ParsePrefix(n.CIDR)
		return err == nil && l.scope(n.Namespace) == l.scope(pd.o.Namespace) && q.Overlaps(pd.p)
	}
	for _, pd := range todo {
		for ; next < len(r.changes) && r.changes[next].Rev <= pd.lo; next++ {
			c := r.changes[next]
			if c.Type == "DELETED" {
				delete(state, c.Namespace+"/"+c.Name)
			} else {
				state[c.Namespace+"/"+c.Name] = c.Obj
			}
		}
		ok := false
		for key, n := range state {
			if explains(pd, key, n) {
				ok = true
				break
			}
		}
		for i := next; !ok && i < len(r.changes) && r.changes[i].Rev <= pd.hi; i++ {
			if c := r.changes[i]; c.Type != "DELETED" && explains(pd, c.Namespace+"/"+c.Name, c.Obj) {
				ok = true
			}
		}
		if !ok {
			f.add(checkRefused, "%s: refused, yet no Network of its scope overlapped %s, nor was its name taken, at any revision from %d to %d", pd.o, pd.p, pd.lo, pd.hi)
		}
	}
}

// checkRefusedGateways: a gateway move answered 422 found, at some revision it could have been
// served at, its Network's prefix not holding the address as a gateway (outside, or the network
// or broadcast address), or a block of its Network containing the address.
func checkRefusedGateways(f *findings, r *replay, ops []op) {
	w := newWindows(ops)
	perKey := map[string][]netChange{}
	for _, c := range r.changes {
		k := c.Namespace + "/" + c.Name
		perKey[k] = append(perKey[k], c)
	}
	blocksOf := map[string][]blockLife{}
	for _, b := range r.blockLives {
		blocksOf[b.Network] = append(blocksOf[b.Network], b)
	}
	for _, o := range ops {
		if o.Err != "" || o.Kind != "gateway" || o.Code != http.StatusUnprocessableEntity {
			continue
		}
		gw, err := netip.ParseAddr(o.Gateway)
		if err != nil {
			continue
		}
		key := o.Namespace + "/" + o.Name
		lo, hi := w.bounds(o)
		explained := false
		changes := perKey[key]
		i := sort.Search(len(changes), func(i int) bool { return changes[i].Rev > lo })
		if i > 0 {
			i-- // the version at lo
		}
		for ; !explained && i < len(changes) && changes[i].Rev <= hi; i++ {
			c := changes[i]
			p, err := netip.ParsePrefix(c.Obj.CIDR)
			explained = c.Type != "DELETED" && (err != nil || !p.Contains(gw) || gw == p.Masked().Addr() || (gw.Is4() && gw == lastAddress(p)))
		}
		for _, b := range blocksOf[key] {
			if explained {
				break
			}
			explained = b.Prefix.Contains(gw) && b.heldDuring(lo, hi)
		}
		if !explained {
			f.add(checkRefusedGw, "%s: refused (%s), yet no block of %s held %s and its prefix allowed it, at any revision from %d to %d", o, o.Message, key, gw, lo, hi)
		}
	}
}

func lastAddress(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

func checkWatches(f *findings, r *replay, records []watchRecord) {
	type segKey struct {
		w   string
		seg int
	}
	segs := map[segKey][]watchRecord{}
	var order []segKey
	for _, rec := range records {
		k := segKey{rec.Watcher, rec.Seg}
		if _, ok := segs[k]; !ok {
			order = append(order, k)
		}
		segs[k] = append(segs[k], rec)
	}
	for _, k := range order {
		recs := segs[k]
		name := fmt.Sprintf("watcher %s segment %d", k.w, k.seg)
		if recs[0].What != "list" {
			f.add(checkWatch, "%s does not start with a list", name)
			continue
		}
		start := recs[0].RV
		if got, want := itemsMap(recs[0].Items), r.networksAt(start); !mapsEqual(got, want) {
			f.add(checkWatch, "%s: LIST at revision %d = %v, the history has %v", name, start, got, want)
		}
		last, end := start, start
		seen := map[int64]bool{}
		for _, rec := range recs[1:] {
			if rec.What == "resume" {
				if rec.RV > end {
					end = rec.RV
				}
				continue
			}
			if rec.RV <= last {
				f.add(checkWatch, "%s: event %s %s at revision %d after revision %d (out of order or duplicate)", name, rec.Type, rec.Key, rec.RV, last)
			}
			last = max(last, rec.RV)
			end = max(end, rec.RV)
			seen[rec.RV] = true
			ok := false
			for _, c := range r.byRev[rec.RV] {
				if c.Namespace+"/"+c.Name == rec.Key && c.Type == rec.Type && c.Obj.UID == rec.UID {
					ok = true
				}
			}
			if !ok {
				f.add(checkWatch, "%s: event %s %s uid %s at revision %d is not in the history", name, rec.Type, rec.Key, rec.UID, rec.RV)
			}
		}
		// Gap-free: every Network change after the list, up to the last revision the watch
		// vouched for, was delivered.
		i := sort.Search(len(r.changes), func(i int) bool { return r.changes[i].Rev > start })
		for ; i < len(r.changes) && r.changes[i].Rev <= end; i++ {
			if c := r.changes[i]; !seen[c.Rev] {
				f.add(checkWatch, "%s (revisions %d..%d): missed %s %s/%s uid %s at revision %d", name, start, end, c.Type, c.Namespace, c.Name, c.Obj.UID, c.Rev)
			}
		}
	}
}

func itemsMap(items []listItem) map[string]string {
	m := map[string]string{}
	for _, it := range items {
		m[it.Key] = it.UID
	}
	return m
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// summary lists the findings, at most limit per check, for the log.
func (f *findings) summary(limit int) string {
	var b strings.Builder
	for _, c := range f.checks() {
		list := f.byCheck[c]
		fmt.Fprintf(&b, "VIOLATION %s: %d\n", c, len(list))
		for i, v := range list {
			if i == limit {
				fmt.Fprintf(&b, "  ... %d more (all in violations.txt)\n", len(list)-limit)
				break
			}
			fmt.Fprintf(&b, "  %s\n", v)
		}
	}
	return b.String()
}
