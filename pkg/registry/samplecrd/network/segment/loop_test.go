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

package segment

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func network(name, rv string) *samplecrd.Network {
	return &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv},
		Status: samplecrd.NetworkStatus{VNI: 7}}
}

// start runs l until ctx is done; the channel closes when Run has returned, which a test waits
// for so that nothing of its loop runs on (and logs) into the next test.
func start(ctx context.Context, l *Loop) <-chan struct{} {
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		l.Run(ctx)
	}()
	return ran
}

// TestLoopResumesWhereItsWatchEnded: the loop's first watch asks for the initial events; a
// watch closed before their bookmark starts over, one closed after it resumes at the last
// event's revision (not replaying every Network), and a watch too old to resume starts over.
func TestLoopResumesWhereItsWatchEnded(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var asked []string
	scripts := [][]watch.Event{
		// Closed during the initial events: start over.
		{{Type: watch.Added, Object: network("a", "5")}},
		// The initial events, their bookmark, two changes, closed: resume at 12.
		{{Type: watch.Added, Object: network("a", "5")}, {Type: watch.Added, Object: network("b", "9")},
			{Type: watch.Bookmark, Object: network("", "10")},
			{Type: watch.Modified, Object: network("a", "11")}, {Type: watch.Added, Object: network("c", "12")}},
		// A bookmark moves it on too.
		{{Type: watch.Bookmark, Object: network("", "20")}},
		// Too old: start over.
		{{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version: 20 (30)").ErrStatus}},
		{},
	}
	done := make(chan struct{})
	l := &Loop{retry: time.Millisecond, Watch: func(_ context.Context, rv string) (watch.Interface, error) {
		mu.Lock()
		defer mu.Unlock()
		asked = append(asked, rv)
		n := len(asked)
		if n == len(scripts) {
			close(done)
			return nil, apierrors.NewServiceUnavailable("enough")
		}
		w := watch.NewFakeWithChanSize(len(scripts[n-1]), false)
		for _, ev := range scripts[n-1] {
			w.Action(ev.Type, ev.Object)
		}
		w.Stop()
		return w, nil
	}}
	ran := start(ctx, l)
	<-done
	cancel()
	<-ran
	mu.Lock()
	defer mu.Unlock()
	if want := []string{"", "", "12", "20", ""}; fmt.Sprint(asked) != fmt.Sprint(want) {
		t.Fatalf("watched from %q, want %q", asked, want)
	}
}

// TestLoopWaitsQuietlyForTheWatchCache: while the watch cache loads it refuses watches (429); the
// loop says so once, at info, and logs no error for it.
func TestLoopWaitsQuietlyForTheWatchCache(t *testing.T) {
	var buf bytes.Buffer
	klog.LogToStderr(false)
	klog.SetOutput(&buf)
	defer func() {
		klog.SetOutput(io.Discard)
		klog.LogToStderr(true)
	}()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opened := make(chan struct{})
	calls := 0
	l := &Loop{retry: time.Millisecond, Watch: func(context.Context, string) (watch.Interface, error) {
		if calls++; calls <= 5 {
			return nil, apierrors.NewTooManyRequests("storage is (re)initializing", 1)
		}
		close(opened)
		return watch.NewFake(), nil // stays open
	}}
	ran := start(ctx, l)
	<-opened
	cancel()
	<-ran
	klog.Flush()
	out := buf.String()
	if n := strings.Count(out, "Waiting for the watch cache of networks"); n != 1 {
		t.Errorf("said it waits %d times over 5 refused watches, want once:\n%s", n, out)
	}
	if strings.Contains(out, "Watching networks for their VNIs") {
		t.Errorf("logged the refused watches as errors:\n%s", out)
	}
}
