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
	"fmt"
	"net/netip"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

var (
	alcPool4 = netip.MustParsePrefix("10.20.0.0/16")
	alcPool6 = netip.MustParsePrefix("fd00:20::/48")
)

func alcAuto(name string, bits int32) *v1.Network {
	return &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NetworkSpec{PrefixLength: bits}}
}

// alcCheckAllocated checks that n got a /bits of pool with the default gateway, and returns it.
func alcCheckAllocated(n *v1.Network, pool netip.Prefix, bits int) (netip.Prefix, error) {
	p, err := netip.ParsePrefix(n.Spec.CIDR)
	switch {
	case err != nil:
		return p, fmt.Errorf("%s: cidr %q: %v", n.Name, n.Spec.CIDR, err)
	case p.Bits() != bits || p.Masked() != p || !pool.Contains(p.Addr()):
		return p, fmt.Errorf("%s: cidr %s, want a /%d inside %s", n.Name, p, bits, pool)
	case n.Spec.PrefixLength != int32(bits):
		return p, fmt.Errorf("%s: prefixLength %d, want %d", n.Name, n.Spec.PrefixLength, bits)
	case n.Spec.Gateway != p.Addr().Next().String():
		return p, fmt.Errorf("%s: gateway %q, want the default %s", n.Name, n.Spec.Gateway, p.Addr().Next())
	}
	return p, nil
}

func TestAlcPools(t *testing.T) {
	s := framework.StartForTest(t, "--network-pool", alcPool4.String(), "--network-pool", alcPool6.String())
	c := ovlClient(t, s)

	t.Run("ipv4 pool exhaustion", func(t *testing.T) { alcExhaust(t, c) })

	t.Run("ipv6 pool", func(t *testing.T) {
		var got []v1.Network
		for i := range 3 {
			n, err := ovlCreate(c, "alc-v6", alcAuto(fmt.Sprintf("v6-%d", i), 64), false)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := alcCheckAllocated(n, alcPool6, 64); err != nil {
				t.Error(err)
			}
			// The capacity comes with the allocated prefix, in the create's answer.
			if c := n.Status.Capacity; c == nil || c.Total != "18446744073709551614" || c.Available != c.Total {
				t.Errorf("%s: capacity %+v, want total and available 2^64-2", n.Name, c)
			}
			if stored := admGet(t, c, "alc-v6", n.Name); stored.Spec.CIDR != n.Spec.CIDR {
				t.Errorf("%s stored with cidr %q, returned %q", n.Name, stored.Spec.CIDR, n.Spec.CIDR)
			}
			got = append(got, *n)
		}
		ovlAssertDisjoint(t, got)
		// Longer than /126 fits no pool.
		_, err := ovlCreate(c, "alc-v6", alcAuto("too-long", 127), false)
		ovlExpectInvalid(t, err, "spec.prefixLength", "prefixLength")
	})

	t.Run("prefixLength must match cidr", func(t *testing.T) {
		n := ovlNetwork("mismatch", "10.99.0.0/16")
		n.Spec.PrefixLength = 24
		_, err := ovlCreate(c, "alc-mismatch", n, false)
		ovlExpectInvalid(t, err, "spec.prefixLength", "must equal the length of spec.cidr 10.99.0.0/16")
		// The rejected create gave its claim back (a Network of another name may take the range).
		n.Name, n.Spec.PrefixLength = "after-mismatch", 16
		created, err := ovlCreate(c, "alc-mismatch", n, false)
		if err != nil {
			t.Fatalf("the cidr of a rejected create is still taken: %v", err)
		}
		if created.Spec.PrefixLength != 16 || created.Spec.CIDR != "10.99.0.0/16" {
			t.Errorf("got %+v, want cidr 10.99.0.0/16 with prefixLength 16", created.Spec)
		}
		// No pool holds a /8.
		_, err = ovlCreate(c, "alc-mismatch", alcAuto("wide", 8), false)
		ovlExpectInvalid(t, err, "spec.prefixLength", "no pool can hold a /8")
	})

	t.Run("v1beta1 round trip", func(t *testing.T) { alcV1beta1(t, s.Config, c) })

	t.Run("dry run shows the prefix a create gets", func(t *testing.T) {
		for i := range 3 {
			name := fmt.Sprint("dry-", i)
			dry, err := ovlCreate(c, "alc-dry", alcAuto(name, 120), true)
			if err != nil {
				t.Fatal(err)
			}
			created, err := ovlCreate(c, "alc-dry", alcAuto(name, 120), false)
			if err != nil {
				t.Fatal(err)
			}
			if dry.Spec.CIDR != created.Spec.CIDR || dry.Spec.Gateway != created.Spec.Gateway {
				t.Errorf("dry run answered %s (gateway %s), the create got %s (gateway %s)",
					dry.Spec.CIDR, dry.Spec.Gateway, created.Spec.CIDR, created.Spec.Gateway)
			}
		}
	})
}

// alcExhaust races 300 creates for 256 /24s of a /16.
func alcExhaust(t *testing.T, c *versioned.Clientset) {
	const creates = 300
	results := make([]*v1.Network, creates)
	errs := make([]error, creates)
	next := make(chan int)
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			for i := range next {
				results[i], errs[i] = ovlCreate(c, "alc-pool", alcAuto(fmt.Sprintf("pool-%03d", i), 24), false)
			}
		})
	}
	for i := range creates {
		next <- i
	}
	close(next)
	wg.Wait()

	var ok, exhausted int
	seen := map[netip.Prefix]string{}
	for i, err := range errs {
		if err != nil {
			if bad := ovlCheckInvalid(err, "spec.prefixLength", "pool 10.20.0.0/16 has no free /24 left"); bad != nil {
				t.Errorf("create %d: %v", i, bad)
			}
			exhausted++
			continue
		}
		ok++
		p, err := alcCheckAllocated(results[i], alcPool4, 24)
		if err != nil {
			t.Error(err)
			continue
		}
		if other, dup := seen[p]; dup {
			t.Errorf("%s and %s both got %s", other, results[i].Name, p)
		}
		seen[p] = results[i].Name
	}
	if ok != 256 || exhausted != 44 {
		t.Errorf("%d creates succeeded and %d found the pool exhausted, want 256 and 44", ok, exhausted)
	}

	list, err := c.SamplecrdV1().Networks("alc-pool").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 256 {
		t.Errorf("%d Networks stored, want 256", len(list.Items))
	}
	for i := range list.Items {
		if _, err := alcCheckAllocated(&list.Items[i], alcPool4, 24); err != nil {
			t.Errorf("stored: %v", err)
		}
	}
	ovlAssertDisjoint(t, list.Items)
}

var alcV1beta1Networks = schema.GroupVersionResource{Group: "samplecrd.k8s.io", Version: "v1beta1", Resource: "networks"}

// alcV1beta1 checks that spec.prefixLength survives both ways between v1beta1 and v1.
func alcV1beta1(t *testing.T, cfg *rest.Config, c *versioned.Clientset) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	beta := dyn.Resource(alcV1beta1Networks).Namespace("alc-beta")
	ctx := context.Background()

	// Allocated through v1beta1, read through v1.
	created, err := beta.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "samplecrd.k8s.io/v1beta1",
		"kind":       "Network",
		"metadata":   map[string]any{"name": "from-beta"},
		"spec":       map[string]any{"prefixLength": int64(64)},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subnet, _, _ := unstructured.NestedString(created.Object, "spec", "subnet")
	gatewayIP, _, _ := unstructured.NestedString(created.Object, "spec", "gatewayIP")
	length, _, _ := unstructured.NestedInt64(created.Object, "spec", "prefixLength")
	p, err := alcCheckAllocated(&v1.Network{ObjectMeta: metav1.ObjectMeta{Name: "from-beta"},
		Spec: v1.NetworkSpec{CIDR: subnet, Gateway: gatewayIP, PrefixLength: int32(length)}}, alcPool6, 64)
	if err != nil {
		t.Fatalf("v1beta1 create returned %v: %v", created.Object["spec"], err)
	}
	if _, found, _ := unstructured.NestedString(created.Object, "spec", "cidr"); found {
		t.Errorf("v1beta1 object has a v1 field: %v", created.Object["spec"])
	}
	asV1 := admGet(t, c, "alc-beta", "from-beta")
	if asV1.Spec.CIDR != p.String() || asV1.Spec.PrefixLength != 64 || asV1.Spec.Gateway != gatewayIP {
		t.Errorf("read through v1: %+v, want cidr %s gateway %s prefixLength 64", asV1.Spec, p, gatewayIP)
	}

	// Created through v1, read through v1beta1.
	n := ovlNetwork("from-v1", "192.168.40.0/24")
	n.Spec.PrefixLength = 24
	if _, err := ovlCreate(c, "alc-beta", n, false); err != nil {
		t.Fatal(err)
	}
	got, err := beta.Get(ctx, "from-v1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	subnet, _, _ = unstructured.NestedString(got.Object, "spec", "subnet")
	gatewayIP, _, _ = unstructured.NestedString(got.Object, "spec", "gatewayIP")
	length, found, _ := unstructured.NestedInt64(got.Object, "spec", "prefixLength")
	if subnet != "192.168.40.0/24" || gatewayIP != "192.168.40.1" || !found || length != 24 {
		t.Errorf("read through v1beta1: %v, want subnet 192.168.40.0/24 gatewayIP 192.168.40.1 prefixLength 24", got.Object["spec"])
	}

	// And a v1beta1 create that names a subnet and a wrong length is refused on spec.prefixLength.
	_, err = beta.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "samplecrd.k8s.io/v1beta1",
		"kind":       "Network",
		"metadata":   map[string]any{"name": "bad-beta"},
		"spec":       map[string]any{"subnet": "192.168.41.0/24", "prefixLength": int64(25)},
	}}, metav1.CreateOptions{})
	// Errors name v1beta1's fields for a v1beta1 client.
	ovlExpectInvalid(t, err, "spec.prefixLength", "must equal the length of spec.subnet 192.168.41.0/24")
}
