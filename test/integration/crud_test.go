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

package integration

import (
	"net/http"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// wantEvent is an expected watch event: its type, and the object's name and resourceVersion.
type wantEvent struct {
	typ             watch.EventType
	name            string
	resourceVersion string
	gateway         string
}

func checkEvents(t *testing.T, w watch.Interface, want []wantEvent) {
	t.Helper()
	for i, we := range want {
		ev := nextEvent(t, w)
		n, ok := ev.Object.(*v1.Network)
		if !ok {
			t.Fatalf("event %d: %s with a %T, want a *v1.Network (%#v)", i, ev.Type, ev.Object, ev.Object)
		}
		if ev.Type != we.typ || n.Name != we.name || n.ResourceVersion != we.resourceVersion || n.Spec.Gateway != we.gateway {
			t.Fatalf("event %d: got %s %s rv=%s gateway=%s, want %s %s rv=%s gateway=%s",
				i, ev.Type, n.Name, n.ResourceVersion, n.Spec.Gateway, we.typ, we.name, we.resourceVersion, we.gateway)
		}
	}
}

func TestCRUDAndWatch(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	initial, err := networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(initial.Items) != 0 || initial.ResourceVersion == "" {
		t.Fatalf("initial list: %d items, resourceVersion %q; want none and a resourceVersion", len(initial.Items), initial.ResourceVersion)
	}
	live, err := networks.Watch(ctx, metav1.ListOptions{ResourceVersion: initial.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Stop()

	// Create.
	n := newNetwork("net-a", "10.1.0.0/24", "")
	n.Labels = map[string]string{"app": "crud"}
	created, err := networks.Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created.Namespace != ns || created.UID == "" || created.ResourceVersion == "" || created.CreationTimestamp.IsZero() {
		t.Fatalf("created metadata incomplete: %+v", created.ObjectMeta)
	}
	if created.Generation != 1 || created.Spec.CIDR != "10.1.0.0/24" || created.Spec.Gateway != "10.1.0.1" {
		t.Fatalf("created generation %d spec %+v, want generation 1, cidr 10.1.0.0/24, defaulted gateway 10.1.0.1", created.Generation, created.Spec)
	}

	// Get.
	got, err := networks.Get(ctx, "net-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(got, created) {
		t.Fatalf("get differs from create:\nget:    %+v\ncreate: %+v", got, created)
	}

	// List.
	list, err := networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || !apiequality.Semantic.DeepEqual(&list.Items[0], created) {
		t.Fatalf("list = %v, want exactly the created network", networkNames(list.Items))
	}

	// Update.
	update := got.DeepCopy()
	update.Spec.Gateway = "10.1.0.254"
	updated, err := networks.Update(ctx, update, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if updated.Spec.Gateway != "10.1.0.254" || updated.Generation != 2 || updated.ResourceVersion == created.ResourceVersion {
		t.Fatalf("updated gateway %s generation %d rv %s; want 10.1.0.254, 2 and a new rv", updated.Spec.Gateway, updated.Generation, updated.ResourceVersion)
	}

	// Update with the stale resourceVersion of the first get: 409 Conflict, nothing changes.
	stale := got.DeepCopy()
	stale.Spec.Gateway = "10.1.0.100"
	_, err = networks.Update(ctx, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("update with a stale resourceVersion: got %v, want a conflict", err)
	}
	if code := err.(apierrors.APIStatus).Status().Code; code != http.StatusConflict {
		t.Fatalf("stale update returned code %d, want 409", code)
	}
	afterStale, err := networks.Get(ctx, "net-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if afterStale.ResourceVersion != updated.ResourceVersion || afterStale.Spec.Gateway != "10.1.0.254" {
		t.Fatalf("the stale update changed the network: rv %s gateway %s", afterStale.ResourceVersion, afterStale.Spec.Gateway)
	}

	// Delete.
	if err := networks.Delete(ctx, "net-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := networks.Get(ctx, "net-a", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after delete: %v, want NotFound", err)
	}
	if err := networks.Delete(ctx, "net-a", metav1.DeleteOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("second delete: %v, want NotFound", err)
	}

	want := []wantEvent{
		{watch.Added, "net-a", created.ResourceVersion, "10.1.0.1"},
		{watch.Modified, "net-a", updated.ResourceVersion, "10.1.0.254"},
		{watch.Deleted, "net-a", "", "10.1.0.254"},
	}
	// The live watch saw the three writes in order. A delete event carries the resourceVersion
	// of the deletion, which the client never saw: take it from the event and check it is newer.
	deletedRV := ""
	for i, we := range want {
		ev := nextEvent(t, live)
		n, ok := ev.Object.(*v1.Network)
		if !ok {
			t.Fatalf("live event %d: %s with %T", i, ev.Type, ev.Object)
		}
		if we.typ == watch.Deleted {
			deletedRV = n.ResourceVersion
			we.resourceVersion = n.ResourceVersion
		}
		if ev.Type != we.typ || n.Name != we.name || n.ResourceVersion != we.resourceVersion || n.Spec.Gateway != we.gateway {
			t.Fatalf("live event %d: got %s %s rv=%s gateway=%s, want %+v", i, ev.Type, n.Name, n.ResourceVersion, n.Spec.Gateway, we)
		}
	}
	if deletedRV == "" || deletedRV == updated.ResourceVersion {
		t.Fatalf("delete event resourceVersion %q, want a new one", deletedRV)
	}
	want[2].resourceVersion = deletedRV

	// A watch started afterwards from the initial list's resourceVersion replays the same events
	// in the same order.
	replay, err := networks.Watch(ctx, metav1.ListOptions{ResourceVersion: initial.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Stop()
	checkEvents(t, replay, want)

	// From the update's resourceVersion only the delete remains.
	fromUpdate, err := networks.Watch(ctx, metav1.ListOptions{ResourceVersion: updated.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer fromUpdate.Stop()
	checkEvents(t, fromUpdate, want[2:])
}

func TestDeleteWithStalePreconditionConflicts(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	created, err := networks.Create(ctx, newNetwork("net-pre", "10.1.1.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	upd := created.DeepCopy()
	upd.Labels = map[string]string{"changed": "yes"}
	if _, err := networks.Update(ctx, upd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	staleRV := created.ResourceVersion
	err = networks.Delete(ctx, "net-pre", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &staleRV}})
	if !apierrors.IsConflict(err) {
		t.Fatalf("delete with a stale resourceVersion precondition: %v, want a conflict", err)
	}
	if _, err := networks.Get(ctx, "net-pre", metav1.GetOptions{}); err != nil {
		t.Fatalf("the network is gone after a refused delete: %v", err)
	}
	uid := created.UID
	if err := networks.Delete(ctx, "net-pre", metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}); err != nil {
		t.Fatalf("delete with the right uid precondition: %v", err)
	}
}
