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
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// kvEvent is one change of one key in etcd, as a watch on the whole prefix reports it.
type kvEvent struct {
	Rev    int64  `json:"rev"`
	Delete bool   `json:"delete,omitempty"`
	Key    string `json:"key"`
	Value  []byte `json:"value,omitempty"`
}

// recorder watches every key under the prefix from revision 1 while the traffic runs, so that
// the history survives compactions injected later (it never falls behind a compaction the
// suite makes: compact asks it how far it got).
type recorder struct {
	cli    *clientv3.Client
	prefix string

	mu       sync.Mutex
	events   []kvEvent
	progress int64 // every change up to this revision has been received
	err      error
	changed  chan struct{}
	done     chan struct{}
}

func startRecorder(ctx context.Context, cli *clientv3.Client, prefix string) *recorder {
	r := &recorder{cli: cli, prefix: prefix, changed: make(chan struct{}, 1), done: make(chan struct{})}
	go r.run(ctx)
	return r
}

func (r *recorder) run(ctx context.Context) {
	defer close(r.done)
	next := int64(1)
	for ctx.Err() == nil {
		// Watch again after what was received or vouched for: a compaction may have removed
		// the revisions in between (which held no change under the prefix).
		r.mu.Lock()
		next = max(next, r.progress+1)
		r.mu.Unlock()
		wctx := clientv3.WithRequireLeader(ctx)
		ch := r.cli.Watch(wctx, r.prefix, clientv3.WithPrefix(), clientv3.WithRev(next), clientv3.WithProgressNotify())
		for resp := range ch {
			if resp.CompactRevision != 0 {
				r.fail(fmt.Errorf("the history recorder lost revisions %d..%d to a compaction", next, resp.CompactRevision))
				return
			}
			if err := resp.Err(); err != nil {
				break // no leader, or the member went away: watch again from next
			}
			r.mu.Lock()
			for _, ev := range resp.Events {
				e := kvEvent{Rev: ev.Kv.ModRevision, Key: string(ev.Kv.Key), Delete: ev.Type == clientv3.EventTypeDelete}
				if !e.Delete {
					e.Value = ev.Kv.Value
				}
				r.events = append(r.events, e)
				next = e.Rev + 1
			}
			// Only a progress notification vouches for every change up to its header's revision
			// (the answer that creates a watch does not: older events may still follow).
			if resp.IsProgressNotify() && resp.Header.Revision > r.progress {
				r.progress = resp.Header.Revision
			}
			if next-1 > r.progress {
				r.progress = next - 1
			}
			r.mu.Unlock()
			select {
			case r.changed <- struct{}{}:
			default:
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

// Progress is the revision up to which the recorder has every change.
func (r *recorder) Progress() (int64, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.progress, r.err
}

// waitFor waits until the recorder has every change up to rev.
func (r *recorder) waitFor(ctx context.Context, rev int64, timeout time.Duration) error {
	deadline := time.After(timeout)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		p, err := r.Progress()
		if err != nil {
			return err
		}
		if p >= rev {
			return nil
		}
		select {
		case <-r.changed:
		case <-tick.C:
			_ = r.cli.RequestProgress(clientv3.WithRequireLeader(ctx))
		case <-deadline:
			return fmt.Errorf("the history recorder reached revision %d, not %d, within %s", p, rev, timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (r *recorder) Events() []kvEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]kvEvent(nil), r.events...)
}

// writeJSONLines writes one JSON document per line.
func writeJSONLines[T any](file string, items []T) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			f.Close()
			return err
		}
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func readJSONLines[T any](file string) ([]T, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []T
	dec := json.NewDecoder(bufio.NewReader(f))
	for dec.More() {
		var it T
		if err := dec.Decode(&it); err != nil {
			return nil, fmt.Errorf("%s: %w", file, err)
		}
		out = append(out, it)
	}
	return out, nil
}
