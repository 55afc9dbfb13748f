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
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	applyv1 "github.com/samplecrd/network-apiserver/pkg/generated/applyconfiguration/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	informers "github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions/samplecrd/v1"
	listers "github.com/samplecrd/network-apiserver/pkg/generated/listers/samplecrd/v1"
)

// Unavailable stands in for a node's controller that cannot run (for example without
// CAP_NET_ADMIN). It realises nothing; it says so on every Network, with server-side apply under
// the node's own field manager:
//
//   - it drops the node's entry from status.nodes (what that entry reported is no longer kept
//     up, so it must not count towards Ready);
//   - it sets the Ready condition to Unknown with its reason and message. The server derives
//     Ready from status.nodes whenever there are entries, so this shows only on Networks no
//     other node reports on, and it gives way as soon as a controller reports;
//   - like a controller, it removes ProtectionFinalizer from a Network being deleted once no
//     node's entry reports attachments, so that Networks protected by an earlier run of a
//     controller are not kept forever.
type Unavailable struct {
	client  versioned.Interface
	lister  listers.NetworkLister
	synced  cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]
	node    string
	reason  string
	message string
}

// NewUnavailable wires the stand-in for node to an informer.
func NewUnavailable(client versioned.Interface, informer informers.NetworkInformer, node, reason, message string) (*Unavailable, error) {
	if node == "" || reason == "" {
		return nil, fmt.Errorf("the unavailable-controller stand-in needs a node name and a reason")
	}
	u := &Unavailable{
		client:  client,
		lister:  informer.Lister(),
		synced:  informer.Informer().HasSynced,
		node:    node,
		reason:  reason,
		message: message,
		queue:   newQueue("network_unavailable"),
	}
	enqueue := func(obj interface{}) {
		if n, ok := obj.(*v1.Network); ok && !u.needsReport(n) {
			return
		}
		if key, err := cache.MetaNamespaceKeyFunc(obj); err == nil {
			u.queue.Add(key)
		}
	}
	_, err := informer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj interface{}) { enqueue(obj) },
	})
	return u, err
}

// Run reports until ctx is done.
func (u *Unavailable) Run(ctx context.Context) error {
	defer utilruntime.HandleCrash()
	defer u.queue.ShutDown()
	if !cache.WaitForCacheSync(ctx.Done(), u.synced) {
		return fmt.Errorf("network informer did not sync")
	}
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for u.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
	return nil
}

func (u *Unavailable) processNext(ctx context.Context) bool {
	key, shutdown := u.queue.Get()
	if shutdown {
		return false
	}
	defer u.queue.Done(key)
	if err := u.sync(ctx, key); err != nil {
		klog.FromContext(ctx).V(2).Info("Reporting the controller as unavailable failed; retrying", "network", key, "err", err)
		u.queue.AddRateLimited(key)
		return true
	}
	u.queue.Forget(key)
	return true
}

// needsReport says whether n still shows this node's entry, or lacks the Unknown condition
// while no node reports on it.
func (u *Unavailable) needsReport(n *v1.Network) bool {
	if n.DeletionTimestamp != nil {
		return nodestatus.Unattached(n) // nothing to report, but the finalizer must not hold it forever
	}
	others := false
	for _, node := range n.Status.Nodes {
		if node.NodeName == u.node {
			return true
		}
		others = true
	}
	if others {
		return false // Ready is derived from the nodes that do report
	}
	c := meta.FindStatusCondition(n.Status.Conditions, samplecrd.ConditionReady)
	return c == nil || c.Status != metav1.ConditionUnknown || c.Reason != u.reason || c.Message != u.message ||
		c.ObservedGeneration != n.Generation
}

func (u *Unavailable) sync(ctx context.Context, key string) error {
	namespace, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	n, err := u.lister.Networks(namespace).Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || !u.needsReport(n) {
		return err
	}
	if n.DeletionTimestamp != nil {
		return nodestatus.Release(ctx, u.client, n)
	}
	// Without nodes in the configuration, the apply removes the entry this field manager owns.
	apply := applyv1.Network(n.Name, n.Namespace).WithStatus(applyv1.NetworkStatus().WithConditions(
		metav1ac.Condition().
			WithType(samplecrd.ConditionReady).
			WithStatus(metav1.ConditionUnknown).
			WithReason(u.reason).
			WithMessage(u.message).
			WithObservedGeneration(n.Generation).
			WithLastTransitionTime(metav1.Now())))
	_, err = nodestatus.ApplyAsNode(ctx, u.client, n.Namespace, apply, u.node)
	return err
}
