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
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// TestBlocksChecker: an entry may list only blocks its node's BlockAllocation (of this Network
// incarnation) holds; entries whose blocks did not change are not read.
func TestBlocksChecker(t *testing.T) {
	old := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "net", UID: "u1"},
		Status: samplecrd.NetworkStatus{Nodes: []samplecrd.NetworkNodeStatus{{NodeName: "n2", Blocks: []string{"10.0.0.0/28"}}}}}
	held := map[string]*samplecrd.BlockAllocation{
		"n1": {NetworkUID: "u1", NodeName: "n1", Blocks: []samplecrd.Block{{CIDR: "10.0.0.64/26"}}},
		"n3": {NetworkUID: "old-uid", NodeName: "n3", Blocks: []samplecrd.Block{{CIDR: "10.0.0.128/26"}}},
	}
	var read []string
	lookup := func(_ context.Context, ns, network, node string) (*samplecrd.BlockAllocation, error) {
		if ns != "ns" || network != "net" {
			t.Errorf("read %s/%s", ns, network)
		}
		read = append(read, node)
		return held[node], nil
	}
	for _, tc := range []struct {
		name  string
		nodes []samplecrd.NetworkNodeStatus
		want  string // "" for no error
		reads int
	}{
		{"held", []samplecrd.NetworkNodeStatus{{NodeName: "n1", Blocks: []string{"10.0.0.64/26"}}}, "", 1},
		{"unchanged entry is not read", []samplecrd.NetworkNodeStatus{{NodeName: "n2", Blocks: []string{"10.0.0.0/28"}}}, "", 0},
		{"no blocks", []samplecrd.NetworkNodeStatus{{NodeName: "n4"}}, "", 0},
		{"another node's", []samplecrd.NetworkNodeStatus{{NodeName: "n1", Blocks: []string{"10.0.0.64/26", "10.0.0.0/28"}}},
			"status.nodes[0].blocks[1]: Invalid value: \"10.0.0.0/28\": is not a block of node n1 (its BlockAllocation holds [10.0.0.64/26])", 1},
		{"no allocation", []samplecrd.NetworkNodeStatus{{NodeName: "n4", Blocks: []string{"10.0.0.64/26"}}}, "is not a block of node n4", 1},
		{"earlier incarnation", []samplecrd.NetworkNodeStatus{{NodeName: "n3", Blocks: []string{"10.0.0.128/26"}}}, "is not a block of node n3", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read = nil
			n := old.DeepCopy()
			n.Status.Nodes = tc.nodes
			c := blocksChecker{UpdatedObjectInfo: rest.DefaultUpdatedObjectInfo(n), nodeBlocks: lookup}
			_, err := c.UpdatedObject(context.Background(), runtime.Object(old))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want a 422 containing %q", err, tc.want)
			}
			if len(read) != tc.reads {
				t.Errorf("read %v, want %d reads", read, tc.reads)
			}
		})
	}
}
