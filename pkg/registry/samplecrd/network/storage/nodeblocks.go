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
	"fmt"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// NodeBlocksFunc reads the BlockAllocation of node for the Network namespace/network, nil when
// there is none.
type NodeBlocksFunc func(ctx context.Context, namespace, network, node string) (*samplecrd.BlockAllocation, error)

// blocksChecker refuses a status write whose node entry lists a block that the node's
// BlockAllocation does not hold: status.nodes[].blocks is the node's realised subset of its
// blocks, so an entry cannot claim a block either. Only entries whose blocks changed are read.
type blocksChecker struct {
	rest.UpdatedObjectInfo
	nodeBlocks NodeBlocksFunc
}

func (c blocksChecker) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	obj, err := c.UpdatedObjectInfo.UpdatedObject(ctx, oldObj)
	if err != nil {
		return obj, err
	}
	n, ok := obj.(*samplecrd.Network)
	old, isNetwork := oldObj.(*samplecrd.Network)
	if !ok || !isNetwork {
		return obj, nil
	}
	before := make(map[string][]string, len(old.Status.Nodes))
	for _, e := range old.Status.Nodes {
		before[e.NodeName] = e.Blocks
	}
	var errs field.ErrorList
	for i, e := range n.Status.Nodes {
		if len(e.Blocks) == 0 || slices.Equal(e.Blocks, before[e.NodeName]) {
			continue
		}
		b, err := c.nodeBlocks(ctx, old.Namespace, old.Name, e.NodeName)
		if err != nil {
			return nil, err
		}
		held := map[string]bool{}
		if b != nil && b.NetworkUID == string(old.UID) && b.NodeName == e.NodeName {
			for _, blk := range b.Blocks {
				held[blk.CIDR] = true
			}
		}
		for j, blk := range e.Blocks {
			if !held[blk] {
				heldList := make([]string, 0, len(held))
				for h := range held {
					heldList = append(heldList, h)
				}
				slices.Sort(heldList)
				errs = append(errs, field.Invalid(field.NewPath("status", "nodes").Index(i).Child("blocks").Index(j), blk,
					fmt.Sprintf("is not a block of node %s (its BlockAllocation holds [%s]); blocks are claimed through networks/%s/blockclaims",
						e.NodeName, strings.Join(heldList, ","), old.Name)))
			}
		}
	}
	if len(errs) > 0 {
		return nil, apierrors.NewInvalid(samplecrd.Kind("Network"), old.Name, errs)
	}
	return obj, nil
}
