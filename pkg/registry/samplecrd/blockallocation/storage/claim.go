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
	"net/http"
	"net/netip"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation/field"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/blockallocation"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/storage"
)

// ReasonAddressesExhausted is the reason of a claim's answer when the Network has no free block
// left (the node entries' reason for the same state).
const ReasonAddressesExhausted metav1.StatusReason = "AddressesExhausted"

// BlockSizes say how large the blocks a claim hands out are.
type BlockSizes struct {
	// IPv4 and IPv6 are the preferred prefix lengths (--block-prefix-length-v4/-v6).
	IPv4, IPv6 int
	// MaxPerNode caps the blocks one node holds in one Network (--max-blocks-per-node).
	MaxPerNode int
}

// DefaultBlockSizes are Calico's block sizes and a cap that keeps a node's CNI configuration small.
var DefaultBlockSizes = BlockSizes{IPv4: 26, IPv6: 122, MaxPerNode: 64}

// Preferred is the block length for a Network prefix: the flag's, adapted so that the prefix
// holds at least 16 blocks, and never longer than /30 (/126).
func (s BlockSizes) Preferred(prefix netip.Prefix) int {
	flag, longest := s.IPv4, samplecrd.MaxIPv4PrefixLength
	if !prefix.Addr().Is4() {
		flag, longest = s.IPv6, samplecrd.MaxIPv6PrefixLength
	}
	return min(max(flag, prefix.Bits()+4), longest)
}

// ClaimREST is networks/{name}/blockclaims: a create-only subresource (like pods/eviction) whose
// POST of a BlockClaim gives the node a free block of the Network and answers the node's
// BlockAllocation after the claim.
type ClaimREST struct {
	// Blocks is the allocator of the block keyspace (<etcd prefix>/blocks), scope = Network UID.
	Blocks *allocator.Allocator
	// Networks and Objects are the codecs of Networks and of BlockAllocations.
	Networks, Objects *networkstorage.EtcdCodec
	Sizes             BlockSizes
	// NodeLabels, when set, tells the labels of Nodes: a claim for a node the Network's
	// spec.nodeSelector does not select is refused (see checkSelected).
	NodeLabels NodeLabelsFunc
	// Quota, when set, bounds the free addresses a node agent holds before it claims more (quota.go).
	Quota *Quota
	// AllocationKey names a Network's allocation key (false: none; nil: claims are not guarded
	// by it). A claim is guarded by its ModRevision as read with the Network: a gateway change
	// without gateway keys writes that key again (allocator.GatewayKeysNone).
	AllocationKey func(n *samplecrd.Network) (string, bool)
}

var (
	_ rest.NamedCreater    = &ClaimREST{}
	_ rest.StorageMetadata = &ClaimREST{}
)

// New returns an empty BlockClaim, the body of a POST.
func (r *ClaimREST) New() runtime.Object { return &samplecrd.BlockClaim{} }

// Destroy does nothing: the stores own the etcd clients.
func (r *ClaimREST) Destroy() {}

// ProducesMIMETypes is nil: the usual media types.
func (r *ClaimREST) ProducesMIMETypes(string) []string { return nil }

// ProducesObject says that a claim answers a BlockAllocation, for OpenAPI.
func (r *ClaimREST) ProducesObject(string) interface{} { return v1.BlockAllocation{} }

// maxClaimAttempts bounds the re-reads and re-picks of one claim that lost races.
const maxClaimAttempts = 32

var (
	errNetworkChanged = errors.New("the network was deleted or replaced, or its gateway changed, meanwhile")
	errNodeChanged    = errors.New("the node's block allocation changed meanwhile")
)

// Create gives the claim's node a block of Network name.
func (r *ClaimREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	claim, ok := obj.(*samplecrd.BlockClaim)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("not a BlockClaim: %T", obj))
	}
	ns, _ := genericapirequest.NamespaceFrom(ctx)
	if errs := validateClaim(claim, name); len(errs) > 0 {
		return nil, apierrors.NewInvalid(samplecrd.Kind("BlockClaim"), name, errs)
	}
	if createValidation != nil {
		if err := createValidation(ctx, claim.DeepCopyObject()); err != nil {
			return nil, err
		}
	}
	netKey := r.Networks.KeyPrefix() + ns + "/" + name
	objName := blockallocation.Name(name, claim.NodeName)
	objKey := r.Objects.KeyPrefix() + ns + "/" + objName
	cover := len(claim.Cover) > 0
	for range maxClaimAttempts {
		if cover {
			out, err := r.coverOnce(ctx, ns, name, netKey, objName, objKey, claim.NodeName, claim.Cover, dryrun.IsDryRun(options.DryRun))
			if errors.Is(err, errNetworkChanged) || errors.Is(err, errNodeChanged) || errors.As(err, new(*allocator.OverlapError)) {
				continue
			}
			return out, err
		}
		out, err := r.claimOnce(ctx, ns, name, netKey, objName, objKey, claim.NodeName, dryrun.IsDryRun(options.DryRun))
		if errors.Is(err, errNetworkChanged) || errors.Is(err, errNodeChanged) || errors.As(err, new(*allocator.OverlapError)) {
			continue // read again, pick again
		}
		return out, err
	}
	return nil, apierrors.NewConflict(samplecrd.Resource("networks/blockclaims"), name,
		fmt.Errorf("every block picked for node %s was taken by a concurrent claim first (%d attempts); retry", claim.NodeName, maxClaimAttempts))
}

func validateClaim(claim *samplecrd.BlockClaim, network string) field.ErrorList {
	var errs field.ErrorList
	if claim.Name != "" && claim.Name != network {
		errs = append(errs, field.Invalid(field.NewPath("metadata", "name"), claim.Name, "must be empty or the Network's name "+network))
	}
	nodePath := field.NewPath("nodeName")
	if claim.NodeName == "" {
		errs = append(errs, field.Required(nodePath, "the node that claims a block"))
	} else {
		for _, msg := range apimachineryvalidation.NameIsDNSSubdomain(claim.NodeName, false) {
			errs = append(errs, field.Invalid(nodePath, claim.NodeName, msg))
		}
	}
	coverPath := field.NewPath("cover")
	if len(claim.Cover) > maxCover {
		errs = append(errs, field.TooMany(coverPath, len(claim.Cover), maxCover))
	} else {
		for i, c := range claim.Cover {
			if a, err := netip.ParseAddr(c); err != nil || a.Zone() != "" || a.Is4In6() || a.String() != c {
				errs = append(errs, field.Invalid(coverPath.Index(i), c, "must be an IPv4 or IPv6 address in canonical form"))
			}
		}
	}
	return errs
}

// storedNetwork is a Network as a claim read it from etcd.
type storedNetwork struct {
	*samplecrd.Network
	// createRevision is its incarnation, modRevision the version read.
	createRevision, modRevision int64
	prefix                      netip.Prefix
	gateway                     netip.Addr
	// allocationKey is the Network's allocation key ("": not guarded by it) and
	// allocationModRevision its ModRevision (0: absent) at the revision the Network was read at.
	allocationKey         string
	allocationModRevision int64
}

// network reads the Network at netKey, and its allocation key as it was at that revision
// (errNetworkChanged when that key has changed since).
func (r *ClaimREST) network(ctx context.Context, netKey, name string) (storedNetwork, error) {
	kv, readAt, err := r.Blocks.GetRevision(ctx, netKey)
	if err != nil {
		return storedNetwork{}, networkstorage.StorageError(err)
	}
	if kv == nil {
		return storedNetwork{}, apierrors.NewNotFound(samplecrd.Resource("networks"), name)
	}
	n, err := r.Networks.Decode(ctx, kv)
	if err != nil {
		return storedNetwork{}, err
	}
	if n.DeletionTimestamp != nil {
		return storedNetwork{}, apierrors.NewConflict(samplecrd.Resource("networks"), name,
			errors.New("the network is being deleted: it gives out no more blocks"))
	}
	prefix, err := netip.ParsePrefix(n.Spec.CIDR)
	if err != nil || prefix.Masked() != prefix {
		return storedNetwork{}, apierrors.NewInternalError(fmt.Errorf("stored network %s has no valid spec.cidr %q", name, n.Spec.CIDR))
	}
	gw, err := netip.ParseAddr(n.Spec.Gateway)
	if err != nil {
		return storedNetwork{}, apierrors.NewInternalError(fmt.Errorf("stored network %s has no valid spec.gateway %q", name, n.Spec.Gateway))
	}
	sn := storedNetwork{Network: n, createRevision: kv.CreateRevision, modRevision: kv.ModRevision, prefix: prefix, gateway: gw}
	if r.AllocationKey != nil {
		if key, ok := r.AllocationKey(n); ok {
			akv, err := r.Blocks.Get(ctx, key)
			if err != nil {
				return storedNetwork{}, networkstorage.StorageError(err)
			}
			if akv != nil {
				if akv.ModRevision > readAt {
					return storedNetwork{}, errNetworkChanged // maybe a gateway change since: read both again
				}
				sn.allocationModRevision = akv.ModRevision
			}
			sn.allocationKey = key
		}
	}
	return sn, nil
}

// allocationGuard guards a claim by sn's allocation key as read (a gateway change writes it
// again): nothing without one; check turns a failed compare into errNetworkChanged.
func (sn storedNetwork) allocationGuard() ([]clientv3.Cmp, []clientv3.Op, func(*etcdserverpb.ResponseOp) error) {
	if sn.allocationKey == "" {
		return nil, nil, nil
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(sn.allocationKey), "=", sn.allocationModRevision)},
		[]clientv3.Op{clientv3.OpGet(sn.allocationKey, clientv3.WithKeysOnly())},
		func(r *etcdserverpb.ResponseOp) error {
			var m int64
			if kvs := r.GetResponseRange().Kvs; len(kvs) > 0 {
				m = kvs[0].ModRevision
			}
			if m != sn.allocationModRevision {
				return errNetworkChanged
			}
			return nil
		}
}

// incarnation guards a write by the Network's incarnation: probe reads its key, check turns a
// failed compare into errNetworkChanged.
func incarnation(netKey string, createRevision int64) (clientv3.Cmp, clientv3.Op, func(*etcdserverpb.ResponseOp) error) {
	return clientv3.Compare(clientv3.CreateRevision(netKey), "=", createRevision),
		clientv3.OpGet(netKey, clientv3.WithKeysOnly()),
		func(r *etcdserverpb.ResponseOp) error {
			if kvs := r.GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != createRevision {
				return errNetworkChanged
			}
			return nil
		}
}

// ensureGateway writes the Network's gateway key when it has none (Networks created before
// blocks existed, or by an older replica), so that no block is ever picked over the gateway.
// The write is guarded by the Network's ModRevision as read: a gateway moved meanwhile must not
// get its old key back.
// Without gateway keys (allocator.GatewayKeysNone) it writes nothing: claims avoid the gateway
// they read and are guarded by the allocation key.
func (r *ClaimREST) ensureGateway(ctx context.Context, sn storedNetwork, netKey string) error {
	if !r.Blocks.WritesGatewayKeys() {
		return nil
	}
	n, prefix, gw := sn.Network, sn.prefix, sn.gateway
	al, ok := allocator.GatewayOf(n)
	if !ok {
		return apierrors.NewInternalError(fmt.Errorf("stored network %s has no valid gateway %q in %s", n.Name, gw, prefix))
	}
	kv, err := r.Blocks.Get(ctx, r.Blocks.Key(al.Scope, al.Prefix))
	if err != nil {
		return networkstorage.StorageError(err)
	}
	if kv != nil {
		if s := r.Blocks.Decode(kv); s.Corrupt == nil && s.Role == allocator.RoleGateway && s.Prefix == al.Prefix {
			return nil
		}
		return apierrors.NewConflict(samplecrd.Resource("networks"), n.Name, fmt.Errorf("the gateway %s is inside a block; change spec.gateway", gw))
	}
	_, err = r.Blocks.Write(ctx, al, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(netKey), "=", sn.modRevision)},
		[]clientv3.Op{clientv3.OpGet(netKey, clientv3.WithKeysOnly())},
		func(rs []*etcdserverpb.ResponseOp) error {
			if kvs := rs[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].ModRevision != sn.modRevision {
				return errNetworkChanged
			}
			return nil
		})
	var overlap *allocator.OverlapError
	switch {
	case errors.As(err, &overlap) && overlap.Other.Role == allocator.RoleGateway:
		return errNetworkChanged // written meanwhile: read again
	case errors.As(err, &overlap):
		return apierrors.NewConflict(samplecrd.Resource("networks"), n.Name,
			fmt.Errorf("the gateway %s is inside block %s of node %s; change spec.gateway", gw, overlap.Other.Prefix, overlap.Other.Node))
	case errors.Is(err, errNetworkChanged):
		return err
	}
	return networkstorage.StorageError(err)
}

func (r *ClaimREST) claimOnce(ctx context.Context, ns, name, netKey, objName, objKey, node string, dryRun bool) (runtime.Object, error) {
	sn, err := r.network(ctx, netKey, name)
	if err != nil {
		return nil, err
	}
	n, prefix := sn.Network, sn.prefix
	if err := r.checkSelected(n, node); err != nil {
		return nil, err
	}
	if !dryRun {
		if err := r.ensureGateway(ctx, sn, netKey); err != nil {
			return nil, err
		}
	}
	if legacy := legacyNodes(n, node); len(legacy) > 0 {
		return nil, waitingForUpgrade(name, prefix, node, legacy)
	}
	current, objModRevision, err := r.nodeObject(ctx, ns, name, objName, objKey, node, n)
	if err != nil {
		return nil, err
	}
	if len(current.Blocks) >= r.Sizes.MaxPerNode {
		return nil, exhausted(name, fmt.Sprintf("%s: node %s holds %d blocks, the most one node may hold (--max-blocks-per-node)",
			prefix, node, len(current.Blocks)))
	}
	if err := r.Quota.checkQuota(ctx, n, prefix, sn.gateway, current); err != nil {
		return nil, err
	}
	block, err := r.pick(ctx, string(n.UID), prefix, sn.gateway)
	if err != nil {
		var none *allocator.ExhaustedError
		if errors.As(err, &none) {
			return nil, exhausted(name, r.exhaustedMessage(ctx, string(n.UID), prefix, node))
		}
		return nil, networkstorage.StorageError(err)
	}
	current.Blocks = append(current.Blocks, samplecrd.Block{CIDR: block.String(), ClaimedAt: metav1.Now(), Origin: samplecrd.BlockOriginClaimed})
	if dryRun {
		return current, nil
	}
	out, _, err := r.commit(ctx, sn, netKey, objKey, objModRevision, current, block)
	return out, err
}

// nodeObject reads the node's BlockAllocation of Network n and its ModRevision (0: none yet).
func (r *ClaimREST) nodeObject(ctx context.Context, ns, name, objName, objKey, node string, n *samplecrd.Network) (*samplecrd.BlockAllocation, int64, error) {
	current := &samplecrd.BlockAllocation{}
	var objModRevision int64
	kv, err := r.Blocks.Get(ctx, objKey)
	if err != nil {
		return nil, 0, networkstorage.StorageError(err)
	}
	if kv != nil {
		if err := r.Objects.DecodeInto(ctx, kv, current); err != nil {
			return nil, 0, err
		}
		objModRevision = kv.ModRevision
	}
	if current.NetworkUID != string(n.UID) {
		// None yet, or left over from an earlier Network of this name (its keys are in that
		// Network's scope, which the verifier removes): start afresh.
		current = &samplecrd.BlockAllocation{ObjectMeta: metav1.ObjectMeta{Name: objName, Namespace: ns, UID: uuid.NewUUID(),
			CreationTimestamp: metav1.Now()}, Network: name, NetworkUID: string(n.UID), NodeName: node}
	}
	if current.NodeName != node {
		return nil, 0, apierrors.NewConflict(samplecrd.Resource("networks/blockclaims"), name,
			fmt.Errorf("block allocation %s belongs to node %s, whose name hashes like %s's", objName, current.NodeName, node))
	}
	return current, objModRevision, nil
}

// commit writes current (whose last block is block, new) and block's key in one transaction
// guarded by the Network's incarnation and the node object's ModRevision as read. It returns
// the object as stored and its new ModRevision.
func (r *ClaimREST) commit(ctx context.Context, sn storedNetwork, netKey, objKey string, objModRevision int64,
	current *samplecrd.BlockAllocation, block netip.Prefix) (*samplecrd.BlockAllocation, int64, error) {
	n, createRevision, prefix, ns, name, node := sn.Network, sn.createRevision, sn.prefix, current.Namespace, current.Network, current.NodeName
	current.ResourceVersion = ""
	data, stored, err := r.Objects.Encode(ctx, objKey, current)
	if err != nil {
		return nil, 0, err
	}
	al := allocator.Allocation{Scope: string(n.UID), Prefix: block, Owner: allocator.Owner{Namespace: ns, Name: name, UID: string(n.UID)},
		Node: node, Role: allocator.RoleBlock, Within: prefix}
	netCmp, netProbe, netCheck := incarnation(netKey, createRevision)
	allocCmps, allocProbes, allocCheck := sn.allocationGuard()
	rev, err := r.Blocks.Write(ctx, al,
		append([]clientv3.Cmp{netCmp, clientv3.Compare(clientv3.ModRevision(objKey), "=", objModRevision)}, allocCmps...),
		append([]clientv3.Op{netProbe, clientv3.OpGet(objKey, clientv3.WithKeysOnly())}, allocProbes...),
		func(rs []*etcdserverpb.ResponseOp) error {
			if err := netCheck(rs[0]); err != nil {
				return err
			}
			if allocCheck != nil {
				if err := allocCheck(rs[2]); err != nil {
					return err
				}
			}
			var m int64
			if kvs := rs[1].GetResponseRange().Kvs; len(kvs) > 0 {
				m = kvs[0].ModRevision
			}
			if m != objModRevision {
				return errNodeChanged
			}
			return nil
		},
		clientv3.OpPut(objKey, stored))
	if err != nil {
		if errors.Is(err, errNetworkChanged) || errors.Is(err, errNodeChanged) || errors.As(err, new(*allocator.OverlapError)) {
			return nil, 0, err
		}
		return nil, 0, networkstorage.StorageError(err)
	}
	out := &samplecrd.BlockAllocation{}
	if err := r.Objects.DecodeData(data, out, rev); err != nil {
		return nil, 0, err
	}
	return out, rev, nil
}

// pick returns a free block of prefix: of the preferred size if one is left, else of the next
// smaller size, down to a single address.
func (r *ClaimREST) pick(ctx context.Context, scope string, prefix netip.Prefix, gateway netip.Addr) (netip.Prefix, error) {
	var last error
	for bits := r.Sizes.Preferred(prefix); bits <= prefix.Addr().BitLen(); bits++ {
		block, err := r.Blocks.PickBlock(ctx, scope, prefix, bits, gateway)
		if err == nil {
			return block, nil
		}
		if !errors.As(err, new(*allocator.ExhaustedError)) {
			return netip.Prefix{}, err
		}
		last = err
	}
	return netip.Prefix{}, last
}

// exhaustedMessage says how the prefix is held, for the answer of a claim that found nothing free.
func (r *ClaimREST) exhaustedMessage(ctx context.Context, scope string, prefix netip.Prefix, node string) string {
	blocks, nodes := 0, map[string]bool{}
	_, err := r.Blocks.Scan(ctx, r.Blocks.ScopePrefix(scope), 0, func(kv *mvccpb.KeyValue) error {
		if s := r.Blocks.Decode(kv); s.Corrupt == nil && s.Role == allocator.RoleBlock {
			blocks++
			nodes[s.Node] = true
		}
		return nil
	})
	if err != nil {
		return fmt.Sprintf("%s: no free address block for %s", prefix, node)
	}
	return fmt.Sprintf("%s: no free address block for %s (%d blocks held by %d nodes)", prefix, node, blocks, len(nodes))
}

// exhausted is a claim's answer when no block is left: 409 with reason AddressesExhausted.
func exhausted(network, message string) error {
	return &apierrors.StatusError{ErrStatus: metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusConflict,
		Reason:  ReasonAddressesExhausted,
		Message: message,
		Details: &metav1.StatusDetails{Group: samplecrd.GroupName, Kind: "networks", Name: network,
			Causes: []metav1.StatusCause{{Type: metav1.CauseType(ReasonAddressesExhausted), Message: message}}},
	}}
}
