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
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// scrape is what /metrics would show of c.
func scrape(t testing.TB, c *Collector) string {
	t.Helper()
	registry := metrics.NewKubeRegistry()
	registry.CustomMustRegister(c)
	rec := httptest.NewRecorder()
	metrics.HandlerFor(registry, metrics.HandlerOpts{}).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	return rec.Body.String()
}

// exported is what an index of networks exports with opts.
func exported(t testing.TB, x *Index, opts Options) string {
	c := NewCollector()
	defer c.Add(x, opts)()
	return scrape(t, c)
}

// randomCapacity draws the capacities a Network can have: none (no prefix), used unknown, exact
// IPv4 counts, full, empty (total 0), counts around 2^32 and beyond a uint64, and a count that is
// not a decimal.
func randomCapacity(r *rand.Rand) *samplecrd.NetworkCapacity {
	total := r.IntN(300)
	used := r.IntN(total + 1)
	c := &samplecrd.NetworkCapacity{Total: strconv.Itoa(total), Allocated: strconv.Itoa(r.IntN(total + 1)),
		Used: strconv.Itoa(used), Available: strconv.Itoa(total - used)}
	switch r.IntN(8) {
	case 0:
		return nil
	case 1:
		c.Used, c.Available, c.NodesWithoutLeases = "", "", 1
	case 2:
		c.Total, c.Available = "36893488147419103230", "36893488147419103229"
		c.Used = "1"
	case 3:
		c.Allocated = "12x"
	case 4:
		// Around 2^32, where a count stops fitting the index's small form.
		c.Total, c.Allocated, c.Used, c.Available = "4294967296", "4294967295", "4294967295", "1"
	}
	return c
}

// TestIndexFollowsChanges applies random adds, updates and deletes over four namespaces and,
// after each, checks that the index exports exactly what one built from scratch from the
// Networks as they now are exports: the sums are kept right change by change, a namespace
// without Networks loses its sums, and the fullest Networks are the ones with series.
func TestIndexFollowsChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 25))
	x := NewIndex()
	if err := x.Replace(nil, "1"); err != nil {
		t.Fatal(err)
	}
	current := map[string]*samplecrd.Network{}
	names := make([]string, 40)
	for i := range names {
		names[i] = fmt.Sprintf("ns-%d/net-%02d", i%4, i)
	}
	ops := map[string]int{}
	for step := range 3000 {
		key := names[r.IntN(len(names))]
		namespace, name, _ := strings.Cut(key, "/")
		n := network(namespace, name, randomCapacity(r))
		var err error
		switch _, exists := current[key]; {
		case exists && r.IntN(3) == 0:
			ops["delete"]++
			// A reflector deletes with the last state it saw; a relist's tombstone carries an older one.
			if r.IntN(2) == 0 {
				err = x.Delete(cache.DeletedFinalStateUnknown{Key: key, Obj: current[key]})
			} else {
				err = x.Delete(current[key])
			}
			delete(current, key)
		case exists:
			ops["update"]++
			err, current[key] = x.Update(n), n
		default:
			ops["add"]++
			err, current[key] = x.Add(n), n
		}
		if err != nil {
			t.Fatal(err)
		}
		if step%10 != 0 {
			continue
		}
		var list []*samplecrd.Network
		for _, n := range current {
			list = append(list, n)
		}
		fresh := indexOf(list...)
		for _, opts := range []Options{{Mode: ModeNetwork, MaxNetworks: 1000}, {Mode: ModeNetwork, MaxNetworks: 5}, {Mode: ModeNamespace}} {
			if got, want := exported(t, x, opts), exported(t, fresh, opts); got != want {
				t.Fatalf("step %d, %+v: the index exports\n%s\none built from the %d Networks exports\n%s", step, opts, got, len(list), want)
			}
		}
	}
	t.Logf("operations: %v", ops)
	for key, n := range current {
		if err := x.Delete(n); err != nil {
			t.Fatal(err)
		}
		delete(current, key)
	}
	if got := exported(t, x, Options{Mode: ModeNetwork, MaxNetworks: 5}); got != omittedHelp+"network_apiserver_network_addresses_omitted_networks 0\n" {
		t.Errorf("every Network deleted, the index exports\n%s", got)
	}
	if x.count != 0 || len(x.spaces) != 0 {
		t.Errorf("every Network deleted, the index holds %d Networks and %d namespaces", x.count, len(x.spaces))
	}
}

// TestIndexRefusesOtherTypes: what is not a Network is an error, not a panic.
func TestIndexRefusesOtherTypes(t *testing.T) {
	x := NewIndex()
	for name, err := range map[string]error{
		"add": x.Add("x"), "update": x.Update(1), "delete": x.Delete(cache.DeletedFinalStateUnknown{Key: "a/b", Obj: 2}),
		"replace": x.Replace([]any{network("a", "b", nil), "x"}, "1"),
	} {
		if err == nil || !strings.Contains(err.Error(), "is not a Network") {
			t.Errorf("%s: %v, want an error", name, err)
		}
	}
}

// BenchmarkIndex reports what the index holds per Network (live heap after a Replace of 100,000
// Networks, over the heap before) and what one update costs.
func BenchmarkIndex(b *testing.B) {
	const count = 100000
	list := make([]any, count)
	for i := range list {
		list[i] = network(fmt.Sprintf("team-%03d", i%100), fmt.Sprintf("network-%06d", i),
			&samplecrd.NetworkCapacity{Total: "253", Allocated: "64", Used: strconv.Itoa(i % 200), Available: strconv.Itoa(253 - i%200)})
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	x := NewIndex()
	if err := x.Replace(list, "1"); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	held := float64(after.HeapAlloc-before.HeapAlloc) / count
	i := 0
	for b.Loop() {
		n := list[i%count].(*samplecrd.Network)
		if err := x.Update(n); err != nil {
			b.Fatal(err)
		}
		i++
	}
	b.ReportMetric(held, "index-bytes/network")
	runtime.KeepAlive(list)
}
