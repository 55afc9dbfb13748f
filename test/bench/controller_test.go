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
	"strings"
	"testing"
	"time"
)

const sampleMetrics = `# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="201",component="apiserver",dry_run="",group="samplecrd.k8s.io",resource="networks",scope="resource",subresource="",verb="POST",version="v1"} 1000
apiserver_request_total{code="201",component="apiserver",dry_run="",group="samplecrd.k8s.io",resource="networks",scope="resource",subresource="blockclaims",verb="POST",version="v1"} 1000
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecrd.k8s.io",resource="networks",scope="resource",subresource="status",verb="APPLY",version="v1"} 1900
apiserver_request_total{code="409",component="apiserver",dry_run="",group="samplecrd.k8s.io",resource="networks",scope="resource",subresource="status",verb="APPLY",version="v1"} 100
apiserver_request_total{code="200",component="apiserver",dry_run="",group="samplecrd.k8s.io",resource="networks",scope="namespace",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 77
network_controller_status_writes_total{kind="state"} 1990
network_controller_status_writes_total{kind="counts"} 10
network_controller_reconcile_total{result="changed"} 1000
network_controller_reconcile_total{result="in_sync"} 1500
network_backend_netlink_requests_total 12345
network_backend_file_writes_total{kind="write"} 1000
network_backend_file_writes_total{kind="remove"} 2
weird_metric{a="x\"y",b="z\\"} 5
`

func TestParseCounters(t *testing.T) {
	got := parseCounters([]byte(sampleMetrics))
	want := map[string]float64{
		"server writes (all)":      4000, // POST, blockclaims POST, status APPLY (200 and 409); not LIST, not events
		"server status writes":     2000,
		"controller status writes": 2000,
		"controller reconciles":    2500,
		"netlink requests":         12345,
		"nftables batches":         0, // absent: zero
		"file writes":              1002,
	}
	if len(got) != len(want) {
		t.Fatalf("counters %v; want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v; want %v", k, got[k], v)
		}
	}
}

func TestParseSample(t *testing.T) {
	name, labels, v, ok := parseSample(`weird_metric{a="x\"y",b="z\\"} 5`)
	if !ok || name != "weird_metric" || labels["a"] != `x"y` || labels["b"] != `z\` || v != 5 {
		t.Fatalf("parsed %q %v %v %v", name, labels, v, ok)
	}
	if _, _, v, ok := parseSample("plain_total 2.5e+03"); !ok || v != 2500 {
		t.Fatalf("plain sample: %v %v", v, ok)
	}
	for _, bad := range []string{"", "# HELP x y", "x{a=\"1\"}", "x{a=1} 3", "x notanumber"} {
		if _, _, _, ok := parseSample(bad); ok {
			t.Errorf("parseSample(%q) accepted", bad)
		}
	}
}

func TestPerNetworkAndReady(t *testing.T) {
	before := map[string]float64{"a": 10, "b": 0}
	after := map[string]float64{"a": 30, "b": 5}
	if got := perNetwork(before, after, 10); got["a"] != 2 || got["b"] != 0.5 {
		t.Fatalf("perNetwork %v", got)
	}
	t0 := time.Unix(100, 0)
	start := map[string]time.Time{"x": t0, "y": t0.Add(time.Second), "z": t0}
	ready := map[string]time.Time{"x": t0.Add(300 * time.Millisecond), "y": t0.Add(1500 * time.Millisecond), "other": t0.Add(time.Hour)}
	lat, last, notReady := readyLatencies(start, ready)
	if notReady != 1 || len(lat) != 2 || !last.Equal(t0.Add(1500*time.Millisecond)) {
		t.Fatalf("latencies %v, last %v, not ready %d", lat, last, notReady)
	}
	if d := summarize(lat); d.MaxMs != 500 || d.P50Ms != 300 {
		t.Fatalf("summary %+v", d)
	}
}

func TestControllerCIDRsAreDistinct(t *testing.T) {
	seen := map[string]bool{}
	for i := range 1 << 16 {
		c, gw := controllerCIDR(i)
		if seen[c] {
			t.Fatalf("Network %d repeats %s", i, c)
		}
		seen[c] = true
		if i == 258 && (c != "10.1.2.0/24" || gw != "10.1.2.1") {
			t.Fatalf("Network 258: %s %s", c, gw)
		}
	}
}

func TestOnlyControllerFlags(t *testing.T) {
	c, err := parseFlags([]string{"-only", "controller"})
	if err != nil || c.ControllerNetworks != 1000 || c.Clients != 32 {
		t.Fatalf("config %+v, %v", c, err)
	}
	if _, err := parseFlags([]string{"-only", "controller", "-controller-networks", "0"}); err == nil {
		t.Fatal("0 Networks accepted")
	}
	if _, err := parseFlags([]string{"-only", "nothing"}); err == nil {
		t.Fatal("an unknown workload accepted")
	}
}

// The step's rows: every figure present once the step ran, none without a figure missing.
func TestControllerLines(t *testing.T) {
	c, err := parseFlags([]string{"-only", "controller"})
	if err != nil {
		t.Fatal(err)
	}
	r := &results{Config: c}
	r.buildLines()
	if len(r.missing()) == 0 {
		t.Fatal("a run without the step's figures misses none")
	}
	costs := parseCounters([]byte(sampleMetrics))
	r.Ours.Controller = &controllerResult{Ready: dist{P50Ms: 100, P99Ms: 900}, CreateCost: costs, DeleteCost: costs}
	r.buildLines()
	if m := r.missing(); len(m) != 0 {
		t.Fatalf("missing: %v", m)
	}
	for _, l := range r.Lines {
		if l.Name == "controller: 1000 creates → Ready p99 (target < 1 s)" {
			if *l.Ours != 900 || l.Ratio != nil {
				t.Fatalf("p99 line %+v", l)
			}
			return
		}
	}
	t.Fatal("no p99 line")
}

// The lost-guards rows are ours only: measured, they are not missing figures for want of a CRD
// figure (a CRD has no allocator); not measured, they are.
func TestLostGuardsRowsAreOursOnly(t *testing.T) {
	c, err := parseFlags(nil)
	if err != nil {
		t.Fatal(err)
	}
	guardRows := func(r *results) (missing []string) {
		r.Lines = nil
		r.buildLines()
		for _, m := range r.missing() {
			if strings.Contains(m, "guards lost") {
				missing = append(missing, m)
			}
		}
		return missing
	}
	r := &results{Config: c}
	r.Ours.Create, r.CRD.Create = &createResult{}, &createResult{}
	r.Ours.CreateAggregated, r.CRD.CreateAggregated = &createResult{}, &createResult{}
	if m := guardRows(r); len(m) != 2 {
		t.Fatalf("without the counter, want both lost-guards rows missing, got %v", m)
	}
	r.Ours.Create.LostGuardsPerCreate, r.Ours.CreateAggregated.LostGuardsPerCreate = val(0.07), val(0.09)
	if m := guardRows(r); len(m) != 0 {
		t.Fatalf("measured lost-guards rows reported missing: %v", m)
	}
}
