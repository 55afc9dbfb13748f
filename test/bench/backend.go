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

package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
)

// Where the objects live: the main collection, and the one the aggregated creates fill.
const (
	benchNamespace = "bench"
	aggNamespace   = "bench-agg"
	// seqAnnotation carries the update number in the watch fan-out, agentSeqAnnotation in the
	// node-agent workload.
	seqAnnotation      = "bench.samplecrd.k8s.io/seq"
	agentSeqAnnotation = "bench.samplecrd.k8s.io/agent-seq"
)

// crdResource is the CRD serving the same API in another group.
var crdResource = schema.GroupVersionResource{Group: "bench.samplecrd.k8s.io", Version: "v1", Resource: "networks"}

// backend is one way of serving Networks, driven through its natural client: our server through
// the generated clientset (protobuf), the CRD through the dynamic client (JSON).
type backend interface {
	// create stores object number i in namespace ns; a dry run goes through every step but storage.
	create(ctx context.Context, ns string, i int, dryRun bool) error
	// annotate sets annotation key to seq on a stored object with a JSON merge patch.
	annotate(ctx context.Context, ns, name, key string, seq int) error
	watch(ctx context.Context, ns, resourceVersion string) (watch.Interface, error)
	// list lists namespace ns ("" for all) and returns the list's resourceVersion and length.
	list(ctx context.Context, ns string) (string, int, error)
	// collectionPath is the REST path of the collection in ns ("" for all namespaces), for raw requests.
	collectionPath(ns string) string
	// informer returns a started informer on all namespaces, with its own list and watch.
	informer(stop <-chan struct{}) cache.SharedIndexInformer
	endpoint() *endpoint
}

// objectName and objectCIDR enumerate disjoint /28s from 10.0.0.0/8: object i is named net-<i>
// and holds the i-th /28, its gateway the first address.
func objectName(i int) string { return fmt.Sprintf("net-%07d", i) }

func objectCIDR(i int) (cidr, gateway string) {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], 10<<24+uint32(i)*16)
	addr := netip.AddrFrom4(b)
	return netip.PrefixFrom(addr, 28).String(), addr.Next().String()
}

// maxObjects is how many /28s 10.0.0.0/8 holds.
const maxObjects = 1 << 20

func createOptions(dryRun bool) metav1.CreateOptions {
	if dryRun {
		return metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	}
	return metav1.CreateOptions{}
}

func annotationPatch(key string, seq int) []byte {
	return fmt.Appendf(nil, `{"metadata":{"annotations":{%q:"%d"}}}`, key, seq)
}

// ours is network-apiserver through the generated clientset.
type ours struct {
	ep     *endpoint
	client *versioned.Clientset
}

func newOurs(ep *endpoint) (*ours, error) {
	c, err := ep.typed()
	return &ours{ep: ep, client: c}, err
}

func (o *ours) endpoint() *endpoint { return o.ep }

func (o *ours) create(ctx context.Context, ns string, i int, dryRun bool) error {
	cidr, gw := objectCIDR(i)
	n := &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: objectName(i)},
		Spec:       v1.NetworkSpec{CIDR: cidr, Gateway: gw, PrefixLength: 28},
	}
	_, err := o.client.SamplecrdV1().Networks(ns).Create(ctx, n, createOptions(dryRun))
	return err
}

func (o *ours) annotate(ctx context.Context, ns, name, key string, seq int) error {
	_, err := o.client.SamplecrdV1().Networks(ns).Patch(ctx, name, types.MergePatchType, annotationPatch(key, seq), metav1.PatchOptions{})
	return err
}

func (o *ours) watch(ctx context.Context, ns, rv string) (watch.Interface, error) {
	return o.client.SamplecrdV1().Networks(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
}

func (o *ours) list(ctx context.Context, ns string) (string, int, error) {
	l, err := o.client.SamplecrdV1().Networks(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", 0, err
	}
	return l.ResourceVersion, len(l.Items), nil
}

func (o *ours) collectionPath(ns string) string {
	if ns == "" {
		return "/apis/samplecrd.k8s.io/v1/networks"
	}
	return "/apis/samplecrd.k8s.io/v1/namespaces/" + ns + "/networks"
}

func (o *ours) informer(stop <-chan struct{}) cache.SharedIndexInformer {
	f := externalversions.NewSharedInformerFactory(o.client, 0)
	inf := f.Samplecrd().V1().Networks().Informer()
	f.Start(stop)
	return inf
}

// crd is the CRD through kube-apiserver and the dynamic client.
type crd struct {
	ep     *endpoint
	client *dynamic.DynamicClient
}

func newCRD(ep *endpoint) (*crd, error) {
	c, err := ep.dynamic()
	return &crd{ep: ep, client: c}, err
}

func (c *crd) endpoint() *endpoint { return c.ep }

func (c *crd) create(ctx context.Context, ns string, i int, dryRun bool) error {
	cidr, gw := objectCIDR(i)
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": crdResource.GroupVersion().String(),
		"kind":       "Network",
		"metadata":   map[string]any{"name": objectName(i)},
		"spec":       map[string]any{"cidr": cidr, "gateway": gw, "prefixLength": int64(28)},
	}}
	_, err := c.client.Resource(crdResource).Namespace(ns).Create(ctx, u, createOptions(dryRun))
	return err
}

func (c *crd) annotate(ctx context.Context, ns, name, key string, seq int) error {
	_, err := c.client.Resource(crdResource).Namespace(ns).Patch(ctx, name, types.MergePatchType, annotationPatch(key, seq), metav1.PatchOptions{})
	return err
}

func (c *crd) watch(ctx context.Context, ns, rv string) (watch.Interface, error) {
	return c.client.Resource(crdResource).Namespace(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
}

func (c *crd) list(ctx context.Context, ns string) (string, int, error) {
	l, err := c.client.Resource(crdResource).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return "", 0, err
	}
	return l.GetResourceVersion(), len(l.Items), nil
}

func (c *crd) collectionPath(ns string) string {
	if ns == "" {
		return "/apis/" + crdResource.Group + "/v1/networks"
	}
	return "/apis/" + crdResource.Group + "/v1/namespaces/" + ns + "/networks"
}

func (c *crd) informer(stop <-chan struct{}) cache.SharedIndexInformer {
	f := dynamicinformer.NewDynamicSharedInformerFactory(c.client, 0)
	inf := f.ForResource(crdResource).Informer()
	f.Start(stop)
	return inf
}
