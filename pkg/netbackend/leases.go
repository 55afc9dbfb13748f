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

package netbackend

import (
	"context"
	"net/netip"
	"time"
)

// Lease is one address the IPAM plugin holds for a pod on the node.
type Lease struct {
	Address netip.Addr
	// ContainerID is the pod sandbox the address was given to (CNI_CONTAINERID of its ADD);
	// empty when the record names none.
	ContainerID string
	// Written is when the record was written (host-local writes it once, in the ADD).
	Written time.Time
}

// LeaseReleaser is a backend whose IPAM leases can be read with their holders and released one
// by one (the Linux backend, over host-local's files). The lease reclaim uses it.
type LeaseReleaser interface {
	// LeaseRecords returns the leases of key's Network on the node, sorted by address.
	LeaseRecords(ctx context.Context, key string) ([]Lease, error)
	// ReleaseLease removes l from key's Network under the IPAM plugin's own lock, and only when
	// the record read again under that lock is still l's (same container, same write time):
	// otherwise the address was released or given to another pod meanwhile, and it returns
	// false.
	ReleaseLease(ctx context.Context, key string, l Lease) (bool, error)
}
