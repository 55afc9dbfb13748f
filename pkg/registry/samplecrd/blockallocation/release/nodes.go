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

package release

import (
	"context"
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// NodeObjects are the Nodes of the core API (attached mode): an informer's cache answers first,
// and a Node missing there is confirmed gone by a live GET (a cache a little behind a Node's
// creation never releases its blocks).
type NodeObjects struct {
	Lister corelisters.NodeLister
	Synced cache.InformerSynced
	Client kubernetes.Interface
}

var errNotSynced = errors.New("the Node informer has not synced yet")

// Gone is true when the Node does not exist.
func (n NodeObjects) Gone(ctx context.Context, name string) (bool, error) {
	if n.Synced != nil && !n.Synced() {
		return false, errNotSynced
	}
	_, err := n.Lister.Get(name)
	switch {
	case err == nil:
		return false, nil
	case !apierrors.IsNotFound(err):
		return false, err
	}
	_, err = n.Client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	}
	return false, nil
}

// Labels returns the labels of the Node named name from the informer's cache; known is false
// until it has synced and for a Node it does not hold.
func (n NodeObjects) Labels(name string) (labels.Set, bool) {
	if n.Synced != nil && !n.Synced() {
		return nil, false
	}
	node, err := n.Lister.Get(name)
	if err != nil {
		return nil, false
	}
	return labels.Set(node.Labels), true
}
