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
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizer"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/tools/clientcmd"
)

func TestAdminTokenIsKeptAcrossStarts(t *testing.T) {
	file := filepath.Join(t.TempDir(), "admin.token")
	first, err := LoadOrCreateAdminToken(file)
	if err != nil {
		t.Fatal(err)
	}
	if len(first) != 64 {
		t.Errorf("token %q: want 64 hex characters", first)
	}
	if info, err := os.Stat(file); err != nil || info.Mode().Perm() != 0o600 {
		t.Errorf("token file mode %v (err %v), want 0600", info.Mode().Perm(), err)
	}
	second, err := LoadOrCreateAdminToken(file)
	if err != nil || second != first {
		t.Errorf("second start got %q (err %v), want the first token %q", second, err, first)
	}
}

func TestStandaloneAuth(t *testing.T) {
	config := &genericapiserver.Config{}
	if err := Apply(config, "secret"); err != nil {
		t.Fatal(err)
	}
	request := func(path, token string) *http.Request {
		r := httptest.NewRequest(http.MethodGet, path, nil)
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		return r
	}

	resp, ok, err := config.Authentication.Authenticator.AuthenticateRequest(request("/apis", "secret"))
	if err != nil || !ok || resp.User.GetName() != AdminUser {
		t.Fatalf("admin token: ok=%v err=%v resp=%v", ok, err, resp)
	}
	admin := resp.User
	if _, ok, _ := config.Authentication.Authenticator.AuthenticateRequest(request("/apis", "wrong")); ok {
		t.Error("a wrong token was accepted")
	}
	if _, ok, _ := config.Authentication.Authenticator.AuthenticateRequest(request("/apis", "")); ok {
		t.Error("an anonymous request outside the health endpoints was authenticated")
	}
	resp, ok, _ = config.Authentication.Authenticator.AuthenticateRequest(request("/readyz/etcd", ""))
	if !ok || resp.User.GetName() != user.Anonymous {
		t.Errorf("anonymous /readyz/etcd: ok=%v user=%v, want anonymous", ok, resp)
	}

	decide := func(u user.Info, path string) authorizer.Decision {
		d, _, err := config.Authorization.Authorizer.Authorize(t.Context(), authorizer.AttributesRecord{User: u, Path: path, Verb: "get"})
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	anonymous := &user.DefaultInfo{Name: user.Anonymous, Groups: []string{user.AllUnauthenticated}}
	if decide(anonymous, "/livez") != authorizer.DecisionAllow {
		t.Error("anonymous must reach /livez")
	}
	if decide(anonymous, "/apis/samplecrd.k8s.io/v1") == authorizer.DecisionAllow {
		t.Error("anonymous must not reach the API")
	}
	if decide(&user.DefaultInfo{Name: "mallory", Groups: []string{user.AllAuthenticated}}, "/metrics") == authorizer.DecisionAllow {
		t.Error("an authenticated user outside system:masters must be denied")
	}
	if decide(admin, "/metrics") != authorizer.DecisionAllow {
		t.Error("the admin must be allowed")
	}
}

func TestAdminKubeconfig(t *testing.T) {
	file := filepath.Join(t.TempDir(), "sub", "admin.kubeconfig")
	if err := WriteAdminKubeconfig(file, "https://127.0.0.1:8443", []byte("CA"), "tok"); err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.LoadFromFile(file)
	if err != nil {
		t.Fatal(err)
	}
	ctx := cfg.Contexts[cfg.CurrentContext]
	if ctx == nil || cfg.Clusters[ctx.Cluster].Server != "https://127.0.0.1:8443" ||
		string(cfg.Clusters[ctx.Cluster].CertificateAuthorityData) != "CA" || cfg.AuthInfos[ctx.AuthInfo].Token != "tok" {
		t.Errorf("kubeconfig does not point at the server with the CA and token: %+v", cfg)
	}
	if info, _ := os.Stat(file); info.Mode().Perm() != 0o600 {
		t.Errorf("kubeconfig mode %v, want 0600", info.Mode().Perm())
	}
}
