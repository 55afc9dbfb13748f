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

package release

import (
	"context"
	"net/netip"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// TestEtcdStoreCandidates: candidates from cached objects carry the objects' ModRevisions and
// keys, the node's entry, and block keys as the claims wrote them; objects of a gone or replaced
// Network are left out.
func TestEtcdStoreCandidates(t *testing.T) {
	obj := func(network, node, uid, rv string, blocks ...string) *samplecrd.BlockAllocation {
		b := &samplecrd.BlockAllocation{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: network + "." + node, ResourceVersion: rv},
			Network: network, NetworkUID: uid, NodeName: node}
		for _, c := range blocks {
			b.Blocks = append(b.Blocks, samplecrd.Block{CIDR: c})
		}
		return b
	}
	web := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team", Name: "web", UID: types.UID("uid-web"), ResourceVersion: "40"},
		Status: samplecrd.NetworkStatus{Nodes: []samplecrd.NetworkNodeStatus{{NodeName: "n1"}}}}
	s := &EtcdStore{NetworkKeys: "/r/networks/", ObjectKeys: "/r/blockallocations/",
		List: func(context.Context) ([]*samplecrd.BlockAllocation, error) {
			return []*samplecrd.BlockAllocation{
				obj("web", "n1", "uid-web", "31", "10.0.0.16/28", "10.0.0.32/28"),
				obj("web", "n2", "uid-web", "32", "10.0.0.48/28"),
				obj("web", "n3", "uid-old", "12", "10.0.0.64/28"), // an earlier web's
				obj("gone", "n1", "uid-gone", "13", "10.9.0.16/28"),
			}, nil
		},
		Network: func(_ context.Context, ns, name string) (*samplecrd.Network, error) {
			if ns == "team" && name == "web" {
				return web, nil
			}
			return nil, apierrors.NewNotFound(samplecrd.Resource("networks"), name)
		}}
	got, err := s.Candidates(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 {
		t.Fatalf("candidates %+v, want web's n1 and n2", got)
	}
	n1, n2 := got[0], got[1]
	if n1.Node != "n1" || n1.Entry == nil || n1.ObjectKey != "/r/blockallocations/team/web.n1" || n1.ObjectRevision != 31 ||
		n1.NetworkKey != "/r/networks/team/web" || n1.NetworkRevision != 40 || len(n1.Blocks) != 2 {
		t.Errorf("n1: %+v", n1)
	}
	want := allocator.Allocation{Scope: "uid-web", Prefix: netip.MustParsePrefix("10.0.0.48/28"),
		Owner: allocator.Owner{Namespace: "team", Name: "web", UID: "uid-web"}, Node: "n2", Role: allocator.RoleBlock}
	if n2.Node != "n2" || n2.Entry != nil || n2.ObjectRevision != 32 || len(n2.Blocks) != 1 || allocator.Value(n2.Blocks[0]) != allocator.Value(want) {
		t.Errorf("n2: %+v", n2)
	}
}
