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

package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/blockallocation/release"
	blockstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/blockallocation/storage"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator/repair"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/capacitymetrics"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/storage"
)

// allocatorPingTimeout bounds /readyz's check of the allocator's etcd client.
const allocatorPingTimeout = 2 * time.Second

// Config is the configuration of a network-apiserver.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	Extra         ExtraConfig
}

// ExtraConfig is what network-apiserver needs beyond a generic apiserver.
type ExtraConfig struct {
	// Allocator keeps Networks from overlapping (required); Scoping says which must not.
	Allocator *allocator.Allocator
	Scoping   allocator.Scoping
	// Pools are where prefixes for spec.prefixLength come from, tried in order.
	Pools []netip.Prefix
	// Blocks keeps the nodes' address blocks of each Network (scope = Network UID) from
	// overlapping one another and the gateway; nil serves no blockallocations and no claims.
	Blocks *allocator.Allocator
	// BlockSizes are the sizes claims hand out.
	BlockSizes blockstorage.BlockSizes
	// NodeLabels, when set (attached mode), tells Nodes' labels: claims for a node a Network's
	// spec.nodeSelector does not select are refused. nil (standalone): the agents' check alone.
	NodeLabels blockstorage.NodeLabelsFunc
	// ClaimQuota, when set, bounds the free addresses a node agent holds before it claims more.
	ClaimQuota *blockstorage.Quota
	// VNIs are the Networks' VNI keys; nil assigns no VNIs.
	VNIs *segment.VNIs
	// BlockReleaseGrace is the least time between the two observations that release a node's
	// blocks (0: release.DefaultGrace).
	BlockReleaseGrace time.Duration
	// Nodes, set in attached mode, tells the block release whether a node's Node is gone; nil
	// (standalone) releases on the status entry alone.
	Nodes release.Nodes
	// VerifyInterval is how often the allocation invariant is verified (and what is safe to fix,
	// fixed), starting right after the server starts.
	VerifyInterval time.Duration
	// CompactionInterval is how often etcd's history is compacted (0: not by this server): a
	// verification reads at one revision and paces itself to end well within it.
	CompactionInterval time.Duration
	// Events, set in attached mode, records the Events of Networks crossing 80% used; nil
	// (standalone: no core API) records none.
	Events record.EventRecorder
	// CapacityMetrics bounds the capacity gauges on /metrics.
	CapacityMetrics capacitymetrics.Options
}

// CompletedConfig is a Config whose defaults have been filled in; only it can build a server.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	extra   ExtraConfig
}

// Server is a running network-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// Complete fills in defaults. It changes the receiver.
func (c *Config) Complete() CompletedConfig {
	if c.Extra.VerifyInterval == 0 {
		c.Extra.VerifyInterval = 10 * time.Minute
	}
	return CompletedConfig{generic: c.GenericConfig.Complete(), extra: c.Extra}
}

// New builds the server and installs samplecrd.k8s.io: v1 (preferred, storage) and v1beta1.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("network-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	if c.extra.Allocator == nil {
		return nil, fmt.Errorf("creating network storage: no allocator")
	}
	allocations := &networkstorage.Allocations{Allocator: c.extra.Allocator, Scoping: c.extra.Scoping, Pools: c.extra.Pools,
		VNIs: c.extra.VNIs, Pages: c.extra.Allocator.Scanner()}
	var blockAllocations *blockstorage.REST
	if c.extra.Blocks != nil {
		if blockAllocations, err = blockstorage.NewREST(Scheme, c.generic.RESTOptionsGetter); err != nil {
			return nil, fmt.Errorf("creating blockallocation storage: %w", err)
		}
		allocations.Blocks, allocations.BlockObjects = c.extra.Blocks, blockAllocations.Etcd.KeyPrefix()
		allocations.NodeBlocks = blockAllocations.NodeBlocks
	}
	storage, err := networkstorage.NewStorage(Scheme, c.generic.RESTOptionsGetter, allocations)
	if err != nil {
		return nil, fmt.Errorf("creating network storage: %w", err)
	}

	if c.extra.Events != nil {
		storage.Status.Observe(capacityEvents(c.extra.Events))
	}
	if c.extra.CapacityMetrics.Mode != capacitymetrics.ModeNone {
		// The gauges follow the watch cache: a scrape reads the index, never the Networks.
		generic.AddPostStartHookOrDie("capacity-metrics", func(hook genericapiserver.PostStartHookContext) error {
			index := capacitymetrics.NewIndex()
			unregister := capacitymetrics.Register(index, c.extra.CapacityMetrics)
			go func() {
				defer unregister()
				index.Follow(hook, storage.Network)
			}()
			return nil
		})
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(samplecrd.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	group.NegotiatedSerializer = groupSerializer(group.NegotiatedSerializer)
	// Both versions share one storage (and so one watch cache): storage works on the internal
	// version and the handlers convert. v1beta1's errors name its own spec fields.
	group.VersionedResourcesStorageMap[v1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"networks":        storage.Network,
		"networks/status": storage.Status,
	}
	if blockAllocations != nil {
		// Served in v1 only: a new resource has no reason to appear in the deprecated v1beta1,
		// and agents (its only writers, through blockclaims) speak v1.
		sizes := c.extra.BlockSizes
		if sizes == (blockstorage.BlockSizes{}) {
			sizes = blockstorage.DefaultBlockSizes
		}
		group.VersionedResourcesStorageMap[v1.SchemeGroupVersion.Version]["blockallocations"] = blockAllocations
		group.VersionedResourcesStorageMap[v1.SchemeGroupVersion.Version]["networks/blockclaims"] = &blockstorage.ClaimREST{
			Blocks: c.extra.Blocks, Networks: storage.Etcd, Objects: blockAllocations.Etcd, Sizes: sizes, NodeLabels: c.extra.NodeLabels,
			Quota: c.extra.ClaimQuota, AllocationKey: func(n *samplecrd.Network) (string, bool) {
				al, ok := c.extra.Scoping.AllocationOf(n)
				if !ok {
					return "", false
				}
				return c.extra.Allocator.Key(al.Scope, al.Prefix), true
			}}
	}
	group.VersionedResourcesStorageMap[v1beta1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"networks":        &v1beta1Networks{storage.Network},
		"networks/status": storage.Status,
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, err
	}
	// Creates and deletes keep the allocations exactly the stored Networks, so readiness does not
	// wait for the repair; it reports (and where safe fixes) what data written around the API, or
	// by older versions of this server, broke.
	verifier := repair.New(c.extra.Allocator, c.extra.Scoping, storage.Etcd.KeyPrefix(), storage.Etcd.DecodeForVerify)
	if blockAllocations != nil {
		// The blocks too: keys against BlockAllocations, gateways, Networks that are gone.
		verifier.WithBlocks(c.extra.Blocks, blockAllocations.Etcd.KeyPrefix(),
			func(ctx context.Context, kv *mvccpb.KeyValue) (*samplecrd.BlockAllocation, error) {
				b := &samplecrd.BlockAllocation{}
				return b, blockAllocations.Etcd.DecodeInto(ctx, kv, b)
			})
		// Blocks of nodes none of whose pods can hold an address in them go back, on every
		// replica (each release is one guarded transaction, so duplicates are harmless).
		grace := c.extra.BlockReleaseGrace
		if grace <= 0 {
			grace = release.DefaultGrace
		}
		store := &release.EtcdStore{Blocks: c.extra.Blocks, NetworkKeys: storage.Etcd.KeyPrefix(), ObjectKeys: blockAllocations.Etcd.KeyPrefix(),
			List: func(ctx context.Context) ([]*samplecrd.BlockAllocation, error) {
				obj, err := blockAllocations.List(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll),
					&metainternalversion.ListOptions{ResourceVersion: "0"})
				if err != nil {
					return nil, err
				}
				list := obj.(*samplecrd.BlockAllocationList)
				out := make([]*samplecrd.BlockAllocation, len(list.Items))
				for i := range list.Items {
					out[i] = &list.Items[i]
				}
				return out, nil
			},
			Network: func(ctx context.Context, namespace, name string) (*samplecrd.Network, error) {
				obj, err := storage.Network.Get(genericapirequest.WithNamespace(ctx, namespace), name, &metav1.GetOptions{ResourceVersion: "0"})
				if err != nil {
					return nil, err
				}
				return obj.(*samplecrd.Network), nil
			}}
		releaser := &release.Releaser{Store: store, Nodes: c.extra.Nodes, Grace: grace, Clock: clock.RealClock{}}
		release.RegisterMetrics()
		generic.AddPostStartHookOrDie("release-blocks", func(hook genericapiserver.PostStartHookContext) error {
			go releaser.Run(hook)
			return nil
		})
	}
	if c.extra.VNIs != nil {
		// VNIs: keys of Networks stored without one (older replicas) assigned, keys of gone
		// Networks removed, status.vni mirrored from the keys.
		verifier.WithVNIs(c.extra.VNIs, repair.MirrorVNIFunc(mirrorVNI(storage.Status, c.extra.VNIs)))
		// Networks seen without status.vni (an older replica's create or status write) get
		// theirs at once, not at the next verification.
		loop := &segment.Loop{VNIs: c.extra.VNIs, Mirror: mirrorVNI(storage.Status, c.extra.VNIs),
			Guard: networkGuard(c.extra.Allocator, storage.Etcd),
			Watch: func(ctx context.Context, rv string) (watch.Interface, error) {
				opts := &metainternalversion.ListOptions{ResourceVersion: rv, Watch: true, AllowWatchBookmarks: true}
				if rv == "" {
					// Every Network from the watch cache as it is, then a bookmark at its revision.
					initial := true
					opts.ResourceVersion, opts.SendInitialEvents = "0", &initial
					opts.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
				}
				return storage.Network.Watch(genericapirequest.WithNamespace(ctx, metav1.NamespaceAll), opts)
			}}
		generic.AddPostStartHookOrDie("segment-vnis", func(hook genericapiserver.PostStartHookContext) error {
			go loop.Run(hook)
			return nil
		})
	}
	generic.AddPostStartHookOrDie("verify-network-allocations", func(hook genericapiserver.PostStartHookContext) error {
		go verifier.Run(hook, c.extra.VerifyInterval, c.extra.CompactionInterval)
		return nil
	})
	// Creates and deletes use the allocator's own etcd client: readiness covers it too.
	if err := generic.AddReadyzChecks(healthz.NamedCheck("etcd-allocator", func(r *http.Request) error {
		ctx, cancel := context.WithTimeout(r.Context(), allocatorPingTimeout)
		defer cancel()
		return c.extra.Allocator.Ping(ctx)
	})); err != nil {
		return nil, err
	}
	return &Server{GenericAPIServer: generic}, nil
}

// vniFieldManager is the field manager of the server's writes of status.vni.
const vniFieldManager = "network-apiserver/segment"

// mirrorVNI returns the write of a Network's status.vni from its VNI key through the status
// storage, in process and marked as the server's (network.WithServerOwnedStatus), so that the
// status strategy keeps it; a Network replaced by another of the same name is left alone.
func mirrorVNI(status *networkstorage.StatusREST, vnis *segment.VNIs) segment.MirrorFunc {
	return func(ctx context.Context, namespace, name string, uid types.UID) error {
		ctx = network.WithServerOwnedStatus(genericapirequest.WithNamespace(ctx, namespace))
		_, _, err := status.Update(ctx, name, rest.DefaultUpdatedObjectInfo(nil, func(ctx context.Context, _, old runtime.Object) (runtime.Object, error) {
			n := old.(*samplecrd.Network).DeepCopy()
			if n.UID != uid {
				// Another Network of that name now: the one read is gone.
				return nil, apierrors.NewNotFound(samplecrd.Resource("networks"), name)
			}
			// The keys as they are now: the status copies the truth, not what was read before.
			v, _, err := vnis.Of(ctx, string(uid), n.Status.VNI)
			if err != nil {
				return nil, err
			}
			n.Status.VNI = v
			return n, nil
		}), rest.ValidateAllObjectFunc, rest.ValidateAllObjectUpdateFunc, false, &metav1.UpdateOptions{FieldManager: vniFieldManager})
		return err
	}
}

// networkGuard returns the guard of a VNI assignment: the Network's key still at the
// CreateRevision of the Network with the UID read (so a Network deleted or replaced meanwhile gets
// no keys).
func networkGuard(alloc *allocator.Allocator, codec *networkstorage.EtcdCodec) segment.GuardFunc {
	return func(ctx context.Context, namespace, name string, uid types.UID) ([]clientv3.Cmp, []clientv3.Op,
		func([]*etcdserverpb.ResponseOp) error, bool, error) {
		key := codec.KeyPrefix() + namespace + "/" + name
		kv, err := alloc.Get(ctx, key)
		if err != nil || kv == nil {
			return nil, nil, nil, false, err
		}
		n, err := codec.Decode(ctx, kv)
		if err != nil {
			return nil, nil, nil, false, err
		}
		if n.UID != uid {
			return nil, nil, nil, false, nil
		}
		created := kv.CreateRevision
		return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", created)},
			[]clientv3.Op{clientv3.OpGet(key, clientv3.WithKeysOnly())},
			func(rs []*etcdserverpb.ResponseOp) error {
				if kvs := rs[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != created {
					return segment.ErrNetworkChanged
				}
				return nil
			}, true, nil
	}
}
