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

package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// kustomizeObjects renders a kustomization with the pinned kubectl.
func kustomizeObjects(t *testing.T, c *standalone, dir string) []*unstructured.Unstructured {
	t.Helper()
	out := c.kubectl(t, "kustomize", dir)
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	var objs []*unstructured.Unstructured
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("kubectl kustomize %s: %v", dir, err)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

func writeObjects(t *testing.T, objs []*unstructured.Unstructured) string {
	t.Helper()
	var buf bytes.Buffer
	for _, o := range objs {
		b, err := json.Marshal(o.Object)
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	f := filepath.Join(t.TempDir(), "objects.json")
	if err := os.WriteFile(f, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// podFrom is a Pod with the pod template of the workload w, in namespace ns.
func podFrom(t *testing.T, w *unstructured.Unstructured, ns string) *unstructured.Unstructured {
	t.Helper()
	tmpl, ok, err := unstructured.NestedMap(w.Object, "spec", "template")
	if !ok || err != nil {
		t.Fatalf("%s %s has no pod template (%v)", w.GetKind(), w.GetName(), err)
	}
	p := &unstructured.Unstructured{Object: tmpl}
	// A StatefulSet's claims become emptyDirs of the same name.
	claims, _, _ := unstructured.NestedSlice(w.Object, "spec", "volumeClaimTemplates")
	vols, _, _ := unstructured.NestedSlice(tmpl, "spec", "volumes")
	for _, c := range claims {
		name, _, _ := unstructured.NestedString(c.(map[string]any), "metadata", "name")
		vols = append(vols, map[string]any{"name": name, "emptyDir": map[string]any{}})
	}
	if err := unstructured.SetNestedSlice(p.Object, vols, "spec", "volumes"); err != nil {
		t.Fatal(err)
	}
	p.SetAPIVersion("v1")
	p.SetKind("Pod")
	p.SetName("e2e-" + strings.ToLower(w.GetKind()) + "-" + w.GetName())
	p.SetNamespace(ns)
	return p
}

// The manifests a user applies are valid for a real kube-apiserver (server-side dry run, Pod
// Security admission included), and the default roles give Networks to the users they should.
func TestDeployManifestsAndRoles(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	c := localCluster(t)

	// The base and each overlay, as `kubectl apply -k --dry-run=server` would send them. The
	// cert-manager overlay's Issuers and Certificates need cert-manager's CRDs, which this cluster
	// does not have: they are left out of the dry run and checked below for what the base needs.
	issued := map[string]bool{}
	for _, dir := range []string{"artifacts/deploy", "artifacts/deploy-overlays/external-etcd", "artifacts/deploy-overlays/cert-manager"} {
		var objs []*unstructured.Unstructured
		for _, o := range kustomizeObjects(t, c, dir) {
			if strings.HasPrefix(o.GetAPIVersion(), "cert-manager.io/") {
				if o.GetKind() == "Certificate" {
					name, _, _ := unstructured.NestedString(o.Object, "spec", "secretName")
					issued[name] = true
				}
				continue
			}
			objs = append(objs, o)
		}
		out, err := c.kubectlErr("apply", "--dry-run=server", "-f", writeObjects(t, objs))
		if err != nil || strings.Contains(out, "Warning") {
			t.Errorf("kubectl apply --dry-run=server of %s: %v\n%s", dir, err, out)
		}
		if !strings.Contains(out, "deployment.apps/network-apiserver created (server dry run)") &&
			!strings.Contains(out, "deployment.apps/network-apiserver configured (server dry run)") {
			t.Errorf("%s: no Deployment in the dry run:\n%s", dir, out)
		}
	}
	// And `apply -k` itself on the base, as the README says.
	if out, err := c.kubectlErr("apply", "-k", "artifacts/deploy", "--dry-run=server"); err != nil || strings.Contains(out, "Warning") {
		t.Errorf("kubectl apply -k artifacts/deploy --dry-run=server: %v\n%s", err, out)
	}

	// Every Secret the base mounts is issued by the cert-manager overlay.
	base := kustomizeObjects(t, c, "artifacts/deploy")
	for _, o := range base {
		vols, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "volumes")
		for _, v := range vols {
			if name, ok, _ := unstructured.NestedString(v.(map[string]any), "secret", "secretName"); ok && !issued[name] {
				t.Errorf("%s %s mounts Secret %s, which the cert-manager overlay does not issue", o.GetKind(), o.GetName(), name)
			}
		}
	}

	// Pod Security enforcement on the pods themselves: the apiserver and etcd pods pass
	// "restricted" in their namespace; the agent's pod would not, and passes in its own.
	byName := map[string]*unstructured.Unstructured{}
	for _, o := range base {
		byName[o.GetKind()+"/"+o.GetName()] = o
	}
	for _, k := range []string{"Deployment/network-apiserver", "StatefulSet/etcd", "DaemonSet/network-agent"} {
		w := byName[k]
		if w == nil {
			t.Fatalf("the base has no %s", k)
		}
		pod := podFrom(t, w, w.GetNamespace())
		if out, err := c.kubectlErr("create", "--dry-run=server", "-f", writeObjects(t, []*unstructured.Unstructured{pod})); err != nil || strings.Contains(out, "Warning") {
			t.Errorf("the %s pod in namespace %s: %v\n%s", k, w.GetNamespace(), err, out)
		}
	}
	agentHere := podFrom(t, byName["DaemonSet/network-agent"], "network-apiserver")
	if err := unstructured.SetNestedField(agentHere.Object, "network-apiserver", "spec", "serviceAccountName"); err != nil {
		t.Fatal(err)
	}
	out, err := c.kubectlErr("create", "--dry-run=server", "-f", writeObjects(t, []*unstructured.Unstructured{agentHere}))
	if err == nil || !strings.Contains(out, `violates PodSecurity "restricted:latest"`) {
		t.Errorf("the agent's pod in the restricted namespace network-apiserver was not refused: %v\n%s", err, out)
	}

	// Roles: an editor of team-a creates, changes and deletes Networks there and nowhere else; a
	// viewer of team-a reads them and changes nothing.
	for _, ns := range []string{"team-a", "team-b"} {
		c.kubectl(t, "create", "namespace", ns)
	}
	c.kubectl(t, "create", "rolebinding", "editor", "-n", "team-a", "--clusterrole", "edit", "--user", "editor")
	c.kubectl(t, "create", "rolebinding", "viewer", "-n", "team-a", "--clusterrole", "view", "--user", "team-viewer")
	// kube-controller-manager aggregates samplecrd-networks-* into edit and view.
	eventually(t, 60*time.Second, "editor can create a Network in team-a", func() (bool, string) {
		out, err := c.kubectlErr("--as", "editor", "-n", "team-a", "create", "-f", "artifacts/examples/network.yaml")
		return err == nil, out
	})
	if out := c.kubectl(t, "--as", "editor", "-n", "team-a", "label", "network", "backend", "owner=editor"); !strings.Contains(out, "labeled") {
		t.Errorf("editor label:\n%s", out)
	}
	out, err = c.kubectlErr("--as", "editor", "-n", "team-b", "create", "-f", "artifacts/examples/network-ipv6.yaml")
	if err == nil || !strings.Contains(out, `User "editor" cannot create resource "networks" in API group "samplecrd.k8s.io" in the namespace "team-b"`) {
		t.Errorf("editor create in team-b: err %v\n%s", err, out)
	}
	eventually(t, 60*time.Second, "team-viewer can read Networks in team-a", func() (bool, string) {
		out, err := c.kubectlErr("--as", "team-viewer", "-n", "team-a", "get", "networks", "-o", "name")
		return err == nil && strings.TrimSpace(out) == "network.samplecrd.k8s.io/backend", out
	})
	for _, verb := range [][]string{
		{"create", "-f", "artifacts/examples/network-ipv6.yaml"},
		{"label", "network", "backend", "owner=viewer", "--overwrite"},
		{"delete", "network", "backend"},
	} {
		out, err := c.kubectlErr(append([]string{"--as", "team-viewer", "-n", "team-a"}, verb...)...)
		if err == nil || !strings.Contains(out, "Forbidden") {
			t.Errorf("team-viewer %s: err %v\n%s", verb[0], err, out)
		}
	}
	if out, err := c.kubectlErr("--as", "team-viewer", "-n", "team-b", "get", "networks"); err == nil || !strings.Contains(out, "Forbidden") {
		t.Errorf("team-viewer list in team-b: err %v\n%s", err, out)
	}
	if out := c.kubectl(t, "--as", "editor", "-n", "team-a", "delete", "network", "backend"); !strings.Contains(out, "deleted") {
		t.Errorf("editor delete:\n%s", out)
	}
}
