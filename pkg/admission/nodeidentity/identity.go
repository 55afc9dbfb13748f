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

// Package nodeidentity tells which node a request speaks for: a user of the node agents'
// identity (a user name or group given by --agent-identity) carrying a node name, either in the
// user extra authentication.kubernetes.io/node-name (ServiceAccount tokens bound to a pod or to
// a Node; kube-apiserver passes extras through the aggregation layer) or in a user name
// system:network-agent:<node> (a per-node credential outside Kubernetes).
package nodeidentity

import (
	"slices"
	"strings"

	"k8s.io/apiserver/pkg/authentication/user"
)

const (
	// NodeNameExtra is the user extra kube-apiserver sets from a ServiceAccount token's node claim.
	NodeNameExtra = "authentication.kubernetes.io/node-name"
	// UserPrefix starts the user name of a per-node agent credential: system:network-agent:<node>.
	UserPrefix = "system:network-agent:"
	// Group is the group of per-node agent credentials.
	Group = "system:network-agents"
	// DefaultAgentServiceAccount is the agents' ServiceAccount in artifacts/deploy.
	DefaultAgentServiceAccount = "system:serviceaccount:network-agent:network-agent"
)

// DefaultAgents are the default --agent-identity: the deployed agents' ServiceAccount and the
// group of per-node credentials.
var DefaultAgents = []string{DefaultAgentServiceAccount, Group}

// Identity recognises the node agents.
type Identity struct {
	// Agents are the user names and groups whose requests are node agents'.
	Agents []string
}

// Node says whether u is a node agent and, if so, which node it speaks for; node is empty for
// an agent whose credential names no node (refused wherever a rule needs one).
func (i Identity) Node(u user.Info) (node string, agent bool) {
	if u == nil || !i.isAgent(u) {
		return "", false
	}
	if names := u.GetExtra()[NodeNameExtra]; len(names) == 1 && names[0] != "" {
		return names[0], true
	}
	if rest, ok := strings.CutPrefix(u.GetName(), UserPrefix); ok && rest != "" && !strings.Contains(rest, ":") {
		return rest, true
	}
	return "", true
}

func (i Identity) isAgent(u user.Info) bool {
	if slices.Contains(i.Agents, u.GetName()) {
		return true
	}
	for _, g := range u.GetGroups() {
		if slices.Contains(i.Agents, g) {
			return true
		}
	}
	return false
}
