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
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/testutil"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// indexOf is an index synced with networks.
func indexOf(networks ...*samplecrd.Network) *Index {
	x := NewIndex()
	list := make([]any, len(networks))
	for i, n := range networks {
		list[i] = n
	}
	if err := x.Replace(list, "1"); err != nil {
		panic(err)
	}
	return x
}

func network(namespace, name string, c *samplecrd.NetworkCapacity) *samplecrd.Network {
	return &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Status: samplecrd.NetworkStatus{Capacity: c}}
}

// testNetworks: a 50% full /28, a 90% full /28 in another namespace, a /64 whose counts are
// beyond 2^53, one whose used is unknown, and one without a capacity (no prefix yet).
func testNetworks() []*samplecrd.Network {
	return []*samplecrd.Network{
		network("a", "half", &samplecrd.NetworkCapacity{Total: "12", Allocated: "8", Used: "6", Available: "6"}),
		network("b", "full", &samplecrd.NetworkCapacity{Total: "10", Allocated: "10", Used: "9", Available: "1"}),
		network("a", "v6", &samplecrd.NetworkCapacity{Total: "18446744073709551614", Allocated: "9007199254740993", Used: "3", Available: "18446744073709551611"}),
		network("a", "unknown", &samplecrd.NetworkCapacity{Total: "13", Allocated: "4", NodesWithoutLeases: 1}),
		network("a", "pending", nil),
	}
}

const (
	omittedHelp = `# HELP network_apiserver_network_addresses_omitted_networks [ALPHA] Networks left without network_apiserver_network_addresses series by --capacity-metrics (over --capacity-metrics-max-networks, or not in mode network); they still count in the namespace sums unless the mode is none.
# TYPE network_apiserver_network_addresses_omitted_networks gauge
`
	namespaceSums = `# HELP network_apiserver_namespace_network_addresses [ALPHA] Sums over the Networks of a namespace of network_apiserver_network_addresses, each state over the Networks that report it (used and available leave out the Networks whose used count is unknown). Exact below 2^53, the nearest float64 above.
# TYPE network_apiserver_namespace_network_addresses gauge
network_apiserver_namespace_network_addresses{namespace="a",state="allocated"} 9.007199254741004e+15
network_apiserver_namespace_network_addresses{namespace="a",state="available"} 1.8446744073709552e+19
network_apiserver_namespace_network_addresses{namespace="a",state="total"} 1.8446744073709552e+19
network_apiserver_namespace_network_addresses{namespace="a",state="used"} 9
network_apiserver_namespace_network_addresses{namespace="b",state="allocated"} 10
network_apiserver_namespace_network_addresses{namespace="b",state="available"} 1
network_apiserver_namespace_network_addresses{namespace="b",state="total"} 10
network_apiserver_namespace_network_addresses{namespace="b",state="used"} 9
`
)

func perNetworkHelp() string {
	return "# HELP network_apiserver_network_addresses [ALPHA] " + NetworkAddressesHelp + "\n# TYPE network_apiserver_network_addresses gauge\n"
}

func TestCollect(t *testing.T) {
	all := `network_apiserver_network_addresses{name="full",namespace="b",state="allocated"} 10
network_apiserver_network_addresses{name="full",namespace="b",state="available"} 1
network_apiserver_network_addresses{name="full",namespace="b",state="total"} 10
network_apiserver_network_addresses{name="full",namespace="b",state="used"} 9
network_apiserver_network_addresses{name="half",namespace="a",state="allocated"} 8
network_apiserver_network_addresses{name="half",namespace="a",state="available"} 6
network_apiserver_network_addresses{name="half",namespace="a",state="total"} 12
network_apiserver_network_addresses{name="half",namespace="a",state="used"} 6
network_apiserver_network_addresses{name="unknown",namespace="a",state="allocated"} 4
network_apiserver_network_addresses{name="unknown",namespace="a",state="total"} 13
network_apiserver_network_addresses{name="v6",namespace="a",state="allocated"} 9.007199254740992e+15
network_apiserver_network_addresses{name="v6",namespace="a",state="available"} 1.8446744073709552e+19
network_apiserver_network_addresses{name="v6",namespace="a",state="total"} 1.8446744073709552e+19
network_apiserver_network_addresses{name="v6",namespace="a",state="used"} 3
`
	for name, tc := range map[string]struct {
		opts Options
		want string
	}{
		"every Network": {Options{Mode: ModeNetwork, MaxNetworks: 10},
			perNetworkHelp() + all + namespaceSums + omittedHelp + "network_apiserver_network_addresses_omitted_networks 0\n"},
		// The two fullest: full (90%), half (50%); v6 (~0%) and unknown (unknown) are left out.
		"bounded to two": {Options{Mode: ModeNetwork, MaxNetworks: 2},
			perNetworkHelp() + strings.Join(strings.SplitAfter(all, "\n")[:8], "") + namespaceSums + omittedHelp +
				"network_apiserver_network_addresses_omitted_networks 2\n"},
		"max 0":          {Options{Mode: ModeNetwork}, namespaceSums + omittedHelp + "network_apiserver_network_addresses_omitted_networks 4\n"},
		"namespace sums": {Options{Mode: ModeNamespace, MaxNetworks: 10}, namespaceSums + omittedHelp + "network_apiserver_network_addresses_omitted_networks 4\n"},
		"none":           {Options{Mode: ModeNone, MaxNetworks: 10}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			c := NewCollector()
			remove := c.Add(indexOf(testNetworks()...), tc.opts)
			defer remove()
			if err := testutil.CustomCollectAndCompare(c, strings.NewReader(tc.want),
				"network_apiserver_network_addresses", "network_apiserver_namespace_network_addresses",
				"network_apiserver_network_addresses_omitted_networks"); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestSources: the latest source is reported; removed, the one before it again; none, nothing;
// an index not synced yet exports nothing (and fails no scrape).
func TestSources(t *testing.T) {
	c := NewCollector()
	one := func(name string) *Index {
		return indexOf(network("ns", name, &samplecrd.NetworkCapacity{Total: "5", Allocated: "0", Used: "0", Available: "5"}))
	}
	want := func(name string) string {
		if name == "" {
			return ""
		}
		return perNetworkHelp() + `network_apiserver_network_addresses{name="` + name + `",namespace="ns",state="allocated"} 0
network_apiserver_network_addresses{name="` + name + `",namespace="ns",state="available"} 5
network_apiserver_network_addresses{name="` + name + `",namespace="ns",state="total"} 5
network_apiserver_network_addresses{name="` + name + `",namespace="ns",state="used"} 0
`
	}
	registry := testutil.NewFakeKubeRegistry("1.37.2")
	registry.CustomMustRegister(c)
	check := func(step, name string) {
		t.Helper()
		if err := testutil.GatherAndCompare(registry, strings.NewReader(want(name)), "network_apiserver_network_addresses"); err != nil {
			t.Errorf("%s: %v", step, err)
		}
	}
	check("no source", "")
	removeFirst := c.Add(one("first"), Options{Mode: ModeNetwork, MaxNetworks: 5})
	check("one source", "first")
	removeSecond := c.Add(one("second"), Options{Mode: ModeNetwork, MaxNetworks: 5})
	check("the latest", "second")
	removeSecond()
	check("the latest removed", "first")
	removeFirst()
	check("all removed", "")
	notSynced := NewIndex()
	if err := notSynced.Add(network("ns", "early", &samplecrd.NetworkCapacity{Total: "5"})); err != nil {
		t.Fatal(err)
	}
	defer c.Add(notSynced, Options{Mode: ModeNetwork, MaxNetworks: 5})()
	check("not synced", "")
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		opts Options
		errs string
	}{
		{Options{Mode: ModeNetwork, MaxNetworks: 10}, ""},
		{Options{Mode: ModeNamespace}, ""},
		{Options{Mode: ModeNone}, ""},
		{Options{Mode: "all", MaxNetworks: 1}, `--capacity-metrics "all" must be one of network, namespace, none`},
		{Options{Mode: ModeNetwork, MaxNetworks: -1}, `--capacity-metrics-max-networks -1 must not be negative`},
	} {
		var msgs []string
		for _, err := range tc.opts.Validate() {
			msgs = append(msgs, err.Error())
		}
		if got := strings.Join(msgs, "; "); got != tc.errs {
			t.Errorf("%+v: errors %q, want %q", tc.opts, got, tc.errs)
		}
	}
}

// BenchmarkScrape measures one scrape of /metrics' capacity gauges at 10,000 Networks (40,000
// per-Network series, in 100 namespaces) as the server encodes it, reporting the body's bytes
// and the series: docs/operations.md projects them to a million Networks.
func BenchmarkScrape(b *testing.B) {
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"network", Options{Mode: ModeNetwork, MaxNetworks: DefaultMaxNetworks}},
		{"namespace", Options{Mode: ModeNamespace}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			networks := make([]*samplecrd.Network, 10000)
			for i := range networks {
				networks[i] = network(fmt.Sprintf("team-%03d", i%100), fmt.Sprintf("network-%05d", i),
					&samplecrd.NetworkCapacity{Total: "253", Allocated: "64", Used: strconv.Itoa(i % 200), Available: strconv.Itoa(253 - i%200)})
			}
			c := NewCollector()
			defer c.Add(indexOf(networks...), tc.opts)()
			registry := metrics.NewKubeRegistry()
			registry.CustomMustRegister(c)
			handler := metrics.HandlerFor(registry, metrics.HandlerOpts{})
			var size, series int
			for b.Loop() {
				rec := httptest.NewRecorder()
				handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
				size = rec.Body.Len()
				series = strings.Count(rec.Body.String(), "\nnetwork_apiserver_")
			}
			b.ReportMetric(float64(size), "bytes/scrape")
			b.ReportMetric(float64(series), "series")
		})
	}
}
