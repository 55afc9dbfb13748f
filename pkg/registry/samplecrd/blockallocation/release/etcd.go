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

package release

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
)

// EtcdStore finds candidates in the servers' watch caches and releases them in etcd.
//
// Reading the caches is enough, however far behind they are: an object read at ModRevision r is
// exactly what etcd held at r, and the release compares both the Network's and the
// BlockAllocation's ModRevision with the ones read, so it commits only if both are, at the
// revision of the commit, still exactly what the decision read. A pass thus costs one LIST of
// BlockAllocations and one GET of a Network per BlockAllocation from memory, and no etcd read.
type EtcdStore struct {
	// Blocks is the allocator of the block keyspace; the releases go through its client.
	Blocks *allocator.Allocator
	// NetworkKeys and ObjectKeys are the etcd key prefixes of Networks and BlockAllocations
	// (ending in "/"; "<prefix><namespace>/<name>" is an object's key).
	NetworkKeys, ObjectKeys string
	// List lists every BlockAllocation, Network reads one Network (nil, nil when there is none),
	// both from the watch cache, with resourceVersion the object's ModRevision.
	List    func(ctx context.Context) ([]*samplecrd.BlockAllocation, error)
	Network func(ctx context.Context, namespace, name string) (*samplecrd.Network, error)
}

// Candidates returns every BlockAllocation whose Network exists with the UID it names. Objects
// of a gone or replaced Network are the Network delete's and the verifier's to remove.
func (s *EtcdStore) Candidates(ctx context.Context) ([]Candidate, error) {
	objects, err := s.List(ctx)
	if err != nil {
		return nil, err
	}
	type read struct {
		n   *samplecrd.Network
		rev int64
	}
	networks := map[string]read{}
	var out []Candidate
	for _, o := range objects {
		if o.NodeName == "" {
			continue
		}
		objRev, err := strconv.ParseInt(o.ResourceVersion, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("block allocation %s/%s has resourceVersion %q: %w", o.Namespace, o.Name, o.ResourceVersion, err)
		}
		netKey := s.NetworkKeys + o.Namespace + "/" + o.Network
		r, ok := networks[netKey]
		if !ok {
			n, err := s.Network(ctx, o.Namespace, o.Network)
			if apierrors.IsNotFound(err) {
				n, err = nil, nil
			}
			if err != nil {
				return nil, err
			}
			if n != nil {
				rev, err := strconv.ParseInt(n.ResourceVersion, 10, 64)
				if err != nil {
					return nil, fmt.Errorf("network %s/%s has resourceVersion %q: %w", n.Namespace, n.Name, n.ResourceVersion, err)
				}
				r = read{n, rev}
			}
			networks[netKey] = r
		}
		if r.n == nil || string(r.n.UID) != o.NetworkUID {
			continue
		}
		c := Candidate{Namespace: o.Namespace, Network: o.Network, Node: o.NodeName,
			ObjectKey: s.ObjectKeys + o.Namespace + "/" + o.Name, ObjectRevision: objRev, NetworkKey: netKey, NetworkRevision: r.rev,
			Selector: r.n.Spec.NodeSelector}
		for i := range r.n.Status.Nodes {
			if r.n.Status.Nodes[i].NodeName == c.Node {
				c.Entry = &r.n.Status.Nodes[i]
				break
			}
		}
		owner := allocator.Owner{Namespace: c.Namespace, Name: c.Network, UID: o.NetworkUID}
		for _, b := range o.Blocks {
			p, err := netip.ParsePrefix(b.CIDR)
			if err != nil {
				continue // no key the claims wrote; the verifier reports it
			}
			c.Blocks = append(c.Blocks, allocator.Allocation{Scope: o.NetworkUID, Prefix: p, Owner: owner,
				Node: c.Node, Role: allocator.RoleBlock})
		}
		out = append(out, c)
	}
	return out, nil
}

// Release deletes c's BlockAllocation and its block keys if the Network and the BlockAllocation
// are still at the revisions c was read at.
func (s *EtcdStore) Release(ctx context.Context, c Candidate) (bool, error) {
	done, _, err := s.Blocks.DeleteIf(ctx, []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(c.NetworkKey), "=", c.NetworkRevision),
		clientv3.Compare(clientv3.ModRevision(c.ObjectKey), "=", c.ObjectRevision),
	}, c.ObjectKey, c.Blocks)
	return done, err
}
