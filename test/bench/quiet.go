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
	"os"
	"strconv"
	"strings"
	"time"
)

// What a quiet machine is, judged just before the run: the share of all CPUs busy over
// loadWindow (what runs now) and the 1-minute load average per CPU (what ran over the last
// minute, so that work that pauses between steps is seen too).
const (
	loadWindow         = 3 * time.Second
	quietBusyMax       = 0.10 // share of all CPUs' time busy over loadWindow
	quietLoad1PerCPU   = 0.5  // 1-minute load average per CPU
	procLoadavg        = "/proc/loadavg"
	procStat           = "/proc/stat"
	loadLinePrefix     = "machine before the run: "
	loadNotSampledLine = loadLinePrefix + "not sampled"
)

// loadSample is how busy the machine was just before the run.
type loadSample struct {
	// Load averages over 1, 5 and 15 minutes, from /proc/loadavg.
	Load1  float64 `json:"load1"`
	Load5  float64 `json:"load5"`
	Load15 float64 `json:"load15"`
	CPUs   int     `json:"cpus"`
	// BusyShare is the share of all CPUs' time not idle (nor waiting for I/O) over Window, from
	// /proc/stat: 1 means every CPU was busy all the time.
	BusyShare     float64 `json:"busyShare"`
	WindowSeconds float64 `json:"windowSeconds"`
	// Quiet says both figures are at most their thresholds, which are recorded with them.
	Quiet          bool    `json:"quiet"`
	BusyMax        float64 `json:"busyMax"`
	Load1PerCPUMax float64 `json:"load1PerCpuMax"`
	Error          string  `json:"error,omitempty"`
}

// cpuTimes are the machine's total and busy CPU time in /proc/stat's ticks.
type cpuTimes struct{ busy, total uint64 }

// parseLoadavg reads the three load averages of /proc/loadavg ("0.52 0.58 0.59 1/467 12345").
func parseLoadavg(s string) (l1, l5, l15 float64, err error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return 0, 0, 0, fmt.Errorf("loadavg %q: want three load averages", s)
	}
	var v [3]float64
	for i := range v {
		if v[i], err = strconv.ParseFloat(f[i], 64); err != nil {
			return 0, 0, 0, fmt.Errorf("loadavg %q: %w", s, err)
		}
	}
	return v[0], v[1], v[2], nil
}

// parseProcStat reads the all-CPU line of /proc/stat and counts the CPUs (the cpuN lines).
// Busy is everything but idle and iowait; guest and guest_nice are left out, since user and
// nice already count them.
func parseProcStat(s string) (cpuTimes, int, error) {
	var t cpuTimes
	found, cpus := false, 0
	for _, l := range strings.Split(s, "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			cpus++
			continue
		}
		// user nice system idle iowait irq softirq steal [guest guest_nice]
		if len(f) < 9 {
			return t, 0, fmt.Errorf("/proc/stat: %q: want at least 8 CPU times", l)
		}
		found = true
		for i, v := range f[1:9] {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return t, 0, fmt.Errorf("/proc/stat: %q: %w", l, err)
			}
			t.total += n
			if i != 3 && i != 4 { // idle, iowait
				t.busy += n
			}
		}
	}
	if !found || cpus == 0 {
		return t, 0, fmt.Errorf("/proc/stat: no cpu lines")
	}
	return t, cpus, nil
}

// busyShare is the share of the CPU time between two samples that was busy.
func busyShare(before, after cpuTimes) (float64, error) {
	if after.total <= before.total || after.busy < before.busy {
		return 0, fmt.Errorf("no CPU time passed between the samples")
	}
	return float64(after.busy-before.busy) / float64(after.total-before.total), nil
}

// classify records the thresholds and whether the figures are within them.
func (s *loadSample) classify() {
	s.BusyMax, s.Load1PerCPUMax = quietBusyMax, quietLoad1PerCPU
	s.Quiet = len(s.overLimits()) == 0
}

// overLimits names the figures above their thresholds.
func (s *loadSample) overLimits() []string {
	var over []string
	if s.BusyShare > s.BusyMax {
		over = append(over, fmt.Sprintf("CPU busy %.1f%% > %.0f%%", 100*s.BusyShare, 100*s.BusyMax))
	}
	if maxLoad := s.Load1PerCPUMax * float64(s.CPUs); s.Load1 > maxLoad {
		over = append(over, fmt.Sprintf("1-min load %.2f > %.2f", s.Load1, maxLoad))
	}
	return over
}

// String is the line at the top of the report and of the console output.
func (s *loadSample) String() string {
	if s == nil {
		return loadNotSampledLine
	}
	if s.Error != "" {
		return loadNotSampledLine + " (" + s.Error + ")"
	}
	word, why := "quiet", ""
	if !s.Quiet {
		word, why = "BUSY", " — "+strings.Join(s.overLimits(), ", ")+": other work shares the CPUs, figures may be low and noisy"
	}
	return fmt.Sprintf("%s%s: CPU busy %.1f%% of %d CPUs over %g s, load average %.2f %.2f %.2f (1, 5, 15 min)%s; quiet means CPU busy ≤ %.0f%% and 1-min load ≤ %.2f per CPU",
		loadLinePrefix, word, 100*s.BusyShare, s.CPUs, s.WindowSeconds, s.Load1, s.Load5, s.Load15, why, 100*s.BusyMax, s.Load1PerCPUMax)
}

// sampleLoad reads /proc/stat, waits window, reads /proc/stat and /proc/loadavg, and classifies
// what it read. A failure to read is kept in the sample's Error rather than failing the run.
func sampleLoad(ctx context.Context, window time.Duration) *loadSample {
	s := &loadSample{WindowSeconds: window.Seconds()}
	fail := func(err error) *loadSample { s.Error = err.Error(); return s }
	b, err := os.ReadFile(procStat)
	if err != nil {
		return fail(err)
	}
	before, _, err := parseProcStat(string(b))
	if err != nil {
		return fail(err)
	}
	if err := pause(ctx, window); err != nil {
		return fail(err)
	}
	if b, err = os.ReadFile(procStat); err != nil {
		return fail(err)
	}
	after, cpus, err := parseProcStat(string(b))
	if err != nil {
		return fail(err)
	}
	if s.BusyShare, err = busyShare(before, after); err != nil {
		return fail(err)
	}
	s.CPUs = cpus
	if b, err = os.ReadFile(procLoadavg); err != nil {
		return fail(err)
	}
	if s.Load1, s.Load5, s.Load15, err = parseLoadavg(string(b)); err != nil {
		return fail(err)
	}
	s.classify()
	return s
}
