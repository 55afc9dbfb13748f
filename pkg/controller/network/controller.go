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

// Package network is the Network controller: it watches Networks, compares each with what the
// node's backend actually has, converges (create, repair drift, delete, collect orphans) and
// reports its node's entry in status.nodes with server-side apply.
package network

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	informers "github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions/samplecrd/v1"
	listers "github.com/samplecrd/network-apiserver/pkg/generated/listers/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/leasereclaim"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Options configure a Controller.
type Options struct {
	// NodeName is this node; it names the status entry and the field manager.
	NodeName string
	// LeaseHeld says whether this agent holds its Lease (nil: it holds none). Once its Node is
	// deleted, only an agent holding its Lease keeps reporting (NodeDeleted): the server's node
	// lifecycle loop removes the entries of one that does not.
	LeaseHeld func() bool
	// GCInterval is how often orphans are collected after the collection at start.
	GCInterval time.Duration
	// Recorder records Events on Networks; nil records none (standalone mode has no Events API).
	Recorder record.EventRecorder
	// MaxRetries is how often a failing Network is retried with backoff before it waits for
	// the next change or resync.
	MaxRetries int
	// LeaseGrace is how long a Network being deleted, with no pods attached on the node but
	// addresses still leased by the IPAM plugin, waits for those leases to go before it is
	// released anyway (its leftover leases are then removed with it). Default 30s.
	LeaseGrace time.Duration
	// Node, when set, is an informer on this node's Node object (it may hold others; only the
	// one named NodeName counts). While that Node is not Ready the node's entries say so
	// (nodestatus.MarkNodeNotReady, as network-apiserver's node lifecycle loop writes them), and
	// once it is deleted they are withdrawn; until it has been seen, or without it, entries are
	// reported as the node finds them.
	Node coreinformers.NodeInformer
	// Blocks, when set, is an informer on this node's BlockAllocations (field selector
	// nodeName=NodeName): the node then hands out addresses only from its own blocks of each
	// Network, claiming the first on realisation and another whenever fewer than
	// MinFreeAddresses of them are free. nil keeps the whole prefix in each configuration (the
	// configuration from before blocks).
	Blocks informers.BlockAllocationInformer
	// MinFreeAddresses is the free addresses a node keeps in its blocks of a Network; default
	// DefaultMinFreeAddresses.
	MinFreeAddresses int
	// Underlay, when valid, is this node's address between nodes: the pods get OverlayMTU, and
	// a Network with a VNI joins its bridges across nodes through a VXLAN device from there
	// (over UnderlayLink when set). Invalid: no segment, standalone single-node operation.
	Underlay     netip.Addr
	UnderlayLink string
	OverlayMTU   int
	// NodeLabels are this node's labels for Networks' spec.nodeSelector while its Node is not
	// known (standalone mode has none: --node-labels); once the Node has been seen, its labels
	// count instead. A node a Network does not select keeps nothing of it (see deselect).
	NodeLabels labels.Set
	// LeaseReclaim, when set, releases leases whose pod sandbox the node's container runtime no
	// longer has, every reclaimInterval(LeaseReclaimGrace); its state is every entry's
	// leaseReclaim. nil: nothing is released and the entries say so.
	LeaseReclaim      *leasereclaim.Reclaimer
	LeaseReclaimGrace time.Duration
	// CountReportInterval is how long the node waits after writing its entry of a Network
	// before it writes a change of the entry's counts alone (leases, attachments): such changes
	// are coalesced into at most one write per interval, the last of them written when the
	// interval ends. Any other change is written at once, with the counts as they are. Default
	// DefaultCountReportInterval.
	CountReportInterval time.Duration
}

// Controller converges one node's networks with the Networks in the API.
type Controller struct {
	client  versioned.Interface
	lister  listers.NetworkLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	backend netbackend.Backend
	opts    Options

	// unconfigure holds the keys of deleted Networks whose CNI configuration goes ahead of
	// their bridge (nil when the backend is no netbackend.ConfigRemover); see unconfigure.go.
	unconfigure workqueue.TypedRateLimitingInterface[string]
	remover     netbackend.ConfigRemover

	// leasesSeen records, per Network being deleted, when its leases without ports were first
	// seen (see Options.LeaseGrace).
	leasesMu   sync.Mutex
	leasesSeen map[string]time.Time
	clock      clock.PassiveClock

	nodeSynced cache.InformerSynced // nil without Options.Node
	nodeMu     sync.Mutex
	node       nodeState
	nodeLabels labels.Set // the Node's, once node.known

	blockLister  listers.BlockAllocationLister // nil without Options.Blocks
	blocksSynced cache.InformerSynced
	// claimed holds, per Network key, the answer of the node's last claim until the informer
	// has seen it, so that a claim is never repeated for want of a watch event.
	claimedMu sync.Mutex
	claimed   map[string]*v1.BlockAllocation
	// claiming counts, per Network key, the claims in flight (see enqueueAllocationChange).
	claiming map[string]int
	// refused holds, per Network key, the state at which a headroom claim was last refused while
	// the node had free addresses (see keepHeadroom).
	refused map[string]headroomRefusal

	// written records, per Network key, when the node last wrote its entry (see
	// Options.CountReportInterval).
	writtenMu sync.Mutex
	written   map[string]time.Time
	// entries holds, per Network key, the entry the node last wrote (see echo.go).
	entries map[string]v1.NetworkNodeStatus
}

// New wires the controller to an informer and a backend.
func New(client versioned.Interface, informer informers.NetworkInformer, backend netbackend.Backend, opts Options) (*Controller, error) {
	if opts.NodeName == "" {
		return nil, fmt.Errorf("the network controller needs a node name")
	}
	if opts.GCInterval == 0 {
		opts.GCInterval = 5 * time.Minute
	}
	if opts.MaxRetries == 0 {
		opts.MaxRetries = 15
	}
	if opts.LeaseGrace == 0 {
		opts.LeaseGrace = 30 * time.Second
	}
	if opts.CountReportInterval == 0 {
		opts.CountReportInterval = DefaultCountReportInterval
	}
	registerControllerMetrics()
	c := &Controller{
		client:     client,
		lister:     informer.Lister(),
		synced:     informer.Informer().HasSynced,
		backend:    backend,
		opts:       opts,
		leasesSeen: map[string]time.Time{},
		clock:      clock.RealClock{},
		queue:      newQueue("network"),
		claimed:    map[string]*v1.BlockAllocation{},
		claiming:   map[string]int{},
		refused:    map[string]headroomRefusal{},
		written:    map[string]time.Time{},
		entries:    map[string]v1.NetworkNodeStatus{},
	}
	if r, ok := backend.(netbackend.ConfigRemover); ok {
		c.remover, c.unconfigure = r, newQueue("network_unconfigure")
	}
	if opts.MinFreeAddresses == 0 {
		c.opts.MinFreeAddresses = DefaultMinFreeAddresses
	}
	if opts.Blocks != nil {
		c.blockLister = opts.Blocks.Lister()
		c.blocksSynced = opts.Blocks.Informer().HasSynced
		if _, err := opts.Blocks.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueueAllocationChange,
			UpdateFunc: func(_, obj interface{}) { c.enqueueAllocationChange(obj) },
			DeleteFunc: c.enqueueAllocation,
		}); err != nil {
			return nil, err
		}
	}
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: c.enqueue,
		UpdateFunc: func(old, obj interface{}) {
			if c.isEcho(old, obj) {
				return
			}
			c.enqueue(obj)
		},
		DeleteFunc: func(obj interface{}) {
			c.enqueue(obj)
			c.enqueueUnconfigure(obj)
		},
	})
	if err != nil || opts.Node == nil {
		return c, err
	}
	return c, c.watchNode(opts.Node)
}

// newQueue is the rate-limited queue of Network keys both of this package's loops use.
func newQueue(name string) workqueue.TypedRateLimitingInterface[string] {
	return workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 2*time.Minute),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: name})
}

func (c *Controller) enqueue(obj interface{}) {
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// Run waits for the cache, then runs the node watch, orphan collection (at start and every
// GCInterval) and the workers side by side until ctx is done. It returns only once all of them
// have stopped, so that the caller may close the backend.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	if c.unconfigure != nil {
		defer c.unconfigure.ShutDown()
	}
	logger := klog.FromContext(ctx).WithValues("node", c.opts.NodeName)
	logger.Info("Starting network controller", "workers", workers)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return fmt.Errorf("network informer did not sync")
	}
	if c.blocksSynced != nil && !cache.WaitForCacheSync(ctx.Done(), c.blocksSynced) {
		return fmt.Errorf("block allocation informer did not sync")
	}
	c.waitForNode(ctx)
	var running sync.WaitGroup
	// Drift on the node (a bridge deleted or changed by hand) is noticed at once, not at resync.
	running.Go(func() {
		if err := c.backend.Watch(ctx, c.queue.Add); err != nil && ctx.Err() == nil {
			logger.Error(err, "Watching the node's networks stopped; drift is repaired at resync only")
		}
	})
	running.Go(func() { wait.UntilWithContext(ctx, c.collectGarbage, c.opts.GCInterval) })
	if c.opts.LeaseReclaim != nil {
		// Its own loop: a leak makes no event the controller sees, the grace needs looks at a
		// steady pace, and one ListPodSandbox serves every Network. The first pass runs before
		// the workers, so the first reports already say whether the runtime answers.
		c.reclaimPass(ctx)
		running.Go(func() { c.runReclaim(ctx) })
	}
	for range workers {
		running.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	if c.unconfigure != nil {
		running.Go(func() { wait.UntilWithContext(ctx, c.runUnconfigure, time.Second) })
	}
	<-ctx.Done()
	logger.Info("Stopping network controller")
	// Workers blocked in Get return once the queue is shut down.
	c.queue.ShutDown()
	if c.unconfigure != nil {
		c.unconfigure.ShutDown()
	}
	running.Wait()
	return nil
}

func (c *Controller) runWorker(ctx context.Context) {
	for c.processNextWorkItem(ctx) {
	}
}

func (c *Controller) processNextWorkItem(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	start := time.Now()
	result, err := c.syncHandler(ctx, key)
	reconciles.WithLabelValues(result).Inc()
	reconcileDuration.WithLabelValues(result).Observe(time.Since(start).Seconds())
	switch {
	case err == nil:
		c.queue.Forget(key)
	case c.queue.NumRequeues(key) < c.opts.MaxRetries:
		reconcileErrors.WithLabelValues(netbackend.ReasonOf(err)).Inc()
		klog.FromContext(ctx).V(2).Info("Reconcile failed; retrying with backoff", "network", key, "err", err)
		c.queue.AddRateLimited(key)
	default:
		reconcileErrors.WithLabelValues(netbackend.ReasonOf(err)).Inc()
		klog.FromContext(ctx).Error(err, "Reconcile keeps failing; waiting for a change or the next resync", "network", key)
		c.queue.Forget(key)
	}
	return true
}

// syncHandler converges the Network of key and returns the result label for metrics: a Network
// gone is removed from the node, one being deleted terminates, any other is synced.
func (c *Controller) syncHandler(ctx context.Context, key string) (string, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return "error", err
	}
	n, err := c.lister.Networks(namespace).Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return c.remove(ctx, key)
	case err != nil:
		return "error", err
	case n.DeletionTimestamp != nil:
		if done, result, err := c.terminateUnselected(ctx, key, n); done {
			return result, err
		}
		return c.terminate(ctx, key, n)
	}
	if n.Spec.NodeSelector != nil && !c.labelsSettled() {
		// The Node informer has not synced yet: its labels may select the node or not. Act on
		// neither guess (a wrong one would remove a bridge, or claim a block); look again soon.
		c.queue.AddAfter(key, labelsRecheck)
		return "waiting_for_node", nil
	}
	selected, err := c.selected(n)
	if err != nil {
		_, reportErr := c.report(ctx, n, 0, nil, err)
		return "error", errors.Join(err, reportErr)
	}
	if !selected {
		return c.deselect(ctx, key, n)
	}
	c.leasesDone(key) // a drain that stopped part way starts afresh next time
	return c.sync(ctx, key, n)
}
