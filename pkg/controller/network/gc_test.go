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
	"testing"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

func TestDeletedNetworkIsRemoved(t *testing.T) {
	n := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	f := newFixture(t, n)
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if err := f.indexer.Delete(n); err != nil {
		t.Fatal(err)
	}
	if result, err := f.sync("team/web"); err != nil || result != "removed" {
		t.Fatalf("sync after delete: %s, %v", result, err)
	}
	if a := f.backend.Get("team/web"); a != nil {
		t.Fatalf("bridge left behind: %+v", a)
	}
	if result, err := f.sync("team/web"); err != nil || result != "in_sync" {
		t.Fatalf("a second sync after delete: %s, %v", result, err)
	}
}

func TestOrphansAreCollected(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	f.backend.Put(netbackend.Actual{Key: "team/gone", Bridge: netbackend.BridgeName("team/gone"), Up: true})
	f.controller.collectGarbage(context.Background())
	if n := f.controller.queue.Len(); n != 1 {
		t.Fatalf("%d keys queued by garbage collection, want only the orphan", n)
	}
	if !f.controller.processNextWorkItem(context.Background()) {
		t.Fatal("queue shut down")
	}
	if f.backend.Get("team/gone") != nil || f.backend.Get("team/web") == nil {
		t.Fatalf("after collection: orphan %+v, live %+v", f.backend.Get("team/gone"), f.backend.Get("team/web"))
	}
}
