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

package repair

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
)

// Kinds of violations of the VNI invariant: every Network has exactly one VNI, held by the pair
// of keys <root>/uid/<uid> → vni and <root>/vni/<vni> → uid, or (the single layout) by the vni
// key alone, whose VNI is the Network's status.vni; no VNI is held twice, no key belongs to a
// Network that is gone, and status.vni is the keys' VNI. Both layouts are accepted whichever one
// this server's creates write.
const (
	// ViolationVNIMissing: a Network without a VNI key (fixed: assigned).
	ViolationVNIMissing = "vni-missing"
	// ViolationVNIDuplicate: a Network whose uid key names a VNI whose key names another Network,
	// or none (fixed: its uid key removed and a free VNI assigned).
	ViolationVNIDuplicate = "vni-duplicate"
	// ViolationVNINetworkGone: a VNI key or uid key of a Network UID no stored Network has
	// (fixed: removed).
	ViolationVNINetworkGone = "vni-network-gone"
	// ViolationVNIStatus: status.vni differs from the keys (fixed: mirrored).
	ViolationVNIStatus = "vni-status"
)

// vniKinds are the violation kinds of the VNI checks, for the metrics.
var vniKinds = []string{ViolationVNIMissing, ViolationVNIDuplicate, ViolationVNINetworkGone, ViolationVNIStatus}

// VNIKeys is what the verifier needs of the VNI keys.
type VNIKeys interface {
	Each(ctx context.Context, rev int64, fn func(segment.Entry) error) error
	EachTrusting(ctx context.Context, rev int64, trust func(segment.Entry) bool, fn func(segment.Entry) error) error
	UIDKey(uid string) string
	Remove(ctx context.Context, key string, modRevision int64) (bool, error)
	Assign(ctx context.Context, uid string, cmps []clientv3.Cmp, probes []clientv3.Op, check func([]*etcdserverpb.ResponseOp) error) (int32, error)
}

var _ VNIKeys = &segment.VNIs{}

// MirrorVNIFunc copies the VNI the keys give the Network namespace/name with UID uid into its
// status.vni (through the status storage, as the server), reading the keys when it writes.
type MirrorVNIFunc func(ctx context.Context, namespace, name string, uid types.UID) error

type vniCheck struct {
	keys   VNIKeys
	mirror MirrorVNIFunc
}

// WithVNIs makes the verifier check the Networks' VNI keys too, at the revision it reads the
// Networks at; mirror restores a status.vni that differs from the keys.
func (r *Repair) WithVNIs(keys VNIKeys, mirror MirrorVNIFunc) *Repair {
	r.vnis = &vniCheck{keys: keys, mirror: mirror}
	return r
}

// vniState is what checkVNIs keeps of a Network's uid key.
type vniState struct {
	vni         int32 // the key's value, read as a VNI (parsed)
	modRevision int64
	has         bool // the Network has a uid key
	parsed      bool // its value is a number
	canonical   bool // ... written as the server writes it
	paired      bool // the vni key of that VNI names this Network
	// single: the Network has no uid key, and the vni key of its status.vni names it (the
	// single layout, segment.LayoutSingle).
	single bool
}

// checkVNIs checks the VNI invariant at rev and fixes it, each key fix in a transaction guarded
// by what it read. The keys are streamed: every uid key comes before every vni key, so a uid key
// is kept as a few numbers beside its Network (vniState) and each vni key is judged as it
// arrives; only keys to fix are held. The fixes are made once the stream has ended.
func (r *Repair) checkVNIs(ctx context.Context, v *Verification, rev int64, networks []etcdNetwork, live networkIndex) error {
	if r.valuesRead.Load() {
		hold, err := r.vniKeysHold(ctx, rev, networks, live)
		if err != nil || hold {
			return err
		}
		klog.InfoS("The VNI keys are not all as the Networks' creates wrote them: reading their values", "revision", rev)
	}
	report := func(kind string, fixed bool, format string, args ...any) {
		v.Violations = append(v.Violations, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...), Fixed: fixed})
	}
	remove := func(key string, modRevision int64) (bool, error) {
		fixed, err := r.vnis.keys.Remove(ctx, key, modRevision)
		if err == nil && !fixed {
			err = errChangedMeanwhile
		}
		if fixed {
			repairs.WithLabelValues("removed").Inc()
		}
		return fixed, err
	}
	state := make([]vniState, len(networks))
	// claims: the first Network whose uid key names a VNI, more: the others (duplicates, rare);
	// odd: uid key values that are not written as the server writes a VNI, by Network (rare);
	// heldBy: the UID a Network's VNI's vni key names, when it is another's (rare).
	claims := make(map[int32]int, len(networks))
	more := map[int32][]int{}
	odd := map[int]string{}
	heldBy := map[int]string{}
	var gone []segment.Entry // uid keys of Networks that are gone, in uid order
	type strayKey struct {
		vni int32
		key segment.Key
	}
	var stray []strayKey // vni keys no Network's uid key names back, in VNI order
	err := r.vnis.keys.Each(ctx, rev, func(e segment.Entry) error {
		switch e.Kind {
		case segment.KindCorrupt:
			report(ViolationInvalid, false, "VNI key %s cannot be read", e.Key.Key)
		case segment.KindUID:
			i, ok := live[e.UID]
			if !ok {
				gone = append(gone, e)
				return nil
			}
			parsed, err := strconv.ParseInt(e.Value, 10, 32)
			st := vniState{vni: int32(parsed), modRevision: e.ModRevision, has: true, parsed: err == nil}
			st.canonical = st.parsed && strconv.FormatInt(parsed, 10) == e.Value
			state[i] = st
			if !st.canonical {
				odd[i] = e.Value
			}
			if st.parsed {
				if _, taken := claims[st.vni]; taken {
					more[st.vni] = append(more[st.vni], i)
				} else {
					claims[st.vni] = i
				}
			}
		case segment.KindVNI:
			i, ok := live[e.Value]
			if ok && state[i].parsed && state[i].vni == e.VNI {
				state[i].paired = true
			}
			single := ok && !state[i].has && networks[i].vni != 0 && networks[i].vni == e.VNI
			if single {
				state[i].single = true
			}
			if !single && (!ok || !state[i].has || !state[i].canonical || state[i].vni != e.VNI) {
				stray = append(stray, strayKey{e.VNI, e.Key})
			}
			// The Networks whose uid key names this VNI but which this key does not name.
			if c, claimed := claims[e.VNI]; claimed && (!ok || c != i) {
				heldBy[c] = e.Value
			}
			for _, c := range more[e.VNI] {
				if !ok || c != i {
					heldBy[c] = e.Value
				}
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	claims, more = nil, nil
	// Keys of Networks that are gone, and leftovers.
	slices.SortFunc(stray, func(a, b strayKey) int { return cmp.Compare(a.vni, b.vni) })
	for _, sk := range stray {
		vni, k := sk.vni, sk.key
		switch i, ok := live[k.Value]; {
		case !ok:
			fixed, err := remove(k.Key, k.ModRevision)
			report(ViolationVNINetworkGone, fixed, "VNI %d is held by network uid %s, which is gone%s", vni, k.Value, outcome(err))
		case !state[i].has:
			// The single layout: the Network's VNI is its status.vni, and this is another.
			fixed, err := remove(k.Key, k.ModRevision)
			report(ViolationVNIDuplicate, fixed, "VNI %d is held by network uid %s, which has no uid key and status.vni %d%s", vni, k.Value, networks[i].vni, outcome(err))
		default:
			// A VNI key whose Network's uid key names another VNI is a leftover, which would
			// hold its VNI forever.
			fixed, err := remove(k.Key, k.ModRevision)
			report(ViolationVNIDuplicate, fixed, "VNI %d is held by network uid %s, whose key names VNI %q%s", vni, k.Value, uidKeyValue(state[i], odd[i]), outcome(err))
		}
	}
	for _, k := range gone {
		fixed, err := remove(k.Key.Key, k.ModRevision)
		report(ViolationVNINetworkGone, fixed, "VNI key %s (VNI %s) belongs to network uid %s, which is gone%s", k.Key.Key, k.Value, k.UID, outcome(err))
	}
	for i, sn := range networks {
		uid, name := sn.UID, sn.Owner
		if uid == "" {
			continue
		}
		var vni int32
		st := state[i]
		ok := st.has || st.single
		if st.single {
			vni = sn.vni
		}
		if st.has {
			if st.parsed && st.paired {
				vni = st.vni
			} else {
				// Half a pair, or a VNI another Network holds: drop this side, then assign anew.
				other := "no network"
				if h, held := heldBy[i]; held {
					other = "network uid " + h
				}
				value := uidKeyValue(st, odd[i])
				_, rerr := remove(r.vnis.keys.UIDKey(uid), st.modRevision)
				if rerr != nil {
					report(ViolationVNIDuplicate, false, "network %s (uid %s) has VNI %s, whose key names %s%s", name, uid, value, other, outcome(rerr))
					continue
				}
				ok = false
				report(ViolationVNIDuplicate, true, "network %s (uid %s) had VNI %s, whose key names %s: its key was removed", name, uid, value, other)
			}
		}
		if !ok {
			// Guarded by the Network's incarnation: a Network deleted meanwhile gets no keys.
			cmps, probes, check := unchanged(revisionGuard{sn.key, sn.createRevision, true})
			got, err := r.vnis.keys.Assign(ctx, uid, cmps, probes, check)
			var exhausted *segment.ExhaustedError
			switch {
			case errors.Is(err, segment.ErrTaken):
				err = errChangedMeanwhile
			case errors.As(err, &exhausted):
			case err == nil:
				vni = got
				repairs.WithLabelValues("restored").Inc()
			}
			report(ViolationVNIMissing, err == nil, "network %s (uid %s) has no VNI key%s", name, uid, outcome(err))
			if err != nil {
				continue
			}
		}
		if sn.vni != vni && r.vnis.mirror != nil {
			err := r.vnis.mirror(ctx, sn.Namespace, sn.Name, types.UID(uid))
			report(ViolationVNIStatus, err == nil, "network %s (uid %s) has status.vni %d, its key VNI %d%s", name, uid, sn.vni, vni, outcome(err))
		}
	}
	return nil
}

// errVNIKeysDiffer ends vniKeysHold's stream at the first key it cannot account for.
var errVNIKeysDiffer = errors.New("a VNI key differs from what its Network's create wrote")

// vniKeysHold is the VNI check of a verification after the first (which read every value),
// reading keys without their values: true when every Network's pair is certainly as it should
// be and no other key exists, false when anything else may be, for checkVNIs to read every value
// and judge. A Network's create writes its uid key (not in the single layout), the vni key of the
// VNI it picked and that VNI as status.vni in one transaction, and nothing else writes either key
// but a fix or a pair assigned later. So a key whose ModRevision is the CreateRevision of the
// Network expected there (the one whose UID, or whose status.vni, it is named after) holds what
// that create wrote: a
// vni key names that Network, and a uid key names the VNI of the vni key written with it, which
// is status.vni when that vni key is the one written by the same create. Other keys of live
// Networks are read with their values (pairs assigned after the create, by the segment loop or
// a fix) and must name their partner; anything else ends the pass. The blind spot is that of
// the allocation keys: a wrong value written around the API in the create's own transaction.
func (r *Repair) vniKeysHold(ctx context.Context, rev int64, networks []etcdNetwork, live networkIndex) (bool, error) {
	// vniOf: the Network whose status.vni is each VNI. A Network without one, or two with one
	// VNI, need the full check.
	vniOf := make(map[int32]int, len(networks))
	for i, sn := range networks {
		if sn.UID == "" {
			continue
		}
		if _, dup := vniOf[sn.vni]; dup || sn.vni == 0 {
			return false, nil
		}
		vniOf[sn.vni] = i
	}
	const (
		uidAtCreate uint8 = 1 << iota // the uid key, last written by the Network's create
		uidRead                       // the uid key, read: it names status.vni
		vniAtCreate                   // the vni key of status.vni, last written by the create
		vniRead                       // that vni key, read: it names the Network
	)
	seen := make([]uint8, len(networks))
	trust := func(e segment.Entry) bool {
		switch e.Kind {
		case segment.KindUID:
			i, ok := live[e.UID]
			return ok && e.ModRevision == networks[i].createRevision
		case segment.KindVNI:
			i, ok := vniOf[e.VNI]
			return ok && e.ModRevision == networks[i].createRevision
		}
		return false
	}
	err := r.vnis.keys.EachTrusting(ctx, rev, trust, func(e segment.Entry) error {
		switch e.Kind {
		case segment.KindUID:
			i, ok := live[e.UID]
			switch {
			case !ok:
			case e.Trusted:
				seen[i] |= uidAtCreate
				return nil
			case e.Value == strconv.FormatInt(int64(networks[i].vni), 10):
				seen[i] |= uidRead
				return nil
			}
		case segment.KindVNI:
			i, ok := vniOf[e.VNI]
			switch {
			case !ok:
			case e.Trusted:
				seen[i] |= vniAtCreate
				return nil
			case e.Value == networks[i].UID:
				seen[i] |= vniRead
				return nil
			}
		}
		return errVNIKeysDiffer
	})
	if errors.Is(err, errVNIKeysDiffer) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	for i, sn := range networks {
		if sn.UID == "" {
			continue
		}
		s := seen[i]
		// A uid key read without its value names the VNI its create picked, status.vni only
		// if the vni key of status.vni was written by that create too. A Network without a
		// uid key (the single layout) needs only the vni key of status.vni naming it.
		hasUID := s&(uidAtCreate|uidRead) != 0
		uid := s&uidRead != 0 || s&(uidAtCreate|vniAtCreate) == uidAtCreate|vniAtCreate
		if (hasUID && !uid) || s&(vniAtCreate|vniRead) == 0 {
			return false, nil
		}
	}
	return true, nil
}

// uidKeyValue is a uid key's value as stored ("" for none).
func uidKeyValue(st vniState, odd string) string {
	switch {
	case !st.has:
		return ""
	case !st.canonical:
		return odd
	}
	return strconv.FormatInt(int64(st.vni), 10)
}
