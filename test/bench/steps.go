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
	"fmt"
	"slices"
	"strings"
)

// The workloads in the order the run takes them; see bench.run.

// 1. N creates directly, with CPU profiles taken meanwhile when asked.
func (b *bench) createDirect(ctx context.Context) error {
	for _, s := range b.sides() {
		// Dry runs first, on both paths: the first requests of a kind pay for lazily built
		// handlers, compiled CEL rules and authorization caches, which are not what we measure.
		for _, be := range []backend{s.direct, s.aggregated} {
			for _, ns := range []string{benchNamespace, aggNamespace} {
				if w := createMany(ctx, be, ns, s.next, 2*b.cfg.Clients, b.cfg.Clients, true); w.Errors > 0 {
					b.fail("%s: warm-up dry-run creates: %d failed; first errors: %s", s.name, w.Errors, strings.Join(w.FirstErrs, " | "))
				}
			}
		}
		var profile func() (string, error)
		if b.cfg.Profile {
			profile = cpuProfile(ctx, s.direct.endpoint(), b.cfg.ProfileSeconds, b.cfg.Out,
				fmt.Sprintf("cpu-%s-create-%s.pprof", s.component, b.res.Started.Format("20060102-150405")))
		}
		s.fig.Create = b.creates(ctx, s, s.direct, benchNamespace, b.cfg.N, "create")
		if profile != nil {
			b.keepProfile(s, "CPU profile", profile)
		}
	}
	return ctx.Err()
}

// 2. LIST the N objects: whole, in JSON and protobuf, and in pages.
func (b *bench) lists(ctx context.Context) error {
	for _, s := range b.sides() {
		path := s.direct.collectionPath(benchNamespace)
		for _, accept := range []string{acceptJSON, acceptProtobuf} {
			step("%s: LIST %s (%s), %d times, whole and in pages of %d", s.name, path, accept, listRuns, pageLimit)
			before := b.sampleCPU()
			whole, err := listAll(ctx, s.direct.endpoint(), path, accept, listRuns)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			whole.CPUMs = perOp(before, b.sampleCPU(), listRuns)
			paged, err := listPaged(ctx, s.direct.endpoint(), path, accept, pageLimit, listRuns)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			b.checkList(s, whole, paged)
			s.fig.Lists[encodingName(accept)] = whole
			s.fig.Lists["paged-"+encodingName(accept)] = paged
		}
	}
	return nil
}

func encodingName(accept string) string {
	if accept == acceptProtobuf {
		return "protobuf"
	}
	return "json"
}

// checkList wants every LIST to return the N objects, except the CRD's protobuf one, a 406.
func (b *bench) checkList(s *side, lists ...*listResult) {
	for _, l := range lists {
		if l.notAcceptable() && s == b.crd {
			continue
		}
		if l.notAcceptable() || l.Items != b.cfg.N {
			b.fail("%s: LIST (%s) returned %d items with status %d, want %d", s.name, l.Accept, l.Items, l.Status, b.cfg.N)
		}
	}
}

// 3. Watch fan-out over the N objects.
func (b *bench) watchFanout(ctx context.Context) error {
	names := make([]string, b.cfg.N)
	for i := range names {
		names[i] = objectName(i)
	}
	for _, s := range b.sides() {
		// The first N objects of each side are the ones in benchNamespace.
		step("%s: watch fan-out: %d watchers, %d updates", s.name, b.cfg.Watchers, b.cfg.Updates)
		w, err := watchFanout(ctx, s.direct, benchNamespace, names, b.cfg.Watchers, b.cfg.Updates)
		if err != nil {
			return fmt.Errorf("%s: watch: %w", s.name, err)
		}
		s.fig.Watch = w
		step("%s: watch: p50 %.1f ms, p99 %.1f ms, %d of %d events lost", s.name, w.Latency.P50Ms, w.Latency.P99Ms, w.Lost, w.Expected)
		if w.Lost > 0 || w.UpdateErrors > 0 || len(w.WatchErrors) > 0 {
			b.fail("%s: watch: %d of %d events lost, %d updates failed, errors: %s", s.name, w.Lost, w.Expected, w.UpdateErrors, strings.Join(w.WatchErrors, " | "))
		}
	}
	return nil
}

// 4. Creates and LISTs through kube-apiserver: ours via the aggregation layer, the CRD as always.
func (b *bench) aggregated(ctx context.Context) error {
	for _, s := range b.sides() {
		// Profiles of the server and, for ours, of kube-apiserver proxying to it.
		var profiles []func() (string, error)
		if b.cfg.Profile {
			stamp := b.res.Started.Format("20060102-150405")
			profiles = append(profiles, cpuProfile(ctx, s.direct.endpoint(), b.cfg.ProfileSeconds, b.cfg.Out,
				fmt.Sprintf("cpu-%s-create-aggregated-%s.pprof", s.component, stamp)))
			if s.aggregated.endpoint() != s.direct.endpoint() {
				profiles = append(profiles, cpuProfile(ctx, s.aggregated.endpoint(), b.cfg.ProfileSeconds, b.cfg.Out,
					fmt.Sprintf("cpu-kube-apiserver-proxying-create-aggregated-%s.pprof", stamp)))
			}
		}
		s.fig.CreateAggregated = b.creates(ctx, s, s.aggregated, aggNamespace, b.cfg.N/2, "create via kube-apiserver")
		for _, profile := range profiles {
			b.keepProfile(s, "CPU profile", profile)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		path := s.aggregated.collectionPath(benchNamespace)
		for _, accept := range []string{acceptJSON, acceptProtobuf} {
			step("%s: LIST %s (%s) via kube-apiserver, %d times", s.name, path, accept, listRuns)
			before := b.sampleCPU()
			l, err := listAll(ctx, s.aggregated.endpoint(), path, accept, listRuns)
			if err != nil {
				return fmt.Errorf("%s: %w", s.name, err)
			}
			l.CPUMs = perOp(before, b.sampleCPU(), listRuns)
			b.checkList(s, l)
			s.fig.Lists["aggregated-"+encodingName(accept)] = l
		}
	}
	return nil
}

// 5–7. Fill both servers up to each checkpoint, then measure what is due at that size:
// memory, then informer cold sync, then the node agents, then restarts (which disturb the
// processes most).
func (b *bench) growing(ctx context.Context) error {
	largestMemory := slices.Max(b.cfg.MemorySizes)
	for _, size := range b.cfg.checkpoints() {
		for _, s := range b.sides() {
			if count := size - s.stored; count > 0 {
				s.fig.Fills = append(s.fig.Fills, b.creates(ctx, s, s.direct, benchNamespace, count, fmt.Sprintf("fill to %d", size)))
				if ctx.Err() != nil {
					return ctx.Err()
				}
			}
		}
		if slices.Contains(b.cfg.MemorySizes, size) {
			for _, s := range b.sides() {
				m, err := measureMemory(ctx, s.direct.endpoint(), b.cl, s.component, s.stored, s.fig.MemoryBaseline)
				if err != nil {
					return fmt.Errorf("%s: memory: %w", s.name, err)
				}
				m.Target = size
				s.fig.Memory = append(s.fig.Memory, m)
				step("%s: memory at %d: heap %.0f B/object, RSS %.0f B/object", s.name, m.Objects, m.HeapPerObject, m.RSSPerObject)
				if b.cfg.Profile && size == largestMemory {
					f, err := heapProfile(ctx, s.direct.endpoint(), b.cfg.Out,
						fmt.Sprintf("heap-%s-%d-%s.pprof", s.component, size, b.res.Started.Format("20060102-150405")))
					if err != nil {
						b.fail("%s: heap profile: %v", s.name, err)
					} else {
						s.fig.Profiles = append(s.fig.Profiles, f)
					}
				}
			}
		}
		if size == b.cfg.SyncObjects {
			for _, s := range b.sides() {
				step("%s: informer cold sync: %d informers, %d objects", s.name, informers, s.stored)
				r, err := coldSync(ctx, s.direct, informers, s.stored)
				if err != nil {
					return fmt.Errorf("%s: informer sync: %w", s.name, err)
				}
				s.fig.Sync = r
				step("%s: informers synced in %.2f s", s.name, r.Seconds)
			}
		}
		if size == b.cfg.AgentObjects {
			if err := b.nodeAgents(ctx); err != nil {
				return err
			}
			// The servers keep the memory the watchers took (the Go runtime returns it to the
			// system slowly): a memory size measured before the next restart would count it.
			if b.cfg.memoryAfterAgentsBeforeRestart() {
				step("restarting both servers, so that the memory the node agents took is not counted at the next memory size")
				if _, err := b.restartBoth(ctx); err != nil {
					return err
				}
			}
		}
		if size == b.cfg.RestartObjects {
			restarts, err := b.restartBoth(ctx)
			if err != nil {
				return err
			}
			for i, s := range b.sides() {
				s.fig.Restart = restarts[i]
			}
		}
	}
	return nil
}

// 8. N more creates with the largest number of objects stored.
func (b *bench) createAtMax(ctx context.Context) error {
	for _, s := range b.sides() {
		s.fig.CreateAtMax = b.creates(ctx, s, s.direct, benchNamespace, b.cfg.N, fmt.Sprintf("create with %d stored", s.stored))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

// The node agents (at -agent-objects stored): many watchers of all namespaces, each on a TLS
// connection of its own, and updates of objects in benchNamespace at a steady pace.
func (b *bench) nodeAgents(ctx context.Context) error {
	// The first objects of each side are in benchNamespace: the N of the first creates, or with
	// -only the fill.
	names := make([]string, min(b.cfg.N, b.cfg.AgentObjects))
	for i := range names {
		names[i] = objectName(i)
	}
	for _, s := range b.sides() {
		step("%s: node agents: %d watchers of all namespaces, each on its own TLS connection, %d stored, %d updates at %g/s",
			s.name, b.cfg.Agents, s.stored, b.cfg.AgentUpdates, b.cfg.AgentRate)
		r, err := b.agentWatchers(ctx, s, benchNamespace, names)
		if err != nil {
			return fmt.Errorf("%s: node agents: %w", s.name, err)
		}
		s.fig.Agents = r
		step("%s: node agents: opened in %.1f s over %d connections; delivery from update sent p50 %.1f ms, p99 %.1f ms; %d of %d events lost; RSS %+.1f KiB per watcher; client %.2f cores",
			s.name, r.OpenSeconds, r.Connections, r.LatencyFromSent.P50Ms, r.LatencyFromSent.P99Ms, r.Lost, r.Expected, r.RSSPerWatcher/1024, r.ClientCores)
		if r.Lost > 0 || r.UpdateErrors > 0 || len(r.WatchErrors) > 0 {
			b.fail("%s: node agents: %d of %d events lost, %d updates failed, errors: %s", s.name, r.Lost, r.Expected, r.UpdateErrors, strings.Join(r.WatchErrors, " | "))
		}
	}
	return nil
}

// onlyNodeAgents is -only watch-agents: fill each side to -agent-objects, then the node agents.
func (b *bench) onlyNodeAgents(ctx context.Context) error {
	for _, s := range b.sides() {
		if w := createMany(ctx, s.direct, benchNamespace, s.next, 2*b.cfg.Clients, b.cfg.Clients, true); w.Errors > 0 {
			b.fail("%s: warm-up dry-run creates: %d failed; first errors: %s", s.name, w.Errors, strings.Join(w.FirstErrs, " | "))
		}
		s.fig.Fills = append(s.fig.Fills, b.creates(ctx, s, s.direct, benchNamespace, b.cfg.AgentObjects, fmt.Sprintf("fill to %d", b.cfg.AgentObjects)))
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return b.nodeAgents(ctx)
}

// restartBoth restarts both servers in turn with what they store, timing each, and waits until
// both serve again on every path.
func (b *bench) restartBoth(ctx context.Context) ([]*restartResult, error) {
	var out []*restartResult
	for _, s := range b.sides() {
		step("%s: restarting %s with %d objects stored", s.name, s.component, s.stored)
		r, err := restartServer(ctx, b.cl, s.component, s.direct, s.stored)
		if err != nil {
			return nil, fmt.Errorf("%s: restart: %w", s.name, err)
		}
		out = append(out, r)
		step("%s: exited %.2f s after SIGTERM; ready after %.2f s, first full LIST after %.2f s", s.name, r.StopMs/1000, r.ReadyMs/1000, r.FirstListMs/1000)
	}
	// Our server reaches its clients' authorization (and the aggregated path) through
	// kube-apiserver: both must be back before anything else is measured.
	if err := b.waitServing(ctx, b.ours.aggregated, "network-apiserver via kube-apiserver"); err != nil {
		return nil, err
	}
	if err := b.waitServing(ctx, b.ours.direct, "network-apiserver"); err != nil {
		return nil, err
	}
	return out, nil
}
