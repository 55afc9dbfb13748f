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

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/table"
)

// TableConvertor prints Networks for `kubectl get`: NAME, CIDR, GATEWAY, READY, USED, AVAILABLE,
// AGE, and with -o wide the Ready reason, the observed generation and the TOTAL and ALLOCATED
// addresses. The counts are strings: exact for IPv6 prefixes, whose counts overflow the int64 of
// an "integer" column; "<unknown>" where status.capacity does not know them.
type TableConvertor struct{}

var _ rest.TableConvertor = TableConvertor{}

var columns = []metav1.TableColumnDefinition{
	{Name: "Name", Type: "string", Format: "name", Description: "Name of the Network."},
	{Name: "CIDR", Type: "string", Description: "The network prefix (spec.cidr)."},
	{Name: "Gateway", Type: "string", Description: "The gateway address (spec.gateway)."},
	{Name: "Ready", Type: "string", Description: "Status of the Ready condition: True, False or Unknown."},
	{Name: "Used", Type: "string", Description: "Addresses leased to pods (status.capacity.used)."},
	{Name: "Available", Type: "string", Description: "Addresses pods could still get: total - used (status.capacity.available)."},
	{Name: "Age", Type: "string", Description: "Time since the Network was created."},
	{Name: "Reason", Type: "string", Priority: 1, Description: "Reason of the Ready condition."},
	{Name: "Observed", Type: "integer", Priority: 1, Description: "Generation the status was computed for."},
	{Name: "Total", Type: "string", Priority: 1, Description: "Usable addresses of the prefix: not the network, broadcast or gateway address (status.capacity.total)."},
	{Name: "Allocated", Type: "string", Priority: 1, Description: "Usable addresses inside the nodes' blocks (status.capacity.allocated)."},
}

// ConvertToTable prints one Network or a list of them.
func (TableConvertor) ConvertToTable(ctx context.Context, obj runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return convertor.ConvertToTable(ctx, obj, tableOptions)
}

var convertor = table.Convertor[*samplecrd.Network]{Kind: "Network", Columns: columns, Row: func(n *samplecrd.Network, name, age string) []interface{} {
	ready, reason := "Unknown", ""
	if c := meta.FindStatusCondition(n.Status.Conditions, samplecrd.ConditionReady); c != nil {
		ready, reason = string(c.Status), c.Reason
	}
	c := n.Status.Capacity
	if c == nil {
		c = &samplecrd.NetworkCapacity{}
	}
	return []interface{}{name, n.Spec.CIDR, n.Spec.Gateway, ready, count(c.Used), count(c.Available), age,
		reason, n.Status.ObservedGeneration, count(c.Total), count(c.Allocated)}
}}

// count prints a capacity count, "<unknown>" when there is none.
func count(s string) string {
	if s == "" {
		return "<unknown>"
	}
	return s
}
