// Package network is the Network controller: it watches Networks, compares each with what the
// node's backend actually has, converges (create, repair drift, delete, collect orphans) and
// reports its node's entry in status.nodes with server-side apply.
package network

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
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
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Event reasons recorded on Networks.
const (
	EventCreated  = "Created"
	EventRepaired = "Repaired"
	// EventAdopted: the node had an unmarked bridge with exactly the Network's name and gateway
	// (the CNI bridge plugin made it for a pod attached before the controller ran), now ours.
	EventAdopted = "Adopted"
	EventDeleted = "Deleted"
	EventFailed  = "Failed"
)

// Options configure a Controller.
type Options struct {
	// NodeName is this node; it names the status entry and the field manager.
	NodeName string
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
	// (MarkNodeNotReady, as network-apiserver's node lifecycle loop writes them), and once it is
	// deleted they are withdrawn; until it has been seen, or without it, entries are reported as
	// the node finds them.
	Node coreinformers.NodeInformer
}

// Controller converges one node's networks with the Networks in the API.
type Controller struct {
	client  versioned.Interface
	lister  listers.NetworkLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	backend netbackend.Backend
	opts    Options

	// leasesSeen records, per Network being deleted, when its leases without ports were first
	// seen (see Options.LeaseGrace).
	leasesMu   sync.Mutex
	leasesSeen map[string]time.Time
	clock      clock.PassiveClock

	nodeSynced cache.InformerSynced // nil without Options.Node
	nodeMu     sync.Mutex
	node       nodeState
}

// nodeSyncTimeout bounds how long Run waits for the Node informer before it starts the workers.
const nodeSyncTimeout = 10 * time.Second

// FieldManagerPrefix is the prefix of each node's field manager for status.nodes.
const FieldManagerPrefix = "network-controller/"

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
	registerControllerMetrics()
	c := &Controller{
		client:     client,
		lister:     informer.Lister(),
		synced:     informer.Informer().HasSynced,
		backend:    backend,
		opts:       opts,
		leasesSeen: map[string]time.Time{},
		clock:      clock.RealClock{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, 2*time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "network"}),
	}
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    c.enqueue,
		UpdateFunc: func(_, obj interface{}) { c.enqueue(obj) },
		DeleteFunc: c.enqueue,
	})
	if err != nil || opts.Node == nil {
		return c, err
	}
	c.nodeSynced = opts.Node.Informer().HasSynced
	_, err = opts.Node.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.nodeChanged(obj, false) },
		UpdateFunc: func(_, obj interface{}) { c.nodeChanged(obj, false) },
		DeleteFunc: func(obj interface{}) { c.nodeChanged(obj, true) },
	})
	return c, err
}

// nodeChanged records what a Node event says of this node (deleted: the event is the Node's
// deletion) and, when that changes how the node reports, requeues every Network.
func (c *Controller) nodeChanged(obj interface{}, deleted bool) {
	if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tombstone.Obj
	}
	node, ok := obj.(*corev1.Node)
	if !ok || node.Name != c.opts.NodeName {
		return
	}
	state := nodeState{known: true, deleted: deleted}
	if ready, why := NodeReadiness(node); !deleted && !ready {
		state.why = why
	}
	c.nodeMu.Lock()
	changed := c.node != state
	c.node = state
	c.nodeMu.Unlock()
	if !changed {
		return
	}
	klog.InfoS("This node's Node changed; reporting on every Network again", "node", c.opts.NodeName,
		"ready", !deleted && state.why == "", "notReadyBecause", state.why, "deleted", deleted)
	networks, err := c.lister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, n := range networks {
		c.enqueue(n)
	}
}

// nodeStatus returns what is known of this node's Node.
func (c *Controller) nodeStatus() nodeState {
	c.nodeMu.Lock()
	defer c.nodeMu.Unlock()
	return c.node
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
	logger := klog.FromContext(ctx).WithValues("node", c.opts.NodeName)
	logger.Info("Starting network controller", "workers", workers)
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return fmt.Errorf("network informer did not sync")
	}
	if c.nodeSynced != nil {
		// So that a node that is not Ready at start does not first report Ready. The Node is
		// not required: without it (no permission to read Nodes, no such Node) the node
		// reports as it finds things, and a Node seen later takes effect then.
		syncCtx, cancel := context.WithTimeout(ctx, nodeSyncTimeout)
		if !cache.WaitForCacheSync(syncCtx.Done(), c.nodeSynced) && ctx.Err() == nil {
			logger.Info("The informer on this node's Node has not synced; reporting without it until it does", "timeout", nodeSyncTimeout)
		}
		cancel()
	}
	var running sync.WaitGroup
	// Drift on the node (a bridge deleted or changed by hand) is noticed at once, not at resync.
	running.Go(func() {
		if err := c.backend.Watch(ctx, c.queue.Add); err != nil && ctx.Err() == nil {
			logger.Error(err, "Watching the node's networks stopped; drift is repaired at resync only")
		}
	})
	running.Go(func() { wait.UntilWithContext(ctx, c.collectGarbage, c.opts.GCInterval) })
	for range workers {
		running.Go(func() { wait.UntilWithContext(ctx, c.runWorker, time.Second) })
	}
	<-ctx.Done()
	logger.Info("Stopping network controller")
	// Workers blocked in Get return once the queue is shut down.
	c.queue.ShutDown()
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
	result, err := c.sync(ctx, key)
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

// sync converges one Network and returns the result label for metrics.
func (c *Controller) sync(ctx context.Context, key string) (string, error) {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return "error", err
	}
	n, err := c.lister.Networks(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return c.remove(ctx, key)
	}
	if err != nil {
		return "error", err
	}
	if n.DeletionTimestamp != nil {
		return c.terminate(ctx, key, n)
	}
	// The finalizer goes on before the configuration is written, so no pod can attach to a
	// Network that is not protected.
	if !slices.Contains(n.Finalizers, ProtectionFinalizer) {
		if n, err = setFinalizer(ctx, c.client, n, true); err != nil {
			return "error", err
		}
	}

	desired, err := desiredOf(key, n)
	if err != nil {
		_, err = c.report(ctx, n, 0, err)
		return "error", err
	}
	before, observeErr := c.backend.Observe(ctx, key)
	changes, ensureErr := c.backend.Ensure(ctx, desired)
	if _, err := c.report(ctx, n, c.attachments(ctx, key), ensureErr); err != nil {
		return "error", err
	}
	if ensureErr != nil {
		return "error", ensureErr
	}
	if len(changes) == 0 {
		return "in_sync", nil
	}
	reason := EventRepaired
	if observeErr == nil && (before == nil || before.Bridge == "" && before.CNIConfig == nil) {
		reason = EventCreated
	}
	if slices.ContainsFunc(changes, func(c string) bool { return strings.HasPrefix(c, netbackend.AdoptedPrefix) }) {
		reason = EventAdopted
	}
	c.event(n, "Normal", reason, fmt.Sprintf("%s on node %s: %v", reason, c.opts.NodeName, changes))
	klog.FromContext(ctx).Info("Converged network", "network", key, "reason", reason, "changes", changes)
	return "changed", nil
}

func desiredOf(key string, n *v1.Network) (netbackend.Desired, error) {
	prefix, err := netip.ParsePrefix(n.Spec.CIDR)
	if err != nil {
		return netbackend.Desired{}, netbackend.Errorf("InvalidSpec", "spec.cidr %q: %v", n.Spec.CIDR, err)
	}
	gateway, err := netip.ParseAddr(n.Spec.Gateway)
	if err != nil {
		return netbackend.Desired{}, netbackend.Errorf("InvalidSpec", "spec.gateway %q: %v", n.Spec.Gateway, err)
	}
	return netbackend.Desired{Key: key, Prefix: prefix, Gateway: gateway, IPMasq: n.Annotations[IPMasqAnnotation] == "true"}, nil
}

// IPMasqAnnotation set to "true" on a Network makes the CNI bridge plugin masquerade its pods'
// traffic leaving the prefix (ipMasq in the configuration list); absent or anything else, off.
const IPMasqAnnotation = "samplecrd.k8s.io/ip-masq"

// ProtectionFinalizer keeps a Network that is being deleted while any node reports pods
// attached to it, the way Kubernetes protects a PersistentVolumeClaim in use: the node keeps the
// bridge and the CNI configuration, so the runtime can still DEL its pods (and host-local
// release their addresses), and the Network goes once every node reports none.
const ProtectionFinalizer = "samplecrd.k8s.io/network-protection"

// ReasonTerminating is a node's reason while the Network it serves is being deleted.
const ReasonTerminating = "Terminating"

// attachments returns the number of pods attached to key's bridge on this node (0 when unknown).
func (c *Controller) attachments(ctx context.Context, key string) int32 {
	a, err := c.backend.Observe(ctx, key)
	if err != nil || a == nil {
		return 0
	}
	return int32(len(a.Ports))
}

// terminate handles a Network being deleted: while pods are attached on this node it keeps (and
// repairs) the bridge and configuration and reports them; with none it reports zero and, when
// every node's entry says zero, removes the finalizer, after which the Network goes and the
// node's part is removed like any deleted Network's.
func (c *Controller) terminate(ctx context.Context, key string, n *v1.Network) (string, error) {
	if !slices.Contains(n.Finalizers, ProtectionFinalizer) {
		return c.remove(ctx, key) // only other finalizers remain: this node's part goes now
	}
	// Unlike a status report, the release must not guess: an unreadable node keeps the Network.
	actual, err := c.backend.Observe(ctx, key)
	if err != nil {
		return "error", err
	}
	var count int32
	if actual != nil {
		count = int32(len(actual.Ports))
	}
	if count > 0 {
		c.leasesDone(key)
		var failure error
		if desired, err := desiredOf(key, n); err == nil {
			_, failure = c.backend.Ensure(ctx, desired)
		}
		if failure == nil {
			failure = netbackend.Errorf(ReasonTerminating,
				"the Network is being deleted but %d pod(s) are attached on node %s; the bridge and CNI configuration stay until the runtime detaches them", count, c.opts.NodeName)
		}
		if _, err := c.report(ctx, n, count, failure); err != nil {
			return "error", err
		}
		return "terminating", nil
	}
	// A runtime's DEL removes the pod's veth before the IPAM plugin releases its address:
	// releasing now would remove host-local's directory under that DEL, which then leaves it
	// behind. Wait (a little) for the leases to go.
	if actual != nil && len(actual.Leases) > 0 {
		if c.leasesPending(key) {
			// The message does not count down: each recheck would rewrite the status.
			if _, err := c.report(ctx, n, 0, netbackend.Errorf(ReasonTerminating,
				"the Network is being deleted; no pods are attached on node %s, but addresses %s are still leased (a runtime's DEL under way?): waiting for their release, at most %v",
				c.opts.NodeName, strings.Join(actual.Leases, ", "), c.opts.LeaseGrace)); err != nil {
				return "error", err
			}
			c.queue.AddAfter(key, leaseRecheck)
			return "terminating", nil
		}
		klog.FromContext(ctx).Info("Leases without pods outlived the grace period; they go with the Network",
			"network", key, "leases", actual.Leases, "grace", c.opts.LeaseGrace)
	}
	c.leasesDone(key)
	updated, err := c.report(ctx, n, 0, netbackend.Errorf(ReasonTerminating,
		"the Network is being deleted; no pods are attached on node %s", c.opts.NodeName))
	if err != nil || updated == nil {
		return "error", err
	}
	if !releasable(updated) {
		klog.FromContext(ctx).V(2).Info("Deletion waits for pods on another node", "network", key)
		return "terminating", nil
	}
	if _, err := setFinalizer(ctx, c.client, updated, false); err != nil {
		return "error", err
	}
	klog.FromContext(ctx).Info("No pods attached on any node; released the Network for deletion", "network", key)
	return "terminating", nil
}

// leaseRecheck is how often a Network waiting for its leases (see Options.LeaseGrace) looks
// again: host-local's files are not watched.
const leaseRecheck = 200 * time.Millisecond

// leasesPending records that key has leases without ports and tells whether to keep waiting for
// them.
func (c *Controller) leasesPending(key string) bool {
	c.leasesMu.Lock()
	defer c.leasesMu.Unlock()
	first, ok := c.leasesSeen[key]
	if !ok {
		first = c.clock.Now()
		c.leasesSeen[key] = first
	}
	return c.clock.Since(first) < c.opts.LeaseGrace
}

// leasesDone forgets key's wait for leases.
func (c *Controller) leasesDone(key string) {
	c.leasesMu.Lock()
	defer c.leasesMu.Unlock()
	delete(c.leasesSeen, key)
}

// releasable tells whether n carries ProtectionFinalizer and no node's entry reports attachments.
func releasable(n *v1.Network) bool {
	if !slices.Contains(n.Finalizers, ProtectionFinalizer) {
		return false
	}
	for _, entry := range n.Status.Nodes {
		if entry.Attachments > 0 {
			return false
		}
	}
	return true
}

// setFinalizer adds (add) or removes ProtectionFinalizer with a merge patch conditional on the
// Network's resourceVersion, and returns the patched Network.
func setFinalizer(ctx context.Context, client versioned.Interface, n *v1.Network, add bool) (*v1.Network, error) {
	finalizers := slices.DeleteFunc(slices.Clone(n.Finalizers), func(f string) bool { return f == ProtectionFinalizer })
	if add {
		finalizers = append(finalizers, ProtectionFinalizer)
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"finalizers": finalizers, "resourceVersion": n.ResourceVersion,
	}})
	if err != nil {
		return nil, err
	}
	patched, err := client.SamplecrdV1().Networks(n.Namespace).Patch(ctx, n.Name, types.MergePatchType, patch, metav1.PatchOptions{})
	if apierrors.IsNotFound(err) {
		return n, nil
	}
	return patched, err
}

func (c *Controller) remove(ctx context.Context, key string) (string, error) {
	c.leasesDone(key)
	if actual, err := c.backend.Observe(ctx, key); err == nil && actual == nil {
		return "in_sync", nil
	}
	if err := c.backend.Remove(ctx, key); err != nil {
		return "error", err
	}
	klog.FromContext(ctx).Info("Removed network from node", "network", key)
	return "removed", nil
}

// report applies this node's status entry, unless it already says the same, and returns the
// Network as it is afterwards (nil when it is gone).
func (c *Controller) report(ctx context.Context, n *v1.Network, attachments int32, failure error) (*v1.Network, error) {
	entry := v1.NetworkNodeStatus{
		NodeName:           c.opts.NodeName,
		Bridge:             netbackend.BridgeName(n.Namespace + "/" + n.Name),
		Ready:              failure == nil,
		ObservedGeneration: n.Generation,
		Message:            "bridge and CNI configuration match the spec",
		Attachments:        attachments,
	}
	if failure != nil {
		entry.Reason, entry.Message = netbackend.ReasonOf(failure), failure.Error()
	}
	// While the Node is not Ready the entry says so, exactly as the server's node lifecycle loop
	// marks it, so the two never undo each other; once the Node is deleted the entry goes, as
	// that loop removes it.
	switch node := c.nodeStatus(); {
	case node.deleted:
		return WithdrawNodeEntry(ctx, c.client, n, c.opts.NodeName, "")
	case node.why != "":
		entry = MarkNodeNotReady(entry, node.why)
	}
	if current := findEntry(n, c.opts.NodeName); current != nil && *current == entry {
		return n, nil
	}
	if failure != nil && netbackend.ReasonOf(failure) != ReasonTerminating {
		c.event(n, "Warning", EventFailed, fmt.Sprintf("node %s: %v", c.opts.NodeName, failure))
	}
	// Deleted meanwhile (nil): the delete event removes it from the node.
	return ApplyNodeEntry(ctx, c.client, n, entry, "")
}

// collectGarbage removes what is ours on the node but has no Network any more.
func (c *Controller) collectGarbage(ctx context.Context) {
	keys, err := c.backend.List(ctx)
	if err != nil {
		klog.FromContext(ctx).Error(err, "Listing the node's networks for garbage collection failed")
		return
	}
	for _, key := range keys {
		namespace, name, err := cache.SplitMetaNamespaceKey(key)
		if err != nil {
			continue
		}
		if _, err := c.lister.Networks(namespace).Get(name); apierrors.IsNotFound(err) {
			c.queue.Add(key)
		}
	}
}

func (c *Controller) event(n *v1.Network, eventType, reason, message string) {
	if c.opts.Recorder != nil {
		c.opts.Recorder.Event(n, eventType, reason, message)
	}
}
