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
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// The scale point (make bench-scale): one side at a time, so that each has the machine to
// itself: network-apiserver standalone (embedded etcd in its process, controllers off), then
// the CRD on kube-apiserver and its etcd from hack/local-up-cluster.sh (network-apiserver
// stopped). Each side is filled in steps of 1% of its target, and stops early when the RSS of
// its processes passes the memory budget.

// scaleResult is one side of the scale point.
type scaleResult struct {
	Target int `json:"target"`
	// Stored is how many objects the side held at the end (counted by the paged LIST).
	Stored         int    `json:"stored"`
	StoppedBecause string `json:"stoppedBecause,omitempty"`
	BudgetBytes    int64  `json:"memoryBudgetBytes"`
	// Processes are the side's processes, whose RSS is summed.
	Processes []string        `json:"processes"`
	Step      int             `json:"objectsPerStep"`
	Steps     []*createResult `json:"steps"`
	// Creates per second over the first and the last tenth of the steps.
	FirstTenthPerSecond float64 `json:"firstTenthPerSecond"`
	LastTenthPerSecond  float64 `json:"lastTenthPerSecond"`
	// RSS of each process and in total; heap is the server's live heap after a forced GC
	// (ours includes its embedded etcd) plus, for the CRD, etcd's go_memstats_heap_alloc_bytes.
	// The baselines are the same with nothing stored (after the warm-up), and the per-object
	// figures (total - baseline) / stored.
	RSS              map[string]int64 `json:"rssBytes"`
	RSSTotal         int64            `json:"rssBytesTotal"`
	RSSBaseline      int64            `json:"rssBytesBaseline"`
	RSSPerObject     float64          `json:"rssBytesPerObject"`
	Heap             map[string]int64 `json:"heapBytes"`
	HeapTotal        int64            `json:"heapBytesTotal"`
	HeapBaseline     int64            `json:"heapBytesBaseline"`
	HeapPerObject    float64          `json:"heapBytesPerObject"`
	DBFileBytes      int64            `json:"etcdDBFileBytes"`
	DBBytes          int64            `json:"etcdDBBytes"`
	DBInUseBytes     int64            `json:"etcdDBInUseBytes"`
	DBInUsePerObject float64          `json:"etcdDBInUseBytesPerObject"`
	// PagedList walks all namespaces in pages of pageLimit, JSON on both sides.
	PagedList   *listResult `json:"pagedList"`
	SyncSeconds float64     `json:"informerSyncSeconds"`
	// Verifier is one periodic verification of ours with the side filled.
	Verifier *verifierResult `json:"verifier,omitempty"`
	// RestartReadyMs runs from the server's start to /readyz 200 (ours: with its embedded etcd;
	// the CRD: kube-apiserver alone, etcd stays up).
	RestartReadyMs float64 `json:"restartReadyMs"`
	// RestartStopMs runs from SIGTERM to the server's exit before that restart.
	RestartStopMs float64 `json:"restartStopMs"`
	Log           string  `json:"log,omitempty"`
}

// runScale runs the scale point and reports it; the exit code is as for run.
func runScale(ctx context.Context, cfg config, root string, load *loadSample) int {
	b := newBench(cfg, nil)
	b.res.LoadBefore = load
	b.res.Machine = machine{CPU: cpuModel(), Cores: runtime.NumCPU(), Kernel: kernel(), Go: runtime.Version(),
		Etcd: etcdVersion(ctx, root)}
	budget := int64(cfg.ScaleBudgetGiB * (1 << 30))
	if cfg.Scale > 0 {
		r, err := b.scaleOurs(ctx, root, cfg.Scale, budget)
		if r != nil {
			b.res.Ours.Scale = r
		}
		if err != nil {
			b.res.Errors = append(b.res.Errors, "ours: "+err.Error())
		}
	}
	if cfg.ScaleCRD > 0 && ctx.Err() == nil {
		r, err := b.scaleCRD(ctx, root, cfg.ScaleCRD, budget)
		if r != nil {
			b.res.CRD.Scale = r
		}
		if err != nil {
			b.res.Errors = append(b.res.Errors, "CRD: "+err.Error())
		}
	}
	return b.report()
}

// scaleOurs runs a standalone network-apiserver in a temporary directory and measures it.
func (b *bench) scaleOurs(ctx context.Context, root string, target int, budget int64) (*scaleResult, error) {
	dir, err := os.MkdirTemp("", "network-bench-scale-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return nil, err
	}
	cl := &cluster{&localcluster.Cluster{Root: root, State: dir, NetworkPort: ports[0]}}
	data := filepath.Join(dir, "data")
	args := []string{filepath.Join(root, "_output", "bin", "network-apiserver"), "--data-dir", data,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[0]), "--controllers=false",
		"--allocation-verify-interval", defaultVerifyInterval.String(), "--allocation-guards=recorded", "--vni-keys=single", "--gateway-keys=none",
		// Two of k8s.io/apiserver's background jobs log when they end (the watch cache's
		// consistency check, etcd compaction), so that the kept log tells which slow fill step
		// each fell into; nothing else is logged more.
		"--vmodule=checker=3,compact=4"}
	if err := os.WriteFile(cl.Path("network-apiserver.args"), []byte(strings.Join(args, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	const component = "network-apiserver"
	step("ours: starting a standalone network-apiserver (embedded etcd, --controllers=false) in %s", dir)
	if _, err := cl.Start(component); err != nil {
		return nil, err
	}
	res := &scaleResult{Target: target, BudgetBytes: budget, Processes: []string{component}}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cl.Stop(stopCtx, component); err != nil {
			b.res.Errors = append(b.res.Errors, "ours: stopping: "+err.Error())
		}
		// Kept always: its verifications' lines say when each ran, which the fill's slow steps
		// are read against.
		b.keepLog(cl, component, "ours")
	}()
	kubeconfig := filepath.Join(data, "admin.kubeconfig")
	if err := waitFor(ctx, 2*time.Minute, func() error { _, err := os.Stat(kubeconfig); return err }); err != nil {
		return res, fmt.Errorf("no %s: %w", kubeconfig, err)
	}
	admin, err := loadAdmin(kubeconfig)
	if err != nil {
		return res, err
	}
	ep, err := newEndpoint(admin, fmt.Sprintf("https://127.0.0.1:%d", ports[0]), "", b.cfg.Compression)
	if err != nil {
		return res, err
	}
	be, err := newOurs(ep)
	if err != nil {
		return res, err
	}
	if err := b.waitServing(ctx, be, "network-apiserver"); err != nil {
		return res, err
	}
	b.res.Machine.NetworkAPIServer = version(ctx, ep)
	endpoint, err := os.ReadFile(filepath.Join(data, "etcd.endpoint"))
	if err != nil {
		return res, err
	}
	certs := filepath.Join(data, "etcd-certs")
	sc := &scaleSide{name: "ours", cl: cl, be: be, processes: res.Processes, verifies: true,
		db: filepath.Join(data, "etcd", "member", "snap", "db"),
		etcd: etcdAccess{url: strings.TrimSpace(string(endpoint)), ca: filepath.Join(certs, "ca.crt"),
			cert: filepath.Join(certs, "client.crt"), key: filepath.Join(certs, "client.key")}}
	return res, b.scaleMeasure(ctx, sc, res)
}

// scaleCRD starts the local cluster, stops its network-apiserver, and measures the CRD.
func (b *bench) scaleCRD(ctx context.Context, root string, target int, budget int64) (*scaleResult, error) {
	cl, err := newCluster(root)
	if err != nil {
		return nil, err
	}
	res := &scaleResult{Target: target, BudgetBytes: budget, Processes: []string{"kube-apiserver", "etcd"}}
	step("CRD: starting etcd and kube-apiserver (hack/local-up-cluster.sh, state in %s)", cl.State)
	defer b.stopCluster(cl)
	if err := cl.up(ctx); err != nil {
		return res, fmt.Errorf("cluster-up: %w", err)
	}
	// The CRD alone: our server would only hold memory and CPU.
	if err := cl.Stop(ctx, "network-apiserver"); err != nil {
		return res, err
	}
	admin, err := loadAdmin(cl.Path("admin.kubeconfig"))
	if err != nil {
		return res, err
	}
	ep, err := newEndpoint(admin, fmt.Sprintf("https://127.0.0.1:%d", cl.APIServerPort), "", b.cfg.Compression)
	if err != nil {
		return res, err
	}
	dyn, err := ep.dynamic()
	if err != nil {
		return res, err
	}
	namespaces := schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	obj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": benchNamespace}}}
	if _, err := dyn.Resource(namespaces).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return res, fmt.Errorf("namespace %s: %w", benchNamespace, err)
	}
	step("CRD: installing the CRD networks.%s", crdResource.Group)
	if err := installCRD(ctx, dyn); err != nil {
		return res, err
	}
	be, err := newCRD(ep)
	if err != nil {
		return res, err
	}
	b.res.Machine.KubeAPIServer = version(ctx, ep)
	sc := &scaleSide{name: "CRD", cl: cl, be: be, processes: res.Processes, db: cl.Path("etcd/member/snap/db"),
		etcd: etcdAccess{url: fmt.Sprintf("https://127.0.0.1:%d", cl.EtcdPort), ca: cl.Path("pki/etcd-ca.crt"),
			cert: cl.Path("pki/etcd-client.crt"), key: cl.Path("pki/etcd-client.key"), ownProcess: true}}
	return res, b.scaleMeasure(ctx, sc, res)
}

// scaleSide is what scaleMeasure needs of a side.
type scaleSide struct {
	name      string
	cl        *cluster
	be        backend
	processes []string // the first is the server, restarted at the end
	verifies  bool     // the server verifies its allocations (ours)
	db        string
	etcd      etcdAccess
}

// etcdAccess is how the bench reads a side's etcd metrics: its client URL and client certificate;
// ownProcess says etcd is not inside the server's process (so its heap is added).
type etcdAccess struct {
	url, ca, cert, key string
	ownProcess         bool
}

// heapTotal is the server's live heap after a forced GC, plus etcd's heap when it runs apart.
func (s *scaleSide) heap(ctx context.Context) (map[string]int64, int64, error) {
	m := map[string]int64{}
	v, err := heapAlloc(ctx, s.be.endpoint())
	if err != nil {
		return nil, 0, fmt.Errorf("heap: %w", err)
	}
	m[s.processes[0]] = v
	if s.etcd.ownProcess {
		metrics, err := s.etcd.metrics(ctx)
		if err != nil {
			return nil, 0, err
		}
		if m["etcd"], err = parseMetric(metrics, "go_memstats_heap_alloc_bytes"); err != nil {
			return nil, 0, err
		}
	}
	total := int64(0)
	for _, v := range m {
		total += v
	}
	return m, total, nil
}

func (s *scaleSide) rss() (map[string]int64, int64, error) {
	m, total := map[string]int64{}, int64(0)
	for _, p := range s.processes {
		v, err := s.cl.RSSBytes(p)
		if err != nil {
			return nil, 0, err
		}
		m[p] = v
		total += v
	}
	return m, total, nil
}

// scaleMeasure fills the side and takes its figures.
func (b *bench) scaleMeasure(ctx context.Context, s *scaleSide, res *scaleResult) error {
	cfg := b.cfg
	if w := createMany(ctx, s.be, benchNamespace, 0, 2*cfg.Clients, cfg.Clients, true); w.Errors > 0 {
		return fmt.Errorf("warm-up dry-run creates: %d failed; first errors: %s", w.Errors, strings.Join(w.FirstErrs, " | "))
	}
	var err error
	if _, res.RSSBaseline, err = s.rss(); err != nil {
		return err
	}
	if _, res.HeapBaseline, err = s.heap(ctx); err != nil {
		return err
	}
	res.Step = max(1, res.Target/100)
	stored := 0
	for stored < res.Target && res.StoppedBecause == "" {
		count := min(res.Step, res.Target-stored)
		// A watchdog stops the step as soon as the side's RSS passes the budget.
		sctx, cancel := context.WithCancel(ctx)
		var over atomic.Value
		done := make(chan struct{})
		go func() {
			defer close(done)
			for sctx.Err() == nil {
				if _, total, err := s.rss(); err == nil && total > res.BudgetBytes {
					over.Store(fmt.Sprintf("RSS %s of %s passed the budget of %s", formatBytes(total), strings.Join(s.processes, " + "), formatBytes(res.BudgetBytes)))
					cancel()
					return
				}
				_ = pause(sctx, 500*time.Millisecond)
			}
		}()
		began := time.Now().UTC()
		r := createMany(sctx, s.be, benchNamespace, stored, count, cfg.Clients, false)
		r.Began = &began
		cancel()
		<-done
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.StoredBefore = stored
		stored += count
		res.Steps = append(res.Steps, r)
		if why, ok := over.Load().(string); ok {
			res.StoppedBecause = fmt.Sprintf("%s during the creates up to %d (that step was cut short; its rate is left out)", why, stored)
		} else if r.Errors > 0 {
			res.StoppedBecause = fmt.Sprintf("%d of %d creates failed; first errors: %s", r.Errors, count, strings.Join(r.FirstErrs, " | "))
			b.res.Errors = append(b.res.Errors, s.name+": "+res.StoppedBecause)
		}
		if len(res.Steps)%10 == 0 || res.StoppedBecause != "" || stored >= res.Target {
			_, total, _ := s.rss()
			step("%s: %d sent, this step %.0f obj/s, RSS %s", s.name, stored, r.PerSecond, formatBytes(total))
		}
	}
	if res.StoppedBecause != "" {
		step("%s: stopped filling: %s", s.name, res.StoppedBecause)
	}
	rated := res.Steps
	if over := res.StoppedBecause != "" && len(rated) > 0; over {
		rated = rated[:len(rated)-1]
	}
	res.FirstTenthPerSecond, res.LastTenthPerSecond = tenthRates(rated)

	if res.RSS, res.RSSTotal, err = s.rss(); err != nil {
		return err
	}
	if res.Heap, res.HeapTotal, err = s.heap(ctx); err != nil {
		return err
	}
	fi, err := os.Stat(s.db)
	if err != nil {
		return err
	}
	res.DBFileBytes = fi.Size()
	metrics, err := s.etcd.metrics(ctx)
	if err != nil {
		return err
	}
	if res.DBBytes, err = parseMetric(metrics, "etcd_mvcc_db_total_size_in_bytes"); err != nil {
		return err
	}
	if res.DBInUseBytes, err = parseMetric(metrics, "etcd_mvcc_db_total_size_in_use_in_bytes"); err != nil {
		return err
	}
	step("%s: RSS %s, heap %s, etcd db %s (%s in use)", s.name, formatBytes(res.RSSTotal), formatBytes(res.HeapTotal), formatBytes(res.DBBytes), formatBytes(res.DBInUseBytes))

	step("%s: paged LIST of all namespaces, JSON, pages of %d", s.name, pageLimit)
	if res.PagedList, err = listPaged(ctx, s.be.endpoint(), s.be.collectionPath(""), acceptJSON, pageLimit, 1); err != nil {
		return err
	}
	res.Stored = res.PagedList.Items
	if res.Stored > 0 {
		res.RSSPerObject = float64(res.RSSTotal-res.RSSBaseline) / float64(res.Stored)
		res.HeapPerObject = float64(res.HeapTotal-res.HeapBaseline) / float64(res.Stored)
		res.DBInUsePerObject = float64(res.DBInUseBytes) / float64(res.Stored)
	}
	step("%s: %d objects in %d pages, %.1f s", s.name, res.Stored, res.PagedList.Pages, res.PagedList.MedianMs/1000)

	step("%s: informer cold sync of %d objects", s.name, res.Stored)
	sync, err := coldSync(ctx, s.be, 1, res.Stored)
	if err != nil {
		return fmt.Errorf("informer sync: %w", err)
	}
	res.SyncSeconds = sync.Seconds
	step("%s: informer synced in %.1f s", s.name, res.SyncSeconds)

	server := s.processes[0]
	if s.verifies {
		// The verification is measured after the restart, on a server without the watch cache's
		// consistency checker (see noConsistencyChecks); the restart's figures do not depend on it.
		if err := appendArg(s.cl.Path(server+".args"), noConsistencyChecks); err != nil {
			return err
		}
	}
	step("%s: restarting %s with %d stored", s.name, server, res.Stored)
	stopping := time.Now()
	if err := s.cl.Stop(ctx, server); err != nil {
		return err
	}
	res.RestartStopMs = ms(time.Since(stopping))
	step("%s: %s exited %.2f s after SIGTERM", s.name, server, res.RestartStopMs/1000)
	started, err := s.cl.Start(server)
	if err != nil {
		return err
	}
	if err := waitFor(ctx, 30*time.Minute, func() error {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		status, body, err := s.be.endpoint().get(rctx, "/readyz", "")
		if err == nil && status != http.StatusOK {
			err = fmt.Errorf("/readyz %d %s", status, truncate(body))
		}
		return err
	}); err != nil {
		return fmt.Errorf("%s not ready after the restart: %w", server, err)
	}
	res.RestartReadyMs = ms(time.Since(started))
	step("%s: ready %.2f s after the restart", s.name, res.RestartReadyMs/1000)
	if s.verifies {
		step("%s: waiting for a verification of the allocations (every %s, the default)", s.name, defaultVerifyInterval)
		pid, err := s.cl.PID(server)
		if err != nil {
			return err
		}
		if res.Verifier, err = measureVerification(ctx, pid, s.cl.Path(server+".log")); err != nil {
			return fmt.Errorf("verifier: %w", err)
		}
		v := res.Verifier
		step("%s: a verification of %d Networks took %.1f s (%.1f s of it paused), %.1f s of CPU: %.2f%% of a core at the default interval",
			s.name, v.Networks, v.Seconds, v.PausedSeconds, v.CPUSeconds, 100*v.ShareOfCoreAtDefault)
		_, rss, err := s.rss()
		if err != nil {
			return err
		}
		_, heap, err := s.heap(ctx)
		if err != nil {
			return err
		}
		v.RSSAfterPerObject = float64(rss-res.RSSBaseline) / float64(res.Stored)
		v.HeapAfterPerObject = float64(heap-res.HeapBaseline) / float64(res.Stored)
		step("%s: after it, RSS %.0f B and live heap %.0f B per stored object", s.name, v.RSSAfterPerObject, v.HeapAfterPerObject)
	}
	return nil
}

// noConsistencyChecks turns off k8s.io/apiserver's watch cache consistency checker
// (DetectCacheInconsistency, on by default): every 5 to 7.5 minutes it lists the whole resource
// from etcd, in pages that each count the rest of the range, and at a million Networks that costs
// as much CPU as a verification. A verification window it overlaps measured both (the figures of
// 0.127 and 0.15 cores in docs/performance.md did), so the verification is measured without it.
// kube-apiserver runs the same checker for the CRD; every other row keeps it on.
const noConsistencyChecks = "--feature-gates=DetectCacheInconsistency=false"

// appendArg adds arg to a component's argument file (used by its next start).
func appendArg(file, arg string) error {
	b, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(b, []byte(arg+"\n")...), 0o644)
}

// tenthRates are the creates per second over the first and the last tenth of the steps.
func tenthRates(steps []*createResult) (first, last float64) {
	if len(steps) == 0 {
		return 0, 0
	}
	k := max(1, len(steps)/10)
	rate := func(s []*createResult) float64 {
		created, seconds := 0, 0.0
		for _, r := range s {
			created += r.Created
			seconds += r.Seconds
		}
		if seconds == 0 {
			return 0
		}
		return float64(created) / seconds
	}
	return rate(steps[:k]), rate(steps[len(steps)-k:])
}

// waitFor retries check every 100 ms until it succeeds, ctx ends or timeout passes.
func waitFor(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check()
		if err == nil {
			return nil
		}
		if perr := pause(ctx, 100*time.Millisecond); perr != nil {
			return fmt.Errorf("%w (last: %v)", perr, err)
		}
	}
}

// keepLogOnError copies a component's log into the output directory when the run has errors.
func (b *bench) keepLogOnError(cl *cluster, component, side string) {
	if len(b.res.Errors) > 0 {
		b.keepLog(cl, component, side)
	}
}

// keepLog copies a component's log into the output directory.
func (b *bench) keepLog(cl *cluster, component, side string) {
	logs := filepath.Join(b.cfg.Out, "logs-"+b.res.Started.Format("20060102-150405"))
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return
	}
	if body, err := os.ReadFile(cl.Path(component + ".log")); err == nil {
		file := filepath.Join(logs, side+"-"+component+".log")
		if os.WriteFile(file, body, 0o644) == nil {
			fmt.Fprintf(os.Stderr, "bench: %s log saved in %s\n", component, file)
		}
	}
}

// metrics fetches etcd's /metrics with the client certificate.
func (e etcdAccess) metrics(ctx context.Context) ([]byte, error) {
	ca, err := os.ReadFile(e.ca)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s", e.ca)
	}
	cert, err := tls.LoadX509KeyPair(e.cert, e.key)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}}}
	defer client.CloseIdleConnections()
	u := e.url + "/metrics"
	if err := requireLoopback(u); err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	if _, err := buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %d %s", u, resp.StatusCode, truncate(buf.Bytes()))
	}
	return buf.Bytes(), nil
}

// parseMetric returns the value of an unlabelled metric in Prometheus text format.
func parseMetric(text []byte, name string) (int64, error) {
	s := bufio.NewScanner(bytes.NewReader(text))
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		if rest, ok := strings.CutPrefix(s.Text(), name+" "); ok {
			v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return int64(v), err
		}
	}
	return 0, fmt.Errorf("no %s in the metrics", name)
}

func formatBytes(v int64) string { return format(float64(v), unitBytes) }
