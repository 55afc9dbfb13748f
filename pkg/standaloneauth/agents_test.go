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
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
)

func TestAgentTokens(t *testing.T) {
	config := &genericapiserver.Config{}
	if err := Apply(config, "secret"); err != nil {
		t.Fatal(err)
	}
	authenticate := func(token string) (user.Info, bool) {
		r := httptest.NewRequest(http.MethodGet, "/apis", nil)
		r.Header.Set("Authorization", "Bearer "+token)
		resp, ok, err := config.Authentication.Authenticator.AuthenticateRequest(r)
		if err != nil || !ok {
			return nil, false
		}
		return resp.User, true
	}
	u, ok := authenticate(AgentToken("secret", "node-1.example"))
	if !ok {
		t.Fatal("node-1.example's agent token was refused")
	}
	if node, agent := (nodeidentity.Identity{Agents: nodeidentity.DefaultAgents}).Node(u); !agent || node != "node-1.example" {
		t.Errorf("agent token user %+v: node %q agent %v", u, node, agent)
	}
	for name, token := range map[string]string{
		"another admin's":       AgentToken("other", "node1"),
		"node renamed":          "network-agent:node2:" + agentMAC("secret", "node1"),
		"no mac":                "network-agent:node1:",
		"no node":               "network-agent::" + agentMAC("secret", ""),
		"truncated":             AgentToken("secret", "node1")[:40],
		"without the prefix":    "node1:" + agentMAC("secret", "node1"),
		"mac of the admin only": agentMAC("secret", "node1"),
	} {
		if u, ok := authenticate(token); ok {
			t.Errorf("%s token authenticated as %+v", name, u)
		}
	}

	decide := func(a authorizer.AttributesRecord) authorizer.Decision {
		a.User = u
		d, _, err := config.Authorization.Authorizer.Authorize(t.Context(), a)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	resource := func(verb, resource, subresource string) authorizer.AttributesRecord {
		return authorizer.AttributesRecord{Verb: verb, APIGroup: "samplecrd.k8s.io", APIVersion: "v1", Resource: resource,
			Subresource: subresource, Namespace: "default", Name: "web", ResourceRequest: true}
	}
	for _, a := range []authorizer.AttributesRecord{
		resource("get", "networks", ""), resource("list", "networks", ""), resource("watch", "networks", ""),
		resource("watch", "blockallocations", ""), resource("patch", "networks", "status"),
		resource("create", "networks", "blockclaims"), {Verb: "get", Path: "/apis/samplecrd.k8s.io/v1"}, {Verb: "get", Path: "/openapi/v3"},
	} {
		if decide(a) != authorizer.DecisionAllow {
			t.Errorf("agent denied %s %s/%s %s", a.Verb, a.Resource, a.Subresource, a.Path)
		}
	}
	for _, a := range []authorizer.AttributesRecord{
		resource("patch", "networks", ""), resource("update", "networks", ""), resource("create", "networks", ""),
		resource("delete", "networks", ""), resource("update", "networks", "status"), resource("update", "blockallocations", ""),
		{Verb: "get", Path: "/metrics"}, {Verb: "get", Path: "/debug/pprof/"},
	} {
		if decide(a) == authorizer.DecisionAllow {
			t.Errorf("agent allowed %s %s/%s %s", a.Verb, a.Resource, a.Subresource, a.Path)
		}
	}
}

func TestAgentKubeconfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "agent-node1.kubeconfig")
	if err := WriteAgentKubeconfig(file, "https://127.0.0.1:8443", []byte("ca"), "secret", "node1"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", file)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BearerToken != AgentToken("secret", "node1") || cfg.Host != "https://127.0.0.1:8443" || string(cfg.CAData) != "ca" {
		t.Errorf("kubeconfig: host %s token %q", cfg.Host, cfg.BearerToken)
	}
	if err := WriteAgentKubeconfig(file, "https://127.0.0.1:8443", nil, "secret", "Node_1"); err == nil {
		t.Error("a node name that is no DNS subdomain was accepted")
	}
}
