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

package storage

import (
	"context"
	"slices"
	"strconv"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// guardedStore keeps one Network and, like the generic store, refuses an update whose
// resourceVersion is not the stored one (409), and deletes a Network being deleted whose last
// finalizer an update removes. between runs before the next update is applied: another
// client's write landing between the decision and the write.
type guardedStore struct {
	stored  *samplecrd.Network
	rv      int
	updates int
	between []func(n *samplecrd.Network)
}

func (s *guardedStore) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	if s.stored == nil {
		return nil, apierrors.NewNotFound(samplecrd.Resource("networks"), name)
	}
	return s.stored.DeepCopy(), nil
}

func (s *guardedStore) write(n *samplecrd.Network) {
	s.rv++
	n.ResourceVersion = strconv.Itoa(s.rv)
	s.stored = n
}

func (s *guardedStore) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, _ rest.ValidateObjectFunc,
	_ rest.ValidateObjectUpdateFunc, _ bool, _ *metav1.UpdateOptions) (runtime.Object, bool, error) {
	s.updates++
	if len(s.between) > 0 && s.stored != nil {
		next := s.stored.DeepCopy()
		s.between[0](next)
		s.between = s.between[1:]
		s.write(next)
	}
	if s.stored == nil {
		return nil, false, apierrors.NewNotFound(samplecrd.Resource("networks"), name)
	}
	obj, err := objInfo.UpdatedObject(ctx, s.stored.DeepCopy())
	if err != nil {
		return nil, false, err
	}
	n := obj.(*samplecrd.Network)
	if n.ResourceVersion != s.stored.ResourceVersion {
		return nil, false, apierrors.NewConflict(samplecrd.Resource("networks"), name, nil)
	}
	if n.DeletionTimestamp != nil && len(n.Finalizers) == 0 {
		s.stored = nil
		return n, false, nil
	}
	s.write(n.DeepCopy())
	return s.stored.DeepCopy(), false, nil
}

func deletingNetwork(finalizers []string, attachments ...int32) *samplecrd.Network {
	now := metav1.Now()
	n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", ResourceVersion: "1",
		DeletionTimestamp: &now, Finalizers: finalizers}}
	for i, a := range attachments {
		n.Status.Nodes = append(n.Status.Nodes, samplecrd.NetworkNodeStatus{NodeName: "node-" + strconv.Itoa(i), Attachments: a})
	}
	return n
}

func TestProtectReleases(t *testing.T) {
	s := &guardedStore{}
	s.write(deletingNetwork([]string{samplecrd.ProtectionFinalizer}, 0, 0))
	out, err := protect(context.Background(), s, s.stored.DeepCopy())
	if err != nil || !released(out) || s.stored != nil {
		t.Fatalf("released: %v, %+v; stored %+v", err, out, s.stored)
	}

	// Another finalizer holds it on: ours goes, the Network stays.
	s = &guardedStore{}
	s.write(deletingNetwork([]string{"example.com/other", samplecrd.ProtectionFinalizer}))
	out, err = protect(context.Background(), s, s.stored.DeepCopy())
	if err != nil || released(out) || s.stored == nil || !slices.Equal(s.stored.Finalizers, []string{"example.com/other"}) {
		t.Fatalf("with another finalizer: %v, %+v; stored %+v", err, out, s.stored)
	}
}

func TestProtectKeepsWhatIsAttached(t *testing.T) {
	s := &guardedStore{}
	s.write(deletingNetwork([]string{samplecrd.ProtectionFinalizer}, 0, 2))
	out, err := protect(context.Background(), s, s.stored.DeepCopy())
	if err != nil || released(out) || s.updates != 0 || !slices.Contains(s.stored.Finalizers, samplecrd.ProtectionFinalizer) {
		t.Fatalf("with node-1 reporting pods: %v, %d updates, stored %+v", err, s.updates, s.stored)
	}
}

// TestProtectRacesAnAttachment: the Network was decided releasable, but before the write a node
// reports a pod: the guarded write conflicts, the rule is decided again on what is stored now,
// and the finalizer stays.
func TestProtectRacesAnAttachment(t *testing.T) {
	s := &guardedStore{between: []func(*samplecrd.Network){func(n *samplecrd.Network) { n.Status.Nodes[1].Attachments = 1 }}}
	s.write(deletingNetwork([]string{samplecrd.ProtectionFinalizer}, 0, 0))
	decided := s.stored.DeepCopy()
	out, err := protect(context.Background(), s, decided)
	if err != nil {
		t.Fatal(err)
	}
	if s.stored == nil || !slices.Contains(s.stored.Finalizers, samplecrd.ProtectionFinalizer) || released(out) {
		t.Fatalf("released although node-1 reported a pod before the write: out %+v, stored %+v", out, s.stored)
	}
	if s.stored.Status.Nodes[1].Attachments != 1 || s.updates != 1 {
		t.Fatalf("stored %+v after %d updates, want the node's report kept and one (refused) update", s.stored.Status.Nodes, s.updates)
	}
}

// TestProtectRacesAnotherWrite: a write between that changes nothing the rule reads only costs a
// second decision; the release happens. Writes that never stop end in an error after
// protectionAttempts, never in a release decided on a stale Network.
func TestProtectRacesAnotherWrite(t *testing.T) {
	touch := func(n *samplecrd.Network) { n.Status.Nodes[0].Message = "still here" }
	s := &guardedStore{between: []func(*samplecrd.Network){touch}}
	s.write(deletingNetwork([]string{samplecrd.ProtectionFinalizer}, 0))
	out, err := protect(context.Background(), s, s.stored.DeepCopy())
	if err != nil || !released(out) || s.stored != nil || s.updates != 2 {
		t.Fatalf("after one racing write: %v, %+v, stored %+v, %d updates", err, out, s.stored, s.updates)
	}

	s = &guardedStore{}
	for range protectionAttempts {
		s.between = append(s.between, touch)
	}
	s.write(deletingNetwork([]string{samplecrd.ProtectionFinalizer}, 0))
	if _, err := protect(context.Background(), s, s.stored.DeepCopy()); !apierrors.IsConflict(err) || s.stored == nil {
		t.Fatalf("under writes that never stop: %v, stored %+v", err, s.stored)
	}
}

// TestProtectAddsToLiveNetworks: a live Network without the finalizer (created before the server
// added it, or stripped by hand) gets it; a gone one is no error.
func TestProtectAddsToLiveNetworks(t *testing.T) {
	s := &guardedStore{}
	s.write(&samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web"}})
	out, err := protect(context.Background(), s, s.stored.DeepCopy())
	if err != nil || !slices.Equal(out.(*samplecrd.Network).Finalizers, []string{samplecrd.ProtectionFinalizer}) ||
		!slices.Equal(s.stored.Finalizers, []string{samplecrd.ProtectionFinalizer}) {
		t.Fatalf("live Network: %v, %+v, stored %+v", err, out, s.stored)
	}

	gone := &guardedStore{}
	if _, err := protect(context.Background(), gone, deletingNetwork([]string{samplecrd.ProtectionFinalizer})); err != nil {
		t.Fatalf("a Network gone meanwhile: %v", err)
	}
}
