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
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"time"
)

// The scale point runs our server at the default verification interval, which the server's
// flag is set to explicitly (defaultVerifyInterval), so that the creates are measured with the
// verifications a user's server makes, and measures the server's CPU during one, after the
// restart, with the watch cache's consistency checker off (noConsistencyChecks: otherwise a
// check falling into the window is counted too): from /proc/<pid>/stat sampled every
// cpuSampleEvery, over the verification's window (its log line says how long it took), minus
// the server's idle rate in the samples before the window. The verification at the restart
// begins before the samples; the one measured is the next, an interval after it ended. Its cost
// at the default interval is that CPU over defaultVerifyInterval.
const (
	defaultVerifyInterval = 10 * time.Minute
	cpuSampleEvery        = 500 * time.Millisecond
)

// verifierResult is one verification with the side filled.
type verifierResult struct {
	Networks int     `json:"networks"`
	Seconds  float64 `json:"seconds"`
	// PausedSeconds is the part of Seconds the verification spent in its pacer's pauses.
	PausedSeconds float64 `json:"pausedSeconds"`
	// CPUSeconds is the server's CPU over the verification, less its idle rate.
	CPUSeconds float64 `json:"cpuSeconds"`
	// IdleCores is that idle rate, from the samples before the verification.
	IdleCores float64 `json:"idleCores"`
	// ShareOfCoreAtDefault is CPUSeconds over the default interval (10 minutes).
	ShareOfCoreAtDefault float64 `json:"shareOfCoreAtDefaultInterval"`
	// RSSAfterPerObject and HeapAfterPerObject are the side's RSS and live heap once the
	// verification has ended, less the baselines, per stored object: the memory rows after the
	// fill depend on whether a verification fell into it, these always follow one (on the
	// restarted server).
	RSSAfterPerObject  float64 `json:"rssBytesPerObjectAfter"`
	HeapAfterPerObject float64 `json:"heapBytesPerObjectAfter"`
}

var verifiedLine = regexp.MustCompile(`"Verified the network allocations" networks=(\d+) revision=\d+ violations=\d+ took="([^"]+)" paused="([^"]+)"`)

// verifiedLines returns the verification lines of a klog log.
func verifiedLines(log []byte) [][]string {
	var out [][]string
	for _, line := range bytes.Split(log, []byte("\n")) {
		if m := verifiedLine.FindSubmatch(line); m != nil {
			out = append(out, []string{string(m[1]), string(m[2]), string(m[3])})
		}
	}
	return out
}

// errBeganBeforeSampling: too few samples before the verification to know the idle rate.
var errBeganBeforeSampling = errors.New("the verification began before the CPU samples")

type cpuAt struct {
	at  time.Time
	cpu time.Duration
}

// measureVerification waits (at most two intervals) for the next verification logged in logFile
// by process pid and returns its cost.
func measureVerification(ctx context.Context, pid int, logFile string) (*verifierResult, error) {
	read := func() ([][]string, error) {
		b, err := os.ReadFile(logFile)
		return verifiedLines(b), err
	}
	seen, err := read()
	if err != nil {
		return nil, err
	}
	var samples []cpuAt
	deadline := time.Now().Add(2*defaultVerifyInterval + 5*time.Minute)
	for time.Now().Before(deadline) {
		t, err := cpuTime(pid)
		if err != nil {
			return nil, err
		}
		now := time.Now()
		samples = append(samples, cpuAt{now, t})
		lines, err := read()
		if err != nil {
			return nil, err
		}
		if len(lines) > len(seen) {
			r, err := verificationCost(lines[len(seen)], samples, now)
			if !errors.Is(err, errBeganBeforeSampling) {
				return r, err
			}
			seen = lines // it began before the samples: wait for the next
		}
		if err := pause(ctx, cpuSampleEvery); err != nil {
			return nil, err
		}
	}
	return nil, fmt.Errorf("no verification logged in %s", 2*defaultVerifyInterval+5*time.Minute)
}

// verificationCost turns a verification line seen at end and the CPU samples up to end into its
// cost: the CPU from the last sample at or before end-took to end, less the idle rate (the
// median of the per-sample rates before that).
func verificationCost(line []string, samples []cpuAt, end time.Time) (*verifierResult, error) {
	took, err := time.ParseDuration(line[1])
	if err != nil {
		return nil, err
	}
	paused, err := time.ParseDuration(line[2])
	if err != nil {
		return nil, err
	}
	r := &verifierResult{Seconds: took.Seconds(), PausedSeconds: paused.Seconds()}
	fmt.Sscan(line[0], &r.Networks)
	start := end.Add(-took - cpuSampleEvery)
	first := -1
	for i, s := range samples {
		if !s.at.After(start) {
			first = i
		}
	}
	if first < 2 {
		return nil, errBeganBeforeSampling
	}
	var rates []float64
	for i := 1; i <= first; i++ {
		rates = append(rates, float64(samples[i].cpu-samples[i-1].cpu)/float64(samples[i].at.Sub(samples[i-1].at)))
	}
	sort.Float64s(rates)
	r.IdleCores = rates[len(rates)/2]
	last := samples[len(samples)-1]
	window := last.at.Sub(samples[first].at)
	r.CPUSeconds = max(0, (last.cpu-samples[first].cpu).Seconds()-r.IdleCores*window.Seconds())
	r.ShareOfCoreAtDefault = r.CPUSeconds / defaultVerifyInterval.Seconds()
	return r, nil
}
