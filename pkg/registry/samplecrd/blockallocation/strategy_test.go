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
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func TestName(t *testing.T) {
	if got := Name("backend", "node1"); got != "backend.node1" {
		t.Errorf("Name = %s", got)
	}
	long := strings.Repeat("n", 250)
	got := Name("backend", long)
	if len(got) != len("backend.")+16 || !strings.HasPrefix(got, NamePrefix("backend")) || NetworkOf(got) != "backend" {
		t.Errorf("Name of a long node = %s", got)
	}
	if Name("backend", long) != got || Name("backend", long+"x") == got {
		t.Errorf("hashed names must be stable and distinct")
	}
}

func TestSelectableFieldsAndTable(t *testing.T) {
	b := &samplecrd.BlockAllocation{
		ObjectMeta: metav1.ObjectMeta{Name: "backend.node1", Namespace: "team-a", CreationTimestamp: metav1.NewTime(time.Now().Add(-4 * time.Minute))},
		Network:    "backend", NetworkUID: "u1", NodeName: "node1",
		Blocks: []samplecrd.Block{{CIDR: "10.66.0.64/26", Origin: samplecrd.BlockOriginClaimed}, {CIDR: "10.66.0.128/27", Origin: samplecrd.BlockOriginClaimed}},
	}
	sel := fields.ParseSelectorOrDie("nodeName=node1,network=backend")
	match := Match(labels.Everything(), sel)
	if ok, err := match.Matches(b); !ok || err != nil {
		t.Errorf("selector %s does not match: %v", sel, err)
	}
	other := Match(labels.Everything(), fields.ParseSelectorOrDie("nodeName=node2"))
	if ok, _ := other.Matches(b); ok {
		t.Errorf("nodeName=node2 matches node1's allocation")
	}
	table, err := TableConvertor{}.ConvertToTable(context.Background(), b, nil)
	if err != nil {
		t.Fatal(err)
	}
	row := table.Rows[0].Cells
	if row[0] != "backend.node1" || row[1] != "backend" || row[2] != "node1" || row[3] != "10.66.0.64/26,10.66.0.128/27" || row[4] != "4m" ||
		row[5] != "Claimed,Claimed" || row[6] != "u1" {
		t.Errorf("row %v", row)
	}
}
