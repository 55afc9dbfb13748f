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
	apiequality "k8s.io/apimachinery/pkg/api/equality"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

// The node's own status write comes back as an update of the Network. Reconciling it again
// costs a full Ensure and a look at the leases and finds nothing to do: with 1000
// Networks created at once it was half of the node's work (two reconciles per Network, the
// second always in sync). An update is an echo, and is not queued, when it changed nothing but
// this node's entry and what the server derives from the entries (conditions, capacity,
// observedGeneration), and the entry is exactly the one this node last wrote. Anything else
// (the spec, metadata, another node's entry, the VNI, or this node's entry changed by someone
// else) is queued as before; the periodic resync still reconciles every Network.

// rememberEntry records the entry the node has just written for key.
func (c *Controller) rememberEntry(key string, entry v1.NetworkNodeStatus) {
	c.writtenMu.Lock()
	defer c.writtenMu.Unlock()
	c.entries[key] = entry
}

// isEcho tells whether the update from old to cur is the node's own status write coming back.
func (c *Controller) isEcho(old, cur interface{}) bool {
	o, ok1 := old.(*v1.Network)
	n, ok2 := cur.(*v1.Network)
	if !ok1 || !ok2 {
		return false
	}
	mine := nodestatus.FindEntry(n, c.opts.NodeName)
	if mine == nil {
		return false
	}
	c.writtenMu.Lock()
	last, ok := c.entries[o.Namespace+"/"+o.Name]
	c.writtenMu.Unlock()
	if !ok || !nodestatus.SameReport(*mine, last) {
		return false
	}
	return apiequality.Semantic.DeepEqual(c.withoutEcho(o), c.withoutEcho(n))
}

// withoutEcho is n without what the node's own write changes.
func (c *Controller) withoutEcho(n *v1.Network) *v1.Network {
	// A shallow copy: the fields set here are replaced, never written through, so the informer's
	// object stays as it is without copying every entry of every update.
	s := *n
	s.ResourceVersion, s.ManagedFields = "", nil
	s.Status.Conditions, s.Status.Capacity, s.Status.ObservedGeneration = nil, nil, 0
	var others []v1.NetworkNodeStatus
	for _, e := range n.Status.Nodes {
		if e.NodeName != c.opts.NodeName {
			others = append(others, e)
		}
	}
	s.Status.Nodes = others
	return &s
}
