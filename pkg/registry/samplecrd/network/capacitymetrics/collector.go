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
// server's /metrics. An Index, fed by a reflector on the server's watch cache, keeps each
// Network's counts and each namespace's sums as they change; a custom collector writes them at
// scrape time without reading a Network.
package capacitymetrics

import (
	"fmt"
	"math/big"
	"slices"
	"strings"
	"sync"

	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
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

// source is one server's index and options.
type source struct {
	index *Index
	opts  Options
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

// Register adds index, with opts, as the source of the process's collector (registering it with
// legacyregistry on first use), until the returned function is called.
func Register(index *Index, opts Options) (unregister func()) {
	registerOnce.Do(func() { legacyregistry.CustomMustRegister(registered) })
	return registered.Add(index, opts)
}

// Add makes index, with opts, the collector's source until the returned function is called.
func (c *Collector) Add(index *Index, opts Options) func() {
	s := &source{index: index, opts: opts}
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

// CollectWithStability exports the capacity the latest source's index holds.
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
	s.index.collect(ch, s.opts)
}

// toFloat is n as the nearest float64: exact below 2^53.
func toFloat(n *big.Int) float64 {
	f, _ := new(big.Float).SetInt(n).Float64()
	return f
}
