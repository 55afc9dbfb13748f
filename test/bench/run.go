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
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
)

// side is one of the two servers under test, with what the run has stored in it so far.
type side struct {
	name      string // "ours" or "CRD", for messages and file names
	component string // its process in the local cluster
	direct    backend
	// aggregated is our server through kube-apiserver's aggregation layer; the CRD is always
	// behind kube-apiserver, so for it this is direct again.
	aggregated backend
	fig        *sideFigures
	next       int // number of the next object to create; never reused, so prefixes never collide
	stored     int // objects of the kind stored, in all namespaces
}

// bench runs the workloads in an order in which the number of stored objects only grows.
type bench struct {
	cfg   config
	cl    *cluster
	res   *results
	ours  *side
	crd   *side
	admin *endpoint // kube-apiserver, for namespaces and the CRD
}

func newBench(cfg config, cl *cluster) *bench {
	res := &results{Started: time.Now(), Config: cfg}
	res.Ours = sideFigures{Server: "network-apiserver", Lists: map[string]*listResult{}}
	res.CRD = sideFigures{Server: "kube-apiserver (CRD)", Lists: map[string]*listResult{}}
	return &bench{cfg: cfg, cl: cl, res: res,
		ours: &side{name: "ours", component: "network-apiserver", fig: &res.Ours},
		crd:  &side{name: "CRD", component: "kube-apiserver", fig: &res.CRD},
	}
}

// sides are the two sides in the order each step runs them (ours first unless -crd-first).
func (b *bench) sides() []*side {
	if b.cfg.CRDFirst {
		return []*side{b.crd, b.ours}
	}
	return []*side{b.ours, b.crd}
}

// fail records a problem that does not stop the run but fails it.
func (b *bench) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	b.res.Errors = append(b.res.Errors, msg)
	fmt.Fprintln(os.Stderr, "bench: FAIL:", msg)
}

func step(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench: %s %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) run(ctx context.Context) error {
	step("starting etcd, kube-apiserver and network-apiserver (hack/local-up-cluster.sh, state in %s)", b.cl.State)
	if err := b.cl.up(ctx); err != nil {
		return fmt.Errorf("cluster-up: %w", err)
	}
	if err := b.connect(ctx); err != nil {
		return err
	}
	steps := []func(context.Context) error{
		b.createDirect, b.lists, b.watchFanout, b.aggregated, b.growing, b.createAtMax,
	}
	if b.cfg.Only == onlyAgents {
		steps = []func(context.Context) error{b.onlyNodeAgents}
	}
	for _, f := range steps {
		if err := f(ctx); err != nil {
			return err
		}
	}
	return nil
}

// connect builds the clients, the namespaces and the CRD, and takes the memory baselines.
func (b *bench) connect(ctx context.Context) error {
	admin, err := loadAdmin(b.cl.Path("admin.kubeconfig"))
	if err != nil {
		return err
	}
	kubeHost := fmt.Sprintf("https://127.0.0.1:%d", b.cl.APIServerPort)
	if b.admin, err = newEndpoint(admin, kubeHost, "", b.cfg.Compression); err != nil {
		return err
	}
	// Our server's certificate is signed by its own serving CA; the admin client certificate is
	// accepted directly, since attached mode trusts kube-apiserver's client CA.
	direct, err := newEndpoint(admin, fmt.Sprintf("https://127.0.0.1:%d", b.cl.NetworkPort), b.cl.Path("pki/serving-ca.crt"), b.cfg.Compression)
	if err != nil {
		return err
	}
	if b.ours.direct, err = newOurs(direct); err != nil {
		return err
	}
	// The aggregated path and the CRD get transports of their own, although both go to kube-apiserver.
	aggEP, err := newEndpoint(admin, kubeHost, "", b.cfg.Compression)
	if err != nil {
		return err
	}
	if b.ours.aggregated, err = newOurs(aggEP); err != nil {
		return err
	}
	crdEP, err := newEndpoint(admin, kubeHost, "", b.cfg.Compression)
	if err != nil {
		return err
	}
	if b.crd.direct, err = newCRD(crdEP); err != nil {
		return err
	}
	b.crd.aggregated = b.crd.direct

	dyn, err := b.admin.dynamic()
	if err != nil {
		return err
	}
	namespaces := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	for _, ns := range []string{benchNamespace, aggNamespace} {
		obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}}
		if _, err := dyn.Resource(namespaces).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("namespace %s: %w", ns, err)
		}
	}
	step("installing the CRD networks.%s", crdResource.Group)
	if err := installCRD(ctx, dyn); err != nil {
		return err
	}
	if err := b.waitServing(ctx, b.ours.direct, "network-apiserver"); err != nil {
		return err
	}
	b.res.Machine = b.machine(ctx)

	for _, s := range b.sides() {
		m, err := measureMemory(ctx, s.direct.endpoint(), b.cl, s.component, 0, nil)
		if err != nil {
			return fmt.Errorf("%s memory baseline: %w", s.name, err)
		}
		s.fig.MemoryBaseline = m
	}
	return nil
}

// waitServing waits until a LIST through be succeeds.
func (b *bench) waitServing(ctx context.Context, be backend, what string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, _, last = be.list(ctx, benchNamespace)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%s not serving: %w (last: %v)", what, err, last)
	}
	return nil
}

// creates runs a parallel create of count new objects into ns through be.
func (b *bench) creates(ctx context.Context, s *side, be backend, ns string, count int, what string) *createResult {
	step("%s: %s: creating %d objects (%d stored), %d clients", s.name, what, count, s.stored, b.cfg.Clients)
	// /metrics is read before the CPU sample: the scrape's CPU is not the creates'.
	lostBefore := b.lostGuards(ctx, s)
	before := b.sampleCPU()
	r := createMany(ctx, be, ns, s.next, count, b.cfg.Clients, false)
	r.CPUMs = perOp(before, b.sampleCPU(), r.Created)
	if lostAfter := b.lostGuards(ctx, s); lostBefore != nil && lostAfter != nil && r.Created > 0 {
		r.LostGuardsPerCreate = val((*lostAfter - *lostBefore) / float64(r.Created))
	}
	r.StoredBefore = s.stored
	s.next += count
	s.stored += r.Created
	step("%s: %s: %.0f obj/s, p50 %.1f ms, p99 %.1f ms", s.name, what, r.PerSecond, r.Latency.P50Ms, r.Latency.P99Ms)
	if r.Errors > 0 && ctx.Err() == nil {
		b.fail("%s: %s: %d of %d creates failed; first errors: %s", s.name, what, r.Errors, count, strings.Join(r.FirstErrs, " | "))
	}
	return r
}

// lostGuards is our server's count of guarded allocation writes that lost their guard; nil for
// the CRD or when /metrics cannot be read.
func (b *bench) lostGuards(ctx context.Context, s *side) *float64 {
	if s != b.ours {
		return nil
	}
	status, body, err := b.ours.direct.endpoint().get(ctx, "/metrics", "")
	if err != nil || status != http.StatusOK {
		return nil
	}
	var lost float64
	for _, line := range strings.Split(string(body), "\n") {
		if name, labels, v, ok := parseSample(line); ok && name == "network_allocation_guarded_writes_total" && labels["result"] == "lost" {
			lost += v
		}
	}
	return &lost
}

// machine describes this machine and the servers' versions.
func (b *bench) machine(ctx context.Context) machine {
	m := machine{CPU: cpuModel(), Cores: runtime.NumCPU(), Kernel: kernel(), Go: runtime.Version()}
	m.NetworkAPIServer = version(ctx, b.ours.direct.endpoint())
	m.KubeAPIServer = version(ctx, b.admin)
	m.Etcd = etcdVersion(ctx, b.cl.Root)
	return m
}

// version is a server's /version: its git version, commit and Go version.
func version(ctx context.Context, ep *endpoint) string {
	status, body, err := ep.get(ctx, "/version", acceptJSON)
	if err != nil || status != http.StatusOK {
		return fmt.Sprintf("unknown (%d %v)", status, err)
	}
	var v struct {
		GitVersion string `json:"gitVersion"`
		GitCommit  string `json:"gitCommit"`
		GoVersion  string `json:"goVersion"`
	}
	if err := json.Unmarshal(body, &v); err != nil {
		return "unknown"
	}
	if len(v.GitCommit) > 12 {
		v.GitVersion += " " + v.GitCommit[:12]
	} else if v.GitCommit != "" {
		v.GitVersion += " " + v.GitCommit
	}
	return fmt.Sprintf("%s, %s", v.GitVersion, v.GoVersion)
}

// etcdVersion is what the pinned etcd binary says it is.
func etcdVersion(ctx context.Context, root string) string {
	out, err := exec.CommandContext(ctx, filepath.Join(root, "_output", "bin", "etcd"), "--version").Output()
	if first, _, _ := strings.Cut(string(out), "\n"); err == nil {
		return strings.TrimPrefix(first, "etcd Version: ")
	}
	return ""
}

// report prints the table, writes the JSON file and returns the exit code.
func (b *bench) report() int {
	r := b.res
	r.Seconds = time.Since(r.Started).Seconds()
	r.buildLines()
	for _, name := range r.missing() {
		r.Errors = append(r.Errors, "missing figure: "+name)
	}
	r.printTable(os.Stdout)
	file, err := r.writeJSON(b.cfg.Out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: writing the results:", err)
		return 1
	}
	fmt.Printf("\nraw figures: %s\n", file)
	for _, s := range b.sides() {
		for _, p := range s.fig.Profiles {
			fmt.Printf("profile: %s\n", p)
		}
	}
	if len(r.Errors) > 0 {
		return 1
	}
	return 0
}
