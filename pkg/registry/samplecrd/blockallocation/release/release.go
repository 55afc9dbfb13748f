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

// Package release gives a node's address blocks of a Network back once no pod of that node can
// still hold an address in them. Every server replica runs it; each release is one etcd
// transaction guarded by the revisions the decision read, so replicas racing one another, an
// agent's status write or a claim never release blocks wrongly: the loser's transaction fails.
//
// A node's BlockAllocation of Network N is released when, at one revision of N:
//   - standalone (no Node objects): N's status.nodes has no entry for the node (removed by
//     hand, or withdrawn by its agent after its last lease);
//   - attached (Node objects exist): the Node is gone (the informer, then a live GET answering
//     404) and N has no entry for the node, or the entry reports leases: 0 explicitly (a missing
//     leases field is unknown, never zero: an older replica's write drops it).
//
// and the same holds at a second observation at least the grace period later, with neither N nor
// the BlockAllocation written in between (the same ModRevisions). Then one transaction
//
//	If ModRevision(N) == r, ModRevision(BlockAllocation) == m
//	Then Delete(BlockAllocation), Delete(each block key, while it still holds its record)
//
// commits the release. Any write in between (a status write re-adding the entry or changing its
// leases, a claim) changes a revision: the decision starts again from a new first observation.
//
// It lives beside the block storage rather than among the API-client controllers because it
// reads and deletes etcd keys at revisions, with the codecs and the allocator the claims use.
package release

import (
	"context"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// DefaultGrace is the default time between the two observations of a release (Calico's GC rule).
const DefaultGrace = 30 * time.Second

// Candidate is one node's BlockAllocation of a Network, with what the decision needs of the
// Network, read at one etcd revision.
type Candidate struct {
	Namespace, Network, Node string
	// ObjectKey and ObjectRevision are the BlockAllocation's etcd key and ModRevision.
	ObjectKey      string
	ObjectRevision int64
	// NetworkKey and NetworkRevision are the Network's etcd key and ModRevision.
	NetworkKey      string
	NetworkRevision int64
	// Entry is the node's entry in the Network's status.nodes, nil when it has none.
	Entry *samplecrd.NetworkNodeStatus
	// Selector is the Network's spec.nodeSelector (nil: every node).
	Selector *metav1.LabelSelector
	// Blocks are the node's block keys as the claims wrote them.
	Blocks []allocator.Allocation
}

func (c Candidate) String() string { return c.Namespace + "/" + c.Network + " node " + c.Node }

// Store reads candidates and releases them.
type Store interface {
	// Candidates returns every BlockAllocation whose Network (same UID) exists, all read at one
	// etcd revision.
	Candidates(ctx context.Context) ([]Candidate, error)
	// Release deletes c's BlockAllocation and block keys in one transaction if the Network and
	// the BlockAllocation are still at c's revisions; false when they are not.
	Release(ctx context.Context, c Candidate) (bool, error)
}

// Nodes says whether nodes' Node objects are gone, and what their labels are (attached mode).
type Nodes interface {
	// Gone is true when the Node named name does not exist, confirmed by a live read.
	Gone(ctx context.Context, name string) (bool, error)
	// Labels returns the labels of the Node named name; known is false when they cannot be told.
	Labels(name string) (set labels.Set, known bool)
}

// EntryAllows says whether the entry rule lets c's blocks go: no entry, or (attached only) an
// entry that reports zero leases explicitly. The second result says why, for logs and tests.
func EntryAllows(c Candidate, attached bool) (bool, string) {
	switch {
	case c.Entry == nil:
		return true, "the Network has no entry for the node"
	case !attached:
		return false, "the node's entry is there"
	case c.Entry.Leases == nil:
		return false, "the node's entry does not say how many leases it holds (unknown, never zero)"
	case *c.Entry.Leases != 0:
		return false, fmt.Sprintf("the node's entry reports %d leases", *c.Entry.Leases)
	}
	return true, "the node's entry reports no leases"
}

// observation is the first observation of a candidate that may be released.
type observation struct {
	at              time.Time
	network, object int64
}

// Releaser decides and commits releases.
type Releaser struct {
	Store Store
	// Nodes is nil in standalone mode.
	Nodes Nodes
	// Grace is the least time between the two observations.
	Grace time.Duration
	Clock clock.PassiveClock

	// seen holds first observations by BlockAllocation key. Only Run's goroutine uses it.
	seen map[string]observation
}

// Pass reads the candidates once: it records first observations, and releases those observed
// releasable, at the same revisions, at least Grace ago. It returns how many it released.
func (r *Releaser) Pass(ctx context.Context) (int, error) {
	logger := klog.FromContext(ctx)
	if r.seen == nil {
		r.seen = map[string]observation{}
	}
	candidates, err := r.Store.Candidates(ctx)
	if err != nil {
		return 0, err
	}
	now := r.Clock.Now()
	present := make(map[string]bool, len(candidates))
	released := 0
	var errs []error
	for _, c := range candidates {
		present[c.ObjectKey] = true
		ok, why, err := r.releasable(ctx, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
			delete(r.seen, c.ObjectKey)
			continue
		}
		if !ok {
			if _, was := r.seen[c.ObjectKey]; was {
				logger.V(2).Info("Blocks no longer to be released", "network", c.Namespace+"/"+c.Network, "node", c.Node, "why", why)
			}
			delete(r.seen, c.ObjectKey)
			continue
		}
		first, was := r.seen[c.ObjectKey]
		if !was || first.network != c.NetworkRevision || first.object != c.ObjectRevision {
			// A first observation, or the Network or the blocks were written since the last
			// one: the grace starts (again) now.
			r.seen[c.ObjectKey] = observation{at: now, network: c.NetworkRevision, object: c.ObjectRevision}
			logger.V(2).Info("Blocks releasable; releasing them after the grace unless something changes", "network", c.Namespace+"/"+c.Network,
				"node", c.Node, "why", why, "grace", r.Grace)
			continue
		}
		if now.Sub(first.at) < r.Grace {
			continue
		}
		delete(r.seen, c.ObjectKey)
		done, err := r.Store.Release(ctx, c)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
			continue
		}
		if !done {
			// Written since the second observation: read again and decide again.
			logger.V(2).Info("The release lost to a write; deciding again", "network", c.Namespace+"/"+c.Network, "node", c.Node)
			continue
		}
		released++
		releases.Inc()
		blocks := make([]string, 0, len(c.Blocks))
		for _, b := range c.Blocks {
			blocks = append(blocks, b.Prefix.String())
		}
		logger.Info("Released a node's blocks: no pod of the node can hold an address in them", "network", c.Namespace+"/"+c.Network,
			"node", c.Node, "blocks", blocks, "why", why, "grace", r.Grace)
	}
	for key := range r.seen {
		if !present[key] {
			delete(r.seen, key)
		}
	}
	return released, errors.Join(errs...)
}

// releasable applies the rule to c as read now.
func (r *Releaser) releasable(ctx context.Context, c Candidate) (bool, string, error) {
	ok, why := EntryAllows(c, r.Nodes != nil)
	if !ok || r.Nodes == nil {
		return ok, why, nil
	}
	gone, err := r.Nodes.Gone(ctx, c.Node)
	if err != nil {
		return false, "", err
	}
	if gone {
		return true, "the Node is deleted and " + why, nil
	}
	// A Node the Network no longer selects: its agent drains the Network and withdraws its entry
	// only once nothing of it is left on the node (no conflist, no lease), so here the entry must
	// be gone, not merely report zero leases.
	if c.Entry == nil && !r.selects(c) {
		return true, "the Network's spec.nodeSelector does not select the Node and " + why, nil
	}
	return false, "the node's Node exists", nil
}

// selects is false only when the Network's selector is known not to select c's Node.
func (r *Releaser) selects(c Candidate) bool {
	if c.Selector == nil {
		return true
	}
	sel, err := metav1.LabelSelectorAsSelector(c.Selector)
	if err != nil {
		return true // validation refuses such selectors; never release on one
	}
	set, known := r.Nodes.Labels(c.Node)
	return !known || sel.Matches(set)
}

// Interval is how often Run passes for a grace: twice per grace, at least every 15 s and at
// most every second.
func Interval(grace time.Duration) time.Duration {
	return min(max(grace/2, time.Second), 15*time.Second)
}

// Run passes every Interval(Grace) until ctx is done.
func (r *Releaser) Run(ctx context.Context) {
	logger := klog.FromContext(ctx)
	logger.Info("Starting the block release loop", "grace", r.Grace, "attached", r.Nodes != nil)
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		if _, err := r.Pass(ctx); err != nil && ctx.Err() == nil {
			logger.Error(err, "Releasing blocks")
		}
	}, Interval(r.Grace))
}
