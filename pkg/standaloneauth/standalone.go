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

// Package standaloneauth is the authentication and authorization of a standalone network-apiserver
// (no core Kubernetes API to delegate to): one admin bearer token, kept in a file, and a kubeconfig
// for it; per-node agent tokens derived from it (agents.go); anonymous requests reach the health
// endpoints only.
package standaloneauth

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/request/bearertoken"
	"k8s.io/apiserver/pkg/authentication/request/union"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/apiserver/pkg/authorization/path"
	authorizerunion "k8s.io/apiserver/pkg/authorization/union"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// AdminUser is the identity of the admin credential a standalone server writes.
const AdminUser = "network-apiserver-admin"

// healthPaths may be read without credentials, so that probes work; everything else needs the token.
var healthPaths = []string{"/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*"}

// LoadOrCreateAdminToken returns the admin bearer token kept in file, creating it on first start,
// so that a kubeconfig written once stays valid across restarts.
func LoadOrCreateAdminToken(file string) (string, error) {
	if b, err := os.ReadFile(file); err == nil {
		if token := strings.TrimSpace(string(b)); token != "" {
			return token, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", err
	}
	token := hex.EncodeToString(raw)
	if err := os.WriteFile(file, []byte(token+"\n"), 0o600); err != nil {
		return "", err
	}
	return token, nil
}

// Apply makes the admin token and the agent tokens derived from it (AgentToken) the only
// credentials: the admin is in system:masters and may do anything, an agent may do what the
// agents' ClusterRole allows in a cluster (agentAuthorizer); anonymous requests reach the
// health endpoints only.
func Apply(config *genericapiserver.Config, token string) error {
	admin := &authenticator.Response{User: &user.DefaultInfo{
		Name:   AdminUser,
		Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated},
	}}
	config.Authentication.Authenticator = union.New(
		bearertoken.New(adminToken(token, admin)),
		authenticator.RequestFunc(func(req *http.Request) (*authenticator.Response, bool, error) {
			if isHealthPath(req.URL.Path) {
				return &authenticator.Response{User: &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}}, true, nil
			}
			return nil, false, nil
		}),
	)
	healthAuthz, err := path.NewAuthorizer(healthPaths)
	if err != nil {
		return err
	}
	config.Authorization.Authorizer, err = authorizerunion.New(
		authorizerunion.NamedAuthorizer{AuthorizerName: "health-paths", Authorizer: healthAuthz},
		authorizerunion.NamedAuthorizer{AuthorizerName: "admin", Authorizer: authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)},
		authorizerunion.NamedAuthorizer{AuthorizerName: "agents", Authorizer: agentAuthorizer()},
	)
	return err
}

// adminToken accepts exactly the admin token, compared in constant time, and the agent tokens
// derived from it.
func adminToken(token string, admin *authenticator.Response) authenticator.Token {
	return authenticator.TokenFunc(func(_ context.Context, presented string) (*authenticator.Response, bool, error) {
		if subtle.ConstantTimeCompare([]byte(presented), []byte(token)) == 1 {
			return admin, true, nil
		}
		if agent, ok := agentUser(token, presented); ok {
			return agent, true, nil
		}
		return nil, false, nil
	})
}

func isHealthPath(p string) bool {
	for _, h := range []string{"/healthz", "/livez", "/readyz"} {
		if p == h || strings.HasPrefix(p, h+"/") {
			return true
		}
	}
	return false
}

// WriteAdminKubeconfig writes a kubeconfig for the admin token that trusts the serving certificate.
func WriteAdminKubeconfig(file, server string, caPEM []byte, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["network-apiserver"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: caPEM}
	cfg.AuthInfos[AdminUser] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["network-apiserver"] = &clientcmdapi.Context{Cluster: "network-apiserver", AuthInfo: AdminUser, Namespace: "default"}
	cfg.CurrentContext = "network-apiserver"
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	if err := clientcmd.WriteToFile(*cfg, file); err != nil {
		return fmt.Errorf("writing %s: %w", file, err)
	}
	return os.Chmod(file, 0o600)
}
