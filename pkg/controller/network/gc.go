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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// collectGarbage queues what is ours on the node but has no Network any more: its sync removes it.
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

// remove takes the node's part of key, a Network that is gone, off the node.
func (c *Controller) remove(ctx context.Context, key string) (string, error) {
	c.leasesDone(key)
	c.forgetWritten(key)
	c.forgetClaim(key)
	if actual, err := c.backend.Observe(ctx, key); err == nil && actual == nil {
		return "in_sync", nil
	}
	if err := c.backend.Remove(ctx, key); err != nil {
		return "error", err
	}
	klog.FromContext(ctx).Info("Removed network from node", "network", key)
	return "removed", nil
}
