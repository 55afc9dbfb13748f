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

package storage

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	fieldsel "k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage"
	cacherstorage "k8s.io/apiserver/pkg/storage/cacher"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	featuregatetesting "k8s.io/component-base/featuregate/testing"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/install"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
	"github.com/samplecrd/network-apiserver/test/etcdtest"
)

// pagesFixture is the etcd3 store of Networks over a real etcd, and a pagingStore around it
// that reads continue pages itself.
type pagesFixture struct {
	generic     storage.Interface
	ours        *pagingStore
	compact     func(t *testing.T)
	forResource *storagebackend.ConfigForResource
	scanner     *etcdscan.Scanner
}

func newPagesFixture(t *testing.T) *pagesFixture {
	t.Helper()
	e := etcdtest.Start(t)
	client := etcdtest.Client(t, e)
	scheme := runtime.NewScheme()
	install.Install(scheme)
	codec := serializer.NewCodecFactory(scheme).LegacyCodec(v1.SchemeGroupVersion)
	config := storagebackend.NewDefaultConfig("/registry", codec)
	config.Transport.ServerList = []string{"http://" + e.Clients[0].Addr().String()}
	forResource := config.ForResource(samplecrd.Resource("networks"))
	generic, destroy, err := factory.Create(*forResource,
		func() runtime.Object { return &samplecrd.Network{} }, func() runtime.Object { return &samplecrd.NetworkList{} }, "/networks")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(destroy)
	scanner := etcdscan.New(client)
	return &pagesFixture{
		generic:     generic,
		ours:        &pagingStore{Interface: generic, etcd: newEtcdCodec(forResource, "/networks"), pages: scanner},
		forResource: forResource,
		scanner:     scanner,
		compact: func(t *testing.T) {
			resp, err := client.Get(context.Background(), "/")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := client.Compact(context.Background(), resp.Header.Revision); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func (f *pagesFixture) put(t *testing.T, ns, name string, labels map[string]string) {
	t.Helper()
	n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Spec: samplecrd.NetworkSpec{CIDR: "10.0.0.0/24"}}
	if err := f.generic.Create(context.Background(), "/networks/"+ns+"/"+name, n, &samplecrd.Network{}, 0); err != nil {
		t.Fatal(err)
	}
}

func (f *pagesFixture) del(t *testing.T, ns, name string) {
	t.Helper()
	err := f.generic.Delete(context.Background(), "/networks/"+ns+"/"+name, &samplecrd.Network{}, nil, storage.ValidateAllObjectFunc, nil, storage.DeleteOptions{})
	if err != nil && !storage.IsNotFound(err) {
		t.Fatal(err)
	}
}

// page is what a list response says, reduced to what both stores must agree on.
type page struct {
	items     []string // namespace/name@resourceVersion
	rv, next  string
	remaining *int64
}

func list(t *testing.T, s storage.Interface, key string, pred storage.SelectionPredicate) (page, error) {
	t.Helper()
	out := &samplecrd.NetworkList{}
	err := s.GetList(context.Background(), key, storage.ListOptions{Recursive: true, Predicate: pred}, out)
	if err != nil {
		return page{}, err
	}
	p := page{rv: out.ResourceVersion, next: out.Continue, remaining: out.RemainingItemCount}
	for _, n := range out.Items {
		p.items = append(p.items, n.Namespace+"/"+n.Name+"@"+n.ResourceVersion)
	}
	return p, nil
}

// samePage reads the page pred continues from both stores and fails unless they agree. The
// paging store leaves remainingItemCount unset (what it does not count); that it does shows the
// page was its own.
func (f *pagesFixture) samePage(t *testing.T, key string, pred storage.SelectionPredicate) page {
	t.Helper()
	return samePageOf(t, f.generic, f.ours, key, pred)
}

func samePageOf(t *testing.T, generic, ours storage.Interface, key string, pred storage.SelectionPredicate) page {
	t.Helper()
	want, err := list(t, generic, key, pred)
	if err != nil {
		t.Fatal(err)
	}
	got, err := list(t, ours, key, pred)
	if err != nil {
		t.Fatal(err)
	}
	if got.remaining != nil {
		t.Fatalf("remainingItemCount %d: the page was not read by the paging store", *got.remaining)
	}
	got.remaining, want.remaining = nil, nil
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("continue page:\n got  %+v\n want %+v", got, want)
	}
	return got
}

// TestContinuePagesAsTheEtcd3Store walks paged lists of Networks (all namespaces and one, with
// and without selectors, limits that do and do not divide the collection) and reads every
// continue page from both the etcd3 store and the paging store, while Networks are created,
// changed and deleted between pages: both must return the same items, resourceVersion and
// continue token. The paging store leaves remainingItemCount unset (what it does not
// count); that it does shows the page was its own.
func TestContinuePagesAsTheEtcd3Store(t *testing.T) {
	f := newPagesFixture(t)
	for i := range 60 {
		var l map[string]string
		if i%3 == 0 {
			l = map[string]string{"tier": "x"}
		}
		f.put(t, []string{"a", "b", "c"}[i%3], fmt.Sprintf("n%02d", i), l)
	}
	tierX := labels.SelectorFromSet(labels.Set{"tier": "x"})
	for run, tc := range []struct {
		key   string
		limit int64
		label labels.Selector
		field fieldsel.Selector
	}{
		{"/networks", 7, nil, nil},
		{"/networks", 20, nil, nil},
		{"/networks", 1, nil, nil},
		{"/networks/b", 4, nil, nil},
		{"/networks", 3, tierX, nil},
		{"/networks", 2, nil, fieldsel.OneTermEqualSelector("metadata.namespace", "c")},
	} {
		name := fmt.Sprintf("%s/%d/%v/%v", tc.key, tc.limit, tc.label, tc.field)
		t.Run(name, func(t *testing.T) {
			label, field := labels.Everything(), fieldsel.Everything()
			if tc.label != nil {
				label = tc.label
			}
			if tc.field != nil {
				field = tc.field
			}
			pred := storage.SelectionPredicate{Label: label, Field: field, GetAttrs: network.GetAttrs, Limit: tc.limit}
			first, err := list(t, f.generic, tc.key, pred)
			if err != nil {
				t.Fatal(err)
			}
			seen := len(first.items)
			for n, next := 0, first.next; next != ""; n++ {
				// Change the collection: the pages must not show it.
				f.put(t, "b", fmt.Sprintf("new-%d-%d", run, n), map[string]string{"tier": "x"})
				f.del(t, "c", fmt.Sprintf("n%02d", 59-3*(n+6*run)))
				pred.Continue = next
				got := f.samePage(t, tc.key, pred)
				if got.rv != first.rv {
					t.Fatalf("page %d at resourceVersion %s, the first at %s", n, got.rv, first.rv)
				}
				seen += len(got.items)
				next = got.next
			}
			if seen == 0 {
				t.Fatal("the walk saw no Network")
			}
		})
	}
}

// TestContinuePageErrors: a bad continue token is a 400 and a compacted one a 410 Gone whose
// continue token goes on at the current revision, from both stores alike; the 410's token
// then lists the rest.
func TestContinuePageErrors(t *testing.T) {
	f := newPagesFixture(t)
	for i := range 10 {
		f.put(t, "a", fmt.Sprintf("n%02d", i), nil)
	}
	pred := storage.SelectionPredicate{Label: labels.Everything(), Field: fieldsel.Everything(), GetAttrs: network.GetAttrs, Limit: 3}
	first, err := list(t, f.generic, "/networks", pred)
	if err != nil || first.next == "" {
		t.Fatalf("first page: %+v, %v", first, err)
	}

	pred.Continue = "not-a-token"
	for _, s := range []storage.Interface{f.generic, f.ours} {
		if _, err := list(t, s, "/networks", pred); !apierrors.IsBadRequest(err) {
			t.Fatalf("%T: a bad token gave %v, want 400", s, err)
		}
	}

	f.put(t, "a", "z-after", nil)
	f.compact(t)
	pred.Continue = first.next
	var tokens []string
	for _, s := range []storage.Interface{f.generic, f.ours} {
		_, err := list(t, s, "/networks", pred)
		status, ok := err.(apierrors.APIStatus)
		if !ok || !apierrors.IsResourceExpired(err) || status.Status().Continue == "" {
			t.Fatalf("%T: a compacted token gave %v, want 410 Gone with a continue token", s, err)
		}
		tokens = append(tokens, status.Status().Continue)
	}
	if tokens[0] != tokens[1] {
		t.Fatalf("the 410s' tokens differ: etcd3 store %q, ours %q", tokens[0], tokens[1])
	}
	pred.Continue = tokens[1]
	var rest []string
	for pred.Continue != "" {
		p, err := list(t, f.ours, "/networks", pred)
		if err != nil {
			t.Fatal(err)
		}
		rest = append(rest, p.items...)
		pred.Continue = p.next
	}
	if len(rest) != 8 { // n03..n09 and the Network created after the first page
		t.Fatalf("the rest after the 410: %v, want 8 Networks", rest)
	}
}

// beneath builds the Network storage as the server does (pagedBeneath around decorate) over the
// fixture's etcd, and waits until it is ready.
func (f *pagesFixture) beneath(t *testing.T, decorate generic.StorageDecorator) storage.Interface {
	t.Helper()
	keyFunc := func(obj runtime.Object) (string, error) { return storage.NamespaceKeyFunc("/networks/", obj) }
	s, destroy, err := pagedBeneath(decorate, f.scanner)(f.forResource, "/networks", keyFunc,
		func() runtime.Object { return &samplecrd.Network{} }, func() runtime.Object { return &samplecrd.NetworkList{} },
		network.GetAttrs, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(destroy)
	// Until the watch cache has synced it hands every list to the storage beneath it.
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return s.ReadinessCheck() == nil, nil
	}); err != nil {
		t.Fatalf("the storage never became ready: %v", err)
	}
	return s
}

// TestPagedBeneathTheWatchCache: the Network storage is the watch cache over the paging store:
// a continue page the cache hands on (ListFromCacheSnapshot off) is read by the paging store
// and equals the etcd3 store's; with ListFromCacheSnapshot on the cache serves it from its
// snapshot. With the watch cache off the storage is the paging store itself.
func TestPagedBeneathTheWatchCache(t *testing.T) {
	f := newPagesFixture(t)
	for i := range 5 {
		f.put(t, "a", fmt.Sprintf("n%02d", i), nil)
	}
	pred := storage.SelectionPredicate{Label: labels.Everything(), Field: fieldsel.Everything(), GetAttrs: network.GetAttrs, Limit: 2}
	firstPage := func(t *testing.T, s storage.Interface) storage.SelectionPredicate {
		t.Helper()
		first, err := list(t, s, "/networks", pred)
		if err != nil || first.next == "" {
			t.Fatalf("first page %+v, %v: want one with a continue token", first, err)
		}
		p := pred
		p.Continue = first.next
		return p
	}

	t.Run("watch cache, ListFromCacheSnapshot off", func(t *testing.T) {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, false)
		s := f.beneath(t, genericregistry.StorageWithCacher())
		if _, ok := s.(*cacherstorage.CacheDelegator); !ok {
			t.Fatalf("built a %T, want the watch cache", s)
		}
		samePageOf(t, f.generic, s, "/networks", firstPage(t, s))
		// The watch cache enabled the size estimation on the paging store: Stats counts the
		// cache's keys and reads a sample's sizes.
		if st, err := s.Stats(context.Background()); err != nil || st.ObjectCount != 5 || st.EstimatedAverageObjectSizeBytes <= 0 {
			t.Fatalf("Stats through the watch cache: %+v, %v: want 5 Networks and their average size", st, err)
		}
	})
	t.Run("watch cache, ListFromCacheSnapshot on", func(t *testing.T) {
		featuregatetesting.SetFeatureGateDuringTest(t, utilfeature.DefaultFeatureGate, features.ListFromCacheSnapshot, true)
		s := f.beneath(t, genericregistry.StorageWithCacher())
		got, err := list(t, s, "/networks", firstPage(t, s))
		if err != nil {
			t.Fatal(err)
		}
		if got.remaining == nil {
			t.Fatal("with ListFromCacheSnapshot on the continue page reached the paging store")
		}
	})
	t.Run("no watch cache", func(t *testing.T) {
		s := f.beneath(t, generic.UndecoratedStorage)
		if _, ok := s.(*pagingStore); !ok {
			t.Fatalf("built a %T, want the paging store", s)
		}
		samePageOf(t, f.generic, s, "/networks", firstPage(t, s))
	})
}

// TestContinuePageFilledMidRead: a selector drops a whole read, the next (twice as large)
// reaches the end of the range and fills the page before its last key: the page must still
// say that more follow, as the etcd3 store's does, and the walk must end with every match.
func TestContinuePageFilledMidRead(t *testing.T) {
	f := newPagesFixture(t)
	x := map[string]string{"tier": "x"}
	for i := range 4 {
		f.put(t, "a", fmt.Sprintf("x%d", i), x)
		f.put(t, "a", fmt.Sprintf("y%d", i), nil)
	}
	for i := range 6 {
		f.put(t, "a", fmt.Sprintf("z%d", i), x)
	}
	pred := storage.SelectionPredicate{Label: labels.SelectorFromSet(x), Field: fieldsel.Everything(), GetAttrs: network.GetAttrs, Limit: 4}
	first, err := list(t, f.generic, "/networks", pred)
	if err != nil {
		t.Fatal(err)
	}
	matches := len(first.items)
	for pred.Continue = first.next; pred.Continue != ""; {
		got := f.samePage(t, "/networks", pred)
		matches += len(got.items)
		pred.Continue = got.next
	}
	if matches != 10 {
		t.Fatalf("the walk found %d Networks, want the 10 labelled", matches)
	}
}

// TestStatsFromASample: with the watch cache's keys, Stats counts them and estimates the
// average stored size from a sample of values: the exact mean while the sample holds every
// Network, a mean within the sizes stored once it cannot, and the etcd3 store's own Stats (a
// count, no size) without the keys.
func TestStatsFromASample(t *testing.T) {
	f := newPagesFixture(t)
	ctx := context.Background()
	if st, err := f.ours.Stats(ctx); err != nil || st.ObjectCount != 0 || st.EstimatedAverageObjectSizeBytes != 0 {
		t.Fatalf("Stats before the keys: %+v, %v: want the etcd3 store's count of 0 and no size", st, err)
	}
	var keys []string
	sizes := func() (lo, hi, mean int64) {
		resp, err := f.scanner.ReadPage(ctx, f.ours.etcd.KeyPrefix(), "\xff", 0, 100000)
		if err != nil {
			t.Fatal(err)
		}
		lo = 1 << 62
		for _, kv := range resp.Kvs {
			n := int64(len(kv.Value))
			lo, hi, mean = min(lo, n), max(hi, n), mean+n
		}
		return lo, hi, mean / int64(len(resp.Kvs))
	}
	if err := f.ours.EnableResourceSizeEstimation(func(context.Context) ([]string, error) { return keys, nil }); err != nil {
		t.Fatal(err)
	}
	if err := f.ours.EnableResourceSizeEstimation(func(context.Context) ([]string, error) { return nil, nil }); err == nil {
		t.Fatal("enabled twice without an error")
	}
	if st, err := f.ours.Stats(ctx); err != nil || st != (storage.Stats{}) {
		t.Fatalf("Stats of nothing: %+v, %v", st, err)
	}
	for i := range 100 {
		f.put(t, "a", fmt.Sprintf("n%03d", i), nil)
		keys = append(keys, fmt.Sprintf("/networks/a/n%03d", i))
	}
	_, _, mean := sizes()
	st, err := f.ours.Stats(ctx)
	if err != nil || st.ObjectCount != 100 || st.EstimatedAverageObjectSizeBytes != mean {
		t.Fatalf("Stats of 100: %+v, %v: want 100 Networks of %d bytes on average", st, err, mean)
	}
	// Larger Networks, and more than one sample holds.
	big := map[string]string{"a-label-that-makes-the-network-larger": strings.Repeat("x", 60)}
	for i := range 2 * sizeSample {
		f.put(t, "b", fmt.Sprintf("n%03d", i), big)
		keys = append(keys, fmt.Sprintf("/networks/b/n%03d", i))
	}
	lo, hi, _ := sizes()
	for range 8 {
		st, err := f.ours.Stats(ctx)
		if err != nil || st.ObjectCount != int64(len(keys)) || st.EstimatedAverageObjectSizeBytes < lo || st.EstimatedAverageObjectSizeBytes > hi {
			t.Fatalf("Stats of %d: %+v, %v: want the count and a size within %d..%d", len(keys), st, err, lo, hi)
		}
	}
	if lo == hi {
		t.Fatalf("the Networks stored are all of %d bytes: the test needs two sizes", lo)
	}
}
