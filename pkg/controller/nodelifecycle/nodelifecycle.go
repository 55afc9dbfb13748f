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

// Package nodelifecycle keeps status.nodes true about nodes that no longer report: network-apiserver
// runs it when it has a core Kubernetes API (attached mode). A node's agent reports its own entry
// in every Network's status.nodes; when its Node stops being Ready (the kubelet stopped, the
// machine died) nothing on that node may be left to say so, and when the Node is deleted nothing
// will ever remove the entry, whose attachments would hold a Network being deleted forever.
//
// So, for every entry whose Node is not Ready, the loop writes the entry as
// nodestatus.MarkNodeNotReady makes it (not ready, reason NodeNotReady; bridge, generation and
// attachments kept), under the node's own field manager, exactly as the node's agent writes it
// while it sees its Node not Ready: whoever writes first, the other finds nothing to change. For
// an entry whose Node has been deleted it removes the entry, the way Kubernetes lets go of the pods
// of a deleted Node — unless (WithAgentLeases) the node's agent still holds its Lease and the entry
// does not report zero leases: pods there may still hold addresses of the node's blocks, so the
// entry stays, marked NodeDeleted as the agent marks it, and is checked again every recheck. (A
// Network being deleted is released by the server, in the status write that leaves no entry
// reporting attachments.) Entries whose name is not, and never was,
// a Node (a controller run with a --node-name of its own, as in a cluster without nodes) are left
// alone. Several replicas may run it at once: they write the same content, conditional on the
// Network's resourceVersion.
//
// It keeps no copy of the Networks (every replica would hold one, for nodes that are nearly always
// Ready): it lists them, a page at a time, when a Node stops being Ready or is deleted, once at
// start (when there are Nodes), and every resync period while some Node is not Ready (for an
// agent that does not watch its Node and writes its entry Ready again).
package nodelifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/pager"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
)

// pass is the only work item: one pass over every Network. Events while a pass is queued
// coalesce into it.
const pass = "pass"

// pageSize is how many Networks a pass lists at a time.
const pageSize = 500

// Controller is the node lifecycle loop.
type Controller struct {
	client versioned.Interface
	nodes  corelisters.NodeLister
	synced cache.InformerSynced
	queue  workqueue.TypedRateLimitingInterface[string]
	resync time.Duration

	mu sync.Mutex
	// deleted holds the names of Nodes this process saw deleted (and not created again).
	deleted sets.Set[string]

	// leases, when set, reads the agents' Leases: a deleted Node's entries are then kept
	// (marked NodeDeleted) while its agent holds its Lease and reports leases.
	leases        kubernetes.Interface
	leaseNS       string
	leaseRecheck  time.Duration
	clock         clock.PassiveClock
	awaitingLease atomic.Bool
}

// DefaultLeaseRecheck is how often entries kept for a deleted Node's running agent are checked
// against its Lease again.
const DefaultLeaseRecheck = 10 * time.Second

// WithAgentLeases makes the loop keep the entries of a deleted Node, marked NodeDeleted, while
// its agent holds the Lease nodestatus.LeaseName(node) in namespace (and the entry does not
// report zero leases): a Node deleted under a running agent must not take the entries, and so
// the blocks, from pods that still hold addresses. Kept entries are checked again every recheck.
func (c *Controller) WithAgentLeases(client kubernetes.Interface, namespace string, recheck time.Duration) *Controller {
	c.leases, c.leaseNS, c.leaseRecheck = client, namespace, recheck
	return c
}

// New wires the loop to an informer on Nodes (not started yet). While some Node is not Ready,
// every resync it passes over the Networks again.
func New(client versioned.Interface, nodeInformer coreinformers.NodeInformer, resync time.Duration) (*Controller, error) {
	c := &Controller{
		client:  client,
		nodes:   nodeInformer.Lister(),
		synced:  nodeInformer.Informer().HasSynced,
		deleted: sets.New[string](),
		resync:  resync,
		clock:   clock.RealClock{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "network_node_lifecycle"}),
	}
	_, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if node, ok := obj.(*corev1.Node); ok {
				c.mu.Lock()
				c.deleted.Delete(node.Name)
				c.mu.Unlock()
				if ready, _ := nodestatus.NodeReadiness(node); !ready {
					c.queue.Add(pass)
				}
			}
		},
		UpdateFunc: func(oldObj, obj interface{}) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := obj.(*corev1.Node)
			if !ok1 || !ok2 {
				return
			}
			oldReady, oldWhy := nodestatus.NodeReadiness(old)
			ready, why := nodestatus.NodeReadiness(node)
			// Becoming Ready again is the node's agent's to report.
			if !ready && (oldReady || why != oldWhy) {
				c.queue.Add(pass)
			}
		},
		DeleteFunc: func(obj interface{}) {
			if tombstone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = tombstone.Obj
			}
			if node, ok := obj.(*corev1.Node); ok {
				c.mu.Lock()
				c.deleted.Insert(node.Name)
				c.mu.Unlock()
				c.queue.Add(pass)
			}
		},
	})
	return c, err
}

// Run waits for the Node cache, passes over the Networks once, then on every change that calls
// for it, until ctx is done.
func (c *Controller) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting the node lifecycle loop: entries of Nodes that are not Ready are marked NodeNotReady, those of deleted Nodes removed")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced) {
		return fmt.Errorf("the node lifecycle loop's Node informer did not sync")
	}
	// Entries of Nodes deleted or gone NotReady while no replica ran; a cluster without Nodes
	// (a control plane alone, as the bench runs) has none worth a LIST of every Network.
	if nodes, err := c.nodes.List(labels.Everything()); err != nil || len(nodes) > 0 {
		c.queue.Add(pass)
	}
	var running sync.WaitGroup
	running.Go(func() {
		wait.UntilWithContext(ctx, func(ctx context.Context) {
			for c.processNext(ctx) {
			}
		}, time.Second)
	})
	running.Go(func() {
		wait.UntilWithContext(ctx, func(context.Context) {
			if c.someNodeNotReady() {
				c.queue.Add(pass)
			}
		}, c.resync)
	})
	if c.leases != nil {
		running.Go(func() {
			wait.UntilWithContext(ctx, func(context.Context) {
				if c.awaitingLease.Load() {
					c.queue.Add(pass)
				}
			}, c.leaseRecheck)
		})
	}
	<-ctx.Done()
	c.queue.ShutDown()
	running.Wait()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	if err := c.passOver(ctx); err != nil {
		klog.FromContext(ctx).V(2).Info("Updating node entries failed; passing over the Networks again", "err", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

func (c *Controller) someNodeNotReady() bool {
	nodes, err := c.nodes.List(labels.Everything())
	if err != nil {
		return false
	}
	for _, node := range nodes {
		if ready, _ := nodestatus.NodeReadiness(node); !ready {
			return true
		}
	}
	return false
}

// passOver brings every Network's entries in line with the Nodes, a page of Networks at a time.
// A Network that fails does not stop the others; the pass fails with the errors at the end.
func (c *Controller) passOver(ctx context.Context) error {
	var errs []error
	awaiting := false
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return c.client.SamplecrdV1().Networks(metav1.NamespaceAll).List(ctx, opts)
	})
	p.PageSize = pageSize
	err := p.EachListItem(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if n, ok := obj.(*v1.Network); ok && (len(n.Status.Nodes) > 0 || n.DeletionTimestamp != nil) {
			waits, err := c.sync(ctx, n)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s/%s: %w", n.Namespace, n.Name, err))
			}
			awaiting = awaiting || waits || err != nil
		}
		return ctx.Err()
	})
	c.awaitingLease.Store(awaiting)
	return errors.Join(append(errs, err)...)
}

// sync brings one Network's entries in line with the Nodes. It says whether it kept an entry of a
// deleted Node for its agent's Lease (to be checked again).
func (c *Controller) sync(ctx context.Context, n *v1.Network) (bool, error) {
	key := n.Namespace + "/" + n.Name
	current := n
	awaiting := false
	for _, entry := range n.Status.Nodes {
		var updated *v1.Network
		node, err := c.nodes.Get(entry.NodeName)
		switch {
		case apierrors.IsNotFound(err):
			if !c.wasNode(entry) {
				continue
			}
			held, err := c.agentHolds(ctx, entry)
			if err != nil {
				return awaiting, err
			}
			if held {
				awaiting = true
				want := nodestatus.MarkNodeDeleted(entry)
				if apiequality.Semantic.DeepEqual(want, entry) {
					continue
				}
				if updated, err = nodestatus.ApplyNodeEntry(ctx, c.client, current, want, current.ResourceVersion); err != nil {
					return awaiting, err
				}
				klog.FromContext(ctx).Info("Kept the status entry of a deleted Node, marked NodeDeleted: its agent still holds its Lease",
					"network", key, "node", entry.NodeName)
				break
			}
			if updated, err = nodestatus.WithdrawNodeEntry(ctx, c.client, current, entry.NodeName, current.ResourceVersion); err != nil {
				return awaiting, err
			}
			klog.FromContext(ctx).Info("Removed the status entry of a deleted Node", "network", key, "node", entry.NodeName)
		case err != nil:
			return awaiting, err
		default:
			ready, why := nodestatus.NodeReadiness(node)
			want := nodestatus.MarkNodeNotReady(entry, why)
			if ready || apiequality.Semantic.DeepEqual(want, entry) {
				continue
			}
			if updated, err = nodestatus.ApplyNodeEntry(ctx, c.client, current, want, current.ResourceVersion); err != nil {
				return awaiting, err
			}
			klog.FromContext(ctx).V(2).Info("Marked the status entry of a Node that is not Ready", "network", key, "node", entry.NodeName, "why", why)
		}
		if updated == nil {
			return awaiting, nil // the Network is gone
		}
		current = updated
	}
	// A Network being deleted whose last entry with attachments went here is released by the
	// server in the write that removed it.
	return awaiting, nil
}

// agentHolds says whether the entry of a deleted Node stays: its agent holds its Lease and the
// entry does not report zero leases. Without WithAgentLeases nothing stays.
func (c *Controller) agentHolds(ctx context.Context, entry v1.NetworkNodeStatus) (bool, error) {
	if c.leases == nil || nodestatus.ReportsNoLeases(entry) {
		return false, nil
	}
	lease, err := c.leases.CoordinationV1().Leases(c.leaseNS).Get(ctx, nodestatus.LeaseName(entry.NodeName), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the Lease of node %s's agent: %w", entry.NodeName, err)
	}
	return nodestatus.LeaseHeld(lease, c.clock.Now()), nil
}

// wasNode says whether entry's node, which has no Node now, had one: this process saw it
// deleted, or the entry was marked NodeNotReady (which only a Node's readiness writes).
func (c *Controller) wasNode(entry v1.NetworkNodeStatus) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleted.Has(entry.NodeName) || entry.Reason == nodestatus.ReasonNodeObjectNotReady || entry.Reason == nodestatus.ReasonNodeDeleted
}
