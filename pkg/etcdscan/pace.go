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
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// pacedKeys is how many keys a scan reads between two of its pacer's pauses.
const pacedKeys = 1000

// Pacer spreads scans out in time: every pacedKeys keys a scan pauses, so that from the pacer's
// start the work (the time between pauses: reading, and whatever the caller does with the keys)
// takes at most Duty of the wall time. Pauses end at Until, so that a pass of scans at one
// revision stays well inside etcd's compaction interval. A pacer is for one goroutine.
//
// A pacer told how many keys its pass will read (Expected) keeps the pass on time: when the work
// so far, projected over the keys left, would not fit into catchUpShare of the time left before
// Until at Duty, it works a larger share from then on — as large as fits, up to all of it — so
// that a pass that is slower than planned (its estimate was low, or the machine is busy) spreads
// its extra work over the rest of its window instead of running unpaced after Until.
type Pacer struct {
	// Duty is the share of wall time the work may take, in (0, 1].
	Duty float64
	// Until is when pausing stops.
	Until time.Time
	// Expected is how many keys the pass is expected to read (0: not known).
	Expected int64
	// Paused is the time spent in pauses so far.
	Paused time.Duration
	// Read counts the keys read so far, pacedKeys at each pause.
	Read int64

	now    func() time.Time
	sleep  func(context.Context, time.Duration) error
	mark   time.Time     // the end of the last pause
	worked time.Duration // the work so far
}

// catchUpShare is the share of the time left before Until that a pass behind its plan plans
// to fill with its remaining work.
const catchUpShare = 0.8

// NewPacer returns a pacer that starts now.
func NewPacer(duty float64, until time.Time) *Pacer {
	p := &Pacer{Duty: duty, Until: until, now: time.Now, sleep: sleep}
	p.mark = p.now()
	return p
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// pause sleeps (1/duty - 1) times the work since the last pause, but not past Until; duty is
// Duty, or the larger share the pass needs to finish on time (see Pacer).
func (p *Pacer) pause(ctx context.Context) error {
	now := p.now()
	worked := now.Sub(p.mark)
	p.worked += worked
	p.Read += pacedKeys
	left := p.Until.Sub(now)
	duty := p.Duty
	if rest := p.Expected - p.Read; rest > 0 && left > 0 {
		need := float64(p.worked) * float64(rest) / float64(p.Read) / (catchUpShare * float64(left))
		duty = min(max(duty, need), 1)
	}
	d := time.Duration(float64(worked) * (1/duty - 1))
	if d > left {
		d = left
	}
	if d > 0 {
		if err := p.sleep(ctx, d); err != nil {
			return err
		}
		p.Paused += d
	}
	p.mark = p.now()
	return nil
}

type pacerKey struct{}

// WithPacer returns ctx carrying p: every scan with it pauses as p says.
func WithPacer(ctx context.Context, p *Pacer) context.Context {
	return context.WithValue(ctx, pacerKey{}, p)
}

// PacerFrom returns the pacer of ctx (nil: none, or one that would not pause).
func PacerFrom(ctx context.Context) *Pacer {
	p, _ := ctx.Value(pacerKey{}).(*Pacer)
	if p == nil || p.Duty <= 0 || p.Duty >= 1 {
		return nil
	}
	return p
}

// Paced wraps fn with the pauses of ctx's pacer, if any.
func Paced(ctx context.Context, fn func(*mvccpb.KeyValue) error) func(*mvccpb.KeyValue) error {
	p := PacerFrom(ctx)
	if p == nil {
		return fn
	}
	n := 0
	return func(kv *mvccpb.KeyValue) error {
		if err := fn(kv); err != nil {
			return err
		}
		if n++; n%pacedKeys == 0 {
			return p.pause(ctx)
		}
		return nil
	}
}
