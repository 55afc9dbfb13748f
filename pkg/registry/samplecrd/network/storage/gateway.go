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

package storage

import (
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// errMoveGateway stops an update that changes spec.gateway, so that it commits in a transaction
// that also moves the gateway key (and fails if the new gateway is inside a block).
var errMoveGateway = errors.New("the update moves the gateway")

// errGatewayMoveRaced says that the Network or its gateway key changed between the update's read
// and its transaction: the update runs again.
var errGatewayMoveRaced = errors.New("the network changed during the gateway move")

// maxGatewayMoveAttempts bounds the re-runs of an update whose gateway move lost a race.
const maxGatewayMoveAttempts = 16

// gatewayMove is an update that changes spec.gateway, as the generic update computed it.
type gatewayMove struct {
	old, updated *samplecrd.Network
	modRevision  uint64
}

// updateMovingGateway runs an update through the generic storage; an update that changes
// spec.gateway instead commits itself together with the move of the gateway key (moveGateway).
func (s *allocatingStore) updateMovingGateway(ctx context.Context, key string, destination runtime.Object,
	preconditions *storage.Preconditions, tryUpdate storage.UpdateFunc, cachedExistingObject runtime.Object) error {
	if s.blocks == nil {
		return storageError(s.Interface.GuaranteedUpdate(ctx, key, destination, false, preconditions, tryUpdate, cachedExistingObject))
	}
	for range maxGatewayMoveAttempts {
		var move *gatewayMove
		err := s.Interface.GuaranteedUpdate(ctx, key, destination, false, preconditions,
			func(existing runtime.Object, meta storage.ResponseMeta) (runtime.Object, *uint64, error) {
				move = nil
				obj, ttl, err := tryUpdate(existing, meta)
				if err != nil {
					return obj, ttl, err
				}
				old, ok1 := existing.(*samplecrd.Network)
				updated, ok2 := obj.(*samplecrd.Network)
				if ok1 && ok2 && old.Spec.Gateway != updated.Spec.Gateway {
					move = &gatewayMove{old: old, updated: updated, modRevision: meta.ResourceVersion}
					return nil, nil, errMoveGateway
				}
				return obj, ttl, nil
			}, cachedExistingObject)
		if move == nil || !errors.Is(err, errMoveGateway) {
			return storageError(err)
		}
		err = s.moveGateway(ctx, key, move, destination)
		if !errors.Is(err, errGatewayMoveRaced) {
			return err
		}
		cachedExistingObject = nil // read the Network from etcd again
	}
	return storageError(fmt.Errorf("moving the gateway: gave up after %d attempts lost to concurrent writes", maxGatewayMoveAttempts))
}

// moveGateway commits the updated Network, removes its old gateway key and writes the new one
// (or, without gateway keys, writes the Network's allocation key again), in one transaction
// guarded by the Network's ModRevision, the old key's (and the allocation key's) ModRevision and
// the blocks around the new gateway. A new gateway inside a block is a 422 on spec.gateway
// naming it.
func (s *allocatingStore) moveGateway(ctx context.Context, key string, move *gatewayMove, destination runtime.Object) error {
	etcdKey, err := s.etcd.key(key)
	if err != nil {
		return err
	}
	newGw, ok := allocator.GatewayOf(move.updated)
	if !ok {
		return invalid(move.updated.Name, field.Invalid(field.NewPath("spec", "gateway"), move.updated.Spec.Gateway, "must be an address inside spec.cidr"))
	}
	data, stored, err := s.etcd.encode(ctx, etcdKey, move.updated)
	if err != nil {
		return err
	}
	cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(etcdKey), "=", int64(move.modRevision))}
	probes := []clientv3.Op{clientv3.OpGet(etcdKey, clientv3.WithKeysOnly())}
	ops := []clientv3.Op{clientv3.OpPut(etcdKey, stored)}
	oldModRevision := int64(-1) // -1: no old gateway key to guard
	if oldGw, ok := allocator.GatewayOf(move.old); ok {
		oldKey := s.blocks.Key(oldGw.Scope, oldGw.Prefix)
		kv, err := s.blocks.Get(ctx, oldKey)
		if err != nil {
			return storageError(err)
		}
		oldModRevision = 0
		if kv != nil {
			oldModRevision = kv.ModRevision
		}
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(oldKey), "=", oldModRevision))
		if kv != nil && string(kv.Value) == allocator.Value(oldGw) {
			ops = append(ops, clientv3.OpDelete(oldKey))
		}
		// else no gateway key (a Network from before blocks, or without gateway keys), or a
		// block there: leave that key.
		probes = append(probes, clientv3.OpGet(oldKey, clientv3.WithKeysOnly()))
	}
	// Without gateway keys (--gateway-keys=none) the new gateway is guarded, not stored, and the
	// Network's allocation key is written again, unchanged, in the same transaction: a claim is
	// guarded by that key's ModRevision as it read it with the gateway its block avoids, so every
	// claim that read the old gateway fails and reads again. A Network without an allocation key
	// (a fault the verifier reports) keeps a gateway key.
	write := s.blocks.Write
	allocModRevision := int64(-1) // -1: the allocation key is not written
	if !s.blocks.WritesGatewayKeys() {
		if al, ok := s.scoping.AllocationOf(move.old); ok {
			allocKey := s.allocator.Key(al.Scope, al.Prefix)
			kv, err := s.allocator.Get(ctx, allocKey)
			if err != nil {
				return storageError(err)
			}
			if kv != nil {
				allocModRevision = kv.ModRevision
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(allocKey), "=", kv.ModRevision))
				probes = append(probes, clientv3.OpGet(allocKey, clientv3.WithKeysOnly()))
				ops = append(ops, clientv3.OpPut(allocKey, string(kv.Value)))
				write = s.blocks.Guard
			}
		}
	}
	rev, err := write(ctx, newGw, cmps, probes, func(rs []*etcdserverpb.ResponseOp) error {
		// The Network or its old gateway key changed: run the update again. Otherwise the
		// guard of the new gateway failed, which Write tells apart (overlap or a write beside).
		if kvs := rs[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].ModRevision != int64(move.modRevision) {
			return errGatewayMoveRaced
		}
		rs = rs[1:]
		for _, want := range []int64{oldModRevision, allocModRevision} {
			if want < 0 {
				continue
			}
			var m int64
			if kvs := rs[0].GetResponseRange().Kvs; len(kvs) > 0 {
				m = kvs[0].ModRevision
			}
			if m != want {
				return errGatewayMoveRaced
			}
			rs = rs[1:]
		}
		return nil
	}, ops...)
	var overlap *allocator.OverlapError
	switch {
	case errors.Is(err, errGatewayMoveRaced):
		return err
	case errors.As(err, &overlap):
		msg := fmt.Sprintf("%s is inside block %s of node %s", move.updated.Spec.Gateway, overlap.Other.Prefix, overlap.Other.Node)
		if overlap.Other.Role != allocator.RoleBlock {
			msg = fmt.Sprintf("%s overlaps %s, which the verifier reports", move.updated.Spec.Gateway, overlap.Other.Prefix)
		}
		return invalid(move.updated.Name, field.Invalid(field.NewPath("spec", "gateway"), move.updated.Spec.Gateway, msg))
	case err != nil:
		return storageError(err)
	}
	return s.etcd.decoder.Decode(data, destination, rev)
}

// checkGateway reports, without writing, whether n's gateway is inside one of its blocks (for dry
// runs): nil, or the 422 the update would answer.
func (a *Allocations) checkGateway(ctx context.Context, n *samplecrd.Network) error {
	gw, ok := allocator.GatewayOf(n)
	if a.Blocks == nil || !ok {
		return nil // no blocks, or a gateway validation refuses (or the strategy defaults)
	}
	var overlap *allocator.OverlapError
	switch err := a.Blocks.Check(ctx, gw); {
	case errors.As(err, &overlap) && overlap.Other.Role == allocator.RoleBlock:
		return invalid(n.Name, field.Invalid(field.NewPath("spec", "gateway"), n.Spec.Gateway,
			fmt.Sprintf("%s is inside block %s of node %s", n.Spec.Gateway, overlap.Other.Prefix, overlap.Other.Node)))
	case err != nil && !errors.As(err, &overlap):
		return storageError(err)
	}
	return nil
}
