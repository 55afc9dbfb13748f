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

package network

import (
	"context"
	"slices"
	"sync"
	"testing"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// recordingRemover is a netbackend.ConfigRemover that records its calls and, through onRemove,
// lets a test act while a configuration is being removed.
type recordingRemover struct {
	mu       sync.Mutex
	calls    []string
	onRemove func(key string)
}

func (r *recordingRemover) RemoveConfig(_ context.Context, key string) (bool, error) {
	r.mu.Lock()
	r.calls = append(r.calls, key)
	on := r.onRemove
	r.mu.Unlock()
	if on != nil {
		on(key)
	}
	return true, nil
}

var _ netbackend.ConfigRemover = (*recordingRemover)(nil)

func withRemover(f *fixture) *recordingRemover {
	r := &recordingRemover{}
	f.controller.remover, f.controller.unconfigure = r, newQueue("test_unconfigure")
	f.t.Cleanup(f.controller.unconfigure.ShutDown)
	return r
}

// A deleted Network's configuration is removed from its own queue, without waiting for the main
// queue (whose remove also deletes the bridge); a Network present again under the key keeps it.
func TestDeletedNetworkConfigurationGoesFirst(t *testing.T) {
	gone := network("gone", "10.1.0.0/24", "10.1.0.1", 1)
	back := network("back", "10.2.0.0/24", "10.2.0.1", 1)
	f := newFixture(t, back)
	r := withRemover(f)
	f.controller.enqueueUnconfigure(gone)
	f.controller.enqueueUnconfigure(back)
	for range 2 {
		if !f.controller.processNextUnconfigure(context.Background()) {
			t.Fatal("the queue shut down")
		}
	}
	if !slices.Equal(r.calls, []string{"team/gone"}) {
		t.Fatalf("configurations removed: %v; want team/gone only (team/back exists)", r.calls)
	}
	if f.controller.queue.Len() != 0 {
		t.Fatalf("the main queue holds %d keys; nothing was created meanwhile", f.controller.queue.Len())
	}
}

// A Network created again while its old configuration is being removed is queued for its sync,
// which writes the configuration again.
func TestRecreatedWhileUnconfiguringIsSyncedAgain(t *testing.T) {
	old := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	f := newFixture(t)
	r := withRemover(f)
	r.onRemove = func(string) {
		if err := f.indexer.Add(network("web", "10.1.0.0/24", "10.1.0.1", 1)); err != nil {
			t.Error(err)
		}
	}
	f.controller.enqueueUnconfigure(old)
	f.controller.processNextUnconfigure(context.Background())
	if len(r.calls) != 1 {
		t.Fatalf("RemoveConfig calls: %v", r.calls)
	}
	if f.controller.queue.Len() != 1 {
		t.Fatalf("the recreated Network is not queued for its sync (main queue holds %d)", f.controller.queue.Len())
	}
	if key, _ := f.controller.queue.Get(); key != "team/web" {
		t.Fatalf("queued %q", key)
	}
}
