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
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/rest"
)

// The node-agent workload: many watchers of all Networks, each on its own TLS connection, as
// node agents would hold them, and updates at a steady pace.

// agentResult is one side's node-agent run.
type agentResult struct {
	Watchers int `json:"watchers"`
	// Objects is how many objects of the kind were stored when the watchers opened.
	Objects int `json:"objects"`
	Updates int `json:"updates"`
	// Encoding is what the watchers ask for, the same on both sides.
	Encoding string `json:"encoding"`
	// Connections is how many distinct established TCP connections to the server the watchers
	// hold, counted in /proc/net/tcp* among this process's sockets; it must equal Watchers.
	Connections int     `json:"connections"`
	OpenSeconds float64 `json:"openSeconds"`
	// AskedRate and Rate are the updates per second asked for and achieved (updates are sent
	// open loop, each at its tick).
	AskedRate    float64  `json:"askedUpdatesPerSecond"`
	Rate         float64  `json:"updatesPerSecond"`
	Expected     int      `json:"expectedEvents"`
	Received     int      `json:"receivedEvents"`
	Lost         int      `json:"lostEvents"`
	Duplicates   int      `json:"duplicateEvents"`
	UpdateErrors int      `json:"updateErrors"`
	WatchErrors  []string `json:"watchErrors,omitempty"`
	// Seconds runs from the first update to the last event received (or the wait's end).
	Seconds float64 `json:"seconds"`
	// LatencyFromSent runs from just before the update request to the event's arrival at a
	// watcher (the table's delivery figures: most events reach the watchers before the updater
	// has its response, so the time after the response is mostly 0).
	LatencyFromSent dist `json:"latencyFromSent"`
	// Latency runs from the update's response (acknowledged) to the event's arrival; an event
	// that arrived before the response counts as 0 and is counted in BeforeAck.
	Latency   dist `json:"latency"`
	BeforeAck int  `json:"deliveriesBeforeAck"`
	// Memory of the serving processes (server and etcd) before the watchers opened, with all of
	// them open, after the updates, and after they were closed; heap is the server's live heap.
	MemoryBefore  *agentMemory `json:"memoryBefore"`
	MemoryOpen    *agentMemory `json:"memoryOpen"`
	MemoryUpdated *agentMemory `json:"memoryAfterUpdates"`
	MemoryClosed  *agentMemory `json:"memoryAfterClose"`
	// Per watcher, with all open: (open - before) / watchers.
	RSSPerWatcher  float64 `json:"rssBytesPerWatcher"`
	HeapPerWatcher float64 `json:"heapBytesPerWatcher"`
	// HeapStackPerWatcher is the server's live heap and goroutine stacks per watcher: unlike
	// the RSS, it does not depend on how much freed memory the Go runtime had kept before.
	HeapStackPerWatcher float64 `json:"heapAndStackBytesPerWatcher"`
	// The bench's own CPU over the update phase, in cores and per delivered event, to tell
	// whether the client was the bottleneck; and the servers' CPU per update.
	ClientCores       float64            `json:"clientCores"`
	ClientUsPerEvent  float64            `json:"clientMicrosecondsPerEvent"`
	ServerCPUMsPerUpd map[string]float64 `json:"cpuMsPerUpdate,omitempty"`
}

// agentMemory is the memory of one side's processes at one moment.
type agentMemory struct {
	HeapBytes int64 `json:"serverHeapAllocBytes"`
	// StackBytes is the server's goroutine stacks (go_memstats_stack_inuse_bytes), which the
	// heap leaves out and every watch adds to.
	StackBytes int64            `json:"serverStackInuseBytes"`
	RSS        map[string]int64 `json:"rssBytes"`
	RSSTotal   int64            `json:"rssBytesTotal"`
}

func (b *bench) agentMemory(ctx context.Context, s *side) (*agentMemory, error) {
	heap, err := heapAlloc(ctx, s.direct.endpoint())
	if err != nil {
		return nil, err
	}
	status, metrics, err := s.direct.endpoint().get(ctx, "/metrics", "")
	if err != nil {
		return nil, err
	}
	if status != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %d %s", status, truncate(metrics))
	}
	stack, err := parseMetric(metrics, "go_memstats_stack_inuse_bytes")
	if err != nil {
		return nil, err
	}
	m := &agentMemory{HeapBytes: heap, StackBytes: stack, RSS: map[string]int64{}}
	for _, c := range []string{s.component, "etcd"} {
		rss, err := b.cl.RSSBytes(c)
		if err != nil {
			return nil, err
		}
		m.RSS[c] = rss
		m.RSSTotal += rss
	}
	return m, nil
}

// agentWatcher is one node agent: a transport (and so a TLS connection) of its own and a watch.
type agentWatcher struct {
	transport *http.Transport
	client    *http.Client
	body      io.ReadCloser
	localAddr string
	// arrivals[seq] is when update seq's event arrived, in nanoseconds since the run's base; 0: not yet.
	arrivals []int64
	received atomic.Int64
	dups     int
	err      error
}

// newAgentWatcher builds a client whose transport is used by nobody else: client-go shares
// transports between configs with the same TLS settings, so the transport is built here from
// the endpoint's TLS config and wrapped with its authentication.
func newAgentWatcher(ep *endpoint, updates int) (*agentWatcher, error) {
	tlsConfig, err := rest.TLSConfigFor(ep.config)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{
		TLSClientConfig:     tlsConfig,
		ForceAttemptHTTP2:   true,
		DisableCompression:  true,
		TLSHandshakeTimeout: 30 * time.Second,
		DialContext:         (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
	}
	rt, err := rest.HTTPWrappersForConfig(ep.config, tr)
	if err != nil {
		return nil, err
	}
	return &agentWatcher{transport: tr, client: &http.Client{Transport: rt}, arrivals: make([]int64, updates)}, nil
}

// open starts the watch of path from resourceVersion rv and returns once the server has
// answered: the server registers a watch before it sends the response headers.
func (w *agentWatcher) open(ctx context.Context, host, path, rv string) error {
	q := url.Values{"watch": {"1"}, "resourceVersion": {rv}}
	u := host + path + "?" + q.Encode()
	if err := requireLoopback(u); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", acceptJSON)
	var reused bool
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		w.localAddr, reused = info.Conn.LocalAddr().String(), info.Reused
	}}
	resp, err := w.client.Do(req.WithContext(httptrace.WithClientTrace(req.Context(), trace)))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1000))
		resp.Body.Close()
		return fmt.Errorf("watch %s: %d %s", path, resp.StatusCode, truncate(body))
	}
	if reused {
		resp.Body.Close()
		return fmt.Errorf("watch %s: the new transport reused a connection", path)
	}
	w.body = resp.Body
	return nil
}

// Markers of a JSON watch event, the same for both servers: {"type":"MODIFIED","object":{...}}
// on one line each (the JSON encoder ends every event with a newline and escapes newlines in
// strings). The event is read only as far as its type and the sequence annotation.
var (
	eventModified = []byte(`{"type":"MODIFIED"`)
	eventError    = []byte(`{"type":"ERROR"`)
	agentSeqKey   = []byte(`"` + agentSeqAnnotation + `":"`)
)

// parseAgentEvent returns the sequence number an event carries, or -1 for an event that is not
// a MODIFIED one with the annotation; isError says the server sent an ERROR event.
func parseAgentEvent(line []byte) (seq int, isError bool) {
	if bytes.HasPrefix(line, eventError) {
		return -1, true
	}
	if !bytes.HasPrefix(line, eventModified) {
		return -1, false
	}
	i := bytes.Index(line, agentSeqKey)
	if i < 0 {
		return -1, false
	}
	rest := line[i+len(agentSeqKey):]
	end := bytes.IndexByte(rest, '"')
	if end <= 0 {
		return -1, false
	}
	n, err := strconv.Atoi(string(rest[:end]))
	if err != nil {
		return -1, false
	}
	return n, false
}

// read consumes the watch until it ends, recording each update's arrival; an end before ctx
// is done is an error.
func (w *agentWatcher) read(ctx context.Context, base time.Time, total *atomic.Int64) {
	r := bufio.NewReaderSize(w.body, 64<<10)
	var long []byte
	for {
		line, err := r.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long, line...)
			continue
		}
		if err != nil {
			if ctx.Err() == nil {
				w.err = fmt.Errorf("watch ended: %w", err)
			}
			return
		}
		if long != nil {
			line = append(long, line...)
			long = nil
		}
		at := time.Since(base)
		seq, isError := parseAgentEvent(line)
		if isError {
			w.err = fmt.Errorf("error event %s", truncate(line))
			continue
		}
		if seq < 0 || seq >= len(w.arrivals) {
			continue
		}
		if w.arrivals[seq] != 0 {
			w.dups++
			continue
		}
		w.arrivals[seq] = max(int64(at), 1)
		w.received.Add(1)
		total.Add(1)
	}
}

func (w *agentWatcher) close() {
	if w.body != nil {
		w.body.Close()
	}
	w.transport.CloseIdleConnections()
}

// agentWatchers opens watchers watches of all namespaces, updates objects (names in ns) at rate
// per second, and measures delivery, memory and CPU.
func (b *bench) agentWatchers(ctx context.Context, s *side, ns string, names []string) (*agentResult, error) {
	cfg := b.cfg
	res := &agentResult{Watchers: cfg.Agents, Objects: s.stored, Updates: cfg.AgentUpdates, Encoding: acceptJSON,
		AskedRate: cfg.AgentRate}
	ep := s.direct.endpoint()
	path := s.direct.collectionPath("")
	rv, _, err := s.direct.list(ctx, ns)
	if err != nil {
		return nil, err
	}
	if res.MemoryBefore, err = b.agentMemory(ctx, s); err != nil {
		return nil, err
	}
	stamp := b.res.Started.Format("20060102-150405")
	if cfg.Profile {
		// The base for the profiles with the watchers open (go tool pprof -diff_base).
		b.agentProfiles(ctx, s, "before", stamp)
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	watchers := make([]*agentWatcher, cfg.Agents)
	defer func() {
		for _, w := range watchers {
			if w != nil {
				w.close()
			}
		}
	}()
	// Opened a few at a time, as agents starting on many nodes would.
	start := time.Now()
	var (
		mu      sync.Mutex
		openErr error
		next    atomic.Int64
		wg      sync.WaitGroup
	)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= cfg.Agents || wctx.Err() != nil {
					return
				}
				w, err := newAgentWatcher(ep, cfg.AgentUpdates)
				if err == nil {
					watchers[i] = w
					err = w.open(wctx, ep.config.Host, path, rv)
				}
				if err != nil {
					mu.Lock()
					openErr = errors.Join(openErr, fmt.Errorf("watcher %d: %w", i, err))
					mu.Unlock()
					cancel()
					return
				}
			}
		}()
	}
	wg.Wait()
	if openErr != nil {
		return nil, openErr
	}
	res.OpenSeconds = time.Since(start).Seconds()

	ports := map[int]bool{}
	for _, w := range watchers {
		_, p, err := net.SplitHostPort(w.localAddr)
		if err != nil {
			return nil, fmt.Errorf("watcher connection %q: %w", w.localAddr, err)
		}
		port, _ := strconv.Atoi(p)
		ports[port] = true
	}
	_, sp, _ := net.SplitHostPort(strings.TrimPrefix(ep.config.Host, "https://"))
	serverPort, err := strconv.Atoi(sp)
	if err != nil {
		return nil, fmt.Errorf("server port of %s: %w", ep.config.Host, err)
	}
	if res.Connections, err = establishedConnections(ports, serverPort); err != nil {
		return nil, err
	}
	if res.Connections != cfg.Agents || len(ports) != cfg.Agents {
		b.fail("%s: node agents: %d watchers hold %d distinct local ports and %d established connections; want one each",
			s.name, cfg.Agents, len(ports), res.Connections)
	}
	if res.MemoryOpen, err = b.agentMemory(ctx, s); err != nil {
		return nil, err
	}
	res.RSSPerWatcher = float64(res.MemoryOpen.RSSTotal-res.MemoryBefore.RSSTotal) / float64(cfg.Agents)
	res.HeapPerWatcher = float64(res.MemoryOpen.HeapBytes-res.MemoryBefore.HeapBytes) / float64(cfg.Agents)
	res.HeapStackPerWatcher = float64(res.MemoryOpen.HeapBytes+res.MemoryOpen.StackBytes-
		res.MemoryBefore.HeapBytes-res.MemoryBefore.StackBytes) / float64(cfg.Agents)
	if cfg.Profile {
		// What the open watches hold: the live heap and every goroutine's stack.
		b.agentProfiles(ctx, s, "open", stamp)
	}

	base := time.Now()
	var received atomic.Int64
	var readers sync.WaitGroup
	for _, w := range watchers {
		readers.Add(1)
		go func() {
			defer readers.Done()
			w.read(wctx, base, &received)
		}()
	}

	sent := make([]int64, cfg.AgentUpdates)
	acked := make([]int64, cfg.AgentUpdates)
	var profile func() (string, error)
	if cfg.Profile {
		// Where the server's CPU goes while it delivers the updates.
		profile = cpuProfile(ctx, ep, cfg.ProfileSeconds, cfg.Out, fmt.Sprintf("cpu-%s-agents-%s.pprof", s.component, stamp))
	}
	cpuBefore := b.sampleCPU()
	selfBefore, err := cpuTime(os.Getpid())
	if err != nil {
		return nil, err
	}
	// Open loop: update seq starts at its tick whether or not the ones before have been
	// answered, so that a slow server does not slow the pace down.
	tick := time.NewTicker(time.Duration(float64(time.Second) / cfg.AgentRate))
	var (
		updates    sync.WaitGroup
		updMu      sync.Mutex
		updErrors  int
		lastSent   time.Duration
		updStart   = time.Now()
		interrupts error
	)
	for seq := range cfg.AgentUpdates {
		if seq > 0 {
			select {
			case <-ctx.Done():
				interrupts = ctx.Err()
			case <-tick.C:
			}
			if interrupts != nil {
				break
			}
		}
		lastSent = time.Since(updStart)
		updates.Add(1)
		go func() {
			defer updates.Done()
			sent[seq] = int64(time.Since(base))
			rctx, rcancel := context.WithTimeout(ctx, requestTimeout)
			err := s.direct.annotate(rctx, ns, names[seq%len(names)], agentSeqAnnotation, seq)
			rcancel()
			if err != nil {
				updMu.Lock()
				updErrors++
				if updErrors == 1 {
					res.WatchErrors = append(res.WatchErrors, "update: "+err.Error())
				}
				updMu.Unlock()
				return
			}
			acked[seq] = int64(time.Since(base))
		}()
	}
	tick.Stop()
	updates.Wait()
	if interrupts != nil {
		return nil, interrupts
	}
	res.UpdateErrors = updErrors
	if lastSent > 0 {
		res.Rate = float64(cfg.AgentUpdates-1) / lastSent.Seconds()
	}
	want := int64(cfg.Agents * (cfg.AgentUpdates - res.UpdateErrors))
	deadline := time.Now().Add(deliveryWait)
	for received.Load() < want && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	res.Seconds = time.Since(updStart).Seconds()
	selfAfter, err := cpuTime(os.Getpid())
	if err != nil {
		return nil, err
	}
	res.ServerCPUMsPerUpd = perOp(cpuBefore, b.sampleCPU(), cfg.AgentUpdates)
	res.ClientCores = (selfAfter - selfBefore).Seconds() / res.Seconds
	// Waited for after the CPU figures, which a profile longer than the updates would dilute.
	if profile != nil {
		b.keepProfile(s, "node agents: CPU profile", profile)
	}
	if res.MemoryUpdated, err = b.agentMemory(ctx, s); err != nil {
		return nil, err
	}

	cancel()
	for _, w := range watchers {
		w.close()
	}
	readers.Wait()
	var fromAck, fromSent []time.Duration
	for i, w := range watchers {
		if w.err != nil && len(res.WatchErrors) < 10 {
			res.WatchErrors = append(res.WatchErrors, fmt.Sprintf("watcher %d: %v after %d events", i, w.err, w.received.Load()))
		}
		res.Duplicates += w.dups
		for seq, at := range w.arrivals {
			if at == 0 || acked[seq] == 0 {
				continue
			}
			d := time.Duration(at - acked[seq])
			if d < 0 {
				res.BeforeAck++
				d = 0
			}
			fromAck = append(fromAck, d)
			fromSent = append(fromSent, time.Duration(at-sent[seq]))
		}
	}
	res.Expected = cfg.Agents * cfg.AgentUpdates
	res.Received = int(received.Load())
	res.Lost = int(want) - res.Received
	res.Latency, res.LatencyFromSent = summarize(fromAck), summarize(fromSent)
	if res.Received > 0 {
		res.ClientUsPerEvent = (selfAfter - selfBefore).Seconds() * 1e6 / float64(res.Received)
	}
	if res.MemoryClosed, err = b.agentMemory(ctx, s); err != nil {
		return nil, err
	}
	return res, nil
}

// agentProfiles saves the server's live heap (after a GC) and goroutine profiles, named for the
// node agents' phase.
func (b *bench) agentProfiles(ctx context.Context, s *side, phase, stamp string) {
	for _, kind := range []string{"heap", "goroutine"} {
		path := "/debug/pprof/" + kind
		if kind == "heap" {
			path += "?gc=1"
		}
		f, err := saveProfile(ctx, s.direct.endpoint(), path, b.cfg.Out, fmt.Sprintf("%s-%s-agents-%s-%s.pprof", kind, s.component, phase, stamp))
		if err != nil {
			b.fail("%s: node agents: %s profile: %v", s.name, kind, err)
			continue
		}
		s.fig.Profiles = append(s.fig.Profiles, f)
	}
}

// establishedConnections counts this process's established TCP connections from one of ports
// to serverPort, from /proc/net/tcp and tcp6 and the socket inodes among /proc/self/fd.
func establishedConnections(ports map[int]bool, serverPort int) (int, error) {
	inodes := map[string]bool{}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	for _, fd := range fds {
		link, err := os.Readlink("/proc/self/fd/" + fd.Name())
		if err != nil {
			continue
		}
		if inode, ok := strings.CutPrefix(link, "socket:["); ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	n := 0
	for _, table := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(table)
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue
			}
			return 0, err
		}
		n += countEstablished(string(b), ports, serverPort, inodes)
	}
	return n, nil
}

// countEstablished counts the lines of a /proc/net/tcp table in state ESTABLISHED (01) from a
// local port in ports to remote port serverPort whose socket inode is in inodes.
func countEstablished(table string, ports map[int]bool, serverPort int, inodes map[string]bool) int {
	n := 0
	for _, line := range strings.Split(table, "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 10 || f[3] != "01" || !inodes[f[9]] {
			continue
		}
		local, remote := hexPort(f[1]), hexPort(f[2])
		if ports[local] && remote == serverPort {
			n++
		}
	}
	return n
}

// hexPort is the port of a /proc/net/tcp address (hex address, colon, hex port).
func hexPort(addr string) int {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 {
		return -1
	}
	p, err := strconv.ParseUint(addr[i+1:], 16, 16)
	if err != nil {
		return -1
	}
	return int(p)
}
