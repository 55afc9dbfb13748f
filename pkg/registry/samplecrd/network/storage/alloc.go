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
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
)

// Allocations makes the no-overlap guarantee part of the Network storage: a create writes the
// Network and its allocation in one etcd transaction guarded by everything that could overlap
// it, a delete removes both in one transaction (allocatingStore), and a create that asks for a
// prefix length is given a free prefix from the pools first (prepare).
type Allocations struct {
	Allocator allocator.Interface
	Scoping   allocator.Scoping
	// Pools are where prefixes for spec.prefixLength come from, tried in order.
	Pools []netip.Prefix
	// Blocks is the allocator of the block keyspace (scope = Network UID), nil without blocks:
	// a create then also writes the Network's gateway key, a gateway change moves it, and a
	// delete removes the Network's block keys and its BlockAllocations (under BlockObjects, the
	// etcd prefix of BlockAllocations, ending in "/"), each in the Network's own transaction.
	Blocks       *allocator.Allocator
	BlockObjects string
	// NodeBlocks reads a node's BlockAllocation of a Network for the check of status writes
	// (nil: no check).
	NodeBlocks NodeBlocksFunc
	// VNIs are the Networks' VNI keys (nil: no VNIs): a create assigns its Network a VNI in its
	// own transaction (status.vni), a delete removes the keys in its own.
	VNIs *segment.VNIs
	// Pages, when set, reads the continue pages of paged lists of Networks from etcd without the
	// count a unary Range pays (nil: the generic storage reads them).
	Pages *etcdscan.Scanner
}

// maxCreateAttempts bounds how often a create runs again after a concurrent create took first
// the prefix it picked for spec.prefixLength, or (server-side apply) the name it creates.
const maxCreateAttempts = 32

// createFunc runs a create once through the generic store, as attempt number attempt. It returns
// the Network whose prefix it picked for spec.prefixLength, nil when it picked none.
type createFunc func(attempt int) (runtime.Object, *samplecrd.Network, error)

// retry is the one retry loop of every create path. It runs create again when the prefix it
// picked was taken by a concurrent create first (its transaction found an overlap), so that
// admission and validation see the prefix the Network is stored with; and, when nameTakenIsUpdate
// (server-side apply), when a concurrent create took its name, which makes it an update. An
// overlap it does not retry is answered as the API's 422.
func (a *Allocations) retry(ctx context.Context, nameTakenIsUpdate bool, create createFunc) (runtime.Object, error) {
	for attempt := 0; ; attempt++ {
		out, picked, err := create(attempt)
		var overlap *allocator.OverlapError
		last := attempt+1 == maxCreateAttempts
		switch {
		case errors.As(err, &overlap) && picked != nil && last:
			return nil, pickRaceError(picked)
		case errors.As(err, &overlap) && picked != nil:
			// Pick again.
		case errors.As(err, &overlap):
			return nil, overlapError(ctx, overlap.Allocation.Owner.Name, overlap.Allocation.Prefix.String(), overlap)
		case nameTakenIsUpdate && apierrors.IsAlreadyExists(err) && !last:
			// Created by someone else meanwhile: this is an update after all.
		default:
			return out, err
		}
	}
}

// prepare does what a create allocates before the generic store runs it: it gives a Network
// that asks for a prefix length a free prefix (the create's transaction makes sure it is still
// free) and reports true, or checks a dry run's prefix against the stored allocations, since a
// dry run never reaches the transaction. Its errors name the Network name; an unparsable cidr is
// left to validation.
func (a *Allocations) prepare(ctx context.Context, n *samplecrd.Network, name string, attempt int, dryRun bool) (bool, error) {
	if n.Spec.CIDR == "" && n.Spec.PrefixLength > 0 {
		p, err := a.pick(ctx, n, name, attempt)
		if err != nil {
			return false, err
		}
		n.Spec.CIDR = p.String()
		return true, nil
	}
	if !dryRun {
		return false, nil
	}
	al, ok := a.Scoping.AllocationOf(n)
	if !ok {
		return false, nil
	}
	var overlap *allocator.OverlapError
	switch err := a.Allocator.Check(ctx, al); {
	case errors.As(err, &overlap):
		return false, overlapError(ctx, name, n.Spec.CIDR, overlap)
	case err != nil:
		return false, storageError(err)
	}
	return false, nil
}

// pick takes a free prefix from the first pool of the family that can hold the requested length:
// the lowest on the first attempt, so that a dry run shows what a create would get.
func (a *Allocations) pick(ctx context.Context, n *samplecrd.Network, name string, attempt int) (netip.Prefix, error) {
	bits := int(n.Spec.PrefixLength)
	path := field.NewPath("spec", "prefixLength")
	var lastExhausted error
	for _, pool := range a.Pools {
		if bits < pool.Bits() || bits > samplecrd.MaxPrefixLength(pool.Addr()) {
			continue
		}
		p, err := a.Allocator.Pick(ctx, a.Scoping.Scope(n.Namespace), pool, bits, attempt)
		var exhausted *allocator.ExhaustedError
		if errors.As(err, &exhausted) {
			lastExhausted = err
			continue
		}
		if err != nil {
			return netip.Prefix{}, storageError(err)
		}
		return p, nil
	}
	if lastExhausted != nil {
		return netip.Prefix{}, invalid(name, field.Invalid(path, n.Spec.PrefixLength, lastExhausted.Error()))
	}
	return netip.Prefix{}, invalid(name, field.Invalid(path, n.Spec.PrefixLength,
		fmt.Sprintf("no pool can hold a /%d (pools: %v)", bits, a.Pools)))
}

func invalid(name string, errs ...*field.Error) error {
	return apierrors.NewInvalid(samplecrd.Kind("Network"), name, errs)
}

// overlapError is the API's answer to a create of Network name whose cidr overlaps a stored
// Network: a 422 on spec.cidr that names the other Network only when it is in the caller's
// namespace.
func overlapError(ctx context.Context, name, cidr string, overlap *allocator.OverlapError) error {
	msg := "overlaps a network in another namespace"
	if ns, _ := genericapirequest.NamespaceFrom(ctx); overlap.Other.Owner.Namespace == ns {
		msg = fmt.Sprintf("overlaps network %s (%s)", overlap.Other.Owner, overlap.Other.Prefix)
	}
	return invalid(name, field.Invalid(field.NewPath("spec", "cidr"), cidr, msg))
}

// pickRaceError is what a create with spec.prefixLength answers when every pick it made was
// taken by a concurrent create first: a conflict, which clients may retry.
func pickRaceError(n *samplecrd.Network) error {
	return apierrors.NewConflict(samplecrd.Resource("networks"), n.Name,
		fmt.Errorf("every free /%d this server picked was taken by a concurrent create first (%d attempts); retry", n.Spec.PrefixLength, maxCreateAttempts))
}
