// Package nodelifecycle keeps status.nodes true about nodes that no longer report: network-apiserver
// runs it when it has a core Kubernetes API (attached mode). A node's agent reports its own entry
// in every Network's status.nodes; when its Node stops being Ready (the kubelet stopped, the
// machine died) nothing on that node may be left to say so, and when the Node is deleted nothing
// will ever remove the entry, whose attachments would hold a Network being deleted forever.
//
// So, for every entry whose Node is not Ready, the loop writes the entry as
// network.MarkNodeNotReady makes it (not ready, reason NodeNotReady; bridge, generation and
// attachments kept), under the node's own field manager, exactly as the node's agent writes it
// while it sees its Node not Ready: whoever writes first, the other finds nothing to change. For
// an entry whose Node has been deleted it removes the entry, the way Kubernetes lets go of the pods
// of a deleted Node; a Network being deleted is then released once no remaining entry reports
// attachments and no Ready node is left to release it. Entries whose name is not, and never was,
// a Node (a controller run with a --node-name of its own, as in a cluster without nodes) are left
// alone. Several replicas may run it at once: they write the same content, conditional on the
// Network's resourceVersion.
package nodelifecycle

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/network"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	informers "github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions/samplecrd/v1"
	listers "github.com/samplecrd/network-apiserver/pkg/generated/listers/samplecrd/v1"
)

// byNode indexes Networks by the node names of their status entries.
const byNode = "statusNodeName"

// Controller is the node lifecycle loop.
type Controller struct {
	client   versioned.Interface
	networks listers.NetworkLister
	index    cache.Indexer
	nodes    corelisters.NodeLister
	synced   []cache.InformerSynced
	queue    workqueue.TypedRateLimitingInterface[string]

	mu sync.Mutex
	// deleted holds the names of Nodes this process saw deleted (and not created again).
	deleted sets.Set[string]
}

// New wires the loop to an informer on Networks and one on Nodes (neither started yet).
func New(client versioned.Interface, networkInformer informers.NetworkInformer, nodeInformer coreinformers.NodeInformer) (*Controller, error) {
	c := &Controller{
		client:   client,
		networks: networkInformer.Lister(),
		index:    networkInformer.Informer().GetIndexer(),
		nodes:    nodeInformer.Lister(),
		synced:   []cache.InformerSynced{networkInformer.Informer().HasSynced, nodeInformer.Informer().HasSynced},
		deleted:  sets.New[string](),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.NewTypedItemExponentialFailureRateLimiter[string](200*time.Millisecond, time.Minute),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "network_node_lifecycle"}),
	}
	if err := networkInformer.Informer().AddIndexers(cache.Indexers{byNode: func(obj interface{}) ([]string, error) {
		n, ok := obj.(*v1.Network)
		if !ok {
			return nil, nil
		}
		names := make([]string, 0, len(n.Status.Nodes))
		for _, e := range n.Status.Nodes {
			names = append(names, e.NodeName)
		}
		return names, nil
	}}); err != nil {
		return nil, err
	}
	enqueueNetwork := func(obj interface{}) {
		if n, ok := obj.(*v1.Network); ok && len(n.Status.Nodes) == 0 && n.DeletionTimestamp == nil {
			return
		}
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	if _, err := networkInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueueNetwork,
		UpdateFunc: func(_, obj interface{}) { enqueueNetwork(obj) },
	}); err != nil {
		return nil, err
	}
	_, err := nodeInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj interface{}) {
			if node, ok := obj.(*corev1.Node); ok {
				c.mu.Lock()
				c.deleted.Delete(node.Name)
				c.mu.Unlock()
				c.enqueueNode(node.Name)
			}
		},
		UpdateFunc: func(oldObj, obj interface{}) {
			old, ok1 := oldObj.(*corev1.Node)
			node, ok2 := obj.(*corev1.Node)
			if !ok1 || !ok2 {
				return
			}
			oldReady, oldWhy := network.NodeReadiness(old)
			ready, why := network.NodeReadiness(node)
			if ready != oldReady || why != oldWhy {
				c.enqueueNode(node.Name)
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
				c.enqueueNode(node.Name)
			}
		},
	})
	return c, err
}

// enqueueNode queues every Network with an entry for node.
func (c *Controller) enqueueNode(node string) {
	keys, err := c.index.IndexKeys(byNode, node)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, key := range keys {
		c.queue.Add(key)
	}
}

// Run waits for both caches, then runs workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrash()
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx)
	logger.Info("Starting the node lifecycle loop: entries of Nodes that are not Ready are marked NodeNotReady, those of deleted Nodes removed")
	if !cache.WaitForCacheSync(ctx.Done(), c.synced...) {
		return fmt.Errorf("the node lifecycle loop's informers did not sync")
	}
	var running sync.WaitGroup
	for range workers {
		running.Go(func() {
			wait.UntilWithContext(ctx, func(ctx context.Context) {
				for c.processNext(ctx) {
				}
			}, time.Second)
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
	if err := c.sync(ctx, key); err != nil {
		klog.FromContext(ctx).V(2).Info("Updating node entries failed; retrying", "network", key, "err", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// sync brings one Network's entries in line with the Nodes.
func (c *Controller) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	n, err := c.networks.Networks(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	current := n
	for _, entry := range n.Status.Nodes {
		var updated *v1.Network
		node, err := c.nodes.Get(entry.NodeName)
		switch {
		case apierrors.IsNotFound(err):
			if !c.wasNode(entry) {
				continue
			}
			if updated, err = network.WithdrawNodeEntry(ctx, c.client, current, entry.NodeName, current.ResourceVersion); err != nil {
				return err
			}
			klog.FromContext(ctx).Info("Removed the status entry of a deleted Node", "network", key, "node", entry.NodeName)
		case err != nil:
			return err
		default:
			ready, why := network.NodeReadiness(node)
			want := network.MarkNodeNotReady(entry, why)
			if ready || want == entry {
				continue
			}
			if updated, err = network.ApplyNodeEntry(ctx, c.client, current, want, current.ResourceVersion); err != nil {
				return err
			}
			klog.FromContext(ctx).V(2).Info("Marked the status entry of a Node that is not Ready", "network", key, "node", entry.NodeName, "why", why)
		}
		if updated == nil {
			return nil // the Network is gone
		}
		current = updated
	}
	if network.Releasable(current) && c.noReadyNodeReports(current) {
		if err := network.Release(ctx, c.client, current); err != nil {
			return err
		}
		klog.FromContext(ctx).Info("No node that is Ready reports on the Network and none reports pods: released it for deletion", "network", key)
	}
	return nil
}

// wasNode says whether entry's node, which has no Node now, had one: this process saw it
// deleted, or the entry was marked NodeNotReady (which only a Node's readiness writes).
func (c *Controller) wasNode(entry v1.NetworkNodeStatus) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deleted.Has(entry.NodeName) || entry.Reason == network.ReasonNodeNotReady
}

// noReadyNodeReports says whether every entry of n is of a Node that is not Ready: no agent is
// left that would release the Network itself.
func (c *Controller) noReadyNodeReports(n *v1.Network) bool {
	for _, entry := range n.Status.Nodes {
		node, err := c.nodes.Get(entry.NodeName)
		if err != nil {
			return false // not a Node, or unknown: its controller decides
		}
		if ready, _ := network.NodeReadiness(node); ready {
			return false
		}
	}
	return true
}
