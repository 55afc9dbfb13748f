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

package embeddedetcd

import (
	"context"
	"errors"
	"testing"
	"time"
)

// TestWaitReadyWaitsForAsLongAsTheMemberStarts: a member that takes many progress intervals to
// become ready is waited for (with a progress call each interval), not given up on; a member
// that fails, or a caller that gives up, ends the wait with that error.
func TestWaitReadyWaitsForAsLongAsTheMemberStarts(t *testing.T) {
	ready := make(chan struct{})
	var calls []time.Duration
	err := waitReady(context.Background(), ready, nil, time.Millisecond, func(waited time.Duration) {
		calls = append(calls, waited)
		if len(calls) == 50 {
			close(ready)
		}
	})
	if err != nil || len(calls) != 50 {
		t.Fatalf("waitReady: %v after %d progress calls, want nil after 50", err, len(calls))
	}
	for i := 1; i < len(calls); i++ {
		if calls[i] < calls[i-1] {
			t.Fatalf("progress %d reported %v waited, after %v", i, calls[i], calls[i-1])
		}
	}

	errc := make(chan error, 1)
	boom := errors.New("boom")
	errc <- boom
	if err := waitReady(context.Background(), make(chan struct{}), errc, time.Hour, func(time.Duration) {}); !errors.Is(err, boom) {
		t.Fatalf("a failing member: %v, want %v", err, boom)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := waitReady(ctx, make(chan struct{}), nil, time.Hour, func(time.Duration) {}); !errors.Is(err, context.Canceled) {
		t.Fatalf("a caller that gave up: %v, want context.Canceled", err)
	}
}
