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

package etcdscan

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// fakeTime is a clock that moves only when work is done or a pause sleeps.
type fakeTime struct {
	t      time.Time
	sleeps []time.Duration
	err    error
}

func (f *fakeTime) now() time.Time { return f.t }
func (f *fakeTime) sleep(_ context.Context, d time.Duration) error {
	f.sleeps = append(f.sleeps, d)
	f.t = f.t.Add(d)
	return f.err
}

func fakePacer(duty float64, budget time.Duration) (*Pacer, *fakeTime) {
	f := &fakeTime{t: time.Unix(1000, 0)}
	p := &Pacer{Duty: duty, Until: f.t.Add(budget), now: f.now, sleep: f.sleep, mark: f.t}
	return p, f
}

// TestPacerKeepsItsDutyUntilItsEnd: each pause is (1/Duty - 1) times the work before it, none
// runs past Until, and after Until a scan is not paused.
func TestPacerKeepsItsDutyUntilItsEnd(t *testing.T) {
	p, f := fakePacer(0.25, 10*time.Second)
	ctx := WithPacer(context.Background(), p)
	work := []time.Duration{100 * time.Millisecond, time.Second, 2 * time.Second, time.Second}
	// 100ms → 300ms, 1s → 3s, 2s → the 3.6s left before Until, then nothing.
	want := []time.Duration{300 * time.Millisecond, 3 * time.Second, 3600 * time.Millisecond}
	for _, w := range work {
		f.t = f.t.Add(w)
		if err := p.pause(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.sleeps) != len(want) {
		t.Fatalf("slept %v, want %v", f.sleeps, want)
	}
	for i := range want {
		if f.sleeps[i] != want[i] {
			t.Fatalf("slept %v, want %v", f.sleeps, want)
		}
	}
	if p.Paused != 6900*time.Millisecond {
		t.Errorf("Paused %v, want 6.9s", p.Paused)
	}
}

// TestPacerBehindItsPlanCatchesUp: a pass told how many keys it reads, whose work turns out
// twice what its duty fits before Until, works a larger share as it goes and ends by Until
// (still pausing: it ends after most of the window); without Expected the same pass pauses at
// its duty until Until and works the rest unpaced after it. A pass ahead of its plan keeps its
// duty.
func TestPacerBehindItsPlanCatchesUp(t *testing.T) {
	const keys = 20 * pacedKeys
	run := func(expected int64, workPerPause time.Duration) (end time.Duration, p *Pacer, sleeps []time.Duration) {
		p, f := fakePacer(0.1, 100*time.Second)
		p.Expected = expected
		start := f.t
		ctx := WithPacer(context.Background(), p)
		for range keys / pacedKeys {
			f.t = f.t.Add(workPerPause)
			end = f.t.Sub(start) // the last key's work done (a pause may follow it)
			if err := p.pause(ctx); err != nil {
				t.Fatal(err)
			}
		}
		return end, p, f.sleeps
	}
	// 20 s of work at a duty of 0.1 needs 200 s; the window is 100 s.
	end, p, _ := run(keys, time.Second)
	if end > 100*time.Second || end < 70*time.Second {
		t.Errorf("a pass behind its plan ended after %s, want by Until (100s) and after 70s", end)
	}
	if p.Read != keys {
		t.Errorf("Read %d, want %d", p.Read, keys)
	}
	if end, _, _ = run(0, time.Second); end != 110*time.Second {
		t.Errorf("without Expected the pass ended after %s, want 110s (100s paced, the last 10s unpaced)", end)
	}
	// 2 s of work fits: every pause is 9 times the work before it.
	_, _, sleeps := run(keys, 100*time.Millisecond)
	for i, d := range sleeps {
		if d != 900*time.Millisecond {
			t.Fatalf("pause %d of a pass ahead of its plan: %s, want 900ms", i, d)
		}
	}
}

// TestPacedScanPausesEveryThousandKeys: a scan with a pacer in its context pauses after every
// pacedKeys keys, and a pause cut short by the context ends the scan with its error.
func TestPacedScanPausesEveryThousandKeys(t *testing.T) {
	p, f := fakePacer(0.5, time.Hour)
	ctx := WithPacer(context.Background(), p)
	fn := Paced(ctx, func(*mvccpb.KeyValue) error {
		f.t = f.t.Add(time.Millisecond) // a key's work
		return nil
	})
	for range 2500 {
		if err := fn(&mvccpb.KeyValue{}); err != nil {
			t.Fatal(err)
		}
	}
	if len(f.sleeps) != 2 || f.sleeps[0] != time.Second || f.sleeps[1] != time.Second {
		t.Fatalf("2500 keys of 1ms at duty 0.5 slept %v, want 1s twice", f.sleeps)
	}
	f.err = context.Canceled
	var err error
	for range 1000 {
		if err = fn(&mvccpb.KeyValue{}); err != nil {
			break
		}
	}
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a pause cut short: %v, want context.Canceled", err)
	}
	// Without a pacer (or with a duty of 1) nothing is wrapped.
	if PacerFrom(context.Background()) != nil || PacerFrom(WithPacer(context.Background(), &Pacer{Duty: 1})) != nil {
		t.Fatal("a pacer where none should pause")
	}
}
