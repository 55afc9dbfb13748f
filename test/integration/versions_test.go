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

package integration

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// sameExceptSpec checks that a v1 and a v1beta1 view of one Network agree: identical metadata
// and status, and the spec fields renamed.
func sameExceptSpec(t *testing.T, v1obj, betaObj *unstructured.Unstructured, cidr, gateway string) {
	t.Helper()
	if v1obj.GetAPIVersion() != "samplecrd.k8s.io/v1" || betaObj.GetAPIVersion() != "samplecrd.k8s.io/v1beta1" ||
		v1obj.GetKind() != "Network" || betaObj.GetKind() != "Network" {
		t.Fatalf("apiVersion/kind: v1 view %s %s, v1beta1 view %s %s", v1obj.GetAPIVersion(), v1obj.GetKind(), betaObj.GetAPIVersion(), betaObj.GetKind())
	}
	if !reflect.DeepEqual(v1obj.Object["metadata"], betaObj.Object["metadata"]) {
		t.Fatalf("metadata differs between versions:\nv1:      %v\nv1beta1: %v", v1obj.Object["metadata"], betaObj.Object["metadata"])
	}
	if !reflect.DeepEqual(v1obj.Object["status"], betaObj.Object["status"]) {
		t.Fatalf("status differs between versions:\nv1:      %v\nv1beta1: %v", v1obj.Object["status"], betaObj.Object["status"])
	}
	wantV1 := map[string]any{"cidr": cidr, "gateway": gateway}
	wantBeta := map[string]any{"subnet": cidr, "gatewayIP": gateway}
	if !reflect.DeepEqual(v1obj.Object["spec"], wantV1) {
		t.Fatalf("v1 spec %v, want %v", v1obj.Object["spec"], wantV1)
	}
	if !reflect.DeepEqual(betaObj.Object["spec"], wantBeta) {
		t.Fatalf("v1beta1 spec %v, want %v", betaObj.Object["spec"], wantBeta)
	}
	for _, key := range []string{"apiVersion", "kind", "metadata", "spec", "status"} {
		delete(v1obj.Object, key)
		delete(betaObj.Object, key)
	}
	if len(v1obj.Object) != 0 || len(betaObj.Object) != 0 {
		t.Fatalf("unexpected top-level fields: v1 %v v1beta1 %v", v1obj.Object, betaObj.Object)
	}
}

func TestVersionsRoundTrip(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	dyn := dynamicClient(t, s)
	v1Networks := dyn.Resource(v1GVR).Namespace(ns)
	betaNetworks := dyn.Resource(v1beta1GVR).Namespace(ns)
	typed := jsonClient(t, s).SamplecrdV1().Networks(ns)

	t.Run("created through v1beta1", func(t *testing.T) {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "samplecrd.k8s.io/v1beta1",
			"kind":       "Network",
			"metadata": map[string]any{
				"name":        "from-beta",
				"labels":      map[string]any{"made": "beta"},
				"annotations": map[string]any{"note": "written in the old layout"},
			},
			"spec": map[string]any{"subnet": "10.8.0.0/24", "gatewayIP": "10.8.0.9"},
		}}
		created, err := betaNetworks.Create(ctx, obj, metav1.CreateOptions{FieldManager: "beta-writer"})
		if err != nil {
			t.Fatal(err)
		}
		if got, _, _ := unstructured.NestedString(created.Object, "spec", "subnet"); got != "10.8.0.0/24" {
			t.Fatalf("v1beta1 create returned spec %v", created.Object["spec"])
		}
		viaV1, err := v1Networks.Get(ctx, "from-beta", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		viaBeta, err := betaNetworks.Get(ctx, "from-beta", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(viaBeta.Object, created.Object) {
			t.Fatalf("v1beta1 get differs from the v1beta1 create:\n%v\n%v", viaBeta.Object, created.Object)
		}
		sameExceptSpec(t, viaV1, viaBeta, "10.8.0.0/24", "10.8.0.9")

		n, err := typed.Get(ctx, "from-beta", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Spec.CIDR != "10.8.0.0/24" || n.Spec.Gateway != "10.8.0.9" || n.Labels["made"] != "beta" || n.Generation != 1 {
			t.Fatalf("typed v1 get: %+v", n)
		}
	})

	t.Run("created through v1", func(t *testing.T) {
		n := newNetwork("from-v1", "fd00:8::/64", "fd00:8::a")
		n.Labels = map[string]string{"made": "v1"}
		n.Annotations = map[string]string{"note": "written in the new layout"}
		created, err := typed.Create(ctx, n, metav1.CreateOptions{FieldManager: "v1-writer"})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = v1.NetworkStatus{ObservedGeneration: 1, Conditions: []metav1.Condition{{
			Type: "Ready", Status: metav1.ConditionTrue, Reason: "Realized", Message: "ok", ObservedGeneration: 1,
			LastTransitionTime: metav1.NewTime(time.Date(2025, 3, 4, 5, 6, 7, 0, time.UTC)),
		}}}
		if _, err := typed.UpdateStatus(ctx, created, metav1.UpdateOptions{FieldManager: "v1-status-writer"}); err != nil {
			t.Fatal(err)
		}
		viaBeta, err := betaNetworks.Get(ctx, "from-v1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		viaV1, err := v1Networks.Get(ctx, "from-v1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if conds, _, _ := unstructured.NestedSlice(viaBeta.Object, "status", "conditions"); len(conds) != 1 {
			t.Fatalf("v1beta1 view has conditions %v, want the Ready condition written through v1", conds)
		}
		sameExceptSpec(t, viaV1, viaBeta, "fd00:8::/64", "fd00:8::a")
	})

	t.Run("updated through v1beta1, read through v1", func(t *testing.T) {
		beta, err := betaNetworks.Get(ctx, "from-v1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if err := unstructured.SetNestedField(beta.Object, "fd00:8::b", "spec", "gatewayIP"); err != nil {
			t.Fatal(err)
		}
		updated, err := betaNetworks.Update(ctx, beta, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n, err := typed.Get(ctx, "from-v1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Spec.Gateway != "fd00:8::b" || n.Generation != 2 || n.ResourceVersion != updated.GetResourceVersion() {
			t.Fatalf("v1 view after a v1beta1 update: gateway %s generation %d rv %s (want rv %s)", n.Spec.Gateway, n.Generation, n.ResourceVersion, updated.GetResourceVersion())
		}
	})
}

func TestDiscovery(t *testing.T) {
	s := sharedServer(t)
	client := httpClient(t, s)

	resp := doRaw(t, client, http.MethodGet, s.URL+"/apis/samplecrd.k8s.io", "", contentTypeJSON, nil)
	if resp.Code != http.StatusOK {
		t.Fatalf("/apis/samplecrd.k8s.io: %d %s", resp.Code, resp.Body)
	}
	var group metav1.APIGroup
	if err := json.Unmarshal(resp.Body, &group); err != nil {
		t.Fatal(err)
	}
	wantVersions := []metav1.GroupVersionForDiscovery{
		{GroupVersion: "samplecrd.k8s.io/v1", Version: "v1"},
		{GroupVersion: "samplecrd.k8s.io/v1beta1", Version: "v1beta1"},
	}
	if group.Name != "samplecrd.k8s.io" || !slices.Equal(group.Versions, wantVersions) || group.PreferredVersion != wantVersions[0] {
		t.Fatalf("group %+v, want versions %v with v1 preferred", group, wantVersions)
	}

	dc, err := discovery.NewDiscoveryClientForConfig(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := dc.ServerGroups()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, g := range groups.Groups {
		if g.Name == "samplecrd.k8s.io" {
			found = true
			if g.PreferredVersion.Version != "v1" || len(g.Versions) != 2 {
				t.Fatalf("discovery client sees %+v", g)
			}
		}
	}
	if !found {
		t.Fatalf("samplecrd.k8s.io not among the server's groups %+v", groups.Groups)
	}

	for _, version := range []string{"v1", "v1beta1"} {
		t.Run(version, func(t *testing.T) {
			resp := doRaw(t, client, http.MethodGet, s.URL+"/apis/samplecrd.k8s.io/"+version, "", contentTypeJSON, nil)
			if resp.Code != http.StatusOK {
				t.Fatalf("%d %s", resp.Code, resp.Body)
			}
			var list metav1.APIResourceList
			if err := json.Unmarshal(resp.Body, &list); err != nil {
				t.Fatal(err)
			}
			if list.GroupVersion != "samplecrd.k8s.io/"+version {
				t.Fatalf("groupVersion %s", list.GroupVersion)
			}
			byName := map[string]metav1.APIResource{}
			for _, r := range list.APIResources {
				byName[r.Name] = r
			}
			// blockallocations and networks/blockclaims are served in v1 only (issue 23).
			want := 2
			if version == "v1" {
				want = 4
				blk, claims := byName["blockallocations"], byName["networks/blockclaims"]
				verbs := slices.Sorted(slices.Values(blk.Verbs))
				if !blk.Namespaced || blk.Kind != "BlockAllocation" || !slices.Equal(verbs, []string{"get", "list", "watch"}) ||
					!slices.Equal(blk.ShortNames, []string{"blk"}) {
					t.Fatalf("blockallocations resource %+v, want namespaced, read-only, short name blk", blk)
				}
				if !claims.Namespaced || claims.Kind != "BlockClaim" || !slices.Equal(claims.Verbs, metav1.Verbs{"create"}) {
					t.Fatalf("networks/blockclaims resource %+v, want create only", claims)
				}
			}
			if len(byName) != want {
				t.Fatalf("resources %v, want %d", list.APIResources, want)
			}
			networks, ok := byName["networks"]
			if !ok {
				t.Fatalf("no networks in %v", list.APIResources)
			}
			if !networks.Namespaced || networks.Kind != "Network" || networks.SingularName != "network" || !slices.Equal(networks.ShortNames, []string{"net"}) {
				t.Fatalf("networks resource %+v", networks)
			}
			for _, verb := range []string{"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"} {
				if !slices.Contains(networks.Verbs, verb) {
					t.Fatalf("networks verbs %v lack %s", networks.Verbs, verb)
				}
			}
			status, ok := byName["networks/status"]
			if !ok {
				t.Fatalf("no networks/status in %v", list.APIResources)
			}
			verbs := slices.Clone([]string(status.Verbs))
			slices.Sort(verbs)
			if !status.Namespaced || status.Kind != "Network" || !slices.Equal(verbs, []string{"get", "patch", "update"}) {
				t.Fatalf("networks/status resource %+v, want namespaced Network with get, patch, update", status)
			}
		})
	}
}

// v1beta1 is deprecated the Kubernetes way: every v1beta1 request gets a Warning header naming
// the replacement; v1 requests get none.
func TestV1beta1IsDeprecated(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	client := httpClient(t, s)
	const want = "samplecrd.k8s.io/v1beta1 Network is deprecated"
	const replacement = "use samplecrd.k8s.io/v1 Network"

	body, err := json.Marshal(betaNetwork("old", "10.8.9.0/24", "").Object)
	if err != nil {
		t.Fatal(err)
	}
	for _, req := range []struct{ method, url string }{
		{http.MethodPost, networksURL(s, "v1beta1", ns)},
		{http.MethodGet, networksURL(s, "v1beta1", ns)},
		{http.MethodGet, networksURL(s, "v1beta1", ns) + "/old"},
	} {
		var reqBody []byte
		if req.method == http.MethodPost {
			reqBody = body
		}
		resp := doRaw(t, client, req.method, req.url, contentTypeJSON, contentTypeJSON, reqBody)
		if resp.Code >= 300 {
			t.Fatalf("%s %s: %d %s", req.method, req.url, resp.Code, resp.Body)
		}
		warnings := strings.Join(resp.Header.Values("Warning"), "\n")
		if !strings.Contains(warnings, want) || !strings.Contains(warnings, replacement) {
			t.Errorf("%s %s: Warning headers %q, want one saying %q and %q", req.method, req.url, warnings, want, replacement)
		}
	}
	resp := doRaw(t, client, http.MethodGet, networksURL(s, "v1", ns), "", contentTypeJSON, nil)
	if w := resp.Header.Values("Warning"); resp.Code != http.StatusOK || len(w) != 0 {
		t.Errorf("v1 list: %d with Warning headers %q, want 200 and none", resp.Code, w)
	}
}

// Validation errors answer v1beta1 clients in v1beta1's field names (spec.subnet, spec.gatewayIP),
// whether they come from validation or from the create path's overlap check.
func TestV1beta1ErrorsNameV1beta1Fields(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	client := httpClient(t, s)
	if _, err := jsonClient(t, s).SamplecrdV1().Networks(ns).Create(ctx, newNetwork("taken", "10.8.20.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	body := func(name, subnet, gatewayIP string) []byte {
		b, err := json.Marshal(betaNetwork(name, subnet, gatewayIP).Object)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for _, tc := range []struct {
		name, method, subpath, contentType string
		body                               []byte
		wantFields                         []string
		wantMessage                        string
	}{
		{name: "host bits set", body: body("bad", "10.8.21.1/24", ""), wantFields: []string{"spec.subnet"}},
		{name: "gateway outside", body: body("bad", "10.8.21.0/24", "10.8.22.1"), wantFields: []string{"spec.gatewayIP"},
			wantMessage: "must be inside spec.subnet 10.8.21.0/24"},
		{name: "both bad", body: body("bad", "nope", "nope-either"), wantFields: []string{"spec.subnet", "spec.gatewayIP"}},
		{name: "overlap", body: body("bad", "10.8.20.128/25", ""), wantFields: []string{"spec.subnet"}},
		{name: "apply changing the subnet", method: http.MethodPatch, subpath: "/taken?fieldManager=beta&force=true", contentType: "application/apply-patch+yaml",
			body:       []byte("apiVersion: samplecrd.k8s.io/v1beta1\nkind: Network\nmetadata:\n  name: taken\nspec:\n  subnet: 10.8.23.0/24\n"),
			wantFields: []string{"spec.subnet"}, wantMessage: "immutable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			method, contentType := tc.method, tc.contentType
			if method == "" {
				method = http.MethodPost
			}
			if contentType == "" {
				contentType = contentTypeJSON
			}
			resp := doRaw(t, client, method, networksURL(s, "v1beta1", ns)+tc.subpath, contentType, contentTypeJSON, tc.body)
			if resp.Code != http.StatusUnprocessableEntity {
				t.Fatalf("status %d, want 422: %s", resp.Code, resp.Body)
			}
			st := decodeStatus(t, resp.Body)
			var fields []string
			if st.Details != nil {
				for _, c := range st.Details.Causes {
					fields = append(fields, c.Field)
				}
			}
			for _, f := range tc.wantFields {
				if !slices.Contains(fields, f) {
					t.Errorf("causes name %v, want %s among them (%s)", fields, f, st.Message)
				}
			}
			if strings.Contains(st.Message, "spec.cidr") || strings.Contains(st.Message, "spec.gateway:") || !strings.Contains(st.Message, tc.wantMessage) {
				t.Errorf("message %q names v1 fields or lacks %q", st.Message, tc.wantMessage)
			}
		})
	}
}
