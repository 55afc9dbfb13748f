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
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// Kinds of violations of the block invariant: per Network, the block keys are exactly the
// blocks its BlockAllocations list, each inside the prefix and owned by its Network and node, no
// two overlap, none contains the gateway (whose key, where there is one, is the gateway's);
// nothing belongs to a Network that is gone. A Network without a gateway key is no fault.
const (
	// ViolationBlockOrphan: a block key no BlockAllocation lists, or a stale gateway key (fixed:
	// removed).
	ViolationBlockOrphan = "block-orphan"
	// ViolationBlockMissing: a block a BlockAllocation lists without its key (fixed: restored,
	// unless it would overlap).
	ViolationBlockMissing = "block-missing"
	// ViolationBlockOutside: a block outside its Network's prefix (reported).
	ViolationBlockOutside = "block-outside"
	// ViolationBlockOwner: a block key of another Network UID or node than the object listing it
	// (reported).
	ViolationBlockOwner = "block-owner"
	// ViolationBlockOverlap: two blocks of one Network overlap (reported; the API cannot do it).
	ViolationBlockOverlap = "block-overlap"
	// ViolationGatewayInBlock: a Network's gateway is inside one of its blocks (reported: an older
	// replica can move a gateway there).
	ViolationGatewayInBlock = "gateway-in-block"
	// ViolationBlockNetworkGone: a block key or BlockAllocation of a Network UID no stored Network
	// has (fixed: removed, safe since that Network is gone).
	ViolationBlockNetworkGone = "block-network-gone"
)

// blockKinds are the violation kinds of the block checks, for the metrics.
var blockKinds = []string{ViolationBlockOrphan, ViolationBlockMissing, ViolationBlockOutside, ViolationBlockOwner,
	ViolationBlockOverlap, ViolationGatewayInBlock, ViolationBlockNetworkGone}

// BlockKeys is what the verifier needs of the block keyspace's allocator.
type BlockKeys interface {
	Each(ctx context.Context, rev int64, fn func(allocator.Stored) error) (int64, error)
	EachTrusting(ctx context.Context, rev int64, trust func(key []byte, modRevision int64) bool, fn func(allocator.Stored) error) (int64, error)
	// Root is the key prefix of every block key, ending in "/" (a Network's UID follows).
	Root() string
	Key(scope string, p netip.Prefix) string
	Remove(ctx context.Context, key string, modRevision int64) (bool, error)
	Write(ctx context.Context, al allocator.Allocation, cmps []clientv3.Cmp, probes []clientv3.Op,
		check func([]*etcdserverpb.ResponseOp) error, ops ...clientv3.Op) (int64, error)
}

var _ BlockKeys = &allocator.Allocator{}

// DecodeBlockAllocationFunc decodes a BlockAllocation as the storage wrote it to etcd.
type DecodeBlockAllocationFunc func(ctx context.Context, kv *mvccpb.KeyValue) (*samplecrd.BlockAllocation, error)

type blockCheck struct {
	keys          BlockKeys
	objectsPrefix string
	decode        DecodeBlockAllocationFunc
}

// WithBlocks makes the verifier check the Networks' blocks too: the keys of keys against the
// BlockAllocations stored under objectsPrefix (which decode reads), at the revision it reads the
// Networks at.
func (r *Repair) WithBlocks(keys BlockKeys, objectsPrefix string, decode DecodeBlockAllocationFunc) *Repair {
	r.blocks = &blockCheck{keys: keys, objectsPrefix: objectsPrefix, decode: decode}
	return r
}

// etcdBlockAllocation is a BlockAllocation as read from etcd.
type etcdBlockAllocation struct {
	object      *samplecrd.BlockAllocation
	key         string
	modRevision int64
}

// readBlockObjects reads the BlockAllocations at rev.
func (r *Repair) readBlockObjects(ctx context.Context, v *Verification, rev int64) ([]etcdBlockAllocation, error) {
	var objects []etcdBlockAllocation
	_, err := r.allocator.Scan(ctx, r.blocks.objectsPrefix, rev, func(kv *mvccpb.KeyValue) error {
		b, err := r.blocks.decode(ctx, kv)
		if err != nil {
			v.Violations = append(v.Violations, Violation{Kind: ViolationInvalid, Detail: fmt.Sprintf("%s cannot be decoded: %v", kv.Key, err)})
			return nil
		}
		objects = append(objects, etcdBlockAllocation{object: b, key: string(kv.Key), modRevision: kv.ModRevision})
		return nil
	})
	return objects, err
}

// listedBlock is a block as a BlockAllocation lists it.
type listedBlock struct {
	prefix netip.Prefix
	node   string
	object etcdBlockAllocation
}

// checkBlocks checks the block invariant at rev and fixes what is safe, each fix in a
// transaction guarded by what it read. The block keys are streamed in key order, where each
// Network's keys (its scope, the Network's UID) are one run, and checked a run at a time: they
// are never all held at once. The fixes are made once the stream has ended.
func (r *Repair) checkBlocks(ctx context.Context, v *Verification, rev int64, networks []etcdNetwork, byUID networkIndex) error {
	objects, err := r.readBlockObjects(ctx, v, rev)
	if err != nil {
		return err
	}
	report := func(kind string, fixed bool, format string, args ...any) {
		v.Violations = append(v.Violations, Violation{Kind: kind, Detail: fmt.Sprintf(format, args...), Fixed: fixed})
	}
	var fixes []func()
	later := func(fix func()) { fixes = append(fixes, fix) }
	remove := func(kind, key string, modRevision int64, format string, args ...any) {
		later(func() {
			fixed, err := r.blocks.keys.Remove(ctx, key, modRevision)
			if fixed {
				repairs.WithLabelValues("removed").Inc()
			}
			report(kind, fixed, format+outcome(err), args...)
		})
	}
	objectsByUID := map[string][]etcdBlockAllocation{}
	for _, o := range objects {
		i, ok := byUID[o.object.NetworkUID]
		if !ok || networks[i].Name != o.object.Network || networks[i].Namespace != o.object.Namespace {
			remove(ViolationBlockNetworkGone, o.key, o.modRevision, "block allocation %s/%s lists blocks of network %s uid %s, which is gone",
				o.object.Namespace, o.object.Name, o.object.Network, o.object.NetworkUID)
			continue
		}
		objectsByUID[o.object.NetworkUID] = append(objectsByUID[o.object.NetworkUID], o)
	}
	checked := make([]bool, len(networks))
	var run []allocator.Stored // one scope's keys; reused from run to run
	endRun := func() {
		if len(run) == 0 {
			return
		}
		scope := run[0].Scope
		if i, ok := byUID[scope]; ok && !checked[i] {
			checked[i] = true
			r.checkNetworkBlocks(ctx, networks[i], run, objectsByUID[scope], report, remove, later)
		} else {
			for _, k := range run {
				if ok { // a second run of one scope: etcd lists keys in order, so it cannot be
					report(ViolationInvalid, false, "block key %s of network uid %s is out of key order", k.Key, k.Scope)
					continue
				}
				remove(ViolationBlockNetworkGone, k.Key, k.ModRevision, "block key %s (%s) belongs to network uid %s, which is gone", k.Key, describe(k), k.Scope)
			}
		}
		run = run[:0]
	}
	// A Network's create writes its gateway key (the only key of its scope it writes) in the
	// same transaction: once a verification has read every value, a key of a Network's scope
	// whose ModRevision is the Network's CreateRevision is that gateway key, read without its
	// value (see check). Moving the gateway replaces the key, so a key left from the create is
	// the current gateway's.
	each := r.blocks.keys.Each
	if r.valuesRead.Load() {
		root := []byte(r.blocks.keys.Root())
		trust := func(key []byte, modRevision int64) bool {
			rest, ok := bytes.CutPrefix(key, root)
			if !ok {
				return false
			}
			end := bytes.IndexByte(rest, '/')
			if end < 0 {
				return false
			}
			i, ok := byUID[string(rest[:end])]
			return ok && networks[i].createRevision == modRevision && networks[i].gateway != ""
		}
		each = func(ctx context.Context, rev int64, fn func(allocator.Stored) error) (int64, error) {
			return r.blocks.keys.EachTrusting(ctx, rev, trust, fn)
		}
	}
	_, err = each(ctx, rev, func(k allocator.Stored) error {
		if len(run) > 0 && k.Scope != run[0].Scope {
			endRun()
		}
		run = append(run, k)
		return nil
	})
	if err != nil {
		return err
	}
	endRun()
	for i, sn := range networks {
		if !checked[i] { // a Network without block keys
			r.checkNetworkBlocks(ctx, sn, nil, objectsByUID[sn.UID], report, remove, later)
		}
	}
	for _, fix := range fixes {
		fix()
	}
	return nil
}

// checkNetworkBlocks checks one Network's block keys against the blocks its BlockAllocations
// list; what it writes it hands to later.
func (r *Repair) checkNetworkBlocks(ctx context.Context, sn etcdNetwork, keys []allocator.Stored, objects []etcdBlockAllocation,
	report func(kind string, fixed bool, format string, args ...any), remove func(kind, key string, modRevision int64, format string, args ...any),
	later func(func())) {
	name := sn.Owner
	gateway, hasGateway := allocator.GatewayFor(sn.Owner, sn.cidr, sn.gateway)
	prefix, err := netip.ParsePrefix(sn.cidr)
	if err != nil || prefix.Masked() != prefix {
		return // reported as invalid by the Network check
	}
	// The blocks the objects list, in address order.
	var listed []listedBlock
	for _, o := range objects {
		for _, b := range o.object.Blocks {
			p, err := netip.ParsePrefix(b.CIDR)
			if err != nil || p.Masked() != p {
				report(ViolationBlockOutside, false, "block allocation %s/%s lists %q, which is not a canonical prefix", o.object.Namespace, o.object.Name, b.CIDR)
				continue
			}
			listed = append(listed, listedBlock{prefix: p, node: o.object.NodeName, object: o})
		}
	}
	slices.SortFunc(listed, func(x, y listedBlock) int {
		return cmp.Or(x.prefix.Addr().Compare(y.prefix.Addr()), cmp.Compare(x.prefix.Bits(), y.prefix.Bits()))
	})
	byPrefix := make(map[netip.Prefix]listedBlock, len(listed))
	var open []listedBlock
	for _, b := range listed {
		if b.prefix.Addr().Is4() != prefix.Addr().Is4() || b.prefix.Bits() < prefix.Bits() || !prefix.Contains(b.prefix.Addr()) {
			report(ViolationBlockOutside, false, "block %s of node %s is outside network %s (%s)", b.prefix, b.node, name, prefix)
		}
		if hasGateway && b.prefix.Contains(gateway.Prefix.Addr()) {
			report(ViolationGatewayInBlock, false, "the gateway %s of network %s is inside block %s of node %s", sn.gateway, name, b.prefix, b.node)
		}
		open = slices.DeleteFunc(open, func(o listedBlock) bool { return !o.prefix.Overlaps(b.prefix) })
		for _, o := range open {
			report(ViolationBlockOverlap, false, "blocks %s of node %s and %s of node %s of network %s overlap", o.prefix, o.node, b.prefix, b.node, name)
		}
		open = append(open, b)
		byPrefix[b.prefix] = b
	}
	// The keys against the listed blocks.
	seen := map[netip.Prefix]bool{}
	for _, k := range keys {
		switch {
		case k.Trusted:
			// written with the Network's create: its gateway key
		case k.Corrupt != nil:
			report(ViolationInvalid, false, "block key %s of network %s: %v", k.Key, name, k.Corrupt)
		case k.Role == allocator.RoleGateway && hasGateway && k.Prefix == gateway.Prefix:
			// its gateway key
		case k.Role == allocator.RoleGateway:
			remove(ViolationBlockOrphan, k.Key, k.ModRevision, "gateway key %s (%s) of network %s is not its gateway %s", k.Key, k.Prefix, name, sn.gateway)
		default:
			b, ok := byPrefix[k.Prefix]
			switch {
			case !ok:
				remove(ViolationBlockOrphan, k.Key, k.ModRevision, "block key %s (%s of node %s) of network %s is listed by no block allocation", k.Key, k.Prefix, k.Node, name)
			case k.Owner != sn.Owner || k.Node != b.node:
				seen[k.Prefix] = true
				report(ViolationBlockOwner, false, "block key %s (%s) of network %s holds %s node %q, but block allocation %s lists it for node %s",
					k.Key, k.Prefix, name, describe(k), k.Node, b.object.object.Name, b.node)
			default:
				seen[k.Prefix] = true
			}
		}
	}
	for _, b := range listed {
		if seen[b.prefix] {
			continue
		}
		al := allocator.Allocation{Scope: sn.UID, Prefix: b.prefix, Owner: sn.Owner, Node: b.node, Role: allocator.RoleBlock, Within: prefix}
		cmps, probes, check := unchanged(revisionGuard{sn.key, sn.createRevision, true}, revisionGuard{b.object.key, b.object.modRevision, false})
		later(func() {
			_, err := r.blocks.keys.Write(ctx, al, cmps, probes, check)
			if err == nil {
				repairs.WithLabelValues("restored").Inc()
			}
			report(ViolationBlockMissing, err == nil, "block %s of node %s of network %s has no key%s", b.prefix, b.node, name, outcome(err))
		})
	}
	// A Network without a gateway key is no fault: claims are guarded by its allocation key
	// (allocator.GatewayKeysNone), and a build before that adds the key itself when it claims.
}

// revisionGuard says that key must still be at revision: its CreateRevision (the same
// incarnation) when create is set, else its ModRevision.
type revisionGuard struct {
	key      string
	revision int64
	create   bool
}

// unchanged returns the compares of guards, the probes that read the keys when they fail, and
// the check that turns a changed key into errChangedMeanwhile (the next pass decides again);
// when every key is unchanged, the write's own guard failed, which Write tells apart.
func unchanged(guards ...revisionGuard) ([]clientv3.Cmp, []clientv3.Op, func([]*etcdserverpb.ResponseOp) error) {
	var cmps []clientv3.Cmp
	var probes []clientv3.Op
	for _, g := range guards {
		if g.create {
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(g.key), "=", g.revision))
		} else {
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(g.key), "=", g.revision))
		}
		probes = append(probes, clientv3.OpGet(g.key, clientv3.WithKeysOnly()))
	}
	return cmps, probes, func(rs []*etcdserverpb.ResponseOp) error {
		for i, g := range guards {
			var rev int64
			if kvs := rs[i].GetResponseRange().Kvs; len(kvs) > 0 {
				rev = kvs[0].ModRevision
				if g.create {
					rev = kvs[0].CreateRevision
				}
			}
			if rev != g.revision {
				return errChangedMeanwhile
			}
		}
		return nil
	}
}
