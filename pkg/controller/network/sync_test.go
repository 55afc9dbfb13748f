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
	"net/netip"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/fake"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	fakebackend "github.com/samplecrd/network-apiserver/pkg/netbackend/fake"
)

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
