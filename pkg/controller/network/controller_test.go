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
	"errors"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/fake"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	fakebackend "github.com/samplecrd/network-apiserver/pkg/netbackend/fake"
)

type fixture struct {
	t          *testing.T
	client     *fake.Clientset
	backend    *fakebackend.Backend
	controller *Controller
	indexer    interface {
		Add(any) error
		Update(any) error
		Delete(any) error
	}
}

func newFixture(t *testing.T, networks ...*v1.Network) *fixture {
	t.Helper()
	var objects []any
	for _, n := range networks {
		objects = append(objects, n)
	}
	client := fake.NewClientset()
	for _, n := range networks {
		if err := client.Tracker().Add(n); err != nil {
			t.Fatal(err)
		}
	}
	informer := externalversions.NewSharedInformerFactory(client, 0).Samplecrd().V1().Networks()
	backend := fakebackend.NewBackend()
	c, err := New(client, informer, backend, Options{NodeName: "node-a", MaxRetries: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	f := &fixture{t: t, client: client, backend: backend, controller: c, indexer: informer.Informer().GetIndexer()}
	for _, o := range objects {
		if err := f.indexer.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func network(name, cidr, gateway string, generation int64) *v1.Network {
	return &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: name, Generation: generation},
		Spec:       v1.NetworkSpec{CIDR: cidr, Gateway: gateway},
	}
}

// sync runs one reconcile of key and returns its result.
func (f *fixture) sync(key string) (string, error) {
	f.t.Helper()
	f.client.ClearActions()
	return f.controller.syncHandler(context.Background(), key)
}

// metadataWrites lists the writes since the last sync that went to the Network itself rather than
// to its status: an agent makes none.
func (f *fixture) metadataWrites() []string {
	var out []string
	for _, a := range f.client.Actions() {
		if a.GetResource().Resource == "networks" && a.GetSubresource() == "" &&
			(a.GetVerb() == "patch" || a.GetVerb() == "update" || a.GetVerb() == "create" || a.GetVerb() == "delete") {
			out = append(out, a.GetVerb())
		}
	}
	return out
}

// statusApplies returns the status entries this node applied since the last sync.
func (f *fixture) statusApplies() []v1.NetworkNodeStatus {
	var out []v1.NetworkNodeStatus
	for _, a := range f.client.Actions() {
		patch, ok := a.(clienttesting.PatchAction)
		if !ok || a.GetSubresource() != "status" {
			continue
		}
		got, err := f.client.SamplecrdV1().Networks(patch.GetNamespace()).Get(context.Background(), patch.GetName(), metav1.GetOptions{})
		if err != nil {
			f.t.Fatal(err)
		}
		for _, n := range got.Status.Nodes {
			if n.NodeName == "node-a" {
				out = append(out, n)
			}
		}
	}
	return out
}

// refresh copies the stored Network (with the status the controller wrote) into the lister.
func (f *fixture) refresh(name string) *v1.Network {
	f.t.Helper()
	n, err := f.client.SamplecrdV1().Networks("team").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	if err := f.indexer.Update(n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

func TestBackendFailureIsReportedAndRetried(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	f.backend.SetFailure("team/web", netbackend.Errorf(netbackend.ReasonAddressInUse, "10.1.0.1 is on eth0"))
	f.controller.queue.Add("team/web")
	f.client.ClearActions()
	if !f.controller.processNextWorkItem(context.Background()) {
		t.Fatal("queue shut down")
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].Ready || applied[0].Reason != netbackend.ReasonAddressInUse || applied[0].Message != "10.1.0.1 is on eth0" {
		t.Fatalf("status after a failure: %+v", applied)
	}
	if n := f.controller.queue.NumRequeues("team/web"); n != 1 {
		t.Fatalf("requeues after a failure: %d, want 1 (rate limited retry)", n)
	}
	f.refresh("web")
	f.backend.SetFailure("team/web", nil)
	if result, err := f.sync("team/web"); err != nil || result != "changed" {
		t.Fatalf("sync after the failure cleared: %s, %v", result, err)
	}
	if applied := f.statusApplies(); len(applied) != 1 || !applied[0].Ready || applied[0].Reason != "" {
		t.Fatalf("status after recovery: %+v", applied)
	}
}

func TestRetriesAreCapped(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	f.backend.SetFailure("team/web", errors.New("boom"))
	for range 3 { // MaxRetries is 2: the third failure gives up until the next change or resync
		f.controller.queue.Add("team/web")
		f.controller.processNextWorkItem(context.Background())
		f.controller.queue.Forget("team/web") // drop the delayed add; count via NumRequeues below
	}
	if n := f.controller.queue.NumRequeues("team/web"); n != 0 {
		t.Fatalf("requeues after giving up: %d, want 0", n)
	}
}

// closeCheckingBackend records any use of the backend, a watch included, that is still under way
// or starts once the backend has been closed.
type closeCheckingBackend struct {
	*fakebackend.Backend
	mu       sync.Mutex
	inUse    int
	closed   bool
	misuses  []string
	realised chan struct{}
	once     sync.Once
	closedCh chan struct{}
}

func (b *closeCheckingBackend) enter(what string) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		b.misuses = append(b.misuses, what+" after Close")
	}
	b.inUse++
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		b.inUse--
		if b.closed {
			b.misuses = append(b.misuses, what+" still running at Close")
		}
	}
}

func (b *closeCheckingBackend) Close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.closed = true
	close(b.closedCh)
}

func (b *closeCheckingBackend) Observe(ctx context.Context, key string) (*netbackend.Actual, error) {
	defer b.enter("Observe")()
	return b.Backend.Observe(ctx, key)
}

func (b *closeCheckingBackend) Leases(ctx context.Context, key string) ([]string, error) {
	defer b.enter("Leases")()
	return b.Backend.Leases(ctx, key)
}

func (b *closeCheckingBackend) Ensure(ctx context.Context, d netbackend.Desired) ([]string, netbackend.Outcome, error) {
	defer b.enter("Ensure")()
	changes, outcome, err := b.Backend.Ensure(ctx, d)
	b.once.Do(func() { close(b.realised) })
	return changes, outcome, err
}

func (b *closeCheckingBackend) List(ctx context.Context) ([]string, error) {
	defer b.enter("List")()
	return b.Backend.List(ctx)
}

// Watch, like a netlink watch tearing down its subscription, takes a while to return once ctx is
// done: until the backend is closed, or at most a second. A Run that returned early is caught
// closing the backend under it every time, not only when the scheduler happens to show it.
func (b *closeCheckingBackend) Watch(ctx context.Context, notify func(string)) error {
	defer b.enter("Watch")()
	err := b.Backend.Watch(ctx, notify)
	select {
	case <-b.closedCh:
	case <-time.After(time.Second):
	}
	return err
}

// Run returns only once the goroutines it started (node watch, orphan collection, workers) have
// stopped, so that its caller can close the backend right after it (run under -race too).
func TestRunWaitsForItsGoroutinesBeforeReturning(t *testing.T) {
	client := fake.NewClientset(network("net-a", "10.0.0.0/24", "10.0.0.1", 1))
	factory := externalversions.NewSharedInformerFactory(client, 0)
	backend := &closeCheckingBackend{Backend: fakebackend.NewBackend(), realised: make(chan struct{}), closedCh: make(chan struct{})}
	c, err := New(client, factory.Samplecrd().V1().Networks(), backend, Options{NodeName: "node-a"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	factory.Start(ctx.Done())
	defer factory.Shutdown()

	done := make(chan error, 1)
	go func() {
		err := c.Run(ctx, 2)
		backend.Close() // what the agent does once Run returns
		done <- err
	}()
	if err := backend.WaitForWatchers(ctx, 1); err != nil {
		t.Fatal(err)
	}
	select {
	case <-backend.realised:
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	backend.mu.Lock()
	defer backend.mu.Unlock()
	if len(backend.misuses) > 0 || backend.inUse != 0 {
		t.Fatalf("Run returned while the backend was in use: %v (%d calls under way)", backend.misuses, backend.inUse)
	}
}
