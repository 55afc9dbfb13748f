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

// Package noderestriction is the NetworkNodeRestriction validating admission plugin, in the
// spirit of Kubernetes' NodeRestriction: a node agent (pkg/admission/nodeidentity) may change
// only its own status.nodes[] entry of a Network and claim blocks for its own node. Everything
// else it writes is refused with 403 naming the node and what it asked for. Requests of other
// users pass untouched.
package noderestriction

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// PluginName is the name to enable or disable the plugin with.
const PluginName = "NetworkNodeRestriction"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return New(), nil
	})
}

// New returns the plugin; its identity comes from the initializer (SetAgentIdentity).
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete, admission.Connect)}
}

// Plugin refuses node agents' writes beyond their own node.
type Plugin struct {
	*admission.Handler
	identity *nodeidentity.Identity
}

var _ admission.ValidationInterface = &Plugin{}

// SetAgentIdentity is called by the initializer.
func (p *Plugin) SetAgentIdentity(i nodeidentity.Identity) { p.identity = &i }

// ValidateInitialization checks that the initializer ran.
func (p *Plugin) ValidateInitialization() error {
	if p.identity == nil {
		return errors.New(PluginName + " needs the agents' identity")
	}
	return nil
}

var (
	networks      = samplecrd.Resource("networks")
	networkStatus = "status"
	blockClaims   = "blockclaims"
)

// Validate admits a node agent's write only when it stays within its own node. It sees the
// internal objects after the strategy prepared them, whatever the API version and patch type.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	node, agent := p.identity.Node(a.GetUserInfo())
	if !agent {
		return nil
	}
	what := describe(a)
	if node == "" {
		return admission.NewForbidden(a, fmt.Errorf("user %s is a node agent but its credential names no node (user extra %s): it may not %s",
			a.GetUserInfo().GetName(), nodeidentity.NodeNameExtra, what))
	}
	refuse := func(format string, args ...any) error {
		return admission.NewForbidden(a, fmt.Errorf("node %s may not %s", node, fmt.Sprintf(format, args...)))
	}
	if a.GetResource().GroupResource() != networks {
		return refuse("%s", what)
	}
	switch {
	case a.GetSubresource() == blockClaims && a.GetOperation() == admission.Create:
		claim, ok := a.GetObject().(*samplecrd.BlockClaim)
		if !ok {
			return refuse("%s", what)
		}
		if claim.NodeName != node {
			return refuse("claim blocks of network %s/%s for node %s (nodeName)", a.GetNamespace(), a.GetName(), claim.NodeName)
		}
		return nil
	case (a.GetSubresource() == "" || a.GetSubresource() == networkStatus) && a.GetOperation() == admission.Update:
		n, ok1 := a.GetObject().(*samplecrd.Network)
		old, ok2 := a.GetOldObject().(*samplecrd.Network)
		if !ok1 || !ok2 {
			return refuse("%s", what)
		}
		if changed := Changes(node, n, old); len(changed) > 0 {
			return refuse("change %s of network %s/%s", joinFields(changed), a.GetNamespace(), a.GetName())
		}
		return nil
	}
	return refuse("%s", what)
}

// describe names the request for a refusal: "create networks", "delete networks/status", ...
func describe(a admission.Attributes) string {
	verb := map[admission.Operation]string{admission.Create: "create", admission.Update: "update", admission.Delete: "delete",
		admission.Connect: "connect to"}[a.GetOperation()]
	resource := a.GetResource().Resource
	if a.GetSubresource() != "" {
		resource += "/" + a.GetSubresource()
	}
	if a.GetName() == "" {
		return fmt.Sprintf("%s %s in namespace %s", verb, resource, a.GetNamespace())
	}
	return fmt.Sprintf("%s %s %s/%s", verb, resource, a.GetNamespace(), a.GetName())
}

// Changes lists what the update from old to n changed beyond node's own status.nodes[] entry,
// as field paths ("spec", "metadata.labels", "status.nodes[node2]", "status.conditions", ...).
// Fields the server derives or keeps itself are not counted: metadata the server manages
// (resourceVersion, managedFields, generation), and, while node entries exist, the Ready
// condition and status.observedGeneration, which the status strategy derives from the entries.
// Without entries, the Ready condition may be dropped (not set or changed).
func Changes(node string, n, old *samplecrd.Network) []string {
	var changed []string
	if !apiequality.Semantic.DeepEqual(n.Spec, old.Spec) {
		changed = append(changed, "spec")
	}
	if !apiequality.Semantic.DeepEqual(n.Labels, old.Labels) {
		changed = append(changed, "metadata.labels")
	}
	if !apiequality.Semantic.DeepEqual(n.Annotations, old.Annotations) {
		changed = append(changed, "metadata.annotations")
	}
	if !apiequality.Semantic.DeepEqual(n.Finalizers, old.Finalizers) {
		changed = append(changed, "metadata.finalizers")
	}
	if !apiequality.Semantic.DeepEqual(n.OwnerReferences, old.OwnerReferences) {
		changed = append(changed, "metadata.ownerReferences")
	}
	meta, oldMeta := n.ObjectMeta.DeepCopy(), old.ObjectMeta.DeepCopy()
	for _, m := range []*metav1.ObjectMeta{meta, oldMeta} {
		m.ResourceVersion, m.ManagedFields, m.Generation = "", nil, 0
		m.Labels, m.Annotations, m.Finalizers, m.OwnerReferences = nil, nil, nil, nil
	}
	if !apiequality.Semantic.DeepEqual(meta, oldMeta) {
		changed = append(changed, "metadata")
	}

	entries := func(list []samplecrd.NetworkNodeStatus) map[string]samplecrd.NetworkNodeStatus {
		out := make(map[string]samplecrd.NetworkNodeStatus, len(list))
		for _, e := range list {
			out[e.NodeName] = e
		}
		return out
	}
	now, before := entries(n.Status.Nodes), entries(old.Status.Nodes)
	var others []string
	for name := range now {
		if name != node && !apiequality.Semantic.DeepEqual(now[name], before[name]) {
			others = append(others, name)
		}
	}
	for name := range before {
		if _, kept := now[name]; !kept && name != node {
			others = append(others, name)
		}
	}
	slices.Sort(others)
	for _, name := range others {
		changed = append(changed, "status.nodes["+name+"]")
	}
	if len(n.Status.Nodes) != len(now) {
		changed = append(changed, "status.nodes (two entries of one node)")
	}
	if n.Status.VNI != old.Status.VNI {
		changed = append(changed, "status.vni")
	}
	derived := len(n.Status.Nodes) > 0
	if !derived && n.Status.ObservedGeneration != old.Status.ObservedGeneration {
		changed = append(changed, "status.observedGeneration")
	}
	oldConditions := conditions(old, derived)
	if !derived && apimeta.FindStatusCondition(n.Status.Conditions, samplecrd.ConditionReady) == nil {
		// The node's field manager may own a Ready condition an older agent wrote (it reported
		// a Network-level condition when it lacked NET_ADMIN): its applies and its withdrawal
		// drop it. Dropping says nothing false; setting it is refused.
		oldConditions = conditions(old, true)
	}
	if !apiequality.Semantic.DeepEqual(conditions(n, derived), oldConditions) {
		changed = append(changed, "status.conditions")
	}
	return changed
}

// conditions are the Network's conditions without those the server derives: AddressesExhausted
// always (no client write sets it: the status strategy keeps the stored one, then derives it), and
// Ready when there are node entries.
func conditions(n *samplecrd.Network, derived bool) []metav1.Condition {
	out := slices.Clone(n.Status.Conditions)
	return slices.DeleteFunc(out, func(c metav1.Condition) bool {
		return c.Type == samplecrd.ConditionAddressesExhausted || (derived && c.Type == samplecrd.ConditionReady)
	})
}

func joinFields(fields []string) string {
	out := ""
	for i, f := range fields {
		switch {
		case i == 0:
		case i == len(fields)-1:
			out += " and "
		default:
			out += ", "
		}
		out += f
	}
	return out
}
