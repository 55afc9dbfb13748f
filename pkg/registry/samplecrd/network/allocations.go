package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/util/dryrun"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// Allocations makes the no-overlap guarantee part of the Network storage: a create writes the
// Network and its allocation in one etcd transaction guarded by everything that could overlap
// it, a delete removes both in one transaction (allocatingStore), and a create that asks for a
// prefix length is given a free prefix from the pools first (beginCreate).
type Allocations struct {
	Allocator *allocator.Allocator
	// PerNamespace limits the guarantee to Networks of the same namespace.
	PerNamespace bool
	// Pools are where prefixes for spec.prefixLength come from, tried in order.
	Pools []netip.Prefix

	// store is the Network storage these allocations are part of; Verify reads through it.
	store *allocatingStore
}

// maxPickAttempts bounds how often a create with spec.prefixLength picks again after another
// create took its pick first.
const maxPickAttempts = 32

func (a *Allocations) scope(namespace string) string {
	if a.PerNamespace {
		return namespace
	}
	return allocator.ClusterScope
}

// allocationOf is the allocation a Network needs; false when its cidr is not a canonical prefix
// (validation rejects such Networks, so only data written around the API can have one).
func (a *Allocations) allocationOf(n *samplecrd.Network) (allocator.Allocation, bool) {
	p, err := netip.ParsePrefix(n.Spec.CIDR)
	if err != nil || p.Masked() != p {
		return allocator.Allocation{}, false
	}
	return allocator.Allocation{
		Scope:  a.scope(n.Namespace),
		Prefix: p,
		Owner:  allocator.Owner{Namespace: n.Namespace, Name: n.Name, UID: string(n.UID)},
	}, true
}

// pickState follows one create request through its attempts: whether it asked for an automatic
// prefix, and how many picks it has made.
type pickState struct {
	auto     bool
	attempts int
}

type pickStateKey struct{}

// withPickState returns a context that follows a create's automatic prefix picks.
func withPickState(ctx context.Context) (context.Context, *pickState) {
	s := &pickState{}
	return context.WithValue(ctx, pickStateKey{}, s), s
}

func pickStateFrom(ctx context.Context) *pickState {
	s, _ := ctx.Value(pickStateKey{}).(*pickState)
	return s
}

// beginCreate gives a Network that asks for a prefix length a free prefix (the create's
// transaction makes sure it is still free), and checks a dry run's prefix against the stored
// allocations, since a dry run never reaches the transaction. An unparsable cidr is left to
// validation.
func (a *Allocations) beginCreate(ctx context.Context, obj runtime.Object, options *metav1.CreateOptions) (genericregistry.FinishFunc, error) {
	n := obj.(*samplecrd.Network)
	if n.Spec.CIDR == "" && n.Spec.PrefixLength > 0 {
		attempt := 0
		if s := pickStateFrom(ctx); s != nil {
			s.auto = true
			attempt = s.attempts
			s.attempts++
		}
		p, err := a.pick(ctx, a.scope(n.Namespace), n, attempt)
		if err != nil {
			return nil, err
		}
		n.Spec.CIDR = p.String()
		return noFinish, nil
	}
	if !dryrun.IsDryRun(options.DryRun) {
		return noFinish, nil
	}
	if al, ok := a.allocationOf(n); ok {
		if err := a.Allocator.Check(ctx, al); err != nil {
			return nil, allocationError(ctx, n, err)
		}
	}
	return noFinish, nil
}

func noFinish(context.Context, bool) {}

// pick takes a free prefix from the first pool of the family that can hold the requested length.
func (a *Allocations) pick(ctx context.Context, scope string, n *samplecrd.Network, attempt int) (netip.Prefix, error) {
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
		p, err := a.Allocator.Pick(ctx, scope, pool, bits, attempt)
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
		return netip.Prefix{}, invalid(n, field.Invalid(path, n.Spec.PrefixLength, lastExhausted.Error()))
	}
	return netip.Prefix{}, invalid(n, field.Invalid(path, n.Spec.PrefixLength,
		fmt.Sprintf("no pool can hold a /%d (pools: %v)", bits, a.Pools)))
}

func invalid(n *samplecrd.Network, errs ...*field.Error) error {
	return apierrors.NewInvalid(samplecrd.Kind("Network"), n.Name, errs)
}

// overlapStatus is the API error for a create whose prefix overlaps a stored Network. It is an
// APIStatus (a 422 on spec.cidr) that still carries the overlap, so that a create whose prefix
// was picked automatically can tell it lost a race and pick again.
type overlapStatus struct {
	*apierrors.StatusError
	overlap *allocator.OverlapError
}

func (e *overlapStatus) Unwrap() error { return e.overlap }

// allocationError turns an allocator error into the API's: an overlap names the other Network
// only when it is in the caller's namespace.
func allocationError(ctx context.Context, n *samplecrd.Network, err error) error {
	var overlap *allocator.OverlapError
	if !errors.As(err, &overlap) {
		return storageError(err)
	}
	msg := "overlaps a network in another namespace"
	if ns, _ := genericapirequest.NamespaceFrom(ctx); overlap.Other.Owner.Namespace == ns {
		msg = fmt.Sprintf("overlaps network %s (%s)", overlap.Other.Owner, overlap.Other.Prefix)
	}
	status := invalid(n, field.Invalid(field.NewPath("spec", "cidr"), n.Spec.CIDR, msg)).(*apierrors.StatusError)
	return &overlapStatus{StatusError: status, overlap: overlap}
}

// lostPickRace says whether err is an overlap of a create whose prefix was picked automatically.
func lostPickRace(ctx context.Context, err error) bool {
	s := pickStateFrom(ctx)
	return s != nil && s.auto && errors.As(err, new(*overlapStatus))
}

// pickRaceError is what a create with spec.prefixLength answers when every pick it made was
// taken by a concurrent create first: a conflict, which clients may retry.
func pickRaceError(n *samplecrd.Network) error {
	return apierrors.NewConflict(samplecrd.Resource("networks"), n.Name,
		fmt.Errorf("every free /%d this server picked was taken by a concurrent create first (%d attempts); retry", n.Spec.PrefixLength, maxPickAttempts))
}
