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

package robustness

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/test/localcluster"
)

var (
	seedFlag    = flag.Int64("seed", 0, "seed of the traffic and the faults (0: one from the clock, printed)")
	fullFlag    = flag.Bool("full", false, "run the full scenarios (minutes each) instead of the short ones")
	outFlag     = flag.String("out", "", "where each run keeps its history, operations and logs (default <repo>/_output/robustness)")
	keepFlag    = flag.Bool("keep", false, "keep a passing run's files too (a failing run's are always kept)")
	replayFlag  = flag.String("replay", "", "TestReplay: validate again the files of a kept run (its directory)")
	clientVFlag = flag.Int("client-v", 0, "log the test process's client-go (the informers' reflectors, the clients) at this klog verbosity into client.log in -out (0: no log)")
)

func repoRoot(t testing.TB) string {
	root, err := localcluster.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestRobustness runs each scenario: traffic from many clients, faults, then the validation.
func TestRobustness(t *testing.T) {
	// The etcd client's gRPC reconnection warnings would bury the report: every fault makes some.
	klog.SetOutput(io.Discard)
	klog.LogToStderr(false)
	root := repoRoot(t)
	out := *outFlag
	if out == "" {
		out = filepath.Join(root, "_output", "robustness")
	}
	if *clientVFlag > 0 {
		clientLog(t, out, *clientVFlag)
	}
	bin := filepath.Join(root, "_output", "bin")
	for _, b := range []string{"network-apiserver", "etcd"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			t.Fatalf("%s/%s is missing: run make build and hack/build-tools.sh etcd etcdctl", bin, b)
		}
	}
	seed := *seedFlag
	if seed == 0 {
		seed = time.Now().UnixNano() % 1_000_000
	}
	t.Logf("seed %d (replay the traffic and faults with: go test ./test/robustness -run 'TestRobustness' -args -seed=%d%s)", seed, seed, map[bool]string{true: " -full"}[*fullFlag])
	for _, sc := range scenarios(*fullFlag) {
		t.Run(sc.Name, func(t *testing.T) { runScenario(t, sc, bin, out, seed) })
	}
}

// clientLog sends klog's output at verbosity v to <out>/client.log (appended to), for the
// reflectors' own account of a run: which lists and watches they made, at which
// resourceVersions, and how each ended.
func clientLog(t *testing.T, out string, v int) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(filepath.Join(out, "client.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { klog.Flush(); _ = f.Close() })
	var fs flag.FlagSet
	klog.InitFlags(&fs)
	if err := fs.Set("v", strconv.Itoa(v)); err != nil {
		t.Fatal(err)
	}
	klog.SetOutput(f)
	t.Logf("client-go's log at -v=%d: %s", v, f.Name())
}

// informerConvergence is how long the check waits for an informer's cache to equal a fresh LIST
// after the traffic. client-go's reflector backs off between its attempts — 800 ms doubling up
// to 30 s, each wait stretched by up to 100% (jitter), the steps reset only after two minutes
// without a failure — so after a few server restarts within two minutes one wait can reach 60 s,
// and a watch resumed on a restarted server whose cache starts past the informer's revision
// (410) waits twice: before the retry that gets the 410, and before the relist. Seen in the
// reflector's own log (-client-v=4): a relist 37 s after the 410, 62 s after the failed watch.
const informerConvergence = 2*time.Minute + 30*time.Second

// linearizabilityTimeout bounds porcupine's search on one name.
const linearizabilityTimeout = 30 * time.Second

// runInfo is what a kept run records about itself, for TestReplay.
type runInfo struct {
	Scenario scenario `json:"scenario"`
	Seed     int64    `json:"seed"`
	Layout   layout   `json:"layout"`
}

func runScenario(t *testing.T, sc scenario, bin, out string, seed int64) {
	dir := filepath.Join(out, fmt.Sprintf("%s-seed%d-%s", sc.Name, seed, time.Now().UTC().Format("20060102T150405")))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Logf("scenario %s, seed %d: %d etcd members, %d replicas, %d clients for %s, faults %v; files in %s",
		sc.Name, seed, sc.EtcdMembers, sc.Replicas, sc.Clients, sc.Duration, sc.Faults, dir)
	lay := layout{Prefix: etcdPrefix, PerNamespace: sc.OverlapScope == "namespace", Blocks: true, Lengths: true,
		NoGatewayKeys: sc.GatewayKeys == "none"}
	info, _ := json.MarshalIndent(runInfo{Scenario: sc, Seed: seed, Layout: lay}, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "run.json"), info, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	c, err := startCluster(ctx, filepath.Join(dir, "cluster"), bin, sc)
	if err != nil {
		t.Fatalf("starting the cluster (files kept in %s): %v", dir, err)
	}
	defer c.stop()
	cli, err := c.etcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	recCtx, stopRec := context.WithCancel(ctx)
	defer stopRec()
	rec := startRecorder(recCtx, cli, etcdPrefix+"/")

	// Watchers and informers on every replica, then the clients, then the faults.
	var watchers []*watcher
	var informers []*informer
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	var wg sync.WaitGroup
	for _, r := range c.replicas {
		w := &watcher{name: fmt.Sprintf("w%d", r.index), replica: r}
		watchers = append(watchers, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(watchCtx) }()
		inf, err := startInformer(fmt.Sprintf("i%d", r.index), r)
		if err != nil {
			t.Fatal(err)
		}
		informers = append(informers, inf)
	}
	log := &opLog{}
	trafficCtx, stopTraffic := context.WithTimeout(ctx, sc.Duration)
	defer stopTraffic()
	var clients sync.WaitGroup
	seen := &blockMemory{}
	for i := range sc.Clients {
		cl := newClient(i, seed, c.replicas[i%len(c.replicas)], defaultTraffic, log, seen)
		clients.Add(1)
		go func() { defer clients.Done(); cl.run(trafficCtx) }()
	}
	in := &injector{c: c, rec: rec, cli: cli, rng: rand.New(rand.NewPCG(uint64(seed), 0xfa)), sc: sc}
	faultsDone := make(chan []fault, 1)
	go func() { faultsDone <- in.run(trafficCtx) }()
	started := time.Now()
	clients.Wait()
	faults := <-faultsDone
	t.Logf("traffic done after %s: %d operations, %d faults", time.Since(started).Round(time.Second), len(log.all()), len(faults))

	// Everything is up again: wait until the recorder, the watchers and the informers have
	// caught up with etcd, then compare the final LISTs with the history.
	var problems []string
	for _, r := range c.replicas {
		if err := r.waitReady(ctx, 2*time.Minute); err != nil {
			problems = append(problems, err.Error())
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	head, err := cli.Get(rctx, etcdPrefix+"/", clientv3.WithPrefix())
	rcancel()
	if err != nil {
		t.Fatalf("reading etcd at the end: %v", err)
	}
	finalRev := head.Header.Revision
	if err := rec.waitFor(ctx, finalRev, 2*time.Minute); err != nil {
		t.Fatalf("history: %v", err)
	}
	events := rec.Events()
	rp := replayHistory(lay, events)
	// The recorder's history ends in the state etcd holds.
	got := map[string]string{}
	for _, kv := range head.Kvs {
		got[string(kv.Key)] = string(kv.Value)
	}
	want := map[string]string{}
	for _, e := range events {
		if e.Rev > finalRev {
			break
		}
		if e.Delete {
			delete(want, e.Key)
		} else {
			want[e.Key] = string(e.Value)
		}
	}
	if !mapsEqual(got, want) {
		problems = append(problems, fmt.Sprintf("history: replaying the recorded events gives %d keys, etcd holds %d at revision %d", len(want), len(got), finalRev))
	}
	lastNet := int64(0)
	if len(rp.changes) > 0 {
		lastNet = rp.changes[len(rp.changes)-1].Rev
	}
	for _, w := range watchers {
		deadline := time.Now().Add(time.Minute)
		for w.LastRV() < lastNet && time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
		}
		if w.LastRV() < lastNet {
			problems = append(problems, fmt.Sprintf("watch: watcher %s reached revision %d, not the last Network change %d, within a minute", w.name, w.LastRV(), lastNet))
		}
	}
	for _, inf := range informers {
		var list, cached []string
		deadline := time.Now().Add(informerConvergence)
		for {
			list, _, _, err = freshList(ctx, inf.replica)
			cached = inf.cacheContent()
			if err == nil && slices.Equal(list, cached) || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err != nil || !slices.Equal(list, cached) {
			problems = append(problems, fmt.Sprintf("informer: %s's cache %v never equalled a fresh LIST %v (%v) within %s; its last errors from ListAndWatch: %q "+
				"(the reflector retries failed watches and relists after a 410 inside it, unreported: -client-v=4 logs those)",
				inf.name, cached, list, err, informerConvergence, inf.lastErrors(5)))
		}
	}
	for _, r := range c.replicas {
		_, items, rv, err := freshList(ctx, r)
		if err != nil {
			problems = append(problems, fmt.Sprintf("final-list: %s: %v", r.proc.Name, err))
			continue
		}
		if got, want := itemsMap(items), rp.networksAt(rv); !mapsEqual(got, want) {
			problems = append(problems, fmt.Sprintf("final-list: %s at revision %d lists %v, the history has %v", r.proc.Name, rv, got, want))
		}
	}
	stopWatch()
	wg.Wait()
	for _, inf := range informers {
		close(inf.stop)
	}
	var watchRecs []watchRecord
	for _, w := range watchers {
		watchRecs = append(watchRecs, w.Records()...)
	}
	// Stop the servers gracefully: a shutdown must not write anything wrong either.
	shutdown := time.Now()
	for _, r := range c.replicas {
		if err := r.proc.Stop(syscall.SIGTERM, 90*time.Second); err != nil {
			problems = append(problems, "shutdown: "+err.Error())
		}
	}
	t.Logf("graceful shutdown of the servers took %s", time.Since(shutdown).Round(time.Millisecond))
	stopRec()
	ops := log.all()
	sort.Slice(ops, func(i, j int) bool { return ops[i].Start < ops[j].Start })
	for _, err := range []error{
		writeJSONLines(filepath.Join(dir, "history.jsonl"), events),
		writeJSONLines(filepath.Join(dir, "ops.jsonl"), ops),
		writeJSONLines(filepath.Join(dir, "watch.jsonl"), watchRecs),
		writeJSONLines(filepath.Join(dir, "faults.jsonl"), faults),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}

	f := validate(lay, rp, ops, watchRecs, faults)
	linStart := time.Now()
	t.Logf("%s (%s)", checkLinearizable(f, ops, linearizabilityTimeout), time.Since(linStart).Round(time.Millisecond))
	for _, p := range problems {
		check, msg, _ := strings.Cut(p, ": ")
		f.add(check, "%s", msg)
	}
	for _, ft := range faults {
		if ft.Err != "" {
			f.add("fault", "%s %s: %s", ft.Kind, ft.Target, ft.Err)
		}
	}
	report := runReport(sc, seed, rp, ops, faults, watchRecs, f)
	t.Log("\n" + report)
	_ = os.WriteFile(filepath.Join(dir, "report.txt"), []byte(report), 0o644)
	var all strings.Builder
	for _, ch := range f.checks() {
		for _, v := range f.byCheck[ch] {
			fmt.Fprintf(&all, "%s: %s\n", ch, v)
		}
	}
	_ = os.WriteFile(filepath.Join(dir, "violations.txt"), []byte(all.String()), 0o644)
	if f.total() > 0 {
		t.Errorf("scenario %s, seed %d: %d violations; history, operations, watch records and logs kept in %s\n%s",
			sc.Name, seed, f.total(), dir, f.summary(10))
		return
	}
	if !*keepFlag {
		c.stop()
		_ = os.RemoveAll(filepath.Join(dir, "cluster"))
		for _, name := range []string{"history.jsonl", "ops.jsonl", "watch.jsonl"} {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}
}

// TestReplay validates the kept files of a run again (-replay DIR); skipped without -replay.
func TestReplay(t *testing.T) {
	if *replayFlag == "" {
		t.Skip("no -replay DIR given")
	}
	dir := *replayFlag
	raw, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var info runInfo
	if err := json.Unmarshal(raw, &info); err != nil {
		t.Fatal(err)
	}
	events, err := readJSONLines[kvEvent](filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := readJSONLines[op](filepath.Join(dir, "ops.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	watches, err := readJSONLines[watchRecord](filepath.Join(dir, "watch.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	faults, err := readJSONLines[fault](filepath.Join(dir, "faults.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	rp := replayHistory(info.Layout, events)
	f := validate(info.Layout, rp, ops, watches, faults)
	linStart := time.Now()
	t.Logf("%s (%s)", checkLinearizable(f, ops, linearizabilityTimeout), time.Since(linStart).Round(time.Millisecond))
	t.Log("\n" + runReport(info.Scenario, info.Seed, rp, ops, faults, watches, f))
	if f.total() > 0 {
		t.Errorf("%d violations\n%s", f.total(), f.summary(20))
	}
}
