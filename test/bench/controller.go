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
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// The controller step (-only controller): network-apiserver standalone (embedded etcd) with its
// in-process controller confined to a network namespace the bench creates, as `make run` runs
// it. N Networks are created from -clients clients; each one's time from its create request to
// its Ready condition True is measured. Then all are deleted, and the step measures when the
// last one left the API and when the node's last bridge and CNI configuration list went, both
// after the last delete returned. What one Network costs is read off the server's /metrics.

// onlyController is the -only value that runs the controller step alone.
const onlyController = "controller"

// controllerResult is the controller step's figures.
type controllerResult struct {
	Networks int    `json:"networks"`
	Clients  int    `json:"clients"`
	NetNS    string `json:"netns"`
	Workers  int    `json:"controllerWorkers,omitempty"`
	// Create is the creates themselves (request latency).
	Create *createResult `json:"create"`
	// Ready runs from each create request's start to the first watch event with Ready True.
	Ready dist `json:"createToReady"`
	// AllReadyMs runs from the first create's start to the last Network's Ready.
	AllReadyMs float64 `json:"allReadyMs"`
	NotReady   int     `json:"notReady"`
	// NodeDoneMs runs from the first create's start until the namespace held N bridges and the
	// configuration directory N lists.
	NodeDoneMs float64       `json:"nodeDoneMs"`
	Delete     *createResult `json:"delete"`
	// After the last delete returned: the last Network gone from the API (its watch DELETED
	// event), the last bridge and the last configuration list gone from the node.
	GoneFromAPIMs   float64 `json:"goneFromAPIAfterLastDeleteMs"`
	BridgesGoneMs   float64 `json:"bridgesGoneAfterLastDeleteMs"`
	ConflistsGoneMs float64 `json:"conflistsGoneAfterLastDeleteMs"`
	LeftNetworks    int     `json:"leftNetworks"`
	LeftBridges     int     `json:"leftBridges"`
	LeftConflists   int     `json:"leftConflists"`
	// CreateCost and DeleteCost are what one Network cost over each phase (counter deltas of
	// the server's /metrics divided by N); the create phase ends once the counters settled.
	CreateCost map[string]float64 `json:"costPerNetworkCreate"`
	DeleteCost map[string]float64 `json:"costPerNetworkDelete"`
	// CPUMs is the server's CPU milliseconds per Network over each phase.
	CreateCPUMs float64  `json:"serverCPUMsPerNetworkCreate"`
	DeleteCPUMs float64  `json:"serverCPUMsPerNetworkDelete"`
	Profiles    []string `json:"profiles,omitempty"`
	// WatchRestarts counts the bench's watch of Networks resumed after the server ended it.
	WatchRestarts int `json:"watchRestarts"`
}

// costCounters are the /metrics figures that make up a Network's cost, by the name the report
// gives them.
var costCounters = []struct {
	name  string
	match func(name string, labels map[string]string) bool
}{
	{"server writes (all)", func(n string, l map[string]string) bool {
		return n == "apiserver_request_total" && l["resource"] == "networks" && isWriteVerb(l["verb"])
	}},
	{"server status writes", func(n string, l map[string]string) bool {
		return n == "apiserver_request_total" && l["resource"] == "networks" && l["subresource"] == "status" && isWriteVerb(l["verb"])
	}},
	{"controller status writes", func(n string, _ map[string]string) bool {
		return n == "network_controller_status_writes_total"
	}},
	{"controller reconciles", func(n string, _ map[string]string) bool { return n == "network_controller_reconcile_total" }},
	{"netlink requests", func(n string, _ map[string]string) bool { return n == "network_backend_netlink_requests_total" }},
	{"nftables batches", func(n string, _ map[string]string) bool { return n == "network_backend_nftables_flushes_total" }},
	{"file writes", func(n string, _ map[string]string) bool { return n == "network_backend_file_writes_total" }},
}

func isWriteVerb(v string) bool {
	switch v {
	case "POST", "PUT", "PATCH", "APPLY", "DELETE":
		return true
	}
	return false
}

// parseCounters sums, for each cost counter, the samples of Prometheus text that it matches.
func parseCounters(text []byte) map[string]float64 {
	out := map[string]float64{}
	for _, c := range costCounters {
		out[c.name] = 0
	}
	for _, raw := range strings.Split(string(text), "\n") {
		name, labels, value, ok := parseSample(raw)
		if !ok {
			continue
		}
		for _, c := range costCounters {
			if c.match(name, labels) {
				out[c.name] += value
			}
		}
	}
	return out
}

// parseSample splits one line of Prometheus text into its name, labels and value.
func parseSample(line string) (string, map[string]string, float64, bool) {
	line = strings.TrimSpace(line)
	if line == "" || strings.HasPrefix(line, "#") {
		return "", nil, 0, false
	}
	labels := map[string]string{}
	name, rest := line, ""
	if i := strings.IndexByte(line, '{'); i >= 0 {
		j := strings.LastIndexByte(line, '}')
		if j < i {
			return "", nil, 0, false
		}
		name, rest = line[:i], strings.TrimSpace(line[j+1:])
		body := line[i+1 : j]
		for body != "" {
			k, after, ok := strings.Cut(body, "=\"")
			if !ok {
				return "", nil, 0, false
			}
			// Values escape '"' and '\' with '\'.
			var v strings.Builder
			end := -1
			for p := 0; p < len(after); p++ {
				if after[p] == '\\' && p+1 < len(after) {
					p++
					v.WriteByte(after[p])
					continue
				}
				if after[p] == '"' {
					end = p
					break
				}
				v.WriteByte(after[p])
			}
			if end < 0 {
				return "", nil, 0, false
			}
			labels[strings.TrimSpace(k)] = v.String()
			body = strings.TrimPrefix(strings.TrimSpace(after[end+1:]), ",")
		}
	} else {
		var ok bool
		name, rest, ok = strings.Cut(line, " ")
		if !ok {
			return "", nil, 0, false
		}
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	v, err := strconv.ParseFloat(fields[0], 64)
	if err != nil {
		return "", nil, 0, false
	}
	return name, labels, v, true
}

// perNetwork is (after - before) / n for each counter.
func perNetwork(before, after map[string]float64, n int) map[string]float64 {
	out := map[string]float64{}
	for k, a := range after {
		out[k] = (a - before[k]) / float64(n)
	}
	return out
}

// readyLatencies pairs each name's start with its Ready time; names never Ready are counted.
func readyLatencies(start, ready map[string]time.Time) (lat []time.Duration, last time.Time, notReady int) {
	for name, s := range start {
		r, ok := ready[name]
		if !ok {
			notReady++
			continue
		}
		lat = append(lat, r.Sub(s))
		if r.After(last) {
			last = r
		}
	}
	return lat, last, notReady
}

// isReady tells whether n's Ready condition is True.
func isReady(n *v1.Network) bool {
	return meta.IsStatusConditionTrue(n.Status.Conditions, "Ready")
}

// controllerCIDR is Network i's /24 of 10.0.0.0/8 and its gateway. The step's Networks are /24s,
// not the other steps' /28s: a /28 holds fewer addresses than the agent's default headroom
// (--min-free-addresses 16), so its node claims every block of it (five claims, a status write
// after each) and then reports AddressesExhausted on its ready entry; a /24 needs one block.
func controllerCIDR(i int) (cidr, gateway string) {
	return fmt.Sprintf("10.%d.%d.0/24", i>>8, i&0xff), fmt.Sprintf("10.%d.%d.1", i>>8, i&0xff)
}

// stallTimeout ends a wait of the controller step in which nothing moved for this long.
const stallTimeout = time.Minute

var errStalled = errors.New("stalled")

// waitCtl is waitFor that gives up at once when check says errStalled.
func waitCtl(ctx context.Context, timeout time.Duration, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		err := check()
		if err == nil || errors.Is(err, errStalled) {
			return err
		}
		if perr := pause(ctx, 50*time.Millisecond); perr != nil {
			return fmt.Errorf("%w (last: %v)", perr, err)
		}
	}
}

// runController runs the controller step and reports it; the exit code is as for run.
func runController(ctx context.Context, cfg config, root string, load *loadSample) int {
	b := newBench(cfg, nil)
	b.res.LoadBefore = load
	b.res.Machine = machine{CPU: cpuModel(), Cores: runtime.NumCPU(), Kernel: kernel(), Go: runtime.Version(),
		Etcd: etcdVersion(ctx, root)}
	r, err := b.controllerStep(ctx, root)
	b.res.Ours.Controller = r
	if err != nil {
		b.res.Errors = append(b.res.Errors, "controller: "+err.Error())
	}
	return b.report()
}

// nodeView counts the bench's bridges in the namespace and the lists in the configuration
// directory.
type nodeView struct {
	h       *netlink.Handle
	confDir string
}

func (v nodeView) count() (bridges, conflists int, err error) {
	links, err := v.h.LinkList()
	if err != nil && !strings.Contains(err.Error(), "interrupted") {
		return 0, 0, err
	}
	for _, l := range links {
		if l.Type() == "bridge" && strings.HasPrefix(l.Attrs().Alias, "samplecrd.k8s.io/network=") {
			bridges++
		}
	}
	entries, err := os.ReadDir(v.confDir)
	if err != nil && !os.IsNotExist(err) {
		return 0, 0, err
	}
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".conflist") && !strings.HasPrefix(e.Name(), ".") {
			conflists++
		}
	}
	return bridges, conflists, nil
}

func (b *bench) controllerStep(ctx context.Context, root string) (_ *controllerResult, stepErr error) {
	cfg := b.cfg
	res := &controllerResult{Networks: cfg.ControllerNetworks, Clients: cfg.Clients, Workers: cfg.ControllerWorkers}
	if os.Geteuid() != 0 {
		return res, fmt.Errorf("the controller step creates a network namespace: run it as root")
	}
	dir, err := os.MkdirTemp("", "network-bench-controller-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	// The namespace: the controller's bridges go there, never into this machine's own.
	res.NetNS = fmt.Sprintf("network-bench-ctl-%d", os.Getpid())
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", res.NetNS).CombinedOutput(); err != nil {
		return res, fmt.Errorf("ip netns add %s: %v: %s", res.NetNS, err, out)
	}
	defer func() {
		if out, err := exec.Command("ip", "netns", "delete", res.NetNS).CombinedOutput(); err != nil {
			b.res.Errors = append(b.res.Errors, fmt.Sprintf("ip netns delete %s: %v: %s", res.NetNS, err, out))
		}
	}()
	nsPath := "/var/run/netns/" + res.NetNS
	nsh, err := netns.GetFromPath(nsPath)
	if err != nil {
		return res, err
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh, unix.NETLINK_ROUTE)
	if err != nil {
		return res, err
	}
	defer h.Close()
	confDir := filepath.Join(dir, "cni", "net.d")
	node := nodeView{h: h, confDir: confDir}

	ports, err := localcluster.FreePorts(1)
	if err != nil {
		return res, err
	}
	cl := &cluster{&localcluster.Cluster{Root: root, State: dir, NetworkPort: ports[0]}}
	data := filepath.Join(dir, "data")
	args := []string{filepath.Join(root, "_output", "bin", "network-apiserver"), "--data-dir", data,
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[0]),
		"--backend-netns", nsPath, "--cni-conf-dir", confDir, "--cni-ipam-data-dir", filepath.Join(dir, "ipam"),
		"--node-name", "bench-node"}
	if cfg.ControllerWorkers > 0 {
		args = append(args, "--controller-workers", strconv.Itoa(cfg.ControllerWorkers))
	}
	// The bridges the node holds once every Network is realised: none while they wait for a
	// pod (the default), one per Network otherwise.
	wantBridges := 0
	if cfg.ControllerBridgePerNetwork {
		args, wantBridges = append(args, "--bridge-on-attach=false"), cfg.ControllerNetworks
	}
	if err := os.WriteFile(cl.Path("network-apiserver.args"), []byte(strings.Join(args, "\n")+"\n"), 0o644); err != nil {
		return res, err
	}
	const component = "network-apiserver"
	step("controller: starting a standalone network-apiserver (embedded etcd, its controller in network namespace %s) in %s", res.NetNS, dir)
	if _, err := cl.Start(component); err != nil {
		return res, err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		if err := cl.Stop(stopCtx, component); err != nil {
			b.res.Errors = append(b.res.Errors, "controller: stopping: "+err.Error())
		}
		if stepErr != nil && len(b.res.Errors) == 0 {
			b.res.Errors = append(b.res.Errors, "controller: "+stepErr.Error())
			defer func() { b.res.Errors = b.res.Errors[1:] }() // runController records stepErr itself
		}
		b.keepLogOnError(cl, component, "controller")
	}()
	kubeconfig := filepath.Join(data, "admin.kubeconfig")
	if err := waitFor(ctx, 2*time.Minute, func() error { _, err := os.Stat(kubeconfig); return err }); err != nil {
		return res, fmt.Errorf("no %s: %w", kubeconfig, err)
	}
	admin, err := loadAdmin(kubeconfig)
	if err != nil {
		return res, err
	}
	ep, err := newEndpoint(admin, fmt.Sprintf("https://127.0.0.1:%d", ports[0]), "", cfg.Compression)
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
	client := be.client
	metricsNow := func() (map[string]float64, error) {
		status, body, err := ep.get(ctx, "/metrics", "")
		if err != nil {
			return nil, err
		}
		if status != 200 {
			return nil, fmt.Errorf("GET /metrics: %d %s", status, truncate(body))
		}
		return parseCounters(body), nil
	}
	pid, err := cl.PID(component)
	if err != nil {
		return res, err
	}

	// The watch of all Networks records when each became Ready and when each left.
	list, err := client.SamplecrdV1().Networks("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return res, err
	}
	var (
		mu    sync.Mutex
		ready = map[string]time.Time{}
		gone  = map[string]time.Time{}
		start = map[string]time.Time{}
	)
	wctx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	// A watch the server ends (a slow watcher is closed under a burst) is resumed from the last
	// event; an expired resourceVersion lists again, and what the list shows counts as seen then.
	var watchRestarts atomic.Int64
	observe := func(typ watch.EventType, n *v1.Network, now time.Time) {
		mu.Lock()
		defer mu.Unlock()
		switch typ {
		case watch.Added, watch.Modified:
			if _, seen := ready[n.Name]; !seen && isReady(n) {
				ready[n.Name] = now
			}
		case watch.Deleted:
			gone[n.Name] = now
		}
	}
	watchDone := make(chan error, 1)
	go func() {
		rv := list.ResourceVersion
		for wctx.Err() == nil {
			w, err := client.SamplecrdV1().Networks("").Watch(wctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if wctx.Err() == nil {
					watchDone <- err
				}
				return
			}
			expired := false
			for ev := range w.ResultChan() {
				if ev.Type == watch.Error {
					if st, ok := ev.Object.(*metav1.Status); ok && st.Code == 410 {
						expired = true
						break
					}
					watchDone <- fmt.Errorf("watch error: %v", ev.Object)
					w.Stop()
					return
				}
				if n, ok := ev.Object.(*v1.Network); ok {
					rv = n.ResourceVersion
					if ev.Type != watch.Bookmark {
						observe(ev.Type, n, time.Now())
					}
				}
			}
			w.Stop()
			watchRestarts.Add(1)
			if expired {
				l, err := client.SamplecrdV1().Networks("").List(wctx, metav1.ListOptions{})
				if err != nil {
					if wctx.Err() == nil {
						watchDone <- err
					}
					return
				}
				now := time.Now()
				mu.Lock()
				present := map[string]bool{}
				for i := range l.Items {
					present[l.Items[i].Name] = true
				}
				for name := range start {
					if _, ok := gone[name]; !ok && !present[name] && ready[name] != (time.Time{}) {
						gone[name] = now
					}
				}
				mu.Unlock()
				for i := range l.Items {
					observe(watch.Modified, &l.Items[i], now)
				}
				rv = l.ResourceVersion
			}
		}
	}()
	watchAlive := func() error {
		select {
		case err := <-watchDone:
			return err
		default:
			return nil
		}
	}

	n := cfg.ControllerNetworks
	before, err := metricsNow()
	if err != nil {
		return res, err
	}
	var profiles []func() (string, error)
	if cfg.Profile {
		profiles = append(profiles, cpuProfile(ctx, ep, cfg.ProfileSeconds, cfg.Out,
			"controller-create-cpu-"+b.res.Started.Format("20060102-150405")+".pprof"))
	}
	cpu0, _ := cpuTime(pid)
	step("controller: creating %d Networks from %d clients", n, cfg.Clients)
	t0 := time.Now()
	res.Create = parallel(ctx, n, cfg.Clients, func(ctx context.Context, i int) error {
		name := objectName(i)
		mu.Lock()
		start[name] = time.Now()
		mu.Unlock()
		cidr, gw := controllerCIDR(i)
		_, err := client.SamplecrdV1().Networks(benchNamespace).Create(ctx, &v1.Network{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1.NetworkSpec{CIDR: cidr, Gateway: gw, PrefixLength: 24},
		}, metav1.CreateOptions{})
		return err
	})
	// Every create's Network Ready, and the node holding its bridge and list.
	var nodeDone time.Time
	progress, progressAt := -1, time.Now()
	err = waitCtl(ctx, 10*time.Minute, func() error {
		if err := watchAlive(); err != nil {
			return fmt.Errorf("%w: %v", errStalled, err)
		}
		mu.Lock()
		got := len(ready)
		mu.Unlock()
		if got != progress {
			progress, progressAt = got, time.Now()
		} else if time.Since(progressAt) > stallTimeout {
			return fmt.Errorf("%w: no Network became Ready for %v (%d Ready)", errStalled, stallTimeout, got)
		}
		if nodeDone.IsZero() {
			if br, cf, err := node.count(); err == nil && br == wantBridges && cf == n {
				nodeDone = time.Now()
			}
		}
		mu.Lock()
		defer mu.Unlock()
		if len(ready) < res.Create.Created {
			return fmt.Errorf("%d of %d Ready", len(ready), res.Create.Created)
		}
		return nil
	})
	mu.Lock()
	lat, last, notReady := readyLatencies(start, ready)
	mu.Unlock()
	res.Ready, res.NotReady = summarize(lat), notReady
	if !last.IsZero() {
		res.AllReadyMs = ms(last.Sub(t0))
	}
	step("controller: Ready p50 %.0f ms, p99 %.0f ms, all after %.0f ms (%d not Ready)", res.Ready.P50Ms, res.Ready.P99Ms, res.AllReadyMs, notReady)
	if err != nil {
		return res, fmt.Errorf("waiting for Ready: %w", err)
	}
	if nodeDone.IsZero() {
		_ = waitFor(ctx, time.Minute, func() error {
			br, cf, err := node.count()
			if err == nil && (br != wantBridges || cf != n) {
				err = fmt.Errorf("%d bridges, %d lists", br, cf)
			}
			return err
		})
		nodeDone = time.Now()
	}
	res.NodeDoneMs = ms(nodeDone.Sub(t0))
	// The create phase ends when the counters stop moving (later status writes count too).
	afterCreate, err := settled(ctx, metricsNow)
	if err != nil {
		return res, err
	}
	cpu1, _ := cpuTime(pid)
	res.CreateCost = perNetwork(before, afterCreate, n)
	res.CreateCPUMs = ms(cpu1-cpu0) / float64(n)

	collect := func() {
		for _, wait := range profiles {
			file, err := wait()
			if err != nil {
				b.res.Errors = append(b.res.Errors, "controller: profile: "+err.Error())
				continue
			}
			res.Profiles = append(res.Profiles, file)
			b.res.Ours.Profiles = append(b.res.Ours.Profiles, file)
		}
		profiles = nil
	}
	if cfg.Profile {
		// One CPU profile at a time: the create phase's ends first (it may outlast the phase).
		collect()
		profiles = append(profiles, cpuProfile(ctx, ep, cfg.ProfileSeconds, cfg.Out,
			"controller-delete-cpu-"+b.res.Started.Format("20060102-150405")+".pprof"))
	}
	step("controller: deleting the %d Networks from %d clients", n, cfg.Clients)
	var lastDeleteNs atomic.Int64
	res.Delete = parallel(ctx, n, cfg.Clients, func(ctx context.Context, i int) error {
		err := client.SamplecrdV1().Networks(benchNamespace).Delete(ctx, objectName(i), metav1.DeleteOptions{})
		if err == nil {
			now := time.Now().UnixNano()
			for {
				old := lastDeleteNs.Load()
				if now <= old || lastDeleteNs.CompareAndSwap(old, now) {
					break
				}
			}
		}
		return err
	})
	lastDelete := time.Unix(0, lastDeleteNs.Load())
	var bridgesGone, conflistsGone time.Time
	progress, progressAt = -1, time.Now()
	err = waitCtl(ctx, 10*time.Minute, func() error {
		if err := watchAlive(); err != nil {
			return fmt.Errorf("%w: %v", errStalled, err)
		}
		br, cf, err := node.count()
		if left := br + cf + res.LeftNetworks; left != progress {
			progress, progressAt = left, time.Now()
		} else if time.Since(progressAt) > stallTimeout {
			return fmt.Errorf("%w: nothing went for %v", errStalled, stallTimeout)
		}
		if err != nil {
			return err
		}
		now := time.Now()
		if br == 0 && bridgesGone.IsZero() {
			bridgesGone = now
		}
		if cf == 0 && conflistsGone.IsZero() {
			conflistsGone = now
		}
		res.LeftBridges, res.LeftConflists = br, cf
		mu.Lock()
		res.LeftNetworks = res.Delete.Created - len(gone)
		mu.Unlock()
		if br > 0 || cf > 0 || res.LeftNetworks > 0 {
			return fmt.Errorf("%d Networks, %d bridges, %d lists left", res.LeftNetworks, br, cf)
		}
		return nil
	})
	mu.Lock()
	var lastGone time.Time
	for _, g := range gone {
		if g.After(lastGone) {
			lastGone = g
		}
	}
	mu.Unlock()
	if !lastGone.IsZero() {
		res.GoneFromAPIMs = ms(lastGone.Sub(lastDelete))
	}
	if !bridgesGone.IsZero() {
		res.BridgesGoneMs = ms(bridgesGone.Sub(lastDelete))
	}
	if !conflistsGone.IsZero() {
		res.ConflistsGoneMs = ms(conflistsGone.Sub(lastDelete))
	}
	step("controller: after the last delete: last Network gone from the API %.0f ms, last bridge %.0f ms, last list %.0f ms",
		res.GoneFromAPIMs, res.BridgesGoneMs, res.ConflistsGoneMs)
	if err != nil {
		return res, fmt.Errorf("waiting for the deletes: %w", err)
	}
	afterDelete, err := settled(ctx, metricsNow)
	if err != nil {
		return res, err
	}
	cpu2, _ := cpuTime(pid)
	res.DeleteCost = perNetwork(afterCreate, afterDelete, n)
	res.DeleteCPUMs = ms(cpu2-cpu1) / float64(n)
	res.WatchRestarts = int(watchRestarts.Load())
	collect()
	if res.Create.Errors > 0 || res.Delete.Errors > 0 {
		return res, fmt.Errorf("%d creates and %d deletes failed (first: %v %v)", res.Create.Errors, res.Delete.Errors,
			res.Create.FirstErrs, res.Delete.FirstErrs)
	}
	return res, nil
}

// settled returns the cost counters once two readings 1 s apart agree (at most 30 s).
func settled(ctx context.Context, read func() (map[string]float64, error)) (map[string]float64, error) {
	prev, err := read()
	if err != nil {
		return nil, err
	}
	for range 30 {
		if err := pause(ctx, time.Second); err != nil {
			return prev, err
		}
		cur, err := read()
		if err != nil {
			return nil, err
		}
		same := true
		for k, v := range cur {
			if prev[k] != v {
				same = false
			}
		}
		if same {
			return cur, nil
		}
		prev = cur
	}
	return prev, nil
}

// parallel runs op for 0..count-1 from clients goroutines and measures it like createMany.
func parallel(ctx context.Context, count, clients int, op func(ctx context.Context, i int) error) *createResult {
	var (
		next      atomic.Int64
		mu        sync.Mutex
		latencies = make([]time.Duration, 0, count)
		res       = &createResult{Objects: count, Clients: clients}
		wg        sync.WaitGroup
	)
	t0 := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= count || ctx.Err() != nil {
					return
				}
				rctx, cancel := context.WithTimeout(ctx, requestTimeout)
				t := time.Now()
				err := op(rctx, i)
				d := time.Since(t)
				cancel()
				mu.Lock()
				if err != nil {
					res.Errors++
					if len(res.FirstErrs) < 5 {
						res.FirstErrs = append(res.FirstErrs, err.Error())
					}
				} else {
					latencies = append(latencies, d)
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(t0)
	res.Created = len(latencies)
	res.Seconds = elapsed.Seconds()
	res.PerSecond = float64(res.Created) / res.Seconds
	res.Latency = summarize(latencies)
	return res
}
