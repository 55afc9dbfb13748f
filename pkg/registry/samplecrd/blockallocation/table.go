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
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metatable "k8s.io/apimachinery/pkg/api/meta/table"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
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

func (TableConvertor) ConvertToTable(_ context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = columns
	}
	if m, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
		table.Continue = m.GetContinue()
		table.RemainingItemCount = m.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	rows, err := metatable.MetaToTableRow(obj, func(obj runtime.Object, m metav1.Object, name, age string) ([]interface{}, error) {
		b, ok := obj.(*samplecrd.BlockAllocation)
		if !ok {
			return nil, fmt.Errorf("not a BlockAllocation: %T", obj)
		}
		cidrs := make([]string, len(b.Blocks))
		origins := make([]string, len(b.Blocks))
		for i, block := range b.Blocks {
			cidrs[i], origins[i] = block.CIDR, block.Origin
		}
		return []interface{}{name, b.Network, b.NodeName, strings.Join(cidrs, ","), age, strings.Join(origins, ","), b.NetworkUID}, nil
	})
	table.Rows = rows
	return table, err
}
