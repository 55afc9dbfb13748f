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
	"fmt"
	"strings"
)

// buildLines turns the raw figures into the table's rows.
func (r *results) buildLines() {
	r.Lines = nil
	o, c, cfg := &r.Ours, &r.CRD, r.Config
	if cfg.scaleMode() {
		r.scaleLines()
		return
	}
	if cfg.Only == onlyAgents {
		r.agentLines()
		return
	}
	if cfg.Only == onlyController {
		r.controllerLines()
		return
	}
	r.createLines(fmt.Sprintf("create %d direct, %d clients", cfg.N, cfg.Clients), o.Create, c.Create, 2.5)
	r.directCPULines("create direct: CPU per create", createCPU(o.Create), createCPU(c.Create), 2.5)
	r.oursOnly("create direct: allocation guards lost per create (each one more transaction and a read)", unitPerNet, lostGuards(o.Create))

	n := cfg.N
	r.listLines(fmt.Sprintf("LIST %d", n), o.Lists["json"], o.Lists["protobuf"], c.Lists["json"], c.Lists["protobuf"], 3, true)
	r.directCPULines(fmt.Sprintf("LIST %d JSON: CPU per LIST", n), listCPU(o.Lists["json"]), listCPU(c.Lists["json"]), 0)
	r.directCPULines(fmt.Sprintf("LIST %d protobuf (CRD: JSON): CPU per LIST", n), listCPU(o.Lists["protobuf"]), listCPU(c.Lists["json"]), 0)
	r.listLines(fmt.Sprintf("paged LIST %d (limit %d)", n, pageLimit), o.Lists["paged-json"], o.Lists["paged-protobuf"],
		c.Lists["paged-json"], c.Lists["paged-protobuf"], 0, false)

	name := fmt.Sprintf("watch %d watchers × %d updates", cfg.Watchers, cfg.Updates)
	var op50, op99, cp50, cp99, olost, clost *float64
	if w := o.Watch; w != nil {
		op50, op99, olost = val(w.Latency.P50Ms), val(w.Latency.P99Ms), val(float64(w.Lost))
	}
	if w := c.Watch; w != nil {
		cp50, cp99, clost = val(w.Latency.P50Ms), val(w.Latency.P99Ms), val(float64(w.Lost))
	}
	r.addLine(name+": delivery p50", unitMs, op50, cp50, false, 0)
	r.addLine(name+": delivery p99", unitMs, op99, cp99, false, 2)
	r.addLine(name+": events lost (must be 0)", unitCount, olost, clost, false, 0)
	r.agentLines()

	r.createLines(fmt.Sprintf("create %d via aggregator, %d clients", cfg.N/2, cfg.Clients), o.CreateAggregated, c.CreateAggregated, 1.5)
	r.aggregatedCPULines("create via aggregator: CPU per create", createCPU(o.CreateAggregated), createCPU(c.CreateAggregated))
	r.oursOnly("create via aggregator: allocation guards lost per create", unitPerNet, lostGuards(o.CreateAggregated))
	r.aggregatedCPULines(fmt.Sprintf("LIST %d JSON via aggregator: CPU per LIST", n), listCPU(o.Lists["aggregated-json"]), listCPU(c.Lists["aggregated-json"]))
	r.listLines(fmt.Sprintf("LIST %d via aggregator", n), o.Lists["aggregated-json"], o.Lists["aggregated-protobuf"],
		c.Lists["aggregated-json"], c.Lists["aggregated-protobuf"], 3, false)

	for _, size := range cfg.MemorySizes {
		om, cm := sampleAt(o.Memory, size), sampleAt(c.Memory, size)
		var oh, or, ch, cr *float64
		label := size
		if om != nil {
			oh, or, label = val(om.HeapPerObject), val(om.RSSPerObject), om.Objects
		}
		if cm != nil {
			ch, cr = val(cm.HeapPerObject), val(cm.RSSPerObject)
		}
		r.addLine(fmt.Sprintf("live heap per object at %d", label), unitPerObj, oh, ch, false, 4)
		r.addLine(fmt.Sprintf("RSS per object at %d", label), unitPerObj, or, cr, false, 0)
	}

	var osync, csync *float64
	if o.Sync != nil {
		osync = val(o.Sync.Seconds * 1000)
	}
	if c.Sync != nil {
		csync = val(c.Sync.Seconds * 1000)
	}
	r.addLine(fmt.Sprintf("informer cold sync, %d informers × %d", informers, cfg.SyncObjects), unitMs, osync, csync, false, 5)

	var ostop, orr, ofl, cstop, crr, cfl *float64
	if x := o.Restart; x != nil {
		ostop, orr, ofl = val(x.StopMs), val(x.ReadyMs), val(x.FirstListMs)
	}
	if x := c.Restart; x != nil {
		cstop, crr, cfl = val(x.StopMs), val(x.ReadyMs), val(x.FirstListMs)
	}
	r.addLine(fmt.Sprintf("restart with %d stored: SIGTERM → exit", cfg.RestartObjects), unitMs, ostop, cstop, false, 0)
	r.addLine(fmt.Sprintf("restart with %d stored: start → /readyz", cfg.RestartObjects), unitMs, orr, crr, false, 0)
	r.addLine(fmt.Sprintf("restart with %d stored: start → full LIST", cfg.RestartObjects), unitMs, ofl, cfl, false, 2)

	stored := cfg.maxSize()
	if o.CreateAtMax != nil {
		stored = o.CreateAtMax.StoredBefore
	}
	r.createLines(fmt.Sprintf("create %d with %d stored", cfg.N, stored), o.CreateAtMax, c.CreateAtMax, 2.5)
}

func (r *results) createLines(name string, ours, crd *createResult, target float64) {
	var orate, op50, op99, crate, cp50, cp99 *float64
	if ours != nil {
		orate, op50, op99 = val(ours.PerSecond), val(ours.Latency.P50Ms), val(ours.Latency.P99Ms)
	}
	if crd != nil {
		crate, cp50, cp99 = val(crd.PerSecond), val(crd.Latency.P50Ms), val(crd.Latency.P99Ms)
	}
	r.addLine(name+": throughput", unitRate, orate, crate, true, target)
	r.addLine(name+": latency p50", unitMs, op50, cp50, false, 0)
	r.addLine(name+": latency p99", unitMs, op99, cp99, false, 0)
}

// listLines adds the time lines for JSON and protobuf (the CRD's protobuf is N/A, compared with
// its JSON), and with sizes the response size lines.
func (r *results) listLines(name string, oj, op, cj, cp *listResult, target float64, sizes bool) {
	ms := func(l *listResult) *float64 {
		if l == nil || l.notAcceptable() {
			return nil
		}
		return val(l.MedianMs)
	}
	bytes := func(l *listResult) *float64 {
		if l == nil || l.notAcceptable() {
			return nil
		}
		return val(float64(l.Bytes))
	}
	r.addLine(name+" JSON: median time", unitMs, ms(oj), ms(cj), false, target)
	pl := r.addLine(name+" protobuf: median time", unitMs, ms(op), ms(cp), false, target)
	noProtobuf(pl, cp, ms(cj))
	if sizes {
		r.addLine(name+" JSON: response size", unitBytes, bytes(oj), bytes(cj), false, 0)
		sl := r.addLine(name+" protobuf: response size", unitBytes, bytes(op), bytes(cp), false, 2)
		noProtobuf(sl, cp, bytes(cj))
	}
}

// noProtobuf marks the CRD's protobuf figure N/A when it answered 406 and compares ours with
// the CRD's JSON figure instead.
func noProtobuf(l *line, crd *listResult, crdJSON *float64) {
	if crd != nil && crd.notAcceptable() {
		l.CRDNote = "N/A (406)"
		l.RatioBase = crdJSON
		l.computeRatio()
	}
}

func sampleAt(samples []*memSample, size int) *memSample {
	for _, s := range samples {
		if s.Target == size {
			return s
		}
	}
	return nil
}

func createCPU(r *createResult) map[string]float64 {
	if r == nil {
		return nil
	}
	return r.CPUMs
}

func listCPU(l *listResult) map[string]float64 {
	if l == nil || l.notAcceptable() {
		return nil
	}
	return l.CPUMs
}

// directCPULines compares the CPU per operation of the serving processes: ours and its etcd
// against kube-apiserver serving the CRD and its etcd (one etcd serves both, at different times).
func (r *results) directCPULines(name string, ours, crd map[string]float64, target float64) {
	r.addLine(name+", server + etcd", unitCPU, cpuSum(ours, "network-apiserver", "etcd"), cpuSum(crd, "kube-apiserver", "etcd"), false, target)
	r.addLine(name+", network-apiserver vs kube-apiserver", unitCPU, cpuSum(ours, "network-apiserver"), cpuSum(crd, "kube-apiserver"), false, 0)
	r.addLine(name+", etcd", unitCPU, cpuSum(ours, "etcd"), cpuSum(crd, "etcd"), false, 0)
}

// aggregatedCPULines compares requests through kube-apiserver: for ours, kube-apiserver's share
// is its proxy work.
func (r *results) aggregatedCPULines(name string, ours, crd map[string]float64) {
	r.addLine(name+", all processes", unitCPU, cpuSum(ours, "kube-apiserver", "network-apiserver", "etcd"), cpuSum(crd, "kube-apiserver", "etcd"), false, 0)
	r.addLine(name+", kube-apiserver (ours: proxying)", unitCPU, cpuSum(ours, "kube-apiserver"), cpuSum(crd, "kube-apiserver"), false, 0)
	r.addLine(name+", network-apiserver vs the CRD's kube-apiserver", unitCPU, cpuSum(ours, "network-apiserver"), cpuSum(crd, "kube-apiserver"), false, 2.5)
	r.addLine(name+", etcd", unitCPU, cpuSum(ours, "etcd"), cpuSum(crd, "etcd"), false, 0)
}

// agentLines are the node-agent rows: delivery, lost events, server memory per watcher, and the
// client's own CPU (to tell whether it was the bottleneck).
func (r *results) agentLines() {
	o, c, cfg := r.Ours.Agents, r.CRD.Agents, r.Config
	stored := cfg.AgentObjects
	if o != nil {
		stored = o.Objects
	}
	name := fmt.Sprintf("node agents: %d watchers (own TLS conns), %d stored, %d updates", cfg.Agents, stored, cfg.AgentUpdates)
	pick := func(a *agentResult, f func(*agentResult) float64) *float64 {
		if a == nil {
			return nil
		}
		return val(f(a))
	}
	both := func(f func(*agentResult) float64) (*float64, *float64) { return pick(o, f), pick(c, f) }
	op50, cp50 := both(func(a *agentResult) float64 { return a.LatencyFromSent.P50Ms })
	op99, cp99 := both(func(a *agentResult) float64 { return a.LatencyFromSent.P99Ms })
	oack, cack := both(func(a *agentResult) float64 { return a.Latency.P99Ms })
	olost, clost := both(func(a *agentResult) float64 { return float64(a.Lost) })
	orss, crss := both(func(a *agentResult) float64 { return a.RSSPerWatcher })
	oheap, cheap := both(func(a *agentResult) float64 { return a.HeapPerWatcher })
	ohs, chs := both(func(a *agentResult) float64 { return a.HeapStackPerWatcher })
	ocpu, ccpu := both(func(a *agentResult) float64 { return a.ClientCores })
	r.addLine(name+": delivery p50 from update sent", unitMs, op50, cp50, false, 0)
	r.addLine(name+": delivery p99 from update sent", unitMs, op99, cp99, false, 2)
	r.addLine(name+": delivery p99 after the update's response", unitMs, oack, cack, false, 0)
	r.addLine(name+": events lost (must be 0)", unitCount, olost, clost, false, 0)
	r.addLine(name+": RSS per watcher, server + etcd", unitBytes, orss, crss, false, 2)
	r.addLine(name+": live heap per watcher, server", unitBytes, oheap, cheap, false, 0)
	r.addLine(name+": live heap + stacks per watcher, server", unitBytes, ohs, chs, false, 0)
	var ocpuUpd, ccpuUpd *float64
	if o != nil {
		ocpuUpd = cpuSum(o.ServerCPUMsPerUpd, "network-apiserver", "etcd")
	}
	if c != nil {
		ccpuUpd = cpuSum(c.ServerCPUMsPerUpd, "kube-apiserver", "etcd")
	}
	r.addLine(name+": CPU per update, server + etcd", unitCPU, ocpuUpd, ccpuUpd, false, 0)
	r.addLine(name+": bench client CPU during updates", unitCores, ocpu, ccpu, false, 0)
}

// scaleLines are the scale point's rows. Each side may have stopped at its own size (the header
// says where and why), so memory is also compared per stored object.
func (r *results) scaleLines() {
	o, c := r.Ours.Scale, r.CRD.Scale
	name := "scale"
	if o != nil && c != nil && o.Stored == c.Stored {
		name = fmt.Sprintf("scale, %d stored", o.Stored)
	} else if o != nil && c != nil {
		name = fmt.Sprintf("scale, %d stored (CRD %d)", o.Stored, c.Stored)
	}
	pick := func(s *scaleResult, f func(*scaleResult) float64) *float64 {
		if s == nil {
			return nil
		}
		return val(f(s))
	}
	line := func(label, unit string, higher bool, target float64, f func(*scaleResult) float64) {
		l := r.addLine(name+": "+label, unit, pick(o, f), pick(c, f), higher, target)
		if c == nil && r.Config.ScaleCRD == 0 {
			l.CRDNote = "not run"
		}
	}
	line("creates/s, first 10%", unitRate, true, 0, func(s *scaleResult) float64 { return s.FirstTenthPerSecond })
	line("creates/s, last 10%", unitRate, true, 0, func(s *scaleResult) float64 { return s.LastTenthPerSecond })
	line("creates/s, last 10% / first 10%", unitFactor, true, 0, func(s *scaleResult) float64 {
		if s.FirstTenthPerSecond == 0 {
			return 0
		}
		return s.LastTenthPerSecond / s.FirstTenthPerSecond
	})
	line("RSS, all processes", unitBytes, false, 0, func(s *scaleResult) float64 { return float64(s.RSSTotal) })
	line("RSS per stored object", unitPerObj, false, 4, func(s *scaleResult) float64 { return s.RSSPerObject })
	line("Go heap (live), all processes", unitBytes, false, 0, func(s *scaleResult) float64 { return float64(s.HeapTotal) })
	line("Go heap per stored object", unitPerObj, false, 0, func(s *scaleResult) float64 { return s.HeapPerObject })
	line("etcd db size", unitBytes, false, 0, func(s *scaleResult) float64 { return float64(s.DBBytes) })
	line("etcd db in use per stored object", unitPerObj, false, 0, func(s *scaleResult) float64 { return s.DBInUsePerObject })
	line("informer cold sync (1 informer)", unitMs, false, 0, func(s *scaleResult) float64 { return s.SyncSeconds * 1000 })
	line(fmt.Sprintf("paged LIST (limit %d) JSON, full walk", pageLimit), unitMs, false, 0, func(s *scaleResult) float64 {
		if s.PagedList == nil {
			return 0
		}
		return s.PagedList.MedianMs
	})
	line("restart: SIGTERM → exit", unitMs, false, 0, func(s *scaleResult) float64 { return s.RestartStopMs })
	line("restart → /readyz", unitMs, false, 0, func(s *scaleResult) float64 { return s.RestartReadyMs })
	// After the restart, without the watch cache's consistency checker (noConsistencyChecks).
	if o != nil {
		var vsec, vcpu, vshare, vrss, vheap *float64
		if v := o.Verifier; v != nil {
			vsec, vcpu, vshare = val(v.Seconds*1000), val(v.CPUSeconds*1000), val(v.ShareOfCoreAtDefault)
			vrss, vheap = val(v.RSSAfterPerObject), val(v.HeapAfterPerObject)
		}
		r.oursOnly(name+": restarted: allocation verification, wall (paced)", unitMs, vsec)
		r.oursOnly(name+": restarted: allocation verification, server CPU", unitCPU, vcpu)
		r.oursOnly(name+": restarted: allocation verification, cores averaged over its 10 min interval (target ≤ 0.05)", unitCores, vshare)
		r.oursOnly(name+": restarted: RSS per stored object, after the verification", unitPerObj, vrss)
		r.oursOnly(name+": restarted: Go heap per stored object, after the verification", unitPerObj, vheap)
	}
}

// controllerLines are the controller step's rows: ours only (a CRD has no controller here).
func (r *results) controllerLines() {
	c := r.Ours.Controller
	n := r.Config.ControllerNetworks
	// Rows of a run with a bridge per Network (--bridge-on-attach=false) are named apart.
	add := r.oursOnly
	if r.Config.ControllerBridgePerNetwork {
		add = func(name, unit string, v *float64) {
			r.oursOnly(strings.Replace(name, "controller:", "controller (a bridge per Network):", 1), unit, v)
		}
	}
	var get = func(f func(*controllerResult) float64) *float64 {
		if c == nil {
			return nil
		}
		return val(f(c))
	}
	add(fmt.Sprintf("controller: %d creates → Ready p50", n), unitMs, get(func(c *controllerResult) float64 { return c.Ready.P50Ms }))
	add(fmt.Sprintf("controller: %d creates → Ready p99 (target < 1 s)", n), unitMs, get(func(c *controllerResult) float64 { return c.Ready.P99Ms }))
	add(fmt.Sprintf("controller: %d creates → Ready max", n), unitMs, get(func(c *controllerResult) float64 { return c.Ready.MaxMs }))
	add("controller: first create → all Ready", unitMs, get(func(c *controllerResult) float64 { return c.AllReadyMs }))
	add("controller: first create → all bridges and lists on the node", unitMs, get(func(c *controllerResult) float64 { return c.NodeDoneMs }))
	add("controller: never Ready (must be 0)", unitCount, get(func(c *controllerResult) float64 { return float64(c.NotReady) }))
	add("controller: last delete → last Network gone from the API (target < 5 s)", unitMs, get(func(c *controllerResult) float64 { return c.GoneFromAPIMs }))
	add("controller: last delete → last bridge gone (target < 5 s)", unitMs, get(func(c *controllerResult) float64 { return c.BridgesGoneMs }))
	add("controller: last delete → last CNI list gone (target < 5 s)", unitMs, get(func(c *controllerResult) float64 { return c.ConflistsGoneMs }))
	add("controller: server CPU per Network, create", unitCPU, get(func(c *controllerResult) float64 { return c.CreateCPUMs }))
	add("controller: server CPU per Network, delete", unitCPU, get(func(c *controllerResult) float64 { return c.DeleteCPUMs }))
	for _, k := range costCounters {
		for _, phase := range []string{"create", "delete"} {
			var v *float64
			if c != nil {
				m := c.CreateCost
				if phase == "delete" {
					m = c.DeleteCost
				}
				if x, ok := m[k.name]; ok {
					v = val(x)
				}
			}
			add(fmt.Sprintf("controller: per Network, %s: %s", phase, k.name), unitPerNet, v)
		}
	}
}

// oursOnly adds a row the CRD has no figure for (its CRD column reads "-", not missing).
func (r *results) oursOnly(name, unit string, v *float64) {
	l := r.addLine(name, unit, v, nil, false, 0)
	l.CRDNote = "-"
}

// lostGuards is a create run's allocation guards lost per create, nil when not measured.
func lostGuards(r *createResult) *float64 {
	if r == nil {
		return nil
	}
	return r.LostGuardsPerCreate
}
