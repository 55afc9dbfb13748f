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
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
)

// DecodeFunc decodes a Network as the storage wrote it to etcd.
type DecodeFunc func(ctx context.Context, kv *mvccpb.KeyValue) (*samplecrd.Network, error)

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
}

// errChangedMeanwhile is a fix's error when what the verifier read changed before the fix.
var errChangedMeanwhile = errors.New("changed since it was read; the next verification decides again")

// New returns the repair of the allocations alloc holds for the Networks whose etcd keys start
// with networksPrefix, which decode reads; scoping says what each Network allocates.
func New(alloc allocator.RepairInterface, scoping allocator.Scoping, networksPrefix string, decode DecodeFunc) *Repair {
	return &Repair{allocator: alloc, scoping: scoping, networksPrefix: networksPrefix, decode: decode}
}

// Pacing of the periodic verification: its scans work at most paceDuty of the wall time (they
// pause in between), for at most a quarter of the interval and maxPaced; after that they run
// unpaced. A verification reads at one etcd revision, and etcd's compaction (every 5 minutes by
// default) must not overtake it.
const (
	paceDuty = 0.25
	maxPaced = 2 * time.Minute
)

// Run verifies every interval until ctx is done, starting now; each verification paces its
// scans, so that at a million Networks it does not hold a core for its whole length.
func (r *Repair) Run(ctx context.Context, interval time.Duration) {
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		pacer := etcdscan.NewPacer(paceDuty, time.Now().Add(min(interval/4, maxPaced)))
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

// etcdNetwork is a Network as read from etcd, with the revisions a repair is guarded by.
type etcdNetwork struct {
	network        *samplecrd.Network
	key            string
	createRevision int64
	modRevision    int64
}

// Verify reads the allocations and the Networks at one etcd revision, reports every violation
// of the invariant (log and metrics), and fixes what is safe: it restores a missing allocation
// (if nothing overlaps it), rewrites a Network's key that holds another owner, and removes
// allocations no Network owns — each in a transaction guarded by the revisions it read, so a
// concurrent create or delete is never undone. Overlapping Networks are only reported.
func (r *Repair) Verify(ctx context.Context) (Verification, error) {
	registerMetrics()
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
	for _, kind := range append([]string{ViolationOverlap, ViolationOrphan, ViolationMissing, ViolationMismatch, ViolationInvalid}, append(blockKinds, vniKinds...)...) {
		violations.WithLabelValues(kind).Set(float64(v.Count(kind)))
	}
	for _, x := range v.Violations {
		klog.ErrorS(nil, "Network allocation invariant violated", "kind", x.Kind, "detail", x.Detail, "fixed", x.Fixed, "revision", v.Revision)
	}
	var paused time.Duration
	if p := etcdscan.PacerFrom(ctx); p != nil {
		paused = p.Paused
	}
	klog.InfoS("Verified the network allocations", "networks", v.Networks, "revision", v.Revision, "violations", len(v.Violations), "took", took, "paused", paused)
	return v, nil
}

func (r *Repair) verify(ctx context.Context) (Verification, error) {
	for {
		stored, rev, err := r.allocator.List(ctx, 0)
		if err != nil {
			return Verification{}, err
		}
		var networks []etcdNetwork
		var v Verification
		_, err = r.allocator.Scan(ctx, r.networksPrefix, rev, func(kv *mvccpb.KeyValue) error {
			n, err := r.decode(ctx, kv)
			if err != nil {
				v.Violations = append(v.Violations, Violation{Kind: ViolationInvalid, Detail: fmt.Sprintf("%s cannot be decoded: %v", kv.Key, err)})
				return nil
			}
			networks = append(networks, etcdNetwork{network: n, key: string(kv.Key), createRevision: kv.CreateRevision, modRevision: kv.ModRevision})
			return nil
		})
		if errors.Is(err, rpctypes.ErrCompacted) {
			continue // compacted between the two reads: read both again
		}
		if err != nil {
			return Verification{}, err
		}
		var blockKeys []allocator.Stored
		var blockObjects []etcdBlockAllocation
		if r.blocks != nil {
			blockKeys, blockObjects, err = r.readBlocks(ctx, &v, rev)
			if errors.Is(err, rpctypes.ErrCompacted) {
				continue
			}
			if err != nil {
				return Verification{}, err
			}
		}
		var vniKeys segment.Stored
		if r.vnis != nil {
			vniKeys, err = r.vnis.keys.List(ctx, rev)
			if errors.Is(err, rpctypes.ErrCompacted) {
				continue
			}
			if err != nil {
				return Verification{}, err
			}
		}
		v.Revision, v.Networks = rev, len(networks)
		r.check(ctx, &v, stored, networks)
		if r.blocks != nil {
			r.checkBlocks(ctx, &v, blockKeys, blockObjects, networks)
		}
		if r.vnis != nil {
			r.checkVNIs(ctx, &v, vniKeys, networks)
		}
		return v, nil
	}
}

func (r *Repair) check(ctx context.Context, v *Verification, stored []allocator.Stored, networks []etcdNetwork) {
	byKey := make(map[string]allocator.Stored, len(stored))
	for _, st := range stored {
		byKey[st.Key] = st
	}
	uids := make(map[string]bool, len(networks))
	for _, n := range networks {
		uids[string(n.network.UID)] = true
	}
	owned := make(map[string]bool, len(networks))
	report := func(kind string, fixed bool, format string, args ...any) {
		v.Violations = append(v.Violations, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...), Fixed: fixed})
	}
	var valid []etcdNetwork
	for _, sn := range networks {
		n := sn.network
		al, ok := r.scoping.AllocationOf(n)
		if !ok {
			report(ViolationInvalid, false, "network %s/%s (uid %s) has no canonical prefix: %q", n.Namespace, n.Name, n.UID, n.Spec.CIDR)
			continue
		}
		valid = append(valid, sn)
		key := r.allocator.Key(al.Scope, al.Prefix)
		st, ok := byKey[key]
		switch {
		case !ok:
			err := r.allocator.Restore(ctx, sn.key, sn.createRevision, al)
			if err == nil {
				repairs.WithLabelValues("restored").Inc()
			}
			report(ViolationMissing, err == nil, "network %s/%s (uid %s, %s) has no allocation at %s%s", n.Namespace, n.Name, n.UID, al.Prefix, key, outcome(err))
		case st.Corrupt == nil && st.Allocation == al:
			owned[key] = true
		case st.Corrupt == nil && st.Owner.UID != "" && uids[st.Owner.UID]:
			// The key holds another stored Network's allocation: the two overlap (reported below).
			owned[key] = true
		default:
			fixed, err := r.allocator.Rewrite(ctx, key, st.ModRevision, sn.key, sn.createRevision, al)
			if fixed {
				repairs.WithLabelValues("rewritten").Inc()
				owned[key] = true
			}
			report(ViolationMismatch, fixed, "allocation %s of network %s/%s (uid %s, %s) holds %s%s", key, n.Namespace, n.Name, n.UID, al.Prefix, describe(st), outcome(err))
		}
	}
	for _, st := range stored {
		if owned[st.Key] {
			continue
		}
		fixed, err := r.allocator.Remove(ctx, st.Key, st.ModRevision)
		if fixed {
			repairs.WithLabelValues("removed").Inc()
		}
		report(ViolationOrphan, fixed, "allocation %s (%s) belongs to no stored network%s", st.Key, describe(st), outcome(err))
	}
	for _, pair := range overlappingPairs(r.scoping, valid) {
		report(ViolationOverlap, false, "networks %s and %s overlap", pair[0], pair[1])
	}
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

// overlappingPairs lists every pair of Networks of one scope whose prefixes overlap. Prefixes
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
		al, _ := scoping.AllocationOf(sn.network)
		entries = append(entries, entry{al.Scope, al.Prefix, i})
	}
	slices.SortFunc(entries, func(x, y entry) int {
		return cmp.Or(cmp.Compare(x.scope, y.scope), x.prefix.Addr().Compare(y.prefix.Addr()), cmp.Compare(x.prefix.Bits(), y.prefix.Bits()))
	})
	name := func(e entry) string {
		al, _ := scoping.AllocationOf(networks[e.index].network)
		return fmt.Sprintf("%s (%s, uid %s)", al.Owner, al.Prefix, al.Owner.UID)
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
