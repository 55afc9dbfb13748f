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
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	samplecrdv1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// TestAggregatedNodeRestriction acts as a compromised node agent behind the real kube-apiserver:
// with a network-agent token bound to the Node node1 it writes its own entry (admitted) and then
// tries node2's entry, the spec, a label, a finalizer, a Network condition, a claim for node2
// and more blocks than its quota, through every kind of write; each must be refused with a
// message naming node1 and what it asked for. E2E_NODERESTRICTION_SERVER_ARGS adds server
// flags, e.g. "--disable-admission-plugins=NetworkNodeRestriction --max-free-addresses-per-node=0"
// to watch the refusals fail without the plugin and the quota.
func TestAggregatedNodeRestriction(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	c := localCluster(t, "NETWORK_APISERVER_ARGS="+os.Getenv("E2E_NODERESTRICTION_SERVER_ARGS"))
	ctx := context.Background()
	for _, node := range []string{"node1", "node2"} {
		c.kubectl(t, "apply", "-f", writeManifest(t, node+".yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+node+"\n"))
	}
	admin := c.clientset(t)
	token := func(args ...string) string {
		t.Helper()
		return strings.TrimSpace(c.kubectl(t, append([]string{"create", "token", "network-agent", "-n", "network-agent", "--duration", "1h"}, args...)...))
	}
	// Only the CA of the admin kubeconfig: the token is the sole credential.
	base := c.restConfig(t)
	configFor := func(tok string) *rest.Config {
		return &rest.Config{Host: base.Host, BearerToken: tok, TLSClientConfig: rest.TLSClientConfig{CAData: base.CAData, CAFile: base.CAFile}}
	}
	clientFor := func(tok string) versioned.Interface {
		client, err := versioned.NewForConfig(configFor(tok))
		if err != nil {
			t.Fatal(err)
		}
		return client
	}
	node1Token := token("--bound-object-kind", "Node", "--bound-object-name", "node1")
	node1 := clientFor(node1Token)
	unbound := clientFor(token())

	networks := admin.SamplecrdV1().Networks("default")
	web, err := networks.Create(ctx, &samplecrdv1.Network{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: samplecrdv1.NetworkSpec{CIDR: "10.40.0.0/22"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(node, message string) samplecrdv1.NetworkNodeStatus {
		return samplecrdv1.NetworkNodeStatus{NodeName: node, Bridge: "nwweb", Ready: true, ObservedGeneration: web.Generation, Message: message,
			IPAMMode: "Blocks"}
	}
	if _, err := nodestatus.ApplyNodeEntry(ctx, admin, web, entry("node2", "node2's own report"), ""); err != nil {
		t.Fatalf("admin writing node2's entry: %v", err)
	}

	// The narrowed ClusterRole: an agent may not even ask to patch a Network's spec.
	specPatch := []byte(`{"spec":{"gateway":"10.40.0.9"}}`)
	if _, err := node1.SamplecrdV1().Networks("default").Patch(ctx, "web", types.MergePatchType, specPatch, metav1.PatchOptions{}); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), `cannot patch resource "networks"`) {
		t.Errorf("node1's spec patch under the agents' ClusterRole: %v, want RBAC's 403", err)
	}
	// Where RBAC is broader (an older role, or an operator's own), the plugin still holds: the
	// rest of the test grants what a careless role would.
	c.kubectl(t, "apply", "-f", writeManifest(t, "broad.yaml", `apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: e2e-broad-agent
rules:
- apiGroups: [samplecrd.k8s.io]
  resources: [networks, networks/status]
  verbs: [get, list, watch, patch, update]
- apiGroups: [samplecrd.k8s.io]
  resources: [networks/blockclaims]
  verbs: [create]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata:
  name: e2e-broad-agent
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: e2e-broad-agent}
subjects:
- {kind: ServiceAccount, name: network-agent, namespace: network-agent}
`))
	eventually(t, 30*time.Second, "the broad role applies to node1's token", func() (bool, string) {
		_, err := node1.SamplecrdV1().Networks("default").Patch(ctx, "web", types.MergePatchType, []byte(`{}`), metav1.PatchOptions{})
		return err == nil, fmt.Sprint(err)
	})

	// Allowed: node1's own entry, by server-side apply (as the agent writes it), JSON patch and
	// strategic merge patch of status.
	web, err = nodestatus.ApplyNodeEntry(ctx, node1, web, entry("node1", "node1's own report"), "")
	if err != nil {
		t.Fatalf("node1 applying its own entry: %v", err)
	}
	index := func(n *samplecrdv1.Network, node string) int {
		for i, e := range n.Status.Nodes {
			if e.NodeName == node {
				return i
			}
		}
		t.Fatalf("no entry of %s in %+v", node, n.Status.Nodes)
		return -1
	}
	n1 := node1.SamplecrdV1().Networks("default")
	own := fmt.Sprintf(`[{"op":"replace","path":"/status/nodes/%d/message","value":"json patch of its own entry"}]`, index(web, "node1"))
	if _, err := n1.Patch(ctx, "web", types.JSONPatchType, []byte(own), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("node1's JSON patch of its own entry: %v", err)
	}
	if _, err := n1.Patch(ctx, "web", types.StrategicMergePatchType,
		[]byte(`{"status":{"nodes":[{"nodeName":"node1","message":"strategic merge patch of its own entry"}]}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("node1's strategic merge patch of its own entry: %v", err)
	}

	web, err = networks.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	node2Index := index(web, "node2")
	const who = `networks.samplecrd.k8s.io "web" is forbidden: node node1 may not `
	refused := func(what string, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), who+want) {
			t.Errorf("%s: got %v, want 403 %q", what, err, who+want)
		}
	}
	applyBody := func(status string) []byte {
		return []byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network","metadata":{"name":"web","namespace":"default"},"status":` + status + `}`)
	}
	force := true
	applyOpts := metav1.PatchOptions{FieldManager: "network-agent/node1", Force: &force}
	_, err = n1.Patch(ctx, "web", types.ApplyPatchType, applyBody(`{"nodes":[{"nodeName":"node2","ready":false,"message":"lies"}]}`), applyOpts, "status")
	refused("server-side apply of node2's entry", err, "change status.nodes[node2] of network default/web")
	_, err = n1.Patch(ctx, "web", types.JSONPatchType,
		[]byte(fmt.Sprintf(`[{"op":"replace","path":"/status/nodes/%d/ready","value":false}]`, node2Index)), metav1.PatchOptions{}, "status")
	refused("JSON patch of node2's entry", err, "change status.nodes[node2] of network default/web")
	_, err = n1.Patch(ctx, "web", types.MergePatchType, []byte(`{"status":{"nodes":[{"nodeName":"node1","bridge":"nwweb","ready":true}]}}`), metav1.PatchOptions{}, "status")
	refused("merge patch replacing status.nodes (drops node2)", err, "change status.nodes[node2] of network default/web")
	_, err = n1.Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{"status":{"nodes":[{"nodeName":"node2","attachments":9}]}}`), metav1.PatchOptions{}, "status")
	refused("strategic merge patch of node2's entry", err, "change status.nodes[node2] of network default/web")
	_, err = n1.Patch(ctx, "web", types.MergePatchType, specPatch, metav1.PatchOptions{})
	refused("merge patch of the spec", err, "change spec of network default/web")
	_, err = n1.Patch(ctx, "web", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"owned-by":"node1"}}}`), metav1.PatchOptions{})
	refused("strategic merge patch of a label", err, "change metadata.labels of network default/web")
	_, err = n1.Patch(ctx, "web", types.JSONPatchType, []byte(`[{"op":"add","path":"/metadata/finalizers","value":["example.com/held-by-node1"]}]`), metav1.PatchOptions{})
	refused("JSON patch setting a finalizer", err, "change metadata.finalizers of network default/web")
	_, err = n1.Patch(ctx, "web", types.ApplyPatchType, applyBody(`{"conditions":[{"type":"Unavailable","status":"True","reason":"Lies","message":"x","lastTransitionTime":"2026-01-01T00:00:00Z"}]}`), applyOpts, "status")
	refused("server-side apply of a Network condition", err, "change status.conditions of network default/web")
	// PUT: the Network as just read, with node2's entry changed, to status and to the main resource.
	fresh := func() *samplecrdv1.Network {
		t.Helper()
		n, err := networks.Get(ctx, "web", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	put := fresh()
	put.Status.Nodes[index(put, "node2")].Ready = false
	_, err = n1.UpdateStatus(ctx, put, metav1.UpdateOptions{})
	refused("PUT of status with node2's entry changed", err, "change status.nodes[node2] of network default/web")
	put = fresh()
	put.Labels = map[string]string{"owned-by": "node1"}
	_, err = n1.Update(ctx, put, metav1.UpdateOptions{})
	refused("PUT of the Network with a label", err, "change metadata.labels of network default/web")
	_, err = n1.Create(ctx, &samplecrdv1.Network{ObjectMeta: metav1.ObjectMeta{Name: "node1s"}, Spec: samplecrdv1.NetworkSpec{CIDR: "10.41.0.0/24"}}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node1 creating a Network: %v, want 403", err)
	}

	// v1beta1: the same refusal whatever the version (a raw PUT of the v1beta1 status).
	raw := node1.SamplecrdV1().RESTClient()
	var beta map[string]any
	body, err := raw.Get().AbsPath("/apis/samplecrd.k8s.io/v1beta1/namespaces/default/networks/web").DoRaw(ctx)
	if err != nil || json.Unmarshal(body, &beta) != nil {
		t.Fatalf("v1beta1 GET: %v\n%s", err, body)
	}
	nodes := beta["status"].(map[string]any)["nodes"].([]any)
	for _, e := range nodes {
		if e := e.(map[string]any); e["nodeName"] == "node2" {
			e["message"] = "rewritten by node1 through v1beta1"
		}
	}
	body, _ = json.Marshal(beta)
	err = raw.Put().AbsPath("/apis/samplecrd.k8s.io/v1beta1/namespaces/default/networks/web/status").Body(body).
		SetHeader("Content-Type", "application/json").Do(ctx).Error()
	refused("v1beta1 PUT of status with node2's entry changed", err, "change status.nodes[node2] of network default/web")
	err = raw.Patch(types.MergePatchType).AbsPath("/apis/samplecrd.k8s.io/v1beta1/namespaces/default/networks/web").
		Body([]byte(`{"spec":{"gatewayIP":"10.40.0.9"}}`)).SetHeader("Content-Type", string(types.MergePatchType)).Do(ctx).Error()
	refused("v1beta1 merge patch of the spec", err, "change spec of network default/web")

	// A token of the agents' ServiceAccount bound to no Node names no node: refused.
	_, err = nodestatus.ApplyNodeEntry(ctx, unbound, web, entry("node1", "no node"), "")
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "is a node agent but its credential names no node") {
		t.Errorf("unbound agent token writing an entry: %v", err)
	}

	// Blocks: none for node2; for itself, only up to the quota.
	_, err = n1.ClaimBlocks(ctx, "web", &samplecrdv1.BlockClaim{NodeName: "node2"}, metav1.CreateOptions{})
	refused("a block claim for node2", err, "claim blocks of network default/web for node node2 (nodeName)")
	var held int
	refusal := ""
	for range 20 {
		a, err := n1.ClaimBlocks(ctx, "web", &samplecrdv1.BlockClaim{NodeName: "node1"}, metav1.CreateOptions{})
		if err != nil {
			if !apierrors.IsForbidden(err) {
				t.Fatalf("claim beyond the quota: %v, want 403", err)
			}
			refusal = err.Error()
			break
		}
		held = len(a.Blocks)
	}
	// The /22 holds 16 blocks of /26 (64 addresses); node1 reports no leases, so it stops once
	// its blocks hold 128 free addresses: after two or three blocks (the prefix's network and
	// broadcast addresses and the gateway count as not free).
	m := regexp.MustCompile(`node node1 may not claim another block of network default/web: its (\d+) blocks hold (\d+) free addresses \((\d+) usable, 0 attachments in its status.nodes entry\), and a node claims only below 128 free \(--max-free-addresses-per-node\)`).FindStringSubmatch(refusal)
	if m == nil || m[1] != strconv.Itoa(held) || held < 2 || held > 3 {
		t.Errorf("node1 holds %d blocks after claiming until refused; refusal %q", held, refusal)
	} else if free, _ := strconv.Atoi(m[2]); free < 128 || free > 192 {
		t.Errorf("refused at %d free addresses", free)
	}
	t.Logf("node1's claims stopped at %d blocks: %s", held, refusal)

	// Nothing node1 tried reached node2's entry, the spec, the labels or the finalizers.
	after, err := networks.Get(ctx, "web", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if e := after.Status.Nodes[index(after, "node2")]; !e.Ready || e.Message != "node2's own report" || e.Attachments != 0 {
		t.Errorf("node2's entry changed: %+v", e)
	}
	if after.Spec.Gateway != web.Spec.Gateway || len(after.Labels) != 0 || !slices.Equal(after.Finalizers, web.Finalizers) || !serverDerivedConditions(after) {
		t.Errorf("web changed: spec %+v labels %v finalizers %v conditions %+v", after.Spec, after.Labels, after.Finalizers, after.Status.Conditions)
	}
	if e := after.Status.Nodes[index(after, "node1")]; e.Message != "strategic merge patch of its own entry" {
		t.Errorf("node1's own entry: %+v", e)
	}
}

// TestStandaloneNodeRestriction: a standalone server writes a per-node agent kubeconfig
// (--agent-kubeconfig-nodes); with it node1 writes its own entry and claims its own blocks, and is
// refused node2's entry, the spec and a claim for node2.
func TestStandaloneNodeRestriction(t *testing.T) {
	netnstest.RequireRoot(t)
	s := startStandalone(t, "--controllers=false", "--agent-kubeconfig-nodes=node1")
	ctx := context.Background()
	admin := s.clientset(t)
	cfg, err := clientcmd.BuildConfigFromFlags("", filepath.Join(s.dataDir, "agent-node1.kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	node1, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	web, err := admin.SamplecrdV1().Networks("default").Create(ctx, &samplecrdv1.Network{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: samplecrdv1.NetworkSpec{CIDR: "10.42.0.0/24"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry := func(node string) samplecrdv1.NetworkNodeStatus {
		return samplecrdv1.NetworkNodeStatus{NodeName: node, Bridge: "nwweb", Ready: true, ObservedGeneration: web.Generation, IPAMMode: "Blocks"}
	}
	if _, err := nodestatus.ApplyNodeEntry(ctx, admin, web, entry("node2"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := nodestatus.ApplyNodeEntry(ctx, node1, web, entry("node1"), ""); err != nil {
		t.Errorf("node1's own entry with its standalone credential: %v", err)
	}
	if _, err := node1.SamplecrdV1().Networks("default").ClaimBlocks(ctx, "web", &samplecrdv1.BlockClaim{NodeName: "node1"}, metav1.CreateOptions{}); err != nil {
		t.Errorf("node1's own claim: %v", err)
	}
	const who = `networks.samplecrd.k8s.io "web" is forbidden: node node1 may not `
	e := entry("node2")
	e.Ready = false
	if _, err := nodestatus.ApplyNodeEntry(ctx, node1, web, e, ""); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), who+"change status.nodes[node2]") {
		t.Errorf("node1 applying node2's entry: %v", err)
	}
	_, err = node1.SamplecrdV1().Networks("default").ClaimBlocks(ctx, "web", &samplecrdv1.BlockClaim{NodeName: "node2"}, metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), who+"claim blocks of network default/web for node node2") {
		t.Errorf("node1 claiming for node2: %v", err)
	}
	// The spec: the agents' permissions (as the ClusterRole in a cluster) do not reach it.
	_, err = node1.SamplecrdV1().Networks("default").Patch(ctx, "web", types.MergePatchType, []byte(`{"spec":{"gateway":"10.42.0.9"}}`), metav1.PatchOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("node1 patching the spec: %v", err)
	}
}

// serverDerivedConditions says whether n's conditions are exactly the two the server derives
// from its node entries: Ready and AddressesExhausted.
func serverDerivedConditions(n *samplecrdv1.Network) bool {
	var types []string
	for _, c := range n.Status.Conditions {
		types = append(types, c.Type)
	}
	slices.Sort(types)
	return slices.Equal(types, []string{samplecrd.ConditionAddressesExhausted, samplecrd.ConditionReady})
}
