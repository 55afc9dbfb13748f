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

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// A deleted Network's CNI configuration goes from a queue of its own, ahead of its bridge: once
// it is gone no runtime can ADD a pod to the Network, and removing a file takes a millisecond,
// while the kernel unregisters a bridge in tens of milliseconds (36 ms each, one at a time, on
// the VM of docs/performance.md). With both in one queue, the configuration of the last of 1000
// deleted Networks stayed on the node for as long as all the bridges before it took. The
// bridge, the segment, the leftover leases and the configuration again (if it came back) go
// through the main queue's remove, as before.

// enqueueUnconfigure queues a deleted Network's key for the removal of its configuration.
func (c *Controller) enqueueUnconfigure(obj interface{}) {
	if c.unconfigure == nil {
		return
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.unconfigure.Add(key)
}

func (c *Controller) runUnconfigure(ctx context.Context) {
	for c.processNextUnconfigure(ctx) {
	}
}

// processNextUnconfigure removes one deleted Network's configuration. A Network created again
// under the key is left alone (its sync owns the configuration); one created while the file
// was being removed is queued for its sync, which writes the configuration again.
func (c *Controller) processNextUnconfigure(ctx context.Context) bool {
	key, shutdown := c.unconfigure.Get()
	if shutdown {
		return false
	}
	defer c.unconfigure.Done(key)
	c.unconfigure.Forget(key)
	if c.exists(key) {
		return true
	}
	removed, err := c.remover.RemoveConfig(ctx, key)
	if err != nil {
		// The main queue's remove tries again, with its retries.
		klog.FromContext(ctx).Error(err, "Removing a deleted Network's CNI configuration ahead of its bridge", "network", key)
		return true
	}
	if removed {
		klog.FromContext(ctx).V(2).Info("Removed the CNI configuration of a deleted network", "network", key)
	}
	if c.exists(key) {
		c.queue.Add(key)
	}
	return true
}

// exists tells whether the informer holds a Network with key.
func (c *Controller) exists(key string) bool {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return false
	}
	_, err = c.lister.Networks(namespace).Get(name)
	return err == nil
}
