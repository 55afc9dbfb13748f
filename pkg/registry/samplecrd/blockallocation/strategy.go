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

// Package blockallocation holds the rules of BlockAllocations: one object per Network and node
// listing the node's address blocks, written by the server alone (networks/blockclaims), read
// by everyone. Its storage package serves it read-only and writes it in claim transactions.
package blockallocation

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// Name is the name of the BlockAllocation of network on node (samplecrd.BlockAllocationName).
func Name(network, node string) string { return samplecrd.BlockAllocationName(network, node) }

// NamePrefix is the prefix of the names of every BlockAllocation of network (and of no other
// Network: Network names hold no dot).
func NamePrefix(network string) string { return network + "." }

// NetworkOf is the Network part of a BlockAllocation name.
func NetworkOf(name string) string {
	network, _, _ := strings.Cut(name, ".")
	return network
}

// Strategy is what the generic store needs to be built: BlockAllocations are never created,
// updated or deleted through it (the REST serves reads only), so its write rules refuse all.
type Strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the BlockAllocation strategy.
func NewStrategy(typer runtime.ObjectTyper) Strategy {
	return Strategy{typer, names.SimpleNameGenerator}
}

func (Strategy) NamespaceScoped() bool                                     { return true }
func (Strategy) PrepareForCreate(context.Context, runtime.Object)          {}
func (Strategy) WarningsOnCreate(context.Context, runtime.Object) []string { return nil }
func (Strategy) Canonicalize(runtime.Object)                               {}

func (Strategy) Validate(context.Context, runtime.Object) field.ErrorList {
	return field.ErrorList{field.Forbidden(field.NewPath(""), "BlockAllocations are written by the server only")}
}

// GetAttrs returns the labels and the selectable fields of a BlockAllocation.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	b, ok := obj.(*samplecrd.BlockAllocation)
	if !ok {
		return nil, nil, fmt.Errorf("not a BlockAllocation: %T", obj)
	}
	return b.Labels, SelectableFields(b), nil
}

// SelectableFields are the fields a field selector can match: name, namespace, network and
// nodeName (an agent watches its own: --field-selector nodeName=node1).
func SelectableFields(b *samplecrd.BlockAllocation) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{"network": b.Network, "nodeName": b.NodeName}, &b.ObjectMeta, true)
}

// Match returns the storage predicate for a label and field selector.
func Match(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: GetAttrs}
}
