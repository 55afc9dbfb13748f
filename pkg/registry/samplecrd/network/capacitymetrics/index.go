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

package capacitymetrics

import (
	"container/heap"
	"context"
	"fmt"
	"math/big"
	"strconv"
	"strings"
	"sync"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// Index keeps what the gauges need of every Network: its four counts, and each namespace's sums,
// kept up to date change by change. A reflector on the server's watch cache feeds it (it is a
// cache.ReflectorStore), so a scrape reads no Network: it walks the index for the per-Network
// series (O(Networks) without an allocation per Network; nothing at all in mode namespace) and
// writes the sums it already holds.
type Index struct {
	mu sync.RWMutex
	// spaces are the namespaces with a Network that has a capacity; count is how many such
	// Networks there are in all.
	spaces map[string]*space
	count  int
	synced bool
	// scratch is a sum's addend, reused under mu.
	scratch big.Int
}

var _ cache.ReflectorStore = &Index{}

// NewIndex returns an empty index that exports nothing until its first Replace.
func NewIndex() *Index {
	return &Index{spaces: map[string]*space{}}
}

// ref names a Network; its strings are the watched object's (no copy is made for the index).
type ref struct{ namespace, name string }

// entry is a Network's status.capacity: bit i of has says whether states[i] is reported, and its
// count is small[i], or large[i] when it does not fit a uint32 (IPv6 prefixes shorter than /96).
// 32 bytes: with its name, 48 bytes a Network in its namespace's map.
type entry struct {
	small [4]uint32
	large *[4]*big.Int
	has   uint8
}

const used = 2 // states[used]

func (e *entry) present(i int) bool { return e.has&(1<<i) != 0 }

// counted says whether state i counts in its namespace's sum: used and available only where
// used is known.
func (e *entry) counted(i int) bool {
	return e.present(i) && (i < used || e.present(used))
}

func (e *entry) big(i int, into *big.Int) *big.Int {
	if e.large != nil && e.large[i] != nil {
		return e.large[i]
	}
	return into.SetUint64(uint64(e.small[i]))
}

// value is state i as the nearest float64: exact below 2^53.
func (e *entry) value(i int) float64 {
	if e.large != nil && e.large[i] != nil {
		return toFloat(e.large[i])
	}
	return float64(e.small[i])
}

// emit writes the Network's series.
func (e *entry) emit(ch chan<- metrics.Metric, key ref) {
	for i := range states {
		if e.present(i) {
			ch <- metrics.NewLazyConstMetric(networkAddresses, metrics.GaugeValue, e.value(i), key.namespace, key.name, states[i])
		}
	}
}

// fullness is used/total, or -1 when unknown: what orders the Networks that get series.
func (e *entry) fullness() float64 {
	if !e.present(0) || !e.present(used) {
		return -1
	}
	if e.large == nil {
		if e.small[0] == 0 {
			return -1
		}
		// Both exact in a float64, and a division rounds to the nearest: what big.Rat gives.
		return float64(e.small[used]) / float64(e.small[0])
	}
	var t, u big.Int
	total := e.big(0, &t)
	if total.Sign() <= 0 {
		return -1
	}
	f, _ := new(big.Rat).SetFrac(e.big(used, &u), total).Float64()
	return f
}

// parse reads a capacity; ok is false without one (no series, counted nowhere). A count that
// is not a decimal is left out, as an absent state.
func parse(c *samplecrd.NetworkCapacity) (e entry, ok bool) {
	if c == nil {
		return e, false
	}
	for i, v := range [4]string{c.Total, c.Allocated, c.Used, c.Available} {
		if v == "" {
			continue
		}
		if u, err := strconv.ParseUint(v, 10, 32); err == nil {
			e.small[i] = uint32(u)
		} else if n, ok := new(big.Int).SetString(v, 10); ok {
			if e.large == nil {
				e.large = &[4]*big.Int{}
			}
			e.large[i] = n
		} else {
			continue
		}
		e.has |= 1 << i
	}
	return e, true
}

// space is a namespace's Networks with a capacity, by name, and its sums over them.
type space struct {
	networks map[string]entry
	// counted[i] is how many Networks' state i is in sum[i]; a sum nobody reports is not exported.
	counted [4]int
	sum     [4]big.Int
}

// Add records a Network (a reflector's ADDED).
func (x *Index) Add(obj any) error { return x.Update(obj) }

// Update records a Network's current capacity in place of the one before.
func (x *Index) Update(obj any) error {
	n, ok := obj.(*samplecrd.Network)
	if !ok {
		return fmt.Errorf("capacity index: %T is not a Network", obj)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.put(n)
	return nil
}

// Delete forgets a Network.
func (x *Index) Delete(obj any) error {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	n, ok := obj.(*samplecrd.Network)
	if !ok {
		return fmt.Errorf("capacity index: %T is not a Network", obj)
	}
	x.mu.Lock()
	defer x.mu.Unlock()
	x.remove(ref{n.Namespace, n.Name})
	return nil
}

// Replace starts over from list (a reflector's LIST, or its initial events); from then on the
// index is synced and exports.
func (x *Index) Replace(list []any, _ string) error {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.spaces, x.count = map[string]*space{}, 0
	for _, obj := range list {
		n, ok := obj.(*samplecrd.Network)
		if !ok {
			return fmt.Errorf("capacity index: %T is not a Network", obj)
		}
		x.put(n)
	}
	x.synced = true
	return nil
}

// Resync has nothing to do: the index has no listeners.
func (x *Index) Resync() error { return nil }

func (x *Index) put(n *samplecrd.Network) {
	key := ref{n.Namespace, n.Name}
	x.remove(key)
	e, ok := parse(n.Status.Capacity)
	if !ok {
		return
	}
	s := x.spaces[key.namespace]
	if s == nil {
		s = &space{networks: map[string]entry{}}
		x.spaces[key.namespace] = s
	}
	s.networks[key.name] = e
	x.count++
	for i := range states {
		if e.counted(i) {
			s.counted[i]++
			s.sum[i].Add(&s.sum[i], e.big(i, &x.scratch))
		}
	}
}

func (x *Index) remove(key ref) {
	s := x.spaces[key.namespace]
	if s == nil {
		return
	}
	e, ok := s.networks[key.name]
	if !ok {
		return
	}
	delete(s.networks, key.name)
	x.count--
	if len(s.networks) == 0 {
		delete(x.spaces, key.namespace)
		return
	}
	for i := range states {
		if e.counted(i) {
			s.counted[i]--
			s.sum[i].Sub(&s.sum[i], e.big(i, &x.scratch))
		}
	}
}

// collect writes the gauges; an index not yet synced writes none (absent, not zero).
func (x *Index) collect(ch chan<- metrics.Metric, opts Options) {
	x.mu.RLock()
	defer x.mu.RUnlock()
	if !x.synced {
		return
	}
	for namespace, s := range x.spaces {
		for i := range states {
			if s.counted[i] > 0 {
				ch <- metrics.NewLazyConstMetric(namespaceAddresses, metrics.GaugeValue, toFloat(&s.sum[i]), namespace, states[i])
			}
		}
	}
	limit := 0
	if opts.Mode == ModeNetwork || opts.Mode == "" {
		limit = min(opts.MaxNetworks, x.count)
	}
	switch {
	case limit == x.count:
		for namespace, s := range x.spaces {
			for name, e := range s.networks {
				e.emit(ch, ref{namespace, name})
			}
		}
	case limit > 0:
		// The fullest Networks keep their series: they are the ones alerts are about. A heap of
		// the limit best, its root the worst kept, so most Networks cost one comparison.
		kept := make(fullest, 0, limit)
		for namespace, s := range x.spaces {
			for name, e := range s.networks {
				c := candidate{ref{namespace, name}, e, e.fullness()}
				if len(kept) < limit {
					heap.Push(&kept, c)
				} else if c.before(&kept[0]) {
					kept[0] = c
					heap.Fix(&kept, 0)
				}
			}
		}
		for i := range kept {
			kept[i].emit(ch, kept[i].ref)
		}
	}
	ch <- metrics.NewLazyConstMetric(omittedNetworks, metrics.GaugeValue, float64(x.count-limit))
}

type candidate struct {
	ref
	entry
	fullness float64
}

// before orders the Networks that get series: fuller first (unknown last), then namespace and name.
func (c *candidate) before(o *candidate) bool {
	if c.fullness != o.fullness {
		return c.fullness > o.fullness
	}
	if n := strings.Compare(c.namespace, o.namespace); n != 0 {
		return n < 0
	}
	return c.name < o.name
}

// fullest is a heap whose root is the candidate every other one comes before.
type fullest []candidate

func (h fullest) Len() int           { return len(h) }
func (h fullest) Less(i, j int) bool { return h[j].before(&h[i]) }
func (h fullest) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *fullest) Push(x any)        { *h = append(*h, x.(candidate)) }
func (h *fullest) Pop() any {
	old := *h
	c := old[len(old)-1]
	*h = old[:len(old)-1]
	return c
}

// Watched is what Follow reads: the Network storage, whose LIST and WATCH the watch cache serves.
type Watched interface {
	List(ctx context.Context, options *metainternalversion.ListOptions) (runtime.Object, error)
	Watch(ctx context.Context, options *metainternalversion.ListOptions) (watch.Interface, error)
}

// Follow feeds the index from store with a client-go reflector (the initial events of a watch,
// or a LIST, then the watch, relisting whenever the watch ends) until ctx ends.
func (x *Index) Follow(ctx context.Context, store Watched) {
	all := func(ctx context.Context, options metav1.ListOptions) (*metainternalversion.ListOptions, context.Context, error) {
		var internal metainternalversion.ListOptions
		if err := metainternalversion.Convert_v1_ListOptions_To_internalversion_ListOptions(&options, &internal, nil); err != nil {
			return nil, nil, err
		}
		return &internal, genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), nil
	}
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, options metav1.ListOptions) (runtime.Object, error) {
			internal, ctx, err := all(ctx, options)
			if err != nil {
				return nil, err
			}
			return store.List(ctx, internal)
		},
		WatchFuncWithContext: func(ctx context.Context, options metav1.ListOptions) (watch.Interface, error) {
			internal, ctx, err := all(ctx, options)
			if err != nil {
				return nil, err
			}
			w, err := store.Watch(ctx, internal)
			if err != nil {
				return nil, err
			}
			// The watch cache hands its events' objects out wrapped (for the encodings it keeps
			// per event); the reflector wants the Network, a copy of which the wrapper gives.
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				if o, ok := e.Object.(runtime.CacheableObject); ok {
					e.Object = o.GetObject()
				}
				return e, true
			}), nil
		},
	}
	cache.NewReflectorWithOptions(lw, &samplecrd.Network{}, x, cache.ReflectorOptions{Name: "capacity-metrics"}).RunWithContext(ctx)
}
