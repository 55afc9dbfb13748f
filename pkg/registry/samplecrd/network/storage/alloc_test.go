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

package storage

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/storage/storagebackend"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/install"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// fakeAllocator picks 10.64.<attempt>.0/24 and loses the first losses creates of a picked prefix
// to a concurrent create, as if another create had taken it first.
type fakeAllocator struct {
	losses   int
	picks    []int // the attempt number of every pick
	creates  []allocator.Allocation
	checkErr error
	checks   int
}

var _ allocator.Interface = &fakeAllocator{}

var winner = allocator.Allocation{Scope: allocator.ClusterScope, Prefix: netip.MustParsePrefix("10.0.0.0/8"),
	Owner: allocator.Owner{Namespace: "default", Name: "other", UID: "uid-other"}}

func (f *fakeAllocator) Pick(_ context.Context, _ string, _ netip.Prefix, bits, attempt int) (netip.Prefix, error) {
	f.picks = append(f.picks, attempt)
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 64, byte(attempt), 0}), bits), nil
}

func (f *fakeAllocator) Create(_ context.Context, _, _ string, al allocator.Allocation, _ ...clientv3.Op) (int64, error) {
	f.creates = append(f.creates, al)
	if len(f.creates) <= f.losses {
		return 0, &allocator.OverlapError{Allocation: al, Other: winner}
	}
	return int64(len(f.creates)), nil
}

func (f *fakeAllocator) CreateGuarded(ctx context.Context, objKey, objValue string, al allocator.Allocation, _ []clientv3.Cmp, _ []clientv3.Op,
	_ func([]*etcdserverpb.ResponseOp) error, also ...clientv3.Op) (int64, error) {
	return f.Create(ctx, objKey, objValue, al, also...)
}

func (f *fakeAllocator) Check(context.Context, allocator.Allocation) error {
	f.checks++
	return f.checkErr
}

func (f *fakeAllocator) Delete(context.Context, string, int64, *allocator.Allocation, ...clientv3.Op) (bool, int64, error) {
	return false, 0, errors.New("not used")
}

func (f *fakeAllocator) Key(scope string, p netip.Prefix) string { return scope + "/" + p.String() }

func (f *fakeAllocator) Get(context.Context, string) (*mvccpb.KeyValue, error) {
	return nil, errors.New("not used")
}

// newTestREST returns the networks REST on the allocating store over alloc, without etcd: only
// creates that commit or fail in the allocator work.
func newTestREST(alloc allocator.Interface) *REST {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	codec := serializer.NewCodecFactory(scheme).LegacyCodec(v1.SchemeGroupVersion)
	allocations := &Allocations{Allocator: alloc, Pools: []netip.Prefix{netip.MustParsePrefix("10.64.0.0/10")}}
	config := &storagebackend.ConfigForResource{Config: storagebackend.Config{Prefix: "/registry", Codec: codec}}
	strategy := network.NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &samplecrd.Network{} },
		NewListFunc:               func() runtime.Object { return &samplecrd.NetworkList{} },
		DefaultQualifiedResource:  samplecrd.Resource("networks"),
		SingularQualifiedResource: samplecrd.Resource("network"),
		CreateStrategy:            strategy,
		UpdateStrategy:            strategy,
		KeyFunc: func(ctx context.Context, name string) (string, error) {
			return genericregistry.NamespaceKeyFunc(ctx, "/networks", name)
		},
		ObjectNameFunc: func(obj runtime.Object) (string, error) { return obj.(*samplecrd.Network).Name, nil },
		Storage: genericregistry.DryRunnableStorage{Codec: codec, Storage: &allocatingStore{
			allocator: alloc, etcd: newEtcdCodec(config, "/networks")}},
	}
	return &REST{Store: store, allocations: allocations}
}

func createRequest(spec samplecrd.NetworkSpec) (context.Context, *samplecrd.Network) {
	ctx := genericapirequest.WithNamespace(genericapirequest.NewContext(), "default")
	return ctx, &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "net1", Namespace: "default"}, Spec: spec}
}

// A create whose picked prefix a concurrent create took first picks again, with the attempt
// number counting up, and is validated and stored with the prefix it won.
func TestCreateRetriesLostPicks(t *testing.T) {
	alloc := &fakeAllocator{losses: 3}
	ctx, n := createRequest(samplecrd.NetworkSpec{PrefixLength: 24})
	out, err := newTestREST(alloc).Create(ctx, n, nil, &metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if want := []int{0, 1, 2, 3}; !slices.Equal(alloc.picks, want) {
		t.Errorf("pick attempts %v, want %v", alloc.picks, want)
	}
	got := out.(*samplecrd.Network)
	if got.Spec.CIDR != "10.64.3.0/24" || got.Spec.Gateway != "10.64.3.1" {
		t.Errorf("stored spec %+v, want the last pick 10.64.3.0/24 with its default gateway", got.Spec)
	}
	if len(alloc.creates) != 4 || alloc.creates[3].Prefix.String() != "10.64.3.0/24" {
		t.Errorf("transactions %v, want four, the last for 10.64.3.0/24", alloc.creates)
	}
}

// A create that loses every pick answers a conflict the client may retry.
func TestCreateGivesUpAfterEveryPickLost(t *testing.T) {
	alloc := &fakeAllocator{losses: maxCreateAttempts}
	ctx, n := createRequest(samplecrd.NetworkSpec{PrefixLength: 24})
	_, err := newTestREST(alloc).Create(ctx, n, nil, &metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), fmt.Sprintf("(%d attempts); retry", maxCreateAttempts)) {
		t.Fatalf("Create = %v, want a conflict after %d attempts", err, maxCreateAttempts)
	}
	if len(alloc.picks) != maxCreateAttempts {
		t.Errorf("%d picks, want %d", len(alloc.picks), maxCreateAttempts)
	}
}

// A prefix the client chose is never picked again: its overlap is the 422 on spec.cidr.
func TestCreateOverlapOfAChosenPrefix(t *testing.T) {
	alloc := &fakeAllocator{losses: 1}
	ctx, n := createRequest(samplecrd.NetworkSpec{CIDR: "10.1.0.0/16"})
	_, err := newTestREST(alloc).Create(ctx, n, nil, &metav1.CreateOptions{})
	checkOverlap(t, err)
	if len(alloc.picks) != 0 || len(alloc.creates) != 1 {
		t.Errorf("%d picks and %d transactions, want none and one", len(alloc.picks), len(alloc.creates))
	}
}

// A dry run never reaches the transaction: its prefix is checked before the generic store.
func TestDryRunCreateChecksThePrefix(t *testing.T) {
	alloc := &fakeAllocator{checkErr: &allocator.OverlapError{
		Allocation: allocator.Allocation{Scope: allocator.ClusterScope, Prefix: netip.MustParsePrefix("10.1.0.0/16")}, Other: winner}}
	ctx, n := createRequest(samplecrd.NetworkSpec{CIDR: "10.1.0.0/16"})
	_, err := newTestREST(alloc).Create(ctx, n, nil, &metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	checkOverlap(t, err)
	if alloc.checks != 1 || len(alloc.creates) != 0 {
		t.Errorf("%d checks and %d transactions, want one and none", alloc.checks, len(alloc.creates))
	}
}

func checkOverlap(t *testing.T, err error) {
	t.Helper()
	if !apierrors.IsInvalid(err) {
		t.Fatalf("Create = %v, want an Invalid error", err)
	}
	status := err.(apierrors.APIStatus).Status()
	want := `Network.samplecrd.k8s.io "net1" is invalid: spec.cidr: Invalid value: "10.1.0.0/16": overlaps network default/other (10.0.0.0/8)`
	if status.Message != want || len(status.Details.Causes) != 1 || status.Details.Causes[0].Field != "spec.cidr" {
		t.Errorf("status %q with causes %+v, want %q at spec.cidr", status.Message, status.Details.Causes, want)
	}
}

// Only server-side apply turns a create that found its name taken into an update: the loop runs
// it again. A POST answers AlreadyExists.
func TestRetryOnlyApplyTurnsATakenNameIntoAnUpdate(t *testing.T) {
	taken := apierrors.NewAlreadyExists(samplecrd.Resource("networks"), "net1")
	a := &Allocations{}
	for _, apply := range []bool{false, true} {
		runs := 0
		_, err := a.retry(context.Background(), apply, func(int) (runtime.Object, *samplecrd.Network, error) {
			runs++
			if runs == 1 {
				return nil, nil, taken
			}
			return &samplecrd.Network{}, nil, nil
		})
		switch {
		case apply && (err != nil || runs != 2):
			t.Errorf("apply: %v after %d runs, want success after 2", err, runs)
		case !apply && (!apierrors.IsAlreadyExists(err) || runs != 1):
			t.Errorf("POST: %v after %d runs, want AlreadyExists after 1", err, runs)
		}
	}
}
