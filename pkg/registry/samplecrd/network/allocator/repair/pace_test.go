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

package repair

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// A verification plans to spread the last one's work over most of its window, which stays
// inside half the interval, four minutes and etcd's compaction interval.
func TestPaceSpreadsTheLastWorkOverTheWindow(t *testing.T) {
	for _, tc := range []struct {
		name                           string
		interval, compaction, lastWork time.Duration
		duty                           float64
		window                         time.Duration
	}{
		{"no estimate, default interval", 10 * time.Minute, 5 * time.Minute, 0, firstDuty, 4 * time.Minute},
		// 30 s of work in 80% of 4 minutes.
		{"a million at the default interval", 10 * time.Minute, 5 * time.Minute, 30 * time.Second, 30.0 / 192, 4 * time.Minute},
		{"short interval: half of it", 2 * time.Minute, 5 * time.Minute, 30 * time.Second, 30.0 / 48, time.Minute},
		{"short compaction: 80% of it", 10 * time.Minute, time.Minute, 30 * time.Second, 30 / 38.4, 48 * time.Second},
		{"no compaction known", 20 * time.Minute, 0, 96 * time.Second, 0.5, 4 * time.Minute},
		{"tiny work: the least duty", 10 * time.Minute, 5 * time.Minute, time.Millisecond, minDuty, 4 * time.Minute},
		{"more work than the window: unpaced", 10 * time.Minute, 5 * time.Minute, 5 * time.Minute, 1, 4 * time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			duty, window := pace(tc.interval, tc.compaction, tc.lastWork)
			if math.Abs(duty-tc.duty) > 1e-9 || window != tc.window {
				t.Errorf("pace(%s, %s, %s) = %.4f, %s; want %.4f, %s", tc.interval, tc.compaction, tc.lastWork, duty, window, tc.duty, tc.window)
			}
		})
	}
}

// Verify remembers the work it did, its pauses left out, for the next verification's pacing.
func TestVerifyRemembersItsWorkWithoutPauses(t *testing.T) {
	f := &fakeAllocations{}
	for i := range 3000 {
		name, uid, cidr := fmt.Sprintf("net-%d", i), fmt.Sprint(i), fmt.Sprintf("10.%d.%d.0/28", i>>8, i&255)
		f.stores(t, name, uid, cidr)
		f.stored = append(f.stored, allocation(name, uid, cidr))
	}
	r := New(f, allocator.Scoping{}, "/networks/", decodeJSON)
	// A pacer that pauses 9 times its work every 1000 keys, for up to a minute.
	p := etcdscan.NewPacer(0.1, time.Now().Add(time.Minute))
	start := time.Now()
	v, err := r.Verify(etcdscan.WithPacer(context.Background(), p))
	if err != nil {
		t.Fatal(err)
	}
	if v.Networks != 3000 || len(v.Violations) != 0 {
		t.Fatalf("verified %d Networks with violations %v, want 3000 and none", v.Networks, v.Violations)
	}
	took := time.Since(start)
	work := time.Duration(r.lastWork.Load())
	if p.Paused == 0 {
		t.Fatalf("the fake scan was not paced: the test checks nothing")
	}
	if work <= 0 || work > took-p.Paused {
		t.Errorf("remembered work %s, want more than 0 and at most %s (took %s, paused %s)", work, took-p.Paused, took, p.Paused)
	}
	// The fake paces its scan of the Networks (etcd's scans pace every keyspace): 3000 keys.
	if got := r.lastKeys.Load(); got != 3000 || p.Read != 3000 {
		t.Errorf("remembered %d keys (the pacer counted %d), want 3000", got, p.Read)
	}
}

// The keys expected grow with the Networks counted: as many per Network as the last paced
// verification read, or the default.
func TestExpectedKeysScaleTheLastOnePerNetwork(t *testing.T) {
	r := New(&fakeAllocations{}, allocator.Scoping{}, "/networks/", decodeJSON)
	if got, want := r.expectedKeys(400_000), int64(400_000*defaultKeysPerNetwork); got != want {
		t.Errorf("with no verification before: %d, want %d", got, want)
	}
	r.lastNetworks.Store(100_000)
	r.lastKeys.Store(200_000) // no blocks, no VNIs: two keys a Network
	if got, want := r.expectedKeys(1_000_000), int64(2_000_000); got != want {
		t.Errorf("a million after 100,000 with 200,000 keys: %d, want %d", got, want)
	}
	r.lastKeys.Store(0) // the last one was not paced
	if got, want := r.expectedKeys(1_000_000), int64(1_000_000*defaultKeysPerNetwork); got != want {
		t.Errorf("after an unpaced verification: %d, want %d", got, want)
	}
}

// The work expected grows with the Networks counted: per Network as the last verification
// worked, or the default when it read too few to tell.
func TestEstimatedWorkScalesTheLastOnePerNetwork(t *testing.T) {
	r := New(&fakeAllocations{}, allocator.Scoping{}, "/networks/", decodeJSON)
	if got, want := r.estimatedWork(500_000), 500_000*defaultWorkPerNetwork; got != want {
		t.Errorf("with no verification before: %s, want %s", got, want)
	}
	r.lastNetworks.Store(fewestToEstimate - 1)
	r.lastWork.Store(int64(time.Second))
	if got, want := r.estimatedWork(2000), 2000*defaultWorkPerNetwork; got != want {
		t.Errorf("after %d Networks: %s, want the default %s", fewestToEstimate-1, got, want)
	}
	// 100,000 Networks in 3 s: 30 µs each.
	r.lastNetworks.Store(100_000)
	r.lastWork.Store(int64(3 * time.Second))
	if got, want := r.estimatedWork(1_000_000), 30*time.Second; got != want {
		t.Errorf("a million after 100,000 in 3 s: %s, want %s", got, want)
	}
}
