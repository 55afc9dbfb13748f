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
	"fmt"
	"sort"
	"strings"
	"time"
)

// runReport is the run's figures: operations by kind and answer, faults with their recovery
// times, watch segments, and the violations by check.
func runReport(sc scenario, seed int64, r *replay, ops []op, faults []fault, watches []watchRecord, f *findings) string {
	var b strings.Builder
	fmt.Fprintf(&b, "scenario %s seed %d: %d etcd revisions with a Network change (last revision %d), %d Network changes\n", sc.Name, seed, len(r.byRev), r.lastRev, len(r.changes))
	kinds := map[string]map[string]int{}
	for _, o := range ops {
		if kinds[o.Kind] == nil {
			kinds[o.Kind] = map[string]int{}
		}
		res := fmt.Sprint(o.Code)
		if o.Err != "" {
			res = "no-answer"
			if strings.HasPrefix(o.Err, "timeout") {
				res = "timeout"
			}
		}
		kinds[o.Kind][res]++
	}
	var names []string
	for k := range kinds {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintf(&b, "operations: %d\n", len(ops))
	for _, k := range names {
		var parts []string
		total := 0
		for res, n := range kinds[k] {
			parts = append(parts, fmt.Sprintf("%s=%d", res, n))
			total += n
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "  %-15s %5d  %s\n", k, total, strings.Join(parts, " "))
	}
	gwInBlock := 0
	for _, o := range ops {
		if o.Kind == "gateway" && o.Code == 422 && strings.Contains(o.Message, "inside block") {
			gwInBlock++
		}
	}
	fmt.Fprintf(&b, "blocks: %d block and gateway keys written, at most %d held at once; %d gateway moves refused as inside a block\n",
		r.blockKeyPuts, r.maxBlockKeys, gwInBlock)
	fmt.Fprintf(&b, "faults: %d\n", len(faults))
	for _, ft := range faults {
		down := time.Duration(ft.Restored - ft.Start)
		ready := time.Duration(ft.Ready - ft.Restored)
		firstWrite := "-"
		var best int64
		for _, o := range ops {
			if o.ok() && o.Start >= ft.Restored && (best == 0 || o.End < best) {
				best = o.End
			}
		}
		if best != 0 {
			firstWrite = time.Duration(best - ft.Restored).Round(time.Millisecond).String()
		}
		fmt.Fprintf(&b, "  %s %-17s %-22s down %-8s ready after %-8s first acknowledged write after %s %s%s\n",
			time.Unix(0, ft.Start).UTC().Format("15:04:05"), ft.Kind, ft.Target, down.Round(time.Millisecond),
			ready.Round(time.Millisecond), firstWrite, ft.Note, map[bool]string{true: " ERROR " + ft.Err}[ft.Err != ""])
	}
	segs, resumes, events := map[string]int{}, map[string]int{}, map[string]int{}
	for _, w := range watches {
		switch w.What {
		case "list":
			segs[w.Watcher]++
		case "resume":
			resumes[w.Watcher]++
		case "event":
			events[w.Watcher]++
		}
	}
	var ws []string
	for w := range segs {
		ws = append(ws, w)
	}
	sort.Strings(ws)
	for _, w := range ws {
		fmt.Fprintf(&b, "watcher %s: %d events, %d resumptions, %d lists (1 + relists after 410)\n", w, events[w], resumes[w], segs[w])
	}
	fmt.Fprintf(&b, "violations: %d\n", f.total())
	if f.total() > 0 {
		b.WriteString(f.summary(10))
	}
	return b.String()
}
