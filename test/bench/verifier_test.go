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
	"errors"
	"math"
	"testing"
	"time"
)

// TestVerificationCost: the server's log line and CPU samples give the verification's CPU less
// the idle rate before it, and its share of a core over the default interval.
func TestVerificationCost(t *testing.T) {
	log := []byte(`I1126 12:11:16.1 server.go:1] "Serving"
I1126 12:11:33.616130   28473 repair.go:155] "Verified the network allocations" networks=464111 revision=464115 violations=0 took="10s" paused="7.5s"
`)
	lines := verifiedLines(log)
	if len(lines) != 1 || lines[0][0] != "464111" || lines[0][1] != "10s" || lines[0][2] != "7.5s" {
		t.Fatalf("parsed %q", lines)
	}
	// Idle at 0.1 cores for 20 s, then 10 s of verification at 1.1 cores.
	t0 := time.Unix(5000, 0)
	var samples []cpuAt
	cpu := time.Duration(0)
	for i := 0; i <= 60; i++ {
		at := t0.Add(time.Duration(i) * cpuSampleEvery)
		if i > 0 {
			rate := 0.1
			if i > 40 {
				rate = 1.1
			}
			cpu += time.Duration(rate * float64(cpuSampleEvery))
		}
		samples = append(samples, cpuAt{at, cpu})
	}
	end := samples[len(samples)-1].at
	r, err := verificationCost(lines[0], samples, end)
	if err != nil {
		t.Fatal(err)
	}
	if r.Networks != 464111 || r.Seconds != 10 || r.PausedSeconds != 7.5 || math.Abs(r.IdleCores-0.1) > 1e-6 {
		t.Fatalf("%+v", r)
	}
	// The window starts one sample early: 10.5 s measured, the idle rate taken out of all of it.
	if math.Abs(r.CPUSeconds-10) > 1e-6 || math.Abs(r.ShareOfCoreAtDefault-10.0/600) > 1e-9 {
		t.Fatalf("CPU %.3f s, share %.5f; want 10 s, %.5f", r.CPUSeconds, r.ShareOfCoreAtDefault, 10.0/600)
	}
	// A verification that began before the samples is not measured.
	if _, err := verificationCost(lines[0], samples[40:], end); !errors.Is(err, errBeganBeforeSampling) {
		t.Fatalf("began before sampling: %v", err)
	}
}
