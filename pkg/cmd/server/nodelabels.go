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
	"time"

	"k8s.io/apimachinery/pkg/labels"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listerscorev1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

// nodeLabels is the server's view of Nodes' labels in attached mode, for the block claims'
// spec.nodeSelector check: an informer on Nodes (trimmed to name, labels and readiness).
type nodeLabels struct {
	factory kubeinformers.SharedInformerFactory
	lister  listerscorev1.NodeLister
	synced  cache.InformerSynced
}

func newNodeLabels(core *rest.Config) (*nodeLabels, error) {
	client, err := kubernetes.NewForConfig(core)
	if err != nil {
		return nil, err
	}
	factory := kubeinformers.NewSharedInformerFactory(client, 10*time.Minute)
	nodes := factory.Core().V1().Nodes()
	if err := nodes.Informer().SetTransform(nodestatus.TrimNode); err != nil {
		return nil, err
	}
	return &nodeLabels{factory: factory, lister: nodes.Lister(), synced: nodes.Informer().HasSynced}, nil
}

// start runs the informer until ctx is done.
func (l *nodeLabels) start(ctx context.Context) {
	l.factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		l.factory.Shutdown()
	}()
}

// Labels returns the labels of Node name; known is false until the informer has synced and for
// a Node it does not hold (the claim then goes ahead: the agent matches the selector itself).
func (l *nodeLabels) Labels(name string) (labels.Set, bool) {
	if !l.synced() {
		return nil, false
	}
	node, err := l.lister.Get(name)
	if err != nil {
		return nil, false
	}
	return labels.Set(node.Labels), true
}
