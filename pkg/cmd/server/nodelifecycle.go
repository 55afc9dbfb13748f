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

package server

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/controller/nodelifecycle"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/blockallocation/release"
)

// nodeResync is the resync period of the server's Node informer.
const nodeResync = 10 * time.Minute

// coreNodes is the server's view of Nodes in attached mode: one informer (Nodes trimmed to their
// readiness) shared by the node lifecycle loop and the block release, and the client behind it.
type coreNodes struct {
	client  kubernetes.Interface
	factory kubeinformers.SharedInformerFactory
	nodes   coreinformers.NodeInformer
}

func newCoreNodes(core *rest.Config) (*coreNodes, error) {
	client, err := kubernetes.NewForConfig(core)
	if err != nil {
		return nil, err
	}
	factory := kubeinformers.NewSharedInformerFactory(client, nodeResync)
	nodes := factory.Core().V1().Nodes()
	if err := nodes.Informer().SetTransform(nodestatus.TrimNode); err != nil {
		return nil, err
	}
	return &coreNodes{client: client, factory: factory, nodes: nodes}, nil
}

// release is what the block release asks of Nodes.
func (c *coreNodes) release() release.Nodes {
	return release.NodeObjects{Lister: c.nodes.Lister(), Synced: c.nodes.Informer().HasSynced, Client: c.client}
}

// start starts the informer until ctx is done.
func (c *coreNodes) start(ctx context.Context) {
	c.factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		c.factory.Shutdown()
	}()
}

// nodeLifecycleResync is how often the loop passes over the Networks again while some Node is not
// Ready, for agents that do not watch their Node and write their entries Ready again.
const nodeLifecycleResync = 5 * time.Minute

// nodeLifecycle runs pkg/controller/nodelifecycle inside the server: Nodes from the core API,
// Networks from this server through its loopback client.
type nodeLifecycle struct {
	nodes *coreNodes
	// leaseNamespace is where agents hold their Leases; empty: a deleted Node's entries go at once.
	leaseNamespace string

	mu   sync.Mutex
	done chan struct{} // closed once a started loop has stopped
}

func newNodeLifecycle(nodes *coreNodes, leaseNamespace string) *nodeLifecycle {
	return &nodeLifecycle{nodes: nodes, leaseNamespace: leaseNamespace}
}

// start starts the loop in the background until ctx is done.
func (l *nodeLifecycle) start(ctx context.Context, loopback *rest.Config) error {
	config := rest.CopyConfig(loopback)
	config.ContentType = runtime.ContentTypeProtobuf
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	client, err := versioned.NewForConfig(config)
	if err != nil {
		return err
	}
	loop, err := nodelifecycle.New(client, l.nodes.nodes, nodeLifecycleResync)
	if err != nil {
		return err
	}
	if l.leaseNamespace != "" {
		loop.WithAgentLeases(l.nodes.client, l.leaseNamespace, nodelifecycle.DefaultLeaseRecheck)
	}
	done := make(chan struct{})
	l.mu.Lock()
	l.done = done
	l.mu.Unlock()
	go func() {
		defer close(done)
		if err := loop.Run(ctx); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "The node lifecycle loop stopped")
		}
	}()
	return nil
}

// wait returns once a started loop has stopped.
func (l *nodeLifecycle) wait() {
	l.mu.Lock()
	done := l.done
	l.mu.Unlock()
	if done != nil {
		<-done
	}
}
