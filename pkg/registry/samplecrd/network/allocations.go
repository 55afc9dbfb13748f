package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/util/dryrun"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// Allocations makes the no-overlap guarantee part of every create and delete: a create claims its
// prefix in etcd (or is given a free one from the pools) before it is stored and gives it back if
// the create fails; a delete releases it once the Network is gone.
type Allocations struct {
	Allocator *allocator.Allocator
	// PerNamespace limits the guarantee to Networks of the same namespace.
	PerNamespace bool
	// Pools are where prefixes for spec.prefixLength come from, tried in order.
	Pools []netip.Prefix
}

// releaseTimeout bounds a release made after the request that caused it has finished.
const releaseTimeout = 30 * time.Second

func (a *Allocations) scope(namespace string) string {
	if a.PerNamespace {
		return namespace
	}
	return allocator.ClusterScope
}

func invalid(n *samplecrd.Network, errs ...*field.Error) error {
	return apierrors.NewInvalid(samplecrd.Kind("Network"), n.Name, errs)
}

// beginCreate claims (or allocates) the Network's prefix. An unparsable cidr is left to validation.
func (a *Allocations) beginCreate(ctx context.Context, obj runtime.Object, options *metav1.CreateOptions) (genericregistry.FinishFunc, error) {
	n := obj.(*samplecrd.Network)
	dryRun := dryrun.IsDryRun(options.DryRun)
	owner := allocator.Owner{Namespace: n.Namespace, Name: n.Name}
	scope := a.scope(n.Namespace)
	var prefix netip.Prefix
	switch {
	case n.Spec.CIDR == "" && n.Spec.PrefixLength > 0:
		p, err := a.allocate(ctx, scope, n, owner, dryRun)
		if err != nil {
			return nil, err
		}
		n.Spec.CIDR, prefix = p.String(), p
		if dryRun {
			return noFinish, nil
		}
	default:
		p, err := netip.ParsePrefix(n.Spec.CIDR)
		if err != nil || p.Masked().String() != n.Spec.CIDR {
			return noFinish, nil
		}
		prefix = p
		var claimed bool
		if dryRun {
			err = a.Allocator.Check(ctx, scope, p, owner)
		} else {
			claimed, err = a.Allocator.Claim(ctx, scope, p, owner)
		}
		if err != nil {
			return nil, a.overlapError(ctx, n, err)
		}
		if !claimed {
			return noFinish, nil
		}
	}
	return func(ctx context.Context, success bool) {
		if !success {
			a.release(scope, prefix, owner)
		}
	}, nil
}

func noFinish(context.Context, bool) {}

// allocate picks the first pool of a family that can hold the requested length.
func (a *Allocations) allocate(ctx context.Context, scope string, n *samplecrd.Network, owner allocator.Owner, dryRun bool) (netip.Prefix, error) {
	bits := int(n.Spec.PrefixLength)
	path := field.NewPath("spec", "prefixLength")
	var lastExhausted error
	for _, pool := range a.Pools {
		maxBits := 126
		if pool.Addr().Is4() {
			maxBits = 30
		}
		if bits < pool.Bits() || bits > maxBits {
			continue
		}
		var p netip.Prefix
		var err error
		if dryRun {
			p, err = a.Allocator.Peek(ctx, scope, pool, bits)
		} else {
			p, err = a.Allocator.Allocate(ctx, scope, pool, bits, owner)
		}
		var exhausted *allocator.ExhaustedError
		if errors.As(err, &exhausted) {
			lastExhausted = err
			continue
		}
		if err != nil {
			return netip.Prefix{}, apierrors.NewInternalError(err)
		}
		return p, nil
	}
	if lastExhausted != nil {
		return netip.Prefix{}, invalid(n, field.Invalid(path, n.Spec.PrefixLength, lastExhausted.Error()))
	}
	return netip.Prefix{}, invalid(n, field.Invalid(path, n.Spec.PrefixLength,
		fmt.Sprintf("no pool can hold a /%d (pools: %v)", bits, a.Pools)))
}

// overlapError names the other Network only when it is in the caller's namespace.
func (a *Allocations) overlapError(ctx context.Context, n *samplecrd.Network, err error) error {
	var overlap *allocator.OverlapError
	if !errors.As(err, &overlap) {
		return apierrors.NewInternalError(err)
	}
	msg := "overlaps a network in another namespace"
	if ns, _ := genericapirequest.NamespaceFrom(ctx); overlap.Other.Owner.Namespace == ns {
		msg = fmt.Sprintf("overlaps network %s (%s)", overlap.Other.Owner, overlap.Other.Prefix)
	}
	return invalid(n, field.Invalid(field.NewPath("spec", "cidr"), n.Spec.CIDR, msg))
}

// afterDelete releases the prefix of a Network that is gone.
func (a *Allocations) afterDelete(obj runtime.Object, options *metav1.DeleteOptions) {
	n, ok := obj.(*samplecrd.Network)
	if !ok || dryrun.IsDryRun(options.DryRun) {
		return
	}
	if p, err := netip.ParsePrefix(n.Spec.CIDR); err == nil {
		a.release(a.scope(n.Namespace), p, allocator.Owner{Namespace: n.Namespace, Name: n.Name})
	}
}

// release is best effort: what fails here, the repair pass removes later.
func (a *Allocations) release(scope string, p netip.Prefix, owner allocator.Owner) {
	ctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
	defer cancel()
	if err := a.Allocator.Release(ctx, scope, p, owner); err != nil {
		klog.ErrorS(err, "Releasing a network's prefix failed; the repair pass will", "network", owner.String(), "cidr", p)
	}
}

// repairPageSize is the limit of each list Repair makes. A list with a limit is served from etcd
// while the watch cache is still initialising, as it may be when the repair at start runs; a list
// without one fails then ("storage is (re)initializing"), and a failed post-start hook kills the
// server.
const repairPageSize = 500

// Repair rebuilds the allocations from the stored Networks, leaving claims younger than grace alone.
func (a *Allocations) Repair(ctx context.Context, store *REST, grace time.Duration) error {
	var networks []samplecrd.Network
	opts := &metainternalversion.ListOptions{Limit: repairPageSize}
	for {
		list, err := store.List(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), opts)
		if err != nil {
			return fmt.Errorf("listing networks: %w", err)
		}
		page := list.(*samplecrd.NetworkList)
		networks = append(networks, page.Items...)
		if page.Continue == "" {
			break
		}
		opts = &metainternalversion.ListOptions{Limit: repairPageSize, Continue: page.Continue}
	}
	var desired []allocator.Desired
	for _, n := range networks {
		if p, err := netip.ParsePrefix(n.Spec.CIDR); err == nil {
			desired = append(desired, allocator.Desired{
				Scope: a.scope(n.Namespace), Prefix: p,
				Owner: allocator.Owner{Namespace: n.Namespace, Name: n.Name},
			})
		}
	}
	result, err := a.Allocator.Repair(ctx, desired, grace)
	if err != nil {
		return err
	}
	for _, overlap := range result.Overlaps {
		klog.ErrorS(overlap, "Stored networks overlap; left as they are")
	}
	if result.Restored+result.Removed > 0 {
		klog.InfoS("Repaired network allocations", "restored", result.Restored, "removed", result.Removed, "networks", len(desired))
	}
	return nil
}
