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

package agent

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	testingclock "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"

	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

// TestRenewLease: the first renewal creates the Lease, later ones move renewTime; a Lease held
// by another identity is taken over; the server's check finds it held until it expires.
func TestRenewLease(t *testing.T) {
	ctx := context.Background()
	kube := kubefake.NewClientset()
	leases := kube.CoordinationV1().Leases("agents")
	clock := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err := renewLease(ctx, leases, "node-1", 40*time.Second, clock.Now()); err != nil {
		t.Fatal(err)
	}
	lease, err := leases.Get(ctx, "network-agent-node-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *lease.Spec.HolderIdentity != "node-1" || *lease.Spec.LeaseDurationSeconds != 40 || !lease.Spec.RenewTime.Time.Equal(clock.Now()) {
		t.Fatalf("created lease: %+v", lease.Spec)
	}
	if !nodestatus.LeaseHeld(lease, clock.Now().Add(39*time.Second)) || nodestatus.LeaseHeld(lease, clock.Now().Add(40*time.Second)) {
		t.Fatal("the lease is not held for exactly its duration")
	}
	acquired := lease.Spec.AcquireTime.Time
	clock.Step(10 * time.Second)
	if err := renewLease(ctx, leases, "node-1", 40*time.Second, clock.Now()); err != nil {
		t.Fatal(err)
	}
	lease, _ = leases.Get(ctx, "network-agent-node-1", metav1.GetOptions{})
	if !lease.Spec.RenewTime.Time.Equal(clock.Now()) || !lease.Spec.AcquireTime.Time.Equal(acquired) {
		t.Fatalf("renewed lease: %+v", lease.Spec)
	}
	lease.Spec.HolderIdentity = ptr.To("someone-else")
	if _, err := leases.Update(ctx, lease, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	clock.Step(10 * time.Second)
	if err := renewLease(ctx, leases, "node-1", 40*time.Second, clock.Now()); err != nil {
		t.Fatal(err)
	}
	lease, _ = leases.Get(ctx, "network-agent-node-1", metav1.GetOptions{})
	if *lease.Spec.HolderIdentity != "node-1" || !lease.Spec.AcquireTime.Time.Equal(clock.Now()) {
		t.Fatalf("taken-over lease: %+v", lease.Spec)
	}
}

// TestLeaseHolderHeld: held from a successful renewal until the Lease's duration has passed.
func TestLeaseHolderHeld(t *testing.T) {
	clock := testingclock.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := &leaseHolder{options: LeaseOptions{Duration: 40 * time.Second}, clock: clock}
	if h.held() {
		t.Fatal("held before any renewal")
	}
	h.renewed.Store(clock.Now().UnixNano())
	clock.Step(39 * time.Second)
	if !h.held() {
		t.Fatal("not held 39s after a renewal")
	}
	clock.Step(time.Second)
	if h.held() {
		t.Fatal("still held 40s after the last renewal")
	}
}
