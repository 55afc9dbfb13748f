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

// Package leasereclaim releases IPAM leases whose pod sandbox no longer exists on the node (a
// node crash, a reboot, a runtime that never called DEL), asking the authority: the node's
// container runtime. It never releases a live pod's address:
//
//   - a lease is a candidate only when its container id is not among the runtime's sandboxes,
//     in any state (a stopped, NOTREADY sandbox still exists: its DEL may still come);
//   - the leases are read before the sandboxes are listed, so a sandbox created meanwhile is
//     not missed;
//   - a candidate is released only after it has been seen orphaned in every pass for the grace
//     period and its record is older than the grace: a runtime lists a sandbox only once its
//     CNI ADD has returned, so a pod being created looks orphaned for as long as its ADD takes,
//     and the grace must be longer than any ADD;
//   - the release happens under the IPAM plugin's own lock, and only when the record read again
//     under it is the same (container id and write time): otherwise the address was released
//     and given to another pod meanwhile;
//   - when the runtime cannot be asked (no endpoint, socket missing, ListPodSandbox failing)
//     nothing is released, every candidate's clock restarts, and State says why.
package leasereclaim

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/cri"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// DefaultGrace is how long a lease must look orphaned (and its record be old) before it is
// released.
const DefaultGrace = 5 * time.Minute

// States a node reports in its entries' leaseReclaim (apart from samplecrd.LeaseReclaimContainerRuntime).
const (
	StateNoEndpoint  = samplecrd.LeaseReclaimOffPrefix + "no container runtime endpoint"
	StateNoSocket    = samplecrd.LeaseReclaimOffPrefix + "container runtime socket missing"
	StateUnreachable = samplecrd.LeaseReclaimOffPrefix + "container runtime not answering"
	StateNotRunYet   = samplecrd.LeaseReclaimOffPrefix + "container runtime not asked yet"
)

// Runtime says which pod sandboxes exist on the node (cri.Client).
type Runtime interface {
	SandboxIDs(ctx context.Context) (map[string]struct{}, error)
}

// Store is the node's leases per Network key.
type Store interface {
	netbackend.LeaseReleaser
	// Keys returns the keys of the Networks whose leases are looked at.
	Keys(ctx context.Context) ([]string, error)
}

// Released is one released lease.
type Released struct {
	Key   string
	Lease netbackend.Lease
	// OrphanedSince is when the lease was first seen with no sandbox.
	OrphanedSince time.Time
}

// Reclaimer looks at the node's leases in passes.
type Reclaimer struct {
	runtime Runtime // nil: no endpoint
	store   Store
	grace   time.Duration
	clock   clock.PassiveClock

	// skipLiveness, for tests only, treats every lease as orphaned without asking the runtime:
	// the race test fails with it, which shows that the liveness check is what keeps live
	// pods' addresses.
	skipLiveness bool

	mu sync.Mutex
	// orphaned: when each lease (key, address, container) was first seen with no sandbox, in
	// an unbroken run of passes.
	orphaned map[leaseID]time.Time
	state    string
}

type leaseID struct {
	key         string
	address     netip.Addr
	containerID string
}

// New returns a Reclaimer of store's leases asking runtime (nil: none, it releases nothing),
// releasing after grace (> 0).
func New(runtime Runtime, store Store, grace time.Duration) (*Reclaimer, error) {
	if grace <= 0 {
		return nil, fmt.Errorf("the lease reclaim grace must be positive, not %v", grace)
	}
	r := &Reclaimer{runtime: runtime, store: store, grace: grace, clock: clock.RealClock{},
		orphaned: map[leaseID]time.Time{}, state: StateNotRunYet}
	if runtime == nil {
		r.state = StateNoEndpoint
	}
	return r, nil
}

// State is what the node reports in leaseReclaim: samplecrd.LeaseReclaimContainerRuntime after
// a pass that could ask the runtime, else one of the Off states.
func (r *Reclaimer) State() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// Pass looks at every lease once and releases those orphaned for the grace. It returns what it
// released (also when it fails part way) and the state after it; an error that stopped it from
// asking the runtime leaves nothing released.
func (r *Reclaimer) Pass(ctx context.Context) ([]Released, error) {
	if r.runtime == nil && !r.skipLiveness {
		return nil, nil
	}
	keys, err := r.store.Keys(ctx)
	if err != nil {
		return nil, fmt.Errorf("listing the node's Networks: %w", err)
	}
	// The leases first, then the sandboxes: a lease written after the listing is not looked at
	// in this pass, and one written before it by a pod whose ADD returned is listed.
	leases := map[string][]netbackend.Lease{}
	var errs []error
	for _, key := range keys {
		l, err := r.store.LeaseRecords(ctx, key)
		if err != nil {
			errs = append(errs, fmt.Errorf("reading the leases of %s: %w", key, err))
			continue
		}
		leases[key] = l
	}
	var live map[string]struct{}
	if !r.skipLiveness {
		live, err = r.runtime.SandboxIDs(ctx)
		if err != nil {
			state := StateUnreachable
			if errors.Is(err, cri.ErrNoSocket) {
				state = StateNoSocket
			}
			r.mu.Lock()
			r.state = state
			clear(r.orphaned) // the run of sightings is broken
			r.mu.Unlock()
			return nil, err
		}
	}
	now := r.clock.Now()
	r.mu.Lock()
	r.state = samplecrd.LeaseReclaimContainerRuntime
	seen := map[leaseID]time.Time{}
	var due []Released
	for key, ls := range leases {
		for _, l := range ls {
			if l.ContainerID == "" {
				continue // a record naming no container is never judged
			}
			if _, ok := live[l.ContainerID]; ok {
				continue
			}
			id := leaseID{key, l.Address, l.ContainerID}
			since, ok := r.orphaned[id]
			if !ok {
				since = now
			}
			seen[id] = since
			if now.Sub(since) >= r.grace && now.Sub(l.Written) >= r.grace {
				due = append(due, Released{Key: key, Lease: l, OrphanedSince: since})
			}
		}
	}
	// A lease not seen orphaned in this pass (released, or its sandbox listed) starts afresh;
	// so does a key whose leases could not be read.
	r.orphaned = seen
	r.mu.Unlock()

	var released []Released
	for _, d := range due {
		ok, err := r.store.ReleaseLease(ctx, d.Key, d.Lease)
		if err != nil {
			errs = append(errs, fmt.Errorf("releasing %s of %s (container %s): %w", d.Lease.Address, d.Key, d.Lease.ContainerID, err))
			continue
		}
		r.mu.Lock()
		delete(r.orphaned, leaseID{d.Key, d.Lease.Address, d.Lease.ContainerID})
		r.mu.Unlock()
		if ok {
			released = append(released, d)
		}
	}
	return released, errors.Join(errs...)
}
