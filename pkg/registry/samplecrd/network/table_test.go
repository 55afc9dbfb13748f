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
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func tableNetwork(name, cidr, gateway string, conditions ...metav1.Condition) samplecrd.Network {
	return samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "default", ResourceVersion: "17",
			// Three hours ago prints as "3h" for as long as the test can possibly take.
			CreationTimestamp: metav1.NewTime(time.Now().Add(-3 * time.Hour)),
		},
		Spec:   samplecrd.NetworkSpec{CIDR: cidr, Gateway: gateway},
		Status: samplecrd.NetworkStatus{ObservedGeneration: 2, Conditions: conditions},
	}
}

func TestTableColumns(t *testing.T) {
	table, err := TableConvertor{}.ConvertToTable(context.Background(), &samplecrd.NetworkList{}, nil)
	if err != nil {
		t.Fatalf("ConvertToTable: %v", err)
	}
	type col struct {
		name, typ string
		priority  int32
	}
	want := []col{
		{"Name", "string", 0}, {"CIDR", "string", 0}, {"Gateway", "string", 0}, {"Ready", "string", 0},
		{"Used", "string", 0}, {"Available", "string", 0},
		{"Age", "string", 0}, {"Reason", "string", 1}, {"Observed", "integer", 1},
		{"Total", "string", 1}, {"Allocated", "string", 1},
	}
	var got []col
	for _, c := range table.ColumnDefinitions {
		got = append(got, col{c.Name, c.Type, c.Priority})
		if c.Description == "" {
			t.Errorf("column %s has no description", c.Name)
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("columns = %v, want %v", got, want)
	}
	if table.ColumnDefinitions[0].Format != "name" {
		t.Errorf("Name column format = %q, want name", table.ColumnDefinitions[0].Format)
	}
	if len(table.Rows) != 0 {
		t.Errorf("empty list gave %d rows", len(table.Rows))
	}
}

func TestTableRowsForNetwork(t *testing.T) {
	tests := []struct {
		name       string
		conditions []metav1.Condition
		want       []interface{}
	}{
		{
			name:       "ready",
			conditions: []metav1.Condition{readyCondition(metav1.ConditionTrue, "Realised")},
			want:       []interface{}{"net1", "10.0.0.0/24", "10.0.0.1", "True", "<unknown>", "<unknown>", "3h", "Realised", int64(2), "<unknown>", "<unknown>"},
		},
		{
			name:       "not ready",
			conditions: []metav1.Condition{readyCondition(metav1.ConditionFalse, "BridgeMissing")},
			want:       []interface{}{"net1", "10.0.0.0/24", "10.0.0.1", "False", "<unknown>", "<unknown>", "3h", "BridgeMissing", int64(2), "<unknown>", "<unknown>"},
		},
		{
			name:       "no conditions",
			conditions: nil,
			want:       []interface{}{"net1", "10.0.0.0/24", "10.0.0.1", "Unknown", "<unknown>", "<unknown>", "3h", "", int64(2), "<unknown>", "<unknown>"},
		},
		{
			name: "Ready found among other conditions",
			conditions: []metav1.Condition{
				{Type: "Progressing", Status: metav1.ConditionTrue, Reason: "Applying"},
				readyCondition(metav1.ConditionUnknown, "NodeUnreachable"),
			},
			want: []interface{}{"net1", "10.0.0.0/24", "10.0.0.1", "Unknown", "<unknown>", "<unknown>", "3h", "NodeUnreachable", int64(2), "<unknown>", "<unknown>"},
		},
		{
			name:       "only other conditions",
			conditions: []metav1.Condition{{Type: "Progressing", Status: metav1.ConditionTrue, Reason: "Applying"}},
			want:       []interface{}{"net1", "10.0.0.0/24", "10.0.0.1", "Unknown", "<unknown>", "<unknown>", "3h", "", int64(2), "<unknown>", "<unknown>"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n := tableNetwork("net1", "10.0.0.0/24", "10.0.0.1", tc.conditions...)
			table, err := TableConvertor{}.ConvertToTable(context.Background(), &n, &metav1.TableOptions{})
			if err != nil {
				t.Fatalf("ConvertToTable: %v", err)
			}
			if len(table.ColumnDefinitions) != len(columns) {
				t.Errorf("%d column definitions, want %d", len(table.ColumnDefinitions), len(columns))
			}
			if table.ResourceVersion != "17" {
				t.Errorf("table resourceVersion = %q, want 17", table.ResourceVersion)
			}
			if len(table.Rows) != 1 {
				t.Fatalf("%d rows, want 1", len(table.Rows))
			}
			if !reflect.DeepEqual(table.Rows[0].Cells, tc.want) {
				t.Errorf("cells = %#v, want %#v", table.Rows[0].Cells, tc.want)
			}
			if table.Rows[0].Object.Object != &n {
				t.Errorf("row object = %v, want the Network itself", table.Rows[0].Object.Object)
			}
		})
	}
}

func TestTableAgeUnknownWithoutCreationTimestamp(t *testing.T) {
	n := tableNetwork("net1", "10.0.0.0/24", "10.0.0.1")
	n.CreationTimestamp = metav1.Time{}
	table, err := TableConvertor{}.ConvertToTable(context.Background(), &n, nil)
	if err != nil {
		t.Fatalf("ConvertToTable: %v", err)
	}
	if got := table.Rows[0].Cells[6]; got != "<unknown>" {
		t.Errorf("age = %v, want <unknown>", got)
	}
}

func TestTableRowsForNetworkList(t *testing.T) {
	list := &samplecrd.NetworkList{
		ListMeta: metav1.ListMeta{ResourceVersion: "42", Continue: "next-page", RemainingItemCount: ptr.To[int64](5)},
		Items: []samplecrd.Network{
			tableNetwork("blue", "10.0.0.0/24", "10.0.0.1", readyCondition(metav1.ConditionTrue, "Realised")),
			tableNetwork("green", "fd00:1::/64", "fd00:1::1"),
		},
	}
	table, err := TableConvertor{}.ConvertToTable(context.Background(), list, &metav1.TableOptions{})
	if err != nil {
		t.Fatalf("ConvertToTable: %v", err)
	}
	if table.ResourceVersion != "42" || table.Continue != "next-page" {
		t.Errorf("table list meta = %q/%q, want 42/next-page", table.ResourceVersion, table.Continue)
	}
	if table.RemainingItemCount == nil || *table.RemainingItemCount != 5 {
		t.Errorf("remainingItemCount = %v, want 5", table.RemainingItemCount)
	}
	want := [][]interface{}{
		{"blue", "10.0.0.0/24", "10.0.0.1", "True", "<unknown>", "<unknown>", "3h", "Realised", int64(2), "<unknown>", "<unknown>"},
		{"green", "fd00:1::/64", "fd00:1::1", "Unknown", "<unknown>", "<unknown>", "3h", "", int64(2), "<unknown>", "<unknown>"},
	}
	if len(table.Rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(table.Rows), len(want))
	}
	for i, row := range table.Rows {
		if !reflect.DeepEqual(row.Cells, want[i]) {
			t.Errorf("row %d cells = %#v, want %#v", i, row.Cells, want[i])
		}
		if row.Object.Object != &list.Items[i] {
			t.Errorf("row %d object is not item %d", i, i)
		}
	}
}

func TestTableNoHeaders(t *testing.T) {
	n := tableNetwork("net1", "10.0.0.0/24", "10.0.0.1")
	for name, opts := range map[string]runtime.Object{
		"nil options":        nil,
		"headers":            &metav1.TableOptions{NoHeaders: false},
		"no headers":         &metav1.TableOptions{NoHeaders: true},
		"not a TableOptions": &metav1.GetOptions{},
	} {
		t.Run(name, func(t *testing.T) {
			table, err := TableConvertor{}.ConvertToTable(context.Background(), &n, opts)
			if err != nil {
				t.Fatalf("ConvertToTable: %v", err)
			}
			wantHeaders := name != "no headers"
			if got := len(table.ColumnDefinitions) > 0; got != wantHeaders {
				t.Errorf("headers present = %v, want %v", got, wantHeaders)
			}
			if len(table.Rows) != 1 || len(table.Rows[0].Cells) != len(columns) {
				t.Errorf("rows = %v, want one row of %d cells", table.Rows, len(columns))
			}
		})
	}
}

func TestTableRejectsOtherObjects(t *testing.T) {
	_, err := TableConvertor{}.ConvertToTable(context.Background(), &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, nil)
	if err == nil {
		t.Error("ConvertToTable(PartialObjectMetadata) succeeded, want an error")
	}
}

func TestTableCapacityColumns(t *testing.T) {
	n := tableNetwork("v6", "fd00:1::/64", "fd00:1::1")
	n.Status.Capacity = &samplecrd.NetworkCapacity{Total: "18446744073709551614", Allocated: "512", Used: "3", Available: "18446744073709551611"}
	table, err := TableConvertor{}.ConvertToTable(context.Background(), &n, nil)
	if err != nil {
		t.Fatalf("ConvertToTable: %v", err)
	}
	want := []interface{}{"v6", "fd00:1::/64", "fd00:1::1", "Unknown", "3", "18446744073709551611", "3h", "", int64(2), "18446744073709551614", "512"}
	if !reflect.DeepEqual(table.Rows[0].Cells, want) {
		t.Errorf("cells = %#v, want %#v", table.Rows[0].Cells, want)
	}
	// Used unknown (a node without leases): USED and AVAILABLE say so, TOTAL and ALLOCATED stay.
	n.Status.Capacity = &samplecrd.NetworkCapacity{Total: "253", Allocated: "64", NodesWithoutLeases: 1}
	table, err = TableConvertor{}.ConvertToTable(context.Background(), &n, nil)
	if err != nil {
		t.Fatalf("ConvertToTable: %v", err)
	}
	want = []interface{}{"v6", "fd00:1::/64", "fd00:1::1", "Unknown", "<unknown>", "<unknown>", "3h", "", int64(2), "253", "64"}
	if !reflect.DeepEqual(table.Rows[0].Cells, want) {
		t.Errorf("cells = %#v, want %#v", table.Rows[0].Cells, want)
	}
}
