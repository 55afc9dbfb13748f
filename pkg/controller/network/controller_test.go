package network

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"
	testingclock "k8s.io/utils/clock/testing"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
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

func TestCreateThenResyncWritesNothing(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	result, err := f.sync("team/web")
	if err != nil || result != "changed" {
		t.Fatalf("first sync: %s, %v", result, err)
	}
	actual := f.backend.Get("team/web")
	if actual == nil || actual.Bridge != netbackend.BridgeName("team/web") || !actual.Up ||
		len(actual.Addresses) != 1 || actual.Addresses[0] != netip.MustParsePrefix("10.1.0.1/24") {
		t.Fatalf("backend after create: %+v", actual)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || !applied[0].Ready || applied[0].ObservedGeneration != 1 || applied[0].Bridge != actual.Bridge {
		t.Fatalf("status entries applied: %+v", applied)
	}
	applied2 := false
	for _, mf := range f.refresh("web").ManagedFields {
		applied2 = applied2 || (mf.Manager == nodestatus.FieldManagerPrefix+"node-a" && mf.Operation == metav1.ManagedFieldsOperationApply)
	}
	if !applied2 {
		t.Errorf("no server-side apply by field manager %s in %+v", nodestatus.FieldManagerPrefix+"node-a", f.refresh("web").ManagedFields)
	}

	f.backend.ResetCounts()
	result, err = f.sync("team/web")
	if err != nil || result != "in_sync" {
		t.Fatalf("resync: %s, %v", result, err)
	}
	if w := f.backend.Counts().Writes; w != 0 {
		t.Errorf("a resync of an unchanged Network made %d backend writes", w)
	}
	if c := f.backend.Counts(); c.Ensure != 1 || c.Observe != 0 {
		t.Errorf("a resync looked at the node other than by one Ensure: %+v", c)
	}
	if n := len(f.client.Actions()); n != 0 {
		t.Errorf("a resync of an unchanged Network made %d API calls: %v", n, f.client.Actions())
	}
}

func TestGatewayChangeIsApplied(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	n := f.refresh("web")
	n.Spec.Gateway, n.Generation = "10.1.0.254", 2
	if _, err := f.client.SamplecrdV1().Networks("team").Update(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.refresh("web")
	if result, err := f.sync("team/web"); err != nil || result != "changed" {
		t.Fatalf("sync after the gateway change: %s, %v", result, err)
	}
	if a := f.backend.Get("team/web"); len(a.Addresses) != 1 || a.Addresses[0] != netip.MustParsePrefix("10.1.0.254/24") {
		t.Fatalf("addresses after the gateway change: %v", a.Addresses)
	}
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].ObservedGeneration != 2 || !applied[0].Ready {
		t.Fatalf("status after the gateway change: %+v", applied)
	}
}

func TestDriftIsRepaired(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	f.refresh("web")
	f.backend.DeleteBridge("team/web")
	if result, err := f.sync("team/web"); err != nil || result != "changed" {
		t.Fatalf("sync after drift: %s, %v", result, err)
	}
	if a := f.backend.Get("team/web"); a == nil || a.Bridge == "" || !a.Up {
		t.Fatalf("bridge not repaired: %+v", a)
	}
	if applied := f.statusApplies(); len(applied) != 0 {
		t.Errorf("repairing drift rewrote an unchanged status: %+v", applied)
	}
}

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

func TestInterfaceNotOursIsReported(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	f.backend.Occupy("team/web")
	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("sync succeeded over a foreign interface")
	}
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].Ready || applied[0].Reason != netbackend.ReasonNotOurs {
		t.Fatalf("status with a foreign interface: %+v", applied)
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

// TestFinalizerProtectsNetworksInUse: the controller puts samplecrd.k8s.io/network-protection on
// a Network before its configuration exists, reports the pods attached on the node in its
// status entry, and while a Network being deleted has pods attached keeps the bridge and
// configuration (so the runtime can still DEL them) and the finalizer; once none are attached
// on any node it removes the finalizer.
func TestFinalizerProtectsNetworksInUse(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	n := f.refresh("web")
	if !slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("finalizers %v, want %s", n.Finalizers, nodestatus.ProtectionFinalizer)
	}

	// Two pods attach: the node's entry counts them.
	f.backend.SetPorts("team/web", "veth1", "veth2")
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].Attachments != 2 || !applied[0].Ready {
		t.Fatalf("status with two pods attached: %+v", applied)
	}

	// Deleted with pods attached: kept, bridge and configuration too, and the status says why.
	n = f.refresh("web")
	now := metav1.Now()
	n.DeletionTimestamp = &now
	if err := f.indexer.Update(n); err != nil {
		t.Fatal(err)
	}
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync of a Network being deleted with pods attached: %s, %v", result, err)
	}
	if a := f.backend.Get("team/web"); a == nil || a.Bridge == "" || a.CNIConfig == nil {
		t.Fatalf("the bridge or configuration went while pods are attached: %+v", a)
	}
	applied := f.statusApplies()
	if len(applied) != 1 || applied[0].Ready || applied[0].Reason != ReasonTerminating || applied[0].Attachments != 2 {
		t.Fatalf("status while deletion waits: %+v", applied)
	}
	if n := f.refresh("web"); !slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("finalizer removed with pods attached: %v", n.Finalizers)
	}

	// Another node still has a pod: this node's pods leave, the finalizer stays.
	n = f.refresh("web")
	n.Status.Nodes = append(n.Status.Nodes, v1.NetworkNodeStatus{NodeName: "node-b", Ready: true, Attachments: 1})
	if _, err := f.client.SamplecrdV1().Networks("team").UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n = f.refresh("web")
	n.DeletionTimestamp = &now
	_ = f.indexer.Update(n)
	f.backend.SetPorts("team/web")
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync with pods on another node: %s, %v", result, err)
	}
	if n := f.refresh("web"); !slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("finalizer removed while node-b reports a pod: %v", n.Finalizers)
	}

	// node-b's pod leaves too: released.
	n = f.refresh("web")
	for i := range n.Status.Nodes {
		if n.Status.Nodes[i].NodeName == "node-b" {
			n.Status.Nodes[i].Attachments = 0
		}
	}
	if _, err := f.client.SamplecrdV1().Networks("team").UpdateStatus(context.Background(), n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	n = f.refresh("web")
	n.DeletionTimestamp = &now
	_ = f.indexer.Update(n)
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync with no pods anywhere: %s, %v", result, err)
	}
	if n := f.refresh("web"); slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("finalizer kept with no pods attached anywhere: %v", n.Finalizers)
	}
}

// adoptingBackend is the fake backend reporting the change the linux backend makes when it
// adopts a bridge the CNI plugin made.
type adoptingBackend struct {
	*fakebackend.Backend
	adopted bool
}

func (b *adoptingBackend) Ensure(ctx context.Context, d netbackend.Desired) ([]string, netbackend.Outcome, error) {
	changes, outcome, err := b.Backend.Ensure(ctx, d)
	if !b.adopted {
		b.adopted = true
		changes = append([]string{netbackend.AdoptedPrefix + netbackend.BridgeName(d.Key) + ": marked"}, changes...)
	}
	return changes, outcome, err
}

func TestAdoptionIsAnEvent(t *testing.T) {
	n := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	client := fake.NewClientset(n)
	informer := externalversions.NewSharedInformerFactory(client, 0).Samplecrd().V1().Networks()
	if err := informer.Informer().GetIndexer().Add(n); err != nil {
		t.Fatal(err)
	}
	recorder := record.NewFakeRecorder(10)
	c, err := New(client, informer, &adoptingBackend{Backend: fakebackend.NewBackend()}, Options{NodeName: "node-a", Recorder: recorder})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.queue.ShutDown)
	if _, err := c.syncHandler(context.Background(), "team/web"); err != nil {
		t.Fatal(err)
	}
	select {
	case e := <-recorder.Events:
		if !strings.HasPrefix(e, "Normal "+EventAdopted+" ") {
			t.Fatalf("event %q, want a Normal %s event", e, EventAdopted)
		}
	default:
		t.Fatal("no event recorded")
	}
}

func TestIPMasqAnnotation(t *testing.T) {
	n := network("web", "10.1.0.0/24", "10.1.0.1", 1)
	if d, err := desiredOf("team/web", n); err != nil || d.IPMasq {
		t.Fatalf("without the annotation: %+v, %v; want ipMasq off", d, err)
	}
	n.Annotations = map[string]string{IPMasqAnnotation: "true"}
	if d, err := desiredOf("team/web", n); err != nil || !d.IPMasq {
		t.Fatalf("with %s=true: %+v, %v; want ipMasq on", IPMasqAnnotation, d, err)
	}
}

// TestUnreadableNodeKeepsTheFinalizer: a node that cannot tell whether pods are attached does not
// release a Network being deleted.
func TestUnreadableNodeKeepsTheFinalizer(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	n := f.refresh("web")
	now := metav1.Now()
	n.DeletionTimestamp = &now
	if err := f.indexer.Update(n); err != nil {
		t.Fatal(err)
	}
	f.backend.SetFailure("team/web", errors.New("netlink: no buffer space"))
	if _, err := f.sync("team/web"); err == nil {
		t.Fatal("sync succeeded although the node could not be read")
	}
	if n := f.refresh("web"); !slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("finalizer removed without knowing the node's attachments: %v", n.Finalizers)
	}
}

// TestReleaseWaitsForLeases: a runtime's DEL removes the pod's veth before host-local releases
// its address; a Network being deleted whose last port went but whose addresses are still leased
// waits for the leases (up to LeaseGrace), so that its removal does not race the DEL and leave
// host-local's directory behind. Past the grace, leases that never go do not hold it forever.
func TestReleaseWaitsForLeases(t *testing.T) {
	f := newFixture(t, network("web", "10.1.0.0/24", "10.1.0.1", 1))
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	f.backend.SetPorts("team/web", "veth1")
	f.backend.SetLeases("team/web", "10.1.0.2")
	n := f.refresh("web")
	now := metav1.Now()
	n.DeletionTimestamp = &now
	if err := f.indexer.Update(n); err != nil {
		t.Fatal(err)
	}
	deleting := func() {
		t.Helper()
		n := f.refresh("web")
		n.DeletionTimestamp = &now
		if err := f.indexer.Update(n); err != nil {
			t.Fatal(err)
		}
	}
	// The veth is gone, the lease not yet: kept, and the status names the lease.
	f.backend.SetPorts("team/web")
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync with a lease left: %s, %v", result, err)
	}
	if n := f.refresh("web"); !slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("released while host-local still leases 10.1.0.2: %v", n.Finalizers)
	}
	if applied := f.statusApplies(); len(applied) != 1 || applied[0].Attachments != 0 || !strings.Contains(applied[0].Message, "10.1.0.2") {
		t.Fatalf("status while the lease is held: %+v", applied)
	}
	// Rechecks while the lease is held write nothing new.
	deleting()
	if _, err := f.sync("team/web"); err != nil {
		t.Fatal(err)
	}
	if applied := f.statusApplies(); len(applied) != 0 {
		t.Fatalf("a recheck with the same lease rewrote the status: %+v", applied)
	}
	// The DEL finishes: released.
	f.backend.SetLeases("team/web")
	deleting()
	if result, err := f.sync("team/web"); err != nil || result != "terminating" {
		t.Fatalf("sync with no lease left: %s, %v", result, err)
	}
	if n := f.refresh("web"); slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("kept with no pods and no leases: %v", n.Finalizers)
	}

	// A lease that never goes (a DEL that never finished) holds the Network only for the grace.
	g := newFixture(t, network("db", "10.2.0.0/24", "10.2.0.1", 1))
	fakeClock := testingclock.NewFakePassiveClock(time.Now())
	g.controller.clock = fakeClock
	if _, err := g.sync("team/db"); err != nil {
		t.Fatal(err)
	}
	g.backend.SetLeases("team/db", "10.2.0.5")
	for i := range 2 { // the first sync waits, the second comes after the grace
		n := g.refresh("db")
		n.DeletionTimestamp = &now
		if err := g.indexer.Update(n); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			fakeClock.SetTime(fakeClock.Now().Add(g.controller.opts.LeaseGrace))
		}
		if _, err := g.sync("team/db"); err != nil {
			t.Fatal(err)
		}
	}
	if n := g.refresh("db"); slices.Contains(n.Finalizers, nodestatus.ProtectionFinalizer) {
		t.Fatalf("a lease that never goes held the Network past the grace: %v", n.Finalizers)
	}
}
