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

// Package table builds the Tables `kubectl get` prints for this group's resources: the header, the
// list metadata (resourceVersion, continue, remaining count) and one row per object, from a
// resource's own columns and row function.
package table

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metatable "k8s.io/apimachinery/pkg/api/meta/table"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"
)

// Convertor prints objects of type T with Columns; Row gives an object's cells in the order of
// Columns, from the object and its name and age as kubectl shows them.
type Convertor[T runtime.Object] struct {
	Kind    string
	Columns []metav1.TableColumnDefinition
	Row     func(obj T, name, age string) []interface{}
}

var _ rest.TableConvertor = Convertor[runtime.Object]{}

// ConvertToTable prints one object or a list of them.
func (c Convertor[T]) ConvertToTable(_ context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	table := &metav1.Table{}
	if opts, ok := tableOptions.(*metav1.TableOptions); !ok || !opts.NoHeaders {
		table.ColumnDefinitions = c.Columns
	}
	if m, err := meta.ListAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
		table.Continue = m.GetContinue()
		table.RemainingItemCount = m.GetRemainingItemCount()
	} else if m, err := meta.CommonAccessor(obj); err == nil {
		table.ResourceVersion = m.GetResourceVersion()
	}
	rows, err := metatable.MetaToTableRow(obj, func(obj runtime.Object, _ metav1.Object, name, age string) ([]interface{}, error) {
		o, ok := obj.(T)
		if !ok {
			return nil, fmt.Errorf("not a %s: %T", c.Kind, obj)
		}
		return c.Row(o, name, age), nil
	})
	table.Rows = rows
	return table, err
}
