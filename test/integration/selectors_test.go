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

package integration

import (
	"context"
	"slices"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	typedv1 "github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/typed/samplecrd/v1"
)

// selectorFixture creates five Networks with distinct prefixes, gateways and labels.
func selectorFixture(ctx context.Context, t *testing.T, networks typedv1.NetworkInterface) {
	t.Helper()
	fixture := []struct {
		name, cidr, gateway string
		labels              map[string]string
	}{
		{"alpha", "10.6.1.0/24", "", map[string]string{"tier": "web", "zone": "a"}},
		{"bravo", "10.6.2.0/24", "10.6.2.254", map[string]string{"tier": "db", "zone": "a"}},
		{"charlie", "fd00:6::/64", "", map[string]string{"tier": "web", "zone": "b"}},
		{"delta", "10.6.4.0/24", "10.6.4.1", nil},
		{"echo", "10.6.5.0/24", "10.6.5.254", map[string]string{"zone": "b"}},
	}
	for _, f := range fixture {
		n := newNetwork(f.name, f.cidr, f.gateway)
		n.Labels = f.labels
		if _, err := networks.Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

func sortedNames(items []v1.Network) []string {
	names := networkNames(items)
	slices.Sort(names)
	return names
}

func TestFieldAndLabelSelectors(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	selectorFixture(ctx, t, networks)

	tests := []struct {
		name          string
		fieldSelector string
		labelSelector string
		want          []string
	}{
		{name: "all", want: []string{"alpha", "bravo", "charlie", "delta", "echo"}},
		{name: "spec.cidr", fieldSelector: "spec.cidr=10.6.2.0/24", want: []string{"bravo"}},
		{name: "spec.cidr IPv6", fieldSelector: "spec.cidr=fd00:6::/64", want: []string{"charlie"}},
		{name: "spec.cidr no match", fieldSelector: "spec.cidr=10.6.3.0/24", want: []string{}},
		{name: "spec.cidr not equal", fieldSelector: "spec.cidr!=10.6.2.0/24", want: []string{"alpha", "charlie", "delta", "echo"}},
		{name: "spec.gateway explicit", fieldSelector: "spec.gateway=10.6.2.254", want: []string{"bravo"}},
		{name: "spec.gateway defaulted", fieldSelector: "spec.gateway=10.6.1.1", want: []string{"alpha"}},
		{name: "spec.gateway IPv6 defaulted", fieldSelector: "spec.gateway=fd00:6::1", want: []string{"charlie"}},
		{name: "metadata.name", fieldSelector: "metadata.name=delta", want: []string{"delta"}},
		{name: "metadata.namespace", fieldSelector: "metadata.namespace=" + ns, want: []string{"alpha", "bravo", "charlie", "delta", "echo"}},
		{name: "two fields", fieldSelector: "spec.cidr=10.6.5.0/24,spec.gateway=10.6.5.254", want: []string{"echo"}},
		{name: "two fields disagreeing", fieldSelector: "spec.cidr=10.6.5.0/24,spec.gateway=10.6.2.254", want: []string{}},
		{name: "label equality", labelSelector: "tier=web", want: []string{"alpha", "charlie"}},
		{name: "label set", labelSelector: "tier in (web,db)", want: []string{"alpha", "bravo", "charlie"}},
		{name: "label absent", labelSelector: "!tier", want: []string{"delta", "echo"}},
		{name: "label and", labelSelector: "tier=web,zone=b", want: []string{"charlie"}},
		{name: "label and field", labelSelector: "zone=a", fieldSelector: "spec.gateway!=10.6.2.254", want: []string{"alpha"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			list, err := networks.List(ctx, metav1.ListOptions{FieldSelector: tc.fieldSelector, LabelSelector: tc.labelSelector})
			if err != nil {
				t.Fatal(err)
			}
			if got := sortedNames(list.Items); !slices.Equal(got, tc.want) {
				t.Fatalf("fields %q labels %q: got %v, want %v", tc.fieldSelector, tc.labelSelector, got, tc.want)
			}
		})
	}

	t.Run("unsupported field", func(t *testing.T) {
		_, err := networks.List(ctx, metav1.ListOptions{FieldSelector: "spec.prefixLength=24"})
		if !apierrors.IsBadRequest(err) {
			t.Fatalf("selecting on spec.prefixLength: %v, want 400", err)
		}
	})

	t.Run("watch with a field selector", func(t *testing.T) {
		list, err := networks.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		w, err := networks.Watch(ctx, metav1.ListOptions{FieldSelector: "spec.gateway=10.6.9.9", ResourceVersion: list.ResourceVersion})
		if err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		if _, err := networks.Create(ctx, newNetwork("foxtrot", "10.6.8.0/24", ""), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := networks.Create(ctx, newNetwork("golf", "10.6.9.0/24", "10.6.9.9"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// The first event must be golf's: foxtrot, created first, does not match.
		ev := nextEvent(t, w)
		if n, ok := ev.Object.(*v1.Network); !ok || n.Name != "golf" {
			t.Fatalf("first event of the filtered watch: %s %#v, want golf added", ev.Type, ev.Object)
		}
		for _, name := range []string{"foxtrot", "golf"} {
			if err := networks.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestPagination(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	selectorFixture(ctx, t, networks)
	all := []string{"alpha", "bravo", "charlie", "delta", "echo"}

	for _, tc := range []struct {
		name            string
		limit           int64
		fieldSelector   string
		want            []string
		wantPageLengths []int
	}{
		{name: "limit 2", limit: 2, want: all, wantPageLengths: []int{2, 2, 1}},
		{name: "limit 1", limit: 1, want: all, wantPageLengths: []int{1, 1, 1, 1, 1}},
		{name: "limit 5", limit: 5, want: all, wantPageLengths: []int{5}},
		{name: "limit 2 with a field selector", limit: 2, fieldSelector: "spec.cidr!=10.6.2.0/24",
			want: []string{"alpha", "charlie", "delta", "echo"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := map[string]int{}
			var pageLengths []int
			var order []string
			opts := metav1.ListOptions{Limit: tc.limit, FieldSelector: tc.fieldSelector}
			for page := 0; ; page++ {
				if page > 10 {
					t.Fatal("more than 10 pages")
				}
				list, err := networks.List(ctx, opts)
				if err != nil {
					t.Fatalf("page %d: %v", page, err)
				}
				if int64(len(list.Items)) > tc.limit {
					t.Fatalf("page %d has %d items, over the limit %d", page, len(list.Items), tc.limit)
				}
				pageLengths = append(pageLengths, len(list.Items))
				for _, n := range list.Items {
					seen[n.Name]++
					order = append(order, n.Name)
				}
				if list.Continue == "" {
					break
				}
				if page == 0 && tc.fieldSelector == "" {
					if rem := list.RemainingItemCount; rem == nil || *rem != int64(len(all))-tc.limit {
						t.Fatalf("first page remainingItemCount %v, want %d", rem, int64(len(all))-tc.limit)
					}
				}
				// Continue pages are read from etcd without counting the rest of the range
				// (docs/performance.md), so they carry no remainingItemCount.
				if page > 0 && list.RemainingItemCount != nil {
					t.Fatalf("continue page %d has remainingItemCount %d: the generic storage read it, counting", page, *list.RemainingItemCount)
				}
				opts.Continue = list.Continue
			}
			for _, name := range tc.want {
				if seen[name] != 1 {
					t.Fatalf("%s seen %d times across the pages, want exactly once (pages: %v)", name, seen[name], order)
				}
			}
			if len(order) != len(tc.want) {
				t.Fatalf("pages returned %v, want %v", order, tc.want)
			}
			if !slices.IsSorted(order) {
				t.Fatalf("pages returned %v out of key order", order)
			}
			if tc.wantPageLengths != nil && !slices.Equal(pageLengths, tc.wantPageLengths) {
				t.Fatalf("page lengths %v, want %v", pageLengths, tc.wantPageLengths)
			}
		})
	}

	t.Run("invalid continue token", func(t *testing.T) {
		_, err := networks.List(ctx, metav1.ListOptions{Limit: 2, Continue: "not-a-token"})
		if !apierrors.IsBadRequest(err) {
			t.Fatalf("list with a garbage continue token: %v, want 400", err)
		}
	})
}

func TestV1beta1FieldSelectors(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	selectorFixture(ctx, t, jsonClient(t, s).SamplecrdV1().Networks(ns))
	beta := dynamicClient(t, s).Resource(v1beta1GVR).Namespace(ns)

	for _, tc := range []struct {
		fieldSelector string
		want          []string
	}{
		{"spec.subnet=10.6.2.0/24", []string{"bravo"}},
		{"spec.subnet=fd00:6::/64", []string{"charlie"}},
		{"spec.subnet!=10.6.2.0/24", []string{"alpha", "charlie", "delta", "echo"}},
		{"spec.gatewayIP=10.6.5.254", []string{"echo"}},
		{"metadata.name=alpha", []string{"alpha"}},
	} {
		t.Run(tc.fieldSelector, func(t *testing.T) {
			list, err := beta.List(ctx, metav1.ListOptions{FieldSelector: tc.fieldSelector})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, item := range list.Items {
				got = append(got, item.GetName())
				if item.GetAPIVersion() != "samplecrd.k8s.io/v1beta1" {
					t.Fatalf("item apiVersion %s", item.GetAPIVersion())
				}
				if _, found, _ := unstructured.NestedString(item.Object, "spec", "subnet"); !found {
					t.Fatalf("v1beta1 item %s has no spec.subnet: %v", item.GetName(), item.Object["spec"])
				}
			}
			slices.Sort(got)
			if got == nil {
				got = []string{}
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("v1beta1 %q: got %v, want %v", tc.fieldSelector, got, tc.want)
			}
		})
	}

	t.Run("v1 field name is not a v1beta1 field", func(t *testing.T) {
		_, err := beta.List(ctx, metav1.ListOptions{FieldSelector: "spec.cidr=10.6.2.0/24"})
		if !apierrors.IsBadRequest(err) {
			t.Fatalf("v1beta1 selecting on spec.cidr: %v, want 400", err)
		}
	})
}
