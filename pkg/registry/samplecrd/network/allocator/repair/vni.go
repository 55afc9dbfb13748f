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
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
)

// Kinds of violations of the VNI invariant: every Network has exactly one VNI, held by the pair
// of keys <root>/uid/<uid> → vni and <root>/vni/<vni> → uid, no VNI is held twice, no key belongs
// to a Network that is gone, and status.vni is the keys' VNI.
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
	List(ctx context.Context, rev int64) (segment.Stored, error)
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

// checkVNIs checks the VNI invariant at one revision and fixes it, each key fix in a transaction
// guarded by what it read.
func (r *Repair) checkVNIs(ctx context.Context, v *Verification, stored segment.Stored, networks []etcdNetwork, live networkIndex) {
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
	for _, k := range stored.Corrupt {
		report(ViolationInvalid, false, "VNI key %s cannot be read", k.Key)
	}
	// Keys of Networks that are gone. (Only the keys to act on are sorted, for reports in VNI
	// order: sorting all of them cost a second at a million Networks.)
	var stray []int32
	var buf [12]byte
	for vni, k := range stored.ByVNI {
		if back, ok := stored.ByUID[k.Value]; !live.has(k.Value) || !ok || back.Value != string(strconv.AppendInt(buf[:0], int64(vni), 10)) {
			stray = append(stray, vni)
		}
	}
	slices.Sort(stray)
	for _, vni := range stray {
		k := stored.ByVNI[vni]
		switch back, ok := stored.ByUID[k.Value]; {
		case !live.has(k.Value):
			fixed, err := remove(k.Key, k.ModRevision)
			report(ViolationVNINetworkGone, fixed, "VNI %d is held by network uid %s, which is gone%s", vni, k.Value, outcome(err))
		case !ok || back.Value != strconv.FormatInt(int64(vni), 10):
			// Keys are written in pairs: a VNI key whose Network's key names another VNI (or
			// none) is a leftover, which would hold its VNI forever.
			fixed, err := remove(k.Key, k.ModRevision)
			report(ViolationVNIDuplicate, fixed, "VNI %d is held by network uid %s, whose key names VNI %q%s", vni, k.Value, back.Value, outcome(err))
		}
	}
	var gone []string
	for uid := range stored.ByUID {
		if !live.has(uid) {
			gone = append(gone, uid)
		}
	}
	slices.Sort(gone)
	for _, uid := range gone {
		k := stored.ByUID[uid]
		fixed, err := remove(k.Key, k.ModRevision)
		report(ViolationVNINetworkGone, fixed, "VNI key %s (VNI %s) belongs to network uid %s, which is gone%s", k.Key, k.Value, uid, outcome(err))
	}
	for _, sn := range networks {
		uid, name := sn.UID, sn.Owner
		if uid == "" {
			continue
		}
		var vni int32
		k, ok := stored.ByUID[uid]
		if ok {
			parsed, err := strconv.ParseInt(k.Value, 10, 32)
			back, held := stored.ByVNI[int32(parsed)]
			if err == nil && held && back.Value == uid {
				vni = int32(parsed)
			} else {
				// Half a pair, or a VNI another Network holds: drop this side, then assign anew.
				other := "no network"
				if held {
					other = "network uid " + back.Value
				}
				_, rerr := remove(k.Key, k.ModRevision)
				if rerr != nil {
					report(ViolationVNIDuplicate, false, "network %s (uid %s) has VNI %s, whose key names %s%s", name, uid, k.Value, other, outcome(rerr))
					continue
				}
				ok = false
				report(ViolationVNIDuplicate, true, "network %s (uid %s) had VNI %s, whose key names %s: its key was removed", name, uid, k.Value, other)
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
}
