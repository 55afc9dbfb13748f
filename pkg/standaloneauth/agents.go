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

package standaloneauth

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
)

// agentTokenPrefix starts a node agent's token: network-agent:<node>:<hex HMAC>.
const agentTokenPrefix = "network-agent:"

// AgentToken is node's credential on a standalone server whose admin token is admin: the node
// name and an HMAC-SHA256 of it keyed with the admin token. The server checks it by computing the
// HMAC again, so it keeps no list; a new admin token (delete <data-dir>/admin.token) revokes every
// agent token with the admin's.
func AgentToken(admin, node string) string {
	return agentTokenPrefix + node + ":" + agentMAC(admin, node)
}

func agentMAC(admin, node string) string {
	m := hmac.New(sha256.New, []byte(admin))
	m.Write([]byte(agentTokenPrefix + node))
	return hex.EncodeToString(m.Sum(nil))
}

// agentUser returns the user of a valid agent token: system:network-agent:<node> in the group
// system:network-agents (pkg/admission/nodeidentity), which NetworkNodeRestriction holds to node.
func agentUser(admin, presented string) (*authenticator.Response, bool) {
	rest, ok := strings.CutPrefix(presented, agentTokenPrefix)
	if !ok {
		return nil, false
	}
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return nil, false
	}
	node, mac := rest[:i], rest[i+1:]
	if !hmac.Equal([]byte(mac), []byte(agentMAC(admin, node))) {
		return nil, false
	}
	return &authenticator.Response{User: &user.DefaultInfo{Name: nodeidentity.UserPrefix + node,
		Groups: []string{nodeidentity.Group, user.AllAuthenticated}}}, true
}

// agentAuthorizer lets the group of agent credentials do what the agents' ClusterRole allows in a
// cluster (artifacts/deploy/rbac.yaml): read Networks and BlockAllocations, patch
// networks/status, claim blocks, and discovery. NetworkNodeRestriction narrows the writes to
// the agent's own node.
func agentAuthorizer() authorizer.Authorizer {
	return authorizer.AuthorizerFunc(func(_ context.Context, a authorizer.Attributes) (authorizer.Decision, string, error) {
		if a.GetUser() == nil || !contains(a.GetUser().GetGroups(), nodeidentity.Group) {
			return authorizer.DecisionNoOpinion, "", nil
		}
		if !a.IsResourceRequest() {
			if a.GetVerb() == "get" && isDiscoveryPath(a.GetPath()) {
				return authorizer.DecisionAllow, "", nil
			}
			return authorizer.DecisionNoOpinion, "", nil
		}
		read := a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch"
		switch r := a.GetResource() + "/" + a.GetSubresource(); {
		case a.GetAPIGroup() != "samplecrd.k8s.io":
		case (r == "networks/" || r == "blockallocations/") && read,
			r == "networks/status" && (a.GetVerb() == "get" || a.GetVerb() == "patch"),
			r == "networks/blockclaims" && a.GetVerb() == "create":
			return authorizer.DecisionAllow, "", nil
		}
		return authorizer.DecisionNoOpinion, "", nil
	})
}

// isDiscoveryPath: discovery, OpenAPI and version, which clients read before they act.
func isDiscoveryPath(p string) bool {
	for _, d := range []string{"/api", "/apis", "/openapi", "/version"} {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// WriteAgentKubeconfig writes a kubeconfig for node's agent token, trusting the serving
// certificate, to file (0600).
func WriteAgentKubeconfig(file, server string, caPEM []byte, admin, node string) error {
	if errs := apimachineryvalidation.NameIsDNSSubdomain(node, false); len(errs) > 0 {
		return fmt.Errorf("agent node name %q: %s", node, strings.Join(errs, "; "))
	}
	name := nodeidentity.UserPrefix + node
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["network-apiserver"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[name] = &clientcmdapi.AuthInfo{Token: AgentToken(admin, node)}
	cfg.Contexts["network-apiserver"] = &clientcmdapi.Context{Cluster: "network-apiserver", AuthInfo: name, Namespace: "default"}
	cfg.CurrentContext = "network-apiserver"
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return os.Chmod(file, 0o600)
}
