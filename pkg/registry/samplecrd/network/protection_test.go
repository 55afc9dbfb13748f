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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func TestProtectionRule(t *testing.T) {
	const other = "example.com/other"
	now := metav1.Now()
	entry := func(node string, attachments int32) samplecrd.NetworkNodeStatus {
		return samplecrd.NetworkNodeStatus{NodeName: node, Attachments: attachments}
	}
	for _, tc := range []struct {
		name       string
		deleting   bool
		finalizers []string
		nodes      []samplecrd.NetworkNodeStatus
		change     ProtectionChange
		want       []string
	}{
		{"live, protected", false, []string{samplecrd.ProtectionFinalizer}, nil, ProtectionKept, []string{samplecrd.ProtectionFinalizer}},
		{"live, unprotected (older server, admin)", false, []string{other}, nil, ProtectionAdded, []string{other, samplecrd.ProtectionFinalizer}},
		{"live with pods", false, nil, []samplecrd.NetworkNodeStatus{entry("a", 2)}, ProtectionAdded, []string{samplecrd.ProtectionFinalizer}},
		{"deleting, no entries", true, []string{samplecrd.ProtectionFinalizer}, nil, ProtectionReleased, nil},
		{"deleting, entries report none", true, []string{other, samplecrd.ProtectionFinalizer},
			[]samplecrd.NetworkNodeStatus{entry("a", 0), entry("b", 0)}, ProtectionReleased, []string{other}},
		{"deleting, one node reports pods", true, []string{samplecrd.ProtectionFinalizer},
			[]samplecrd.NetworkNodeStatus{entry("a", 0), entry("b", 1)}, ProtectionKept, []string{samplecrd.ProtectionFinalizer}},
		{"deleting, a node still reports leases (a DEL under way)", true, []string{samplecrd.ProtectionFinalizer},
			[]samplecrd.NetworkNodeStatus{entry("a", 0), {NodeName: "b", Leases: ptr.To[int32](1)}}, ProtectionKept, []string{samplecrd.ProtectionFinalizer}},
		{"deleting, leases reported zero", true, []string{samplecrd.ProtectionFinalizer},
			[]samplecrd.NetworkNodeStatus{{NodeName: "b", Leases: ptr.To[int32](0)}}, ProtectionReleased, nil},
		{"deleting, stripped by an administrator: not put back", true, []string{other},
			[]samplecrd.NetworkNodeStatus{entry("b", 5)}, ProtectionKept, []string{other}},
	} {
		input := slices.Clone(tc.finalizers)
		n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "web", Finalizers: input}}
		n.Status.Nodes = tc.nodes
		if tc.deleting {
			n.DeletionTimestamp = &now
		}
		if got := Protection(n); got != tc.change || !slices.Equal(n.Finalizers, tc.want) {
			t.Errorf("%s: %v with finalizers %v, want %v with %v", tc.name, got, n.Finalizers, tc.change, tc.want)
		}
		if !slices.Equal(input, tc.finalizers) {
			t.Errorf("%s: changed the slice it was given in place: %v", tc.name, input)
		}
	}
}

// TestReleaseInDelete: only a delete marked WithReleaseInDelete drops the finalizer from a
// Network it is about to delete, and only when no node reports pods; it never deletes gracefully.
func TestReleaseInDelete(t *testing.T) {
	s := networkStrategy{}
	now := metav1.Now()
	for _, tc := range []struct {
		name     string
		marked   bool
		deleting bool
		attached int32
		want     []string
	}{
		{"marked, unattached", true, false, 0, []string{"example.com/other"}},
		{"not marked", false, false, 0, []string{samplecrd.ProtectionFinalizer, "example.com/other"}},
		{"marked, a node reports pods", true, false, 1, []string{samplecrd.ProtectionFinalizer, "example.com/other"}},
		{"marked, already being deleted", true, true, 0, []string{samplecrd.ProtectionFinalizer, "example.com/other"}},
	} {
		n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "web", Finalizers: []string{samplecrd.ProtectionFinalizer, "example.com/other"}}}
		n.Status.Nodes = []samplecrd.NetworkNodeStatus{{NodeName: "a", Attachments: tc.attached}}
		if tc.deleting {
			n.DeletionTimestamp = &now
		}
		ctx := context.Background()
		if tc.marked {
			ctx = WithReleaseInDelete(ctx)
		}
		if s.CheckGracefulDelete(ctx, n, &metav1.DeleteOptions{}) {
			t.Errorf("%s: graceful", tc.name)
		}
		if !slices.Equal(n.Finalizers, tc.want) {
			t.Errorf("%s: finalizers %v, want %v", tc.name, n.Finalizers, tc.want)
		}
	}
}
