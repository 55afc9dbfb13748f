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

package network

import (
	"context"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

// nodeSyncTimeout bounds how long Run waits for the Node informer before it starts the workers.
const nodeSyncTimeout = 10 * time.Second

// nodeState is what the controller knows of its own Node.
type nodeState struct {
	// known is false until the Node has been seen (or when no Node is watched): report as usual.
	known bool
	// deleted: the Node was seen and then deleted; the node's entries are withdrawn.
	deleted bool
	// why the Node is not Ready; empty when it is Ready.
	why string
}

// watchNode follows this node's Node through informer (see Options.Node).
func (c *Controller) watchNode(informer coreinformers.NodeInformer) error {
	c.nodeSynced = informer.Informer().HasSynced
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { c.nodeChanged(obj, false) },
		UpdateFunc: func(_, obj interface{}) { c.nodeChanged(obj, false) },
		DeleteFunc: func(obj interface{}) { c.nodeChanged(obj, true) },
	})
	return err
}

// waitForNode waits a little for the Node informer, so that a node that is not Ready at start
// does not first report Ready. The Node is not required: without it (no permission to read
// Nodes, no such Node) the node reports as it finds things, and a Node seen later takes effect
// then.
func (c *Controller) waitForNode(ctx context.Context) {
	if c.nodeSynced == nil {
		return
	}
	syncCtx, cancel := context.WithTimeout(ctx, nodeSyncTimeout)
	defer cancel()
	if !cache.WaitForCacheSync(syncCtx.Done(), c.nodeSynced) && ctx.Err() == nil {
		klog.FromContext(ctx).Info("The informer on this node's Node has not synced; reporting without it until it does",
			"node", c.opts.NodeName, "timeout", nodeSyncTimeout)
	}
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
	if ready, why := nodestatus.NodeReadiness(node); !deleted && !ready {
		state.why = why
	}
	c.nodeMu.Lock()
	relabelled := !c.node.known || !maps.Equal(c.nodeLabels, node.Labels)
	changed := c.node != state || relabelled
	c.node = state
	if relabelled {
		c.nodeLabels = labels.Set(maps.Clone(node.Labels))
	}
	c.nodeMu.Unlock()
	if !changed {
		return
	}
	klog.InfoS("This node's Node changed; reporting on every Network again", "node", c.opts.NodeName,
		"ready", !deleted && state.why == "", "notReadyBecause", state.why, "deleted", deleted, "labelsChanged", relabelled)
	networks, err := c.lister.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, n := range networks {
		c.enqueue(n)
	}
}

// labelsRecheck is how soon a Network with a selector is looked at again while the Node
// informer has not synced.
const labelsRecheck = time.Second

// labelsSettled says whether the node's labels are known well enough to match selectors: the
// Node has been seen, or there is no Node informer, or it has synced without this node's Node
// (then Options.NodeLabels count).
func (c *Controller) labelsSettled() bool {
	if c.nodeSynced == nil {
		return true
	}
	c.nodeMu.Lock()
	known := c.node.known
	c.nodeMu.Unlock()
	return known || c.nodeSynced()
}

// selectorLabels returns the labels Networks' spec.nodeSelector is matched against: those of
// this node's Node once it has been seen, else Options.NodeLabels (standalone: --node-labels).
func (c *Controller) selectorLabels() labels.Set {
	c.nodeMu.Lock()
	defer c.nodeMu.Unlock()
	if c.node.known {
		return c.nodeLabels
	}
	return c.opts.NodeLabels
}

// nodeStatus returns what is known of this node's Node.
func (c *Controller) nodeStatus() nodeState {
	c.nodeMu.Lock()
	defer c.nodeMu.Unlock()
	return c.node
}
