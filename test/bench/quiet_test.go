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
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestParseLoadavg(t *testing.T) {
	l1, l5, l15, err := parseLoadavg("2.33 2.79 2.60 2/168 13180\n")
	if err != nil || l1 != 2.33 || l5 != 2.79 || l15 != 2.60 {
		t.Fatalf("got %v %v %v, %v", l1, l5, l15, err)
	}
	for _, bad := range []string{"", "0.5 0.4", "0.5 x 0.3 1/2 3"} {
		if _, _, _, err := parseLoadavg(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestParseProcStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice: guest is already in user.
	stat := `cpu  100 10 50 800 20 5 5 10 40 0
cpu0 50 5 25 400 10 3 2 5 20 0
cpu1 50 5 25 400 10 2 3 5 20 0
intr 12345 0 0
ctxt 999
`
	got, cpus, err := parseProcStat(stat)
	if err != nil {
		t.Fatal(err)
	}
	if want := (cpuTimes{busy: 180, total: 1000}); got != want || cpus != 2 {
		t.Fatalf("got %+v and %d CPUs, want %+v and 2", got, cpus, want)
	}
	for _, bad := range []string{"intr 1 2 3\n", "cpu  1 2 3\ncpu0 1 2 3\n", "cpu  1 2 3 4 5 6 7 x\ncpu0 1 2 3 4 5 6 7 8\n", "cpu  1 2 3 4 5 6 7 8\n"} {
		if _, _, err := parseProcStat(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestBusyShare(t *testing.T) {
	share, err := busyShare(cpuTimes{busy: 180, total: 1000}, cpuTimes{busy: 230, total: 1200})
	if err != nil || share != 0.25 {
		t.Fatalf("got %v, %v; want 0.25", share, err)
	}
	if _, err := busyShare(cpuTimes{busy: 1, total: 10}, cpuTimes{busy: 1, total: 10}); err == nil {
		t.Error("no time passed: no error")
	}
}

func TestLoadSampleClassification(t *testing.T) {
	const thresholds = "quiet means CPU busy ≤ 10% and 1-min load ≤ 0.50 per CPU"
	for _, tc := range []struct {
		name        string
		busy, load1 float64
		quiet       bool
		want        []string
		notWant     []string
	}{
		{name: "idle", busy: 0.02, load1: 0.1, quiet: true,
			want:    []string{"machine before the run: quiet: CPU busy 2.0% of 2 CPUs over 3 s, load average 0.10 0.20 0.30 (1, 5, 15 min); " + thresholds},
			notWant: []string{"BUSY", ">"}},
		{name: "at both thresholds", busy: 0.10, load1: 1.0, quiet: true,
			want: []string{"before the run: quiet: CPU busy 10.0%"}, notWant: []string{"BUSY"}},
		{name: "CPUs busy now", busy: 0.35, load1: 0.2, quiet: false,
			want:    []string{"before the run: BUSY: CPU busy 35.0% of 2 CPUs", "— CPU busy 35.0% > 10%: other work shares the CPUs", thresholds},
			notWant: []string{"quiet:", "1-min load 0.20 >"}},
		{name: "busy over the last minute", busy: 0.03, load1: 2.33, quiet: false,
			want:    []string{"before the run: BUSY:", "— 1-min load 2.33 > 1.00: other work", thresholds},
			notWant: []string{"CPU busy 3.0% >"}},
		{name: "both", busy: 0.9, load1: 3, quiet: false,
			want: []string{"— CPU busy 90.0% > 10%, 1-min load 3.00 > 1.00:"}},
	} {
		s := &loadSample{Load1: tc.load1, Load5: 0.2, Load15: 0.3, CPUs: 2, BusyShare: tc.busy, WindowSeconds: loadWindow.Seconds()}
		s.classify()
		if s.Quiet != tc.quiet || s.BusyMax != 0.10 || s.Load1PerCPUMax != 0.5 {
			t.Errorf("%s: quiet %v (thresholds %v, %v), want %v", tc.name, s.Quiet, s.BusyMax, s.Load1PerCPUMax, tc.quiet)
		}
		line := s.String()
		for _, w := range tc.want {
			if !strings.Contains(line, w) {
				t.Errorf("%s: %q lacks %q", tc.name, line, w)
			}
		}
		for _, w := range tc.notWant {
			if strings.Contains(line, w) {
				t.Errorf("%s: %q has %q", tc.name, line, w)
			}
		}
	}
	var none *loadSample
	if got := none.String(); got != "machine before the run: not sampled" {
		t.Errorf("nil sample: %q", got)
	}
	failed := &loadSample{Error: "open /proc/stat: no such file or directory"}
	if got := failed.String(); got != "machine before the run: not sampled (open /proc/stat: no such file or directory)" {
		t.Errorf("failed sample: %q", got)
	}
}

// The report's first lines: the title, then the load line.
func TestReportStartsWithLoadLine(t *testing.T) {
	s := &loadSample{Load1: 2.33, Load5: 2.79, Load15: 2.6, CPUs: 2, BusyShare: 0.6, WindowSeconds: 3}
	s.classify()
	r := &results{Started: time.Date(2026, 11, 25, 18, 0, 0, 0, time.UTC), LoadBefore: s}
	var out bytes.Buffer
	r.printTable(&out)
	lines := strings.Split(strings.TrimLeft(out.String(), "\n"), "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "network-apiserver vs the best CRD") || lines[1] != s.String() {
		t.Fatalf("report starts with %q", lines[:min(len(lines), 2)])
	}
	if !strings.Contains(lines[1], "BUSY") {
		t.Fatalf("load line %q does not say BUSY", lines[1])
	}
}

// sampleLoad reads this machine's /proc: whatever the load, it yields figures in range and a
// classification consistent with them.
func TestSampleLoadReadsProc(t *testing.T) {
	s := sampleLoad(t.Context(), 100*time.Millisecond)
	if s.Error != "" {
		t.Fatal(s.Error)
	}
	if s.CPUs < 1 || s.BusyShare < 0 || s.BusyShare > 1 || s.Load1 < 0 || s.WindowSeconds != 0.1 {
		t.Fatalf("implausible sample %+v", s)
	}
	if want := s.BusyShare <= quietBusyMax && s.Load1 <= quietLoad1PerCPU*float64(s.CPUs); s.Quiet != want {
		t.Fatalf("quiet %v for %+v", s.Quiet, s)
	}
}
