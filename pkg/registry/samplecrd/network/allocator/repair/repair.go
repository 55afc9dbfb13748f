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

// Package repair verifies the allocation invariant (each allocation is one stored Network's, each
// stored Network has one, no two of a scope overlap) from what etcd holds at one revision, reports
// every violation in the log and in metrics, and fixes what is safe to fix.
package repair

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// DecodeFunc decodes a Network as the storage wrote it to etcd into n, clearing n first: a
// verification passes the same n for every Network it reads.
type DecodeFunc func(ctx context.Context, kv *mvccpb.KeyValue, n *samplecrd.Network) error

// Repair verifies the allocations of allocator against the Networks stored under networksPrefix.
type Repair struct {
	allocator      allocator.RepairInterface
	scoping        allocator.Scoping
	networksPrefix string
	decode         DecodeFunc
	// blocks, when set, checks the Networks' blocks too (WithBlocks).
	blocks *blockCheck
	// vnis, when set, checks the Networks' VNI keys too (WithVNIs).
	vnis *vniCheck
	// lastNetworks is how many Networks the last pass read.
	lastNetworks atomic.Int64
	// valuesRead is set once a verification has read every value: later ones read the allocation
	// and block keys without their values and trust what the revisions tell (check, checkBlocks).
	valuesRead atomic.Bool
	// lastWork is how long the last verification worked (its time less its pauses), in
	// nanoseconds: the next one's pacing plans for as much.
	lastWork atomic.Int64
	// lastKeys is how many keys the last paced verification read (counted by its pacer): the
	// next one expects as many per Network.
	lastKeys atomic.Int64
}

// errChangedMeanwhile is a fix's error when what the verifier read changed before the fix.
var errChangedMeanwhile = errors.New("changed since it was read; the next verification decides again")

// New returns the repair of the allocations alloc holds for the Networks whose etcd keys start
// with networksPrefix, which decode reads; scoping says what each Network allocates.
func New(alloc allocator.RepairInterface, scoping allocator.Scoping, networksPrefix string, decode DecodeFunc) *Repair {
	return &Repair{allocator: alloc, scoping: scoping, networksPrefix: networksPrefix, decode: decode}
}

// Pacing of the periodic verification. A verification's work (reading, joining, fixing) is
// spread evenly over a window: from its start, at most half the interval, maxWindow and
// compactionShare of etcd's compaction interval (a verification reads at one revision, which a
// compaction one interval after the revision's time removes). Its scans pause so that the work
// expected (estimatedWork) fills planShare of the window; with no estimate they work firstDuty
// of the wall time; told the keys expected (expectedKeys), a pass that falls behind works a larger
// share (etcdscan.Pacer). Past the window's end a verification runs unpaced; a pass that a
// compaction overtakes anyway is read again from the start.
const (
	maxWindow       = 4 * time.Minute
	compactionShare = 0.8
	planShare       = 0.8
	firstDuty       = 0.25
	minDuty         = 0.02
	// defaultWorkPerNetwork is the work expected per Network when no verification has read
	// enough of them to tell (about what one took at a million Networks on two cores), and
	// fewestToEstimate how many that is.
	defaultWorkPerNetwork = 40 * time.Microsecond
	fewestToEstimate      = 1000
	// defaultKeysPerNetwork is the keys expected per Network without such a verification: the
	// Network, its allocation, its gateway key and its two VNI keys.
	defaultKeysPerNetwork = 5
)

// pace returns the share of wall time a verification's work may take and how long it may pause
// for: interval is the verification interval, compaction etcd's compaction interval (0: none
// known) and work the work expected, pauses left out (0: no estimate).
func pace(interval, compaction, work time.Duration) (duty float64, window time.Duration) {
	window = min(interval/2, maxWindow)
	if compaction > 0 {
		window = min(window, time.Duration(float64(compaction)*compactionShare))
	}
	if work <= 0 {
		return firstDuty, window
	}
	duty = float64(work) / (planShare * float64(window))
	return min(max(duty, minDuty), 1), window
}

// estimatedWork is the work expected of a verification of n Networks: as long per Network as
// the last verification's work, or defaultWorkPerNetwork when it read fewer than
// fewestToEstimate (the Networks are most of what there is to read: each has its allocation, a
// gateway key, its VNI keys and its blocks).
func (r *Repair) estimatedWork(n int64) time.Duration {
	perNetwork := defaultWorkPerNetwork
	if last := r.lastNetworks.Load(); last >= fewestToEstimate {
		perNetwork = time.Duration(r.lastWork.Load() / last)
	}
	return time.Duration(n) * perNetwork
}

// expectedKeys is how many keys a verification of n Networks is expected to read: as many per
// Network as the last paced verification read, or defaultKeysPerNetwork. Its pacer keeps the
// pass on time with it (etcdscan.Pacer): a pass whose work per key turns out larger than the
// last one's spreads the difference over its window instead of running unpaced past it.
func (r *Repair) expectedKeys(n int64) int64 {
	if last, keys := r.lastNetworks.Load(), r.lastKeys.Load(); last >= fewestToEstimate && keys > 0 {
		return n * keys / last
	}
	return n * defaultKeysPerNetwork
}

// Run verifies every interval until ctx is done, starting now; each verification counts the
// Networks and paces its scans to spread the work expected over its window (pace), so that at a
// million Networks it takes a small share of a core for minutes instead of a core for most of a
// minute; told the keys expected, its pacer makes a pass slower than planned work a larger share
// rather than run past the window. compaction is etcd's compaction interval, 0 when unknown or
// off.
func (r *Repair) Run(ctx context.Context, interval, compaction time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		var work time.Duration
		var keys int64
		if n, err := r.allocator.Count(ctx, r.networksPrefix); err == nil {
			work, keys = r.estimatedWork(n), r.expectedKeys(n)
		}
		duty, window := pace(interval, compaction, work)
		pacer := etcdscan.NewPacer(duty, time.Now().Add(window))
		pacer.Expected = keys
		if _, err := r.Verify(etcdscan.WithPacer(ctx, pacer)); err != nil {
			klog.ErrorS(err, "Verifying network allocations failed")
		}
	}, interval)
}

// Kinds of violations of the allocation invariant, as the verifier reports them.
const (
	// ViolationOverlap: two stored Networks of one scope overlap.
	ViolationOverlap = "overlap"
	// ViolationOrphan: an allocation no stored Network owns.
	ViolationOrphan = "orphan"
	// ViolationMissing: a stored Network without an allocation.
	ViolationMissing = "missing"
	// ViolationMismatch: a Network's allocation key holds another owner (for example a record
	// written before allocations carried the Network's UID).
	ViolationMismatch = "mismatch"
	// ViolationInvalid: a stored Network without a canonical prefix, or an undecodable one.
	ViolationInvalid = "invalid"
	// ViolationUnrecordedLength: a stored Network's prefix length missing from its scope's
	// length record while creates trust the record (--allocation-guards=recorded, after this
	// process's first verification); a replica of a build that does not keep the record runs
	// beside this one, or something wrote etcd around the API.
	ViolationUnrecordedLength = "unrecordedLength"
)

// Violation is one break of the invariant: each allocation key is the allocation of one stored
// Network (same scope, prefix, namespace, name and UID), each stored Network has one, and no two
// stored Networks of a scope overlap.
type Violation struct {
	Kind string
	// Detail names the keys, Networks and prefixes involved.
	Detail string
	// Fixed says the verifier repaired it.
	Fixed bool
}

// Verification is the result of one pass.
type Verification struct {
	// Revision is the etcd revision at which allocations and Networks were read.
	Revision   int64
	Networks   int
	Violations []Violation
}

// Count returns how many violations of kind were found.
func (v Verification) Count(kind string) int {
	n := 0
	for _, x := range v.Violations {
		if x.Kind == kind {
			n++
		}
	}
	return n
}

// etcdNetwork is what a verification keeps of a Network read from etcd: the fields its checks
// read and the revisions a repair is guarded by. A verification holds one per stored Network
// until it ends; a decoded samplecrd.Network is some 400 bytes before its strings, this a third
// of that (see docs/performance.md, "The verifier's memory").
type etcdNetwork struct {
	allocator.Owner // namespace, name, uid
	cidr, gateway   string
	vni             int32 // status.vni
	key             string
	createRevision  int64
	modRevision     int64
}

func newEtcdNetwork(n *samplecrd.Network, kv *mvccpb.KeyValue) etcdNetwork {
	return etcdNetwork{Owner: allocator.OwnerOf(n), cidr: n.Spec.CIDR, gateway: n.Spec.Gateway, vni: n.Status.VNI,
		key: string(kv.Key), createRevision: kv.CreateRevision, modRevision: kv.ModRevision}
}

// networkIndex finds a verification's Networks by UID (each Network's position in the slice).
type networkIndex map[string]int

func (x networkIndex) has(uid string) bool {
	_, ok := x[uid]
	return ok
}

func indexNetworks(networks []etcdNetwork) networkIndex {
	byUID := make(networkIndex, len(networks))
	for i, sn := range networks {
		byUID[sn.UID] = i
	}
	return byUID
}

// Verify reads the allocations and the Networks at one etcd revision, reports every violation
// of the invariant (log and metrics), and fixes what is safe: it restores a missing allocation
// (if nothing overlaps it), rewrites a Network's key that holds another owner, and removes
// allocations no Network owns — each in a transaction guarded by the revisions it read, so a
// concurrent create or delete is never undone. Overlapping Networks are only reported.
func (r *Repair) Verify(ctx context.Context) (Verification, error) {
	registerMetrics()
	keysOnly := r.valuesRead.Load() // the allocation and block keys are read without their values
	start := time.Now()
	v, err := r.verify(ctx)
	took := time.Since(start)
	verificationSeconds.Observe(took.Seconds())
	result := "ok"
	switch {
	case err != nil:
		result = "error"
	case len(v.Violations) > 0:
		result = "violations"
	}
	verifications.WithLabelValues(result).Inc()
	if err != nil {
		return v, err
	}
	for _, kind := range append([]string{ViolationOverlap, ViolationOrphan, ViolationMissing, ViolationMismatch, ViolationInvalid,
		ViolationUnrecordedLength}, append(blockKinds, vniKinds...)...) {
		violations.WithLabelValues(kind).Set(float64(v.Count(kind)))
	}
	for _, x := range v.Violations {
		klog.ErrorS(nil, "Network allocation invariant violated", "kind", x.Kind, "detail", x.Detail, "fixed", x.Fixed, "revision", v.Revision)
	}
	var paused time.Duration
	var keys int64
	if p := etcdscan.PacerFrom(ctx); p != nil {
		paused, keys = p.Paused, p.Read
	}
	r.lastKeys.Store(keys)
	r.lastWork.Store(int64(took - paused))
	r.valuesRead.Store(true)
	klog.InfoS("Verified the network allocations", "networks", v.Networks, "revision", v.Revision, "violations", len(v.Violations), "took", took, "paused", paused, "keysOnly", keysOnly)
	return v, nil
}

func (r *Repair) verify(ctx context.Context) (Verification, error) {
	for {
		v, err := r.verifyOnce(ctx)
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue // compacted during the pass: read everything again, at a newer revision
		}
		if err != nil {
			return Verification{}, err
		}
		return v, nil
	}
}

// verifyOnce reads the Networks, which pins the revision, then checks the allocations, the
// blocks and the VNIs read at that revision one after the other, so that each check's keys are
// garbage before the next one's are read.
func (r *Repair) verifyOnce(ctx context.Context) (Verification, error) {
	var v Verification
	// Room for what the last pass found and an eighth more: the slice is not grown by doubling.
	last := r.lastNetworks.Load()
	networks := make([]etcdNetwork, 0, last+last/8)
	n := &samplecrd.Network{} // each Network is decoded into it, and kept as an etcdNetwork
	rev, err := r.allocator.Scan(ctx, r.networksPrefix, 0, func(kv *mvccpb.KeyValue) error {
		if err := r.decode(ctx, kv, n); err != nil {
			v.Violations = append(v.Violations, Violation{Kind: ViolationInvalid, Detail: fmt.Sprintf("%s cannot be decoded: %v", kv.Key, err)})
			return nil
		}
		networks = append(networks, newEtcdNetwork(n, kv))
		return nil
	})
	if err != nil {
		return v, err
	}
	r.lastNetworks.Store(int64(len(networks)))
	v.Revision, v.Networks = rev, len(networks)
	byUID := indexNetworks(networks)
	if err := r.check(ctx, &v, rev, networks, byUID); err != nil {
		return v, err
	}
	if r.blocks != nil {
		if err := r.checkBlocks(ctx, &v, rev, networks, byUID); err != nil {
			return v, err
		}
	}
	if r.vnis != nil {
		if err := r.checkVNIs(ctx, &v, rev, networks, byUID); err != nil {
			return v, err
		}
	}
	return v, nil
}

// check joins the allocation keys, streamed at rev in key order, with the Networks by each
// Network's allocation key: the keys are never all held at once. The fixes it decides are made
// once the stream has ended, so that no write is made while it is open and a pass that fails
// (etcd compacted rev) has fixed nothing.
func (r *Repair) check(ctx context.Context, v *Verification, rev int64, networks []etcdNetwork, byUID networkIndex) error {
	report := func(kind string, fixed bool, format string, args ...any) {
		v.Violations = append(v.Violations, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...), Fixed: fixed})
	}
	// byKey: the Network whose allocation is at a key; more: the others whose allocation is at
	// the same key (Networks that overlap, rare).
	byKey := make(map[string]int, len(networks))
	more := map[string][]int{}
	for i, sn := range networks {
		al, ok := r.scoping.AllocationFor(sn.Owner, sn.cidr)
		if !ok {
			report(ViolationInvalid, false, "network %s (uid %s) has no canonical prefix: %q", sn.Owner, sn.UID, sn.cidr)
			continue
		}
		key := r.allocator.Key(al.Scope, al.Prefix)
		if _, taken := byKey[key]; taken {
			more[key] = append(more[key], i)
			continue
		}
		byKey[key] = i
	}
	found := make([]bool, len(networks)) // the Network's allocation key exists
	removeOrphan := func(st allocator.Stored) {
		fixed, err := r.allocator.Remove(ctx, st.Key, st.ModRevision)
		if fixed {
			repairs.WithLabelValues("removed").Inc()
		}
		report(ViolationOrphan, fixed, "allocation %s (%s) belongs to no stored network%s", st.Key, describe(st), outcome(err))
	}
	// The fixes are built by functions of their own, which copy what they need: a closure made
	// in the stream's callback would move every streamed key to the heap, not only those to fix.
	orphanFix := func(st allocator.Stored) func() { return func() { removeOrphan(st) } }
	rewriteFix := func(st allocator.Stored, mismatched []int, owned bool) func() {
		return func() {
			for _, i := range mismatched {
				sn := networks[i]
				al, _ := r.scoping.AllocationFor(sn.Owner, sn.cidr)
				fixed, err := r.allocator.Rewrite(ctx, st.Key, st.ModRevision, sn.key, sn.createRevision, al)
				if fixed {
					repairs.WithLabelValues("rewritten").Inc()
					owned = true
				}
				report(ViolationMismatch, fixed, "allocation %s of network %s (uid %s, %s) holds %s%s", st.Key, sn.Owner, sn.UID, al.Prefix, describe(st), outcome(err))
			}
			if !owned {
				removeOrphan(st) // none of the rewrites took the key
			}
		}
	}
	var fixes []func()
	// A Network's create writes its allocation in the same transaction, so an allocation key
	// whose ModRevision is the CreateRevision of a Network expected there holds that Network's
	// allocation, unless something wrote that key in that very transaction around the API. Once
	// a verification has read every value (the first of this process: records from before
	// allocations carried the UID, a restored keyspace), the later ones read the keys without
	// their values (from etcd's index) and read only the values of keys they cannot trust this way.
	each := r.allocator.Each
	if r.valuesRead.Load() {
		trust := func(key []byte, modRevision int64) bool {
			first, ok := byKey[string(key)]
			if !ok {
				return false
			}
			if networks[first].createRevision == modRevision {
				return true
			}
			for _, i := range more[string(key)] {
				if networks[i].createRevision == modRevision {
					return true
				}
			}
			return false
		}
		each = func(ctx context.Context, rev int64, fn func(allocator.Stored) error) (int64, error) {
			return r.allocator.EachTrusting(ctx, rev, trust, fn)
		}
	}
	_, err := each(ctx, rev, func(st allocator.Stored) error {
		first, ok := byKey[st.Key]
		if !ok {
			fixes = append(fixes, orphanFix(st))
			return nil
		}
		var mismatched []int
		owned := false
		judge := func(i int) {
			found[i] = true
			sn := networks[i]
			al, _ := r.scoping.AllocationFor(sn.Owner, sn.cidr)
			switch {
			case st.Trusted:
				// Written with the create of a Network expected here: this one's, or one it
				// overlaps (reported below).
				owned = true
			case st.Corrupt == nil && st.Allocation == al:
				owned = true
			case st.Corrupt == nil && st.Owner.UID != "" && byUID.has(st.Owner.UID):
				// The key holds another stored Network's allocation: the two overlap (reported below).
				owned = true
			default:
				mismatched = append(mismatched, i)
			}
		}
		judge(first)
		for _, i := range more[st.Key] {
			judge(i)
		}
		if len(mismatched) > 0 {
			fixes = append(fixes, rewriteFix(st, mismatched, owned))
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, fix := range fixes {
		fix()
	}
	for i, sn := range networks {
		al, ok := r.scoping.AllocationFor(sn.Owner, sn.cidr)
		if !ok || found[i] {
			continue
		}
		err := r.allocator.Restore(ctx, sn.key, sn.createRevision, al)
		if err == nil {
			repairs.WithLabelValues("restored").Inc()
		}
		report(ViolationMissing, err == nil, "network %s (uid %s, %s) has no allocation at %s%s", sn.Owner, sn.UID, al.Prefix, r.allocator.Key(al.Scope, al.Prefix), outcome(err))
	}
	for _, pair := range overlappingPairs(r.scoping, networks) {
		report(ViolationOverlap, false, "networks %s and %s overlap", pair[0], pair[1])
	}
	return r.checkLengths(ctx, report, networks)
}

// checkLengths makes the length records hold every stored Network's prefix length
// (allocator.RecordLengths). A length missing while creates trust the records is a violation;
// while they do not (--allocation-guards=all during a rolling upgrade from a build that keeps no
// records, or the first verification of a process) it is older builds' creates, recorded
// without a report.
func (r *Repair) checkLengths(ctx context.Context, report func(kind string, fixed bool, format string, args ...any), networks []etcdNetwork) error {
	findings, err := r.allocator.RecordLengths(ctx, func(yield func(string, netip.Prefix) bool) {
		for _, sn := range networks {
			if al, ok := r.scoping.AllocationFor(sn.Owner, sn.cidr); ok && !yield(al.Scope, al.Prefix) {
				return
			}
		}
	})
	if err != nil {
		return err
	}
	for _, f := range findings {
		if f.Fixed {
			repairs.WithLabelValues("lengthsRecorded").Inc()
		}
		if f.Trusted {
			report(ViolationUnrecordedLength, f.Fixed, "length record %s lacks the stored prefix lengths %v%s", f.Record, f.Missing, outcome(f.Err))
		} else {
			klog.InfoS("Recorded prefix lengths stored by replicas that keep no length record", "record", f.Record, "lengths", f.Missing, "recorded", f.Fixed, "err", f.Err)
		}
	}
	return nil
}

func outcome(err error) string {
	if err == nil {
		return ""
	}
	return fmt.Sprintf(" (not fixed: %v)", err)
}

func describe(st allocator.Stored) string {
	if st.Corrupt != nil {
		return fmt.Sprintf("a corrupt record: %v", st.Corrupt)
	}
	return fmt.Sprintf("%s of %s uid %q", st.Prefix, st.Owner, st.Owner.UID)
}

// overlappingPairs lists every pair of Networks of one scope whose prefixes overlap, of those
// with a canonical prefix (the others are reported as invalid). Prefixes
// are nested or disjoint, so after sorting by start address (longer prefixes first) a Network
// overlaps exactly the earlier ones whose range still covers its start.
func overlappingPairs(scoping allocator.Scoping, networks []etcdNetwork) [][2]string {
	type entry struct {
		scope  string
		prefix netip.Prefix
		index  int // into networks: names are formatted only for the pairs found
	}
	entries := make([]entry, 0, len(networks))
	for i, sn := range networks {
		if al, ok := scoping.AllocationFor(sn.Owner, sn.cidr); ok {
			entries = append(entries, entry{al.Scope, al.Prefix, i})
		}
	}
	slices.SortFunc(entries, func(x, y entry) int {
		return cmp.Or(cmp.Compare(x.scope, y.scope), x.prefix.Addr().Compare(y.prefix.Addr()), cmp.Compare(x.prefix.Bits(), y.prefix.Bits()))
	})
	name := func(e entry) string {
		sn := networks[e.index]
		return fmt.Sprintf("%s (%s, uid %s)", sn.Owner, e.prefix, sn.UID)
	}
	var pairs [][2]string
	var open []entry
	for _, e := range entries {
		open = slices.DeleteFunc(open, func(o entry) bool {
			return o.scope != e.scope || o.prefix.Addr().Is4() != e.prefix.Addr().Is4() || !o.prefix.Contains(e.prefix.Addr())
		})
		for _, o := range open {
			pairs = append(pairs, [2]string{name(o), name(e)})
		}
		open = append(open, e)
	}
	return pairs
}
