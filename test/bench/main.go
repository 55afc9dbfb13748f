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

// Command bench measures network-apiserver against the best CustomResourceDefinition for the
// same API, served by kube-apiserver from the same etcd, in one run on loopback: creates, LISTs,
// watch fan-out, the aggregation layer, memory per object, informer cold sync, restart to ready
// and creates with many objects stored. It prints a side-by-side table and writes every raw
// figure as JSON. `make bench` runs it; `make test` runs its -quick mode.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// Fixed shape of some workloads.
const (
	informers = 10  // informers started at once in the cold sync
	pageLimit = 500 // page size of the paged LIST
	listRuns  = 5   // each LIST is timed this many times; the table shows the median
)

// config is what the flags choose; it is part of the JSON file.
type config struct {
	N              int    `json:"n"`
	Clients        int    `json:"clients"`
	Watchers       int    `json:"watchers"`
	Updates        int    `json:"updates"`
	SyncObjects    int    `json:"syncObjects"`
	MemorySizes    []int  `json:"memorySizes"`
	RestartObjects int    `json:"restartObjects"`
	Quick          bool   `json:"quick"`
	Profile        bool   `json:"profile"`
	ProfileSeconds int    `json:"profileSeconds"`
	Compression    bool   `json:"compression"`
	Out            string `json:"out"`
	// The node-agent workload: Agents watchers of all Networks, each on its own TLS connection,
	// with AgentObjects stored, and AgentUpdates updates at AgentRate per second.
	Agents       int     `json:"agents"`
	AgentObjects int     `json:"agentObjects"`
	AgentUpdates int     `json:"agentUpdates"`
	AgentRate    float64 `json:"agentUpdatesPerSecond"`
	// Only names the single workload to run ("" runs them all).
	Only string `json:"only,omitempty"`
	// CRDFirst runs the CRD's side of each step before ours: load that comes or goes during a
	// run lands on the other side than with the default order.
	CRDFirst bool `json:"crdFirst,omitempty"`
	// The controller step (-only controller): Networks created and deleted, and the in-process
	// controller's workers (0: the server's default).
	ControllerNetworks int `json:"controllerNetworks,omitempty"`
	ControllerWorkers  int `json:"controllerWorkers,omitempty"`
	// ControllerBridgePerNetwork runs the controller with --bridge-on-attach=false: every
	// Network gets its bridge at once. By default (bridges on a pod's first attach) no pod
	// attaches in the step, so the node gets lists and no bridges.
	ControllerBridgePerNetwork bool `json:"controllerBridgePerNetwork,omitempty"`
	// Scale, when above 0, runs the scale point instead (make bench-scale): Scale Networks in a
	// standalone network-apiserver and ScaleCRD in the CRD, each side stopping early when its
	// processes' RSS passes ScaleBudgetGiB.
	Scale          int     `json:"scale,omitempty"`
	ScaleCRD       int     `json:"scaleCRD,omitempty"`
	ScaleBudgetGiB float64 `json:"scaleMemoryBudgetGiB,omitempty"`
}

// onlyAgents is the -only value that runs the node-agent workload alone.
const onlyAgents = "watch-agents"

// memoryAfterAgentsBeforeRestart says a memory size is measured after the node agents (which
// run after the memory measurement of their own size) and before the servers' next restart.
func (c config) memoryAfterAgentsBeforeRestart() bool {
	for _, m := range c.MemorySizes {
		if m > c.AgentObjects && (c.RestartObjects < c.AgentObjects || m <= c.RestartObjects) {
			return true
		}
	}
	return false
}

// scaleMode says the run is the scale point (make bench-scale), not the comparison.
func (c config) scaleMode() bool { return c.Scale > 0 || c.ScaleCRD > 0 }

// maxSize is the largest number of objects the run stores before its last creates.
func (c config) maxSize() int {
	return slices.Max(append([]int{c.SyncObjects, c.RestartObjects, c.AgentObjects}, c.MemorySizes...))
}

// checkpoints are the store sizes the run fills up to, in growing order.
func (c config) checkpoints() []int {
	s := append([]int{c.SyncObjects, c.RestartObjects, c.AgentObjects}, c.MemorySizes...)
	slices.Sort(s)
	return slices.Compact(s)
}

func (c config) validate() error {
	var errs []error
	for name, v := range map[string]int{"-n": c.N, "-clients": c.Clients, "-watchers": c.Watchers, "-updates": c.Updates,
		"-sync-objects": c.SyncObjects, "-restart-objects": c.RestartObjects, "-profile-seconds": c.ProfileSeconds,
		"-agents": c.Agents, "-agent-objects": c.AgentObjects, "-agent-updates": c.AgentUpdates} {
		if v < 1 {
			errs = append(errs, fmt.Errorf("%s must be at least 1", name))
		}
	}
	if c.N < 2 {
		errs = append(errs, fmt.Errorf("-n must be at least 2"))
	}
	if c.AgentRate <= 0 {
		errs = append(errs, fmt.Errorf("-agent-rate must be above 0"))
	}
	if c.Only != "" && c.Only != onlyAgents && c.Only != onlyController {
		errs = append(errs, fmt.Errorf("-only: %q is not a workload (there are: %s, %s)", c.Only, onlyAgents, onlyController))
	}
	if c.ControllerNetworks < 1 || c.ControllerNetworks > 1<<16 {
		errs = append(errs, fmt.Errorf("-controller-networks must be between 1 and %d (the /24s of 10.0.0.0/8)", 1<<16))
	}
	if c.ControllerWorkers < 0 {
		errs = append(errs, fmt.Errorf("-controller-workers must not be negative"))
	}
	if c.Scale < 0 || c.ScaleCRD < 0 || c.Scale > maxObjects || c.ScaleCRD > maxObjects {
		errs = append(errs, fmt.Errorf("-scale and -scale-crd must be between 0 and %d (the /28s of 10.0.0.0/8)", maxObjects))
	}
	if c.scaleMode() && c.ScaleBudgetGiB <= 0 {
		errs = append(errs, fmt.Errorf("-scale-memory-budget-gib must be above 0"))
	}
	if len(c.MemorySizes) == 0 {
		errs = append(errs, fmt.Errorf("-memory-sizes must name at least one size"))
	}
	for _, s := range c.MemorySizes {
		if s < 1 {
			errs = append(errs, fmt.Errorf("-memory-sizes: %d is not a size", s))
		}
	}
	// Object numbers are never reused: every create takes the next /28 of 10.0.0.0/8.
	if total := c.maxSize() + c.N + c.N/2 + c.N; total > maxObjects {
		errs = append(errs, fmt.Errorf("the run would create %d objects; 10.0.0.0/8 holds %d /28s", total, maxObjects))
	}
	return errors.Join(errs...)
}

// sizesFlag is a comma-separated list of object counts.
type sizesFlag []int

func (s *sizesFlag) String() string {
	parts := make([]string, len(*s))
	for i, v := range *s {
		parts[i] = strconv.Itoa(v)
	}
	return strings.Join(parts, ",")
}

func (s *sizesFlag) Set(v string) error {
	var out []int
	for _, p := range strings.Split(v, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	*s = out
	return nil
}

func parseFlags(args []string) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	c := config{}
	sizes := sizesFlag{20000, 100000}
	fs.IntVar(&c.N, "n", 5000, "objects created by the create workloads (the aggregated one creates n/2)")
	fs.IntVar(&c.Clients, "clients", 32, "concurrent clients of the create workloads and fills")
	fs.IntVar(&c.Watchers, "watchers", 100, "watchers of the watch fan-out")
	fs.IntVar(&c.Updates, "updates", 500, "updates of the watch fan-out")
	fs.IntVar(&c.SyncObjects, "sync-objects", 50000, "objects stored for the informer cold sync")
	fs.Var(&sizes, "memory-sizes", "comma-separated object counts at which memory per object is measured")
	fs.IntVar(&c.RestartObjects, "restart-objects", 50000, "objects stored when the servers are restarted")
	fs.BoolVar(&c.Quick, "quick", false, "tiny sizes (n=200, 5 watchers, 20 updates, sync 1000, memory 500,1000, restart 1000, 50 agents and 100 agent updates with 1000 stored): a check that everything works, in a minute or two")
	fs.BoolVar(&c.Profile, "profile", false, "also write CPU profiles (taken during the first creates, during the creates through kube-apiserver — for ours, of kube-apiserver proxying them too — and during the node agents' updates), heap profiles (at the largest memory size) and heap and goroutine profiles (before and with the node agents' watchers open) of both servers into the output dir")
	fs.IntVar(&c.ProfileSeconds, "profile-seconds", 10, "length of the CPU profiles")
	fs.BoolVar(&c.Compression, "compression", false, "let clients ask for gzip responses (off by default: on loopback it only costs the servers CPU)")
	fs.StringVar(&c.Out, "out", "_output/bench", "directory for the JSON file (bench-<time>.json) and profiles")
	fs.IntVar(&c.Agents, "agents", 1000, "node agents: watchers of all Networks, each on a TLS connection of its own")
	fs.IntVar(&c.AgentObjects, "agent-objects", 10000, "node agents: objects stored when the watchers open")
	fs.IntVar(&c.AgentUpdates, "agent-updates", 1000, "node agents: updates, each delivered to every watcher")
	fs.Float64Var(&c.AgentRate, "agent-rate", 20, "node agents: updates per second, sent at a steady pace whether or not the ones before have been answered")
	fs.StringVar(&c.Only, "only", "", "run only this workload: "+onlyAgents+" (fills to -agent-objects first) or "+onlyController+
		" (a standalone network-apiserver with its controller in a network namespace the bench creates: -controller-networks created from -clients clients until Ready, then deleted; needs root)")
	fs.BoolVar(&c.CRDFirst, "crd-first", false, "run the CRD's side of each step before ours (the default is ours first): alternate runs to see whether load that comes or goes favours one side")
	fs.IntVar(&c.ControllerNetworks, "controller-networks", 1000, "controller step: Networks created and deleted")
	fs.IntVar(&c.ControllerWorkers, "controller-workers", 0, "controller step: the controller's --controller-workers (0: the server's default)")
	fs.BoolVar(&c.ControllerBridgePerNetwork, "controller-bridge-per-network", false, "controller step: run the controller with --bridge-on-attach=false (a bridge for every Network at once; by default bridges wait for a pod, and the step attaches none)")
	fs.IntVar(&c.Scale, "scale", 0, "instead of the comparison, the scale point (make bench-scale): store this many Networks in a standalone network-apiserver (embedded etcd, controllers off), then in the CRD")
	fs.IntVar(&c.ScaleCRD, "scale-crd", -1, "the scale point's target for the CRD side (default: -scale)")
	fs.Float64Var(&c.ScaleBudgetGiB, "scale-memory-budget-gib", 12, "the scale point stops adding to a side when the RSS of its processes passes this many GiB")
	if err := fs.Parse(args); err != nil {
		return c, err
	}
	if fs.NArg() > 0 {
		return c, fmt.Errorf("unexpected arguments: %v", fs.Args())
	}
	c.MemorySizes = sizes
	if c.ScaleCRD < 0 {
		c.ScaleCRD = c.Scale
	}
	if c.Quick {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		quick := map[string]func(){
			"n": func() { c.N = 200 }, "watchers": func() { c.Watchers = 5 }, "updates": func() { c.Updates = 20 },
			"sync-objects": func() { c.SyncObjects = 1000 }, "memory-sizes": func() { c.MemorySizes = []int{500, 1000} },
			"restart-objects": func() { c.RestartObjects = 1000 }, "profile-seconds": func() { c.ProfileSeconds = 3 },
			"controller-networks": func() { c.ControllerNetworks = 50 },
			"agents":              func() { c.Agents = 50 }, "agent-objects": func() { c.AgentObjects = 1000 }, "agent-updates": func() { c.AgentUpdates = 100 },
		}
		for name, apply := range quick {
			if !set[name] {
				apply()
			}
		}
	}
	return c, c.validate()
}

// repoRoot is the repository the bench runs in.
func repoRoot() (string, error) {
	root, err := localcluster.RepoRoot()
	if err != nil {
		return "", fmt.Errorf("run the bench inside the network-apiserver repository (%w)", err)
	}
	return root, nil
}

func main() {
	cfg, err := parseFlags(os.Args[1:])
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(2)
	}
	// A signal ends the run the way a failure does: partial results, then the cluster stopped.
	ctx, cancel := context.WithCancel(context.Background())
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	go func() {
		sig := <-signals
		fmt.Fprintf(os.Stderr, "bench: received %v; stopping\n", sig)
		cancel()
	}()
	code := run(ctx, cfg)
	signal.Stop(signals)
	cancel()
	os.Exit(code)
}

// run starts the cluster, measures, stops the cluster whatever happened, and reports. The exit
// code is 1 when a step failed, a request failed, a figure is missing or an event was lost.
func run(ctx context.Context, cfg config) int {
	root, err := repoRoot()
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	for _, b := range []string{"etcd", "etcdctl", "kube-apiserver", "kube-controller-manager", "kubectl", "network-apiserver"} {
		if err := mustExist(filepath.Join(root, "_output", "bin", b), "make build && hack/build-tools.sh"); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 2
		}
	}
	if !filepath.IsAbs(cfg.Out) {
		cfg.Out = filepath.Join(root, cfg.Out)
	}
	if err := os.MkdirAll(cfg.Out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	// Sampled before anything starts, so that a reader can trust or discount the figures.
	load := sampleLoad(ctx, loadWindow)
	fmt.Fprintln(os.Stderr, "bench:", load.String())
	if cfg.scaleMode() {
		return runScale(ctx, cfg, root, load)
	}
	if cfg.Only == onlyController {
		return runController(ctx, cfg, root, load)
	}
	cl, err := newCluster(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	b := newBench(cfg, cl)
	b.res.LoadBefore = load
	// Down runs however the run ends; a signal cancels ctx, which ends the run.
	runErr := b.run(ctx)
	if runErr != nil {
		b.res.Errors = append(b.res.Errors, "run stopped: "+runErr.Error())
	}
	b.stopCluster(cl)
	return b.report()
}
