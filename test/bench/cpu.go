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
	"os"
	"strconv"
	"strings"
	"time"
)

// The processes whose CPU the bench accounts, as the local cluster names their pid files.
var cpuComponents = []string{"etcd", "kube-apiserver", "network-apiserver"}

// clockTicks is the unit of utime and stime in /proc/<pid>/stat (USER_HZ, 100 on Linux).
const clockTicks = 100

// cpuTime returns the CPU time (user + system) process pid has used so far.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseCPUTime(string(b))
}

// parseCPUTime reads utime and stime (fields 14 and 15) of a /proc/<pid>/stat line; the fields
// are counted after the parenthesised command name, which may itself hold spaces.
func parseCPUTime(stat string) (time.Duration, error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, fmt.Errorf("no command name in %q", stat)
	}
	fields := strings.Fields(stat[i+1:])
	if len(fields) < 13 {
		return 0, fmt.Errorf("short stat line %q", stat)
	}
	var ticks int64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("stat field %q: %w", f, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// cpuSample is the CPU time each component had used at one moment.
type cpuSample map[string]time.Duration

// sampleCPU reads the CPU time of every component that runs; a failure is recorded by the caller
// as a missing figure, never guessed.
func (b *bench) sampleCPU() cpuSample {
	s := cpuSample{}
	for _, c := range cpuComponents {
		pid, err := b.cl.PID(c)
		if err != nil {
			continue
		}
		if t, err := cpuTime(pid); err == nil {
			s[c] = t
		}
	}
	return s
}

// perOp returns each component's CPU milliseconds per operation between before and after.
func perOp(before, after cpuSample, ops int) map[string]float64 {
	if ops <= 0 {
		return nil
	}
	out := map[string]float64{}
	for c, t := range after {
		if t0, ok := before[c]; ok {
			out[c] = float64(t-t0) / float64(time.Millisecond) / float64(ops)
		}
	}
	return out
}

// cpuSum adds the CPU per operation of the named components; nil when one is missing.
func cpuSum(cpu map[string]float64, components ...string) *float64 {
	total := 0.0
	for _, c := range components {
		v, ok := cpu[c]
		if !ok {
			return nil
		}
		total += v
	}
	return &total
}
