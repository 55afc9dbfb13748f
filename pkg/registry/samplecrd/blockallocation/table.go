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

package blockallocation

import (
	"context"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/table"
)

// TableConvertor prints BlockAllocations for `kubectl get blk`: NAME, NETWORK, NODE, BLOCKS, AGE,
// and with -o wide each block's origin and the Network's UID.
type TableConvertor struct{}

var _ rest.TableConvertor = TableConvertor{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the BlockAllocation (<network>.<node>)."},
	{Name: "Network", Type: "string", Description: "The Network the blocks belong to."},
	{Name: "Node", Type: "string", Description: "The node holding the blocks."},
	{Name: "Blocks", Type: "string", Description: "The node's blocks, comma-separated."},
	{Name: "Age", Type: "string", Description: "Time since the node's first claim."},
	{Name: "Origin", Type: "string", Priority: 1, Description: "Why each block was given (Claimed or CoversLeases)."},
	{Name: "Network-UID", Type: "string", Priority: 1, Description: "UID of the Network."},
}

// ConvertToTable prints one BlockAllocation or a list of them.
func (TableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return convertor.ConvertToTable(ctx, obj, tableOptions)
}

var convertor = table.Convertor[*samplecrd.BlockAllocation]{Kind: "BlockAllocation", Columns: columns, Row: func(b *samplecrd.BlockAllocation, name, age string) []interface{} {
	cidrs := make([]string, len(b.Blocks))
	origins := make([]string, len(b.Blocks))
	for i, block := range b.Blocks {
		cidrs[i], origins[i] = block.CIDR, block.Origin
	}
	return []interface{}{name, b.Network, b.NodeName, strings.Join(cidrs, ","), age, strings.Join(origins, ","), b.NetworkUID}
}}
