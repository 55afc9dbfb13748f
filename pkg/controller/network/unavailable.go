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
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	applyv1 "github.com/samplecrd/network-apiserver/pkg/generated/applyconfiguration/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	informers "github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions/samplecrd/v1"
	listers "github.com/samplecrd/network-apiserver/pkg/generated/listers/samplecrd/v1"
)

// Unavailable stands in for a node's controller that cannot run (for example without
// CAP_NET_ADMIN). It realises nothing; it says so in the node's own entry of every Network, with
// server-side apply under the node's own field manager: ready false, its reason (one for which
// samplecrd.ControllerUnavailable holds) and message, no attachments and nothing else. The
// server counts such entries apart when it derives Ready (Unknown with the reason when only such
// entries exist); it also releases a Network being deleted once no entry reports attachments, so
// the stand-in writes nothing but its entry.
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

// needsReport says whether n's entry for this node is not yet the stand-in's.
func (u *Unavailable) needsReport(n *v1.Network) bool {
	e := nodestatus.FindEntry(n, u.node)
	want := v1.NetworkNodeStatus{NodeName: u.node, Reason: u.reason, Message: u.message, ObservedGeneration: n.Generation}
	return e == nil || !nodestatus.SameReport(*e, want)
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
	// The apply owns the entry's fields it names and no others: whatever an earlier run of a
	// controller reported under this field manager (bridge, attachments, blocks, a Network-level
	// condition of an older stand-in) goes.
	apply := applyv1.Network(n.Name, n.Namespace).WithStatus(applyv1.NetworkStatus().WithNodes(
		applyv1.NetworkNodeStatus().
			WithNodeName(u.node).
			WithReady(false).
			WithReason(u.reason).
			WithMessage(u.message).
			WithObservedGeneration(n.Generation)))
	_, err = nodestatus.ApplyAsNode(ctx, u.client, n.Namespace, apply, u.node)
	return err
}
