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

// Package capacitymetrics exports the Networks' status.capacity as Prometheus gauges on the
// server's /metrics. A custom collector reads the Networks from the server's watch cache at
// scrape time: nothing is kept or written per change, and a scrape sees what a LIST would.
package capacitymetrics

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// Modes of the export (--capacity-metrics).
const (
	// ModeNetwork exports per-Network series for at most MaxNetworks Networks (the fullest) and
	// the per-namespace sums.
	ModeNetwork = "network"
	// ModeNamespace exports the per-namespace sums only.
	ModeNamespace = "namespace"
	// ModeNone exports no capacity series.
	ModeNone = "none"
)

// listTimeout bounds a scrape's LIST of the Networks.
const listTimeout = 10 * time.Second

// Modes are the values --capacity-metrics takes.
var Modes = []string{ModeNetwork, ModeNamespace, ModeNone}

// DefaultMaxNetworks is the default bound on the Networks with series of their own: 10,000
// Networks are at most 40,000 series (docs/operations.md gives their cost).
const DefaultMaxNetworks = 10000

// The states of the state label, in the order of status.capacity.
var states = []string{"total", "allocated", "used", "available"}

// NetworkAddressesHelp is the HELP of network_apiserver_network_addresses.
const NetworkAddressesHelp = "Addresses of a Network's prefix by state, from its status.capacity: total (usable addresses: the prefix without its network, " +
	"IPv4 broadcast and gateway addresses), allocated (inside the nodes' blocks), used (leased to pods, as the nodes report) and " +
	"available (total - used). used and available are absent while a node reports no lease count. Exact below 2^53, the nearest " +
	"float64 above (large IPv6 prefixes). Every replica reports the same store: aggregate with max by (namespace, name), not sum."

var (
	networkAddresses = metrics.NewDesc("network_apiserver_network_addresses", NetworkAddressesHelp,
		[]string{"namespace", "name", "state"}, nil, metrics.ALPHA, "")
	namespaceAddresses = metrics.NewDesc("network_apiserver_namespace_network_addresses",
		"Sums over the Networks of a namespace of network_apiserver_network_addresses, each state over the Networks that report it "+
			"(used and available leave out the Networks whose used count is unknown). Exact below 2^53, the nearest float64 above.",
		[]string{"namespace", "state"}, nil, metrics.ALPHA, "")
	omittedNetworks = metrics.NewDesc("network_apiserver_network_addresses_omitted_networks",
		"Networks left without network_apiserver_network_addresses series by --capacity-metrics (over --capacity-metrics-max-networks, "+
			"or not in mode network); they still count in the namespace sums unless the mode is none.",
		nil, nil, metrics.ALPHA, "")
)

// ListFunc lists every Network of the server's store (its watch cache).
type ListFunc func(ctx context.Context) ([]*samplecrd.Network, error)

// Options bound what a scrape exports.
type Options struct {
	// Mode is ModeNetwork, ModeNamespace or ModeNone ("" is ModeNetwork).
	Mode string
	// MaxNetworks bounds the Networks with series of their own in ModeNetwork (0: none).
	MaxNetworks int
}

// Validate checks the options, naming the flags.
func (o Options) Validate() []error {
	var errs []error
	if o.Mode != "" && !slices.Contains(Modes, o.Mode) {
		errs = append(errs, fmt.Errorf("--capacity-metrics %q must be one of %s", o.Mode, strings.Join(Modes, ", ")))
	}
	if o.MaxNetworks < 0 {
		errs = append(errs, fmt.Errorf("--capacity-metrics-max-networks %d must not be negative", o.MaxNetworks))
	}
	return errs
}

// source is one server's store and options.
type source struct {
	list ListFunc
	opts Options
}

// Collector exports the capacity gauges of the server's Networks.
type Collector struct {
	metrics.BaseStableCollector

	mu sync.Mutex
	// sources are the servers of this process, the latest last: a scrape reports the latest.
	// One process serves one server; tests run several in turn.
	sources []*source
}

// NewCollector returns a collector with no source: it exports nothing until one is added.
func NewCollector() *Collector { return &Collector{} }

var (
	registered   = NewCollector()
	registerOnce sync.Once
	_            metrics.StableCollector = &Collector{}
)

// Register adds list, with opts, as the source of the process's collector (registering it with
// legacyregistry on first use), until the returned function is called.
func Register(list ListFunc, opts Options) (unregister func()) {
	registerOnce.Do(func() { legacyregistry.CustomMustRegister(registered) })
	return registered.Add(list, opts)
}

// Add makes list, with opts, the collector's source until the returned function is called.
func (c *Collector) Add(list ListFunc, opts Options) func() {
	s := &source{list: list, opts: opts}
	c.mu.Lock()
	c.sources = append(c.sources, s)
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.sources = slices.DeleteFunc(c.sources, func(o *source) bool { return o == s })
	}
}

// DescribeWithStability describes the gauges.
func (c *Collector) DescribeWithStability(ch chan<- *metrics.Desc) {
	ch <- networkAddresses
	ch <- namespaceAddresses
	ch <- omittedNetworks
}

// CollectWithStability lists the Networks and exports their capacity.
func (c *Collector) CollectWithStability(ch chan<- metrics.Metric) {
	c.mu.Lock()
	var s *source
	if len(c.sources) > 0 {
		s = c.sources[len(c.sources)-1]
	}
	c.mu.Unlock()
	if s == nil || s.opts.Mode == ModeNone {
		return
	}
	// A scrape waits for no slow store: a LIST of the watch cache answers at once when it is ready.
	ctx, cancel := context.WithTimeout(context.Background(), listTimeout)
	defer cancel()
	networks, err := s.list(ctx)
	if err != nil {
		// A scrape without the gauges (absent, not zero) rather than a failed /metrics.
		klog.ErrorS(err, "Listing Networks for the capacity metrics")
		return
	}
	collect(ch, networks, s.opts)
}

// counts are a Network's parsed capacity: nil where a state is absent.
type counts [4]*big.Int

func parse(c *samplecrd.NetworkCapacity) (counts, bool) {
	var out counts
	if c == nil {
		return out, false
	}
	for i, v := range []string{c.Total, c.Allocated, c.Used, c.Available} {
		if v == "" {
			continue
		}
		// Most counts fit a uint64: parsed without math/big's slower path.
		if u, err := strconv.ParseUint(v, 10, 64); err == nil {
			out[i] = new(big.Int).SetUint64(u)
		} else if n, ok := new(big.Int).SetString(v, 10); ok {
			out[i] = n
		}
	}
	return out, true
}

// toFloat is n as the nearest float64: exact below 2^53.
func toFloat(n *big.Int) float64 {
	f, _ := new(big.Float).SetInt(n).Float64()
	return f
}

// fullness is used/total, or -1 when unknown: what orders the Networks that get series.
func (c counts) fullness() float64 {
	if c[0] == nil || c[2] == nil || c[0].Sign() <= 0 {
		return -1
	}
	f, _ := new(big.Rat).SetFrac(c[2], c[0]).Float64()
	return f
}

type entry struct {
	namespace, name string
	counts          counts
	fullness        float64
}

func collect(ch chan<- metrics.Metric, networks []*samplecrd.Network, opts Options) {
	entries := make([]entry, 0, len(networks))
	sums := map[string]*counts{}
	for _, n := range networks {
		c, ok := parse(n.Status.Capacity)
		if !ok {
			continue
		}
		entries = append(entries, entry{namespace: n.Namespace, name: n.Name, counts: c, fullness: c.fullness()})
		sum := sums[n.Namespace]
		if sum == nil {
			sum = &counts{}
			sums[n.Namespace] = sum
		}
		for i, v := range c {
			if v == nil || (i >= 2 && c[2] == nil) {
				continue
			}
			if sum[i] == nil {
				sum[i] = new(big.Int)
			}
			sum[i].Add(sum[i], v)
		}
	}
	for namespace, sum := range sums {
		for i, v := range sum {
			if v != nil {
				ch <- metrics.NewLazyConstMetric(namespaceAddresses, metrics.GaugeValue, toFloat(v), namespace, states[i])
			}
		}
	}
	limit := 0
	if opts.Mode == ModeNetwork || opts.Mode == "" {
		limit = min(opts.MaxNetworks, len(entries))
	}
	if limit < len(entries) && limit > 0 {
		// The fullest Networks keep their series: they are the ones alerts are about.
		slices.SortFunc(entries, func(a, b entry) int {
			switch {
			case a.fullness > b.fullness:
				return -1
			case a.fullness < b.fullness:
				return 1
			}
			if c := strings.Compare(a.namespace, b.namespace); c != 0 {
				return c
			}
			return strings.Compare(a.name, b.name)
		})
	}
	for _, e := range entries[:limit] {
		for i, v := range e.counts {
			if v != nil {
				ch <- metrics.NewLazyConstMetric(networkAddresses, metrics.GaugeValue, toFloat(v), e.namespace, e.name, states[i])
			}
		}
	}
	ch <- metrics.NewLazyConstMetric(omittedNetworks, metrics.GaugeValue, float64(len(entries)-limit))
}
