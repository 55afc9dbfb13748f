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
	"net/http"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
)

func TestDryRunStoresNothing(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	dryRun := []string{metav1.DryRunAll}

	// A dry-run create returns the defaulted object but stores nothing.
	preview, err := networks.Create(ctx, newNetwork("net-dry", "10.5.0.0/24", ""), metav1.CreateOptions{DryRun: dryRun})
	if err != nil {
		t.Fatal(err)
	}
	if preview.Name != "net-dry" || preview.Spec.Gateway != "10.5.0.1" || preview.Generation != 1 {
		t.Fatalf("dry-run create returned %+v", preview)
	}
	if _, err := networks.Get(ctx, "net-dry", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get after a dry-run create: %v, want NotFound", err)
	}
	list, err := networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 0 {
		t.Fatalf("list after a dry-run create: %v, want nothing", networkNames(list.Items))
	}

	// Nor did it claim its prefix: another Network can take the same one for real.
	real, err := networks.Create(ctx, newNetwork("net-real", "10.5.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a network on the prefix of the dry-run create: %v", err)
	}

	// A dry-run update returns the change but stores nothing.
	upd := real.DeepCopy()
	upd.Spec.Gateway = "10.5.0.200"
	upd.Labels = map[string]string{"dry": "run"}
	previewUpd, err := networks.Update(ctx, upd, metav1.UpdateOptions{DryRun: dryRun})
	if err != nil {
		t.Fatal(err)
	}
	if previewUpd.Spec.Gateway != "10.5.0.200" || previewUpd.Generation != 2 {
		t.Fatalf("dry-run update returned gateway %s generation %d", previewUpd.Spec.Gateway, previewUpd.Generation)
	}
	got, err := networks.Get(ctx, "net-real", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.ResourceVersion != real.ResourceVersion || got.Spec.Gateway != "10.5.0.1" || got.Generation != 1 || len(got.Labels) != 0 {
		t.Fatalf("a dry-run update changed the stored network: %+v", got)
	}

	// A dry-run patch likewise.
	if _, err := networks.Patch(ctx, "net-real", types.MergePatchType, []byte(`{"spec":{"gateway":"10.5.0.201"}}`),
		metav1.PatchOptions{DryRun: dryRun}); err != nil {
		t.Fatal(err)
	}

	// A dry-run delete leaves the Network, and its prefix claimed.
	if err := networks.Delete(ctx, "net-real", metav1.DeleteOptions{DryRun: dryRun}); err != nil {
		t.Fatal(err)
	}
	got, err = networks.Get(ctx, "net-real", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get after a dry-run delete: %v", err)
	}
	if got.ResourceVersion != real.ResourceVersion || got.Spec.Gateway != "10.5.0.1" {
		t.Fatalf("dry runs changed the stored network: %+v", got)
	}
	_, err = networks.Create(ctx, newNetwork("net-overlap", "10.5.0.0/25", ""), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("creating an overlapping network after a dry-run delete: %v, want Invalid naming the overlap", err)
	}
	list, err = networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if names := networkNames(list.Items); len(names) != 1 || names[0] != "net-real" {
		t.Fatalf("networks after the dry runs: %v, want [net-real]", names)
	}
}

func TestFieldValidation(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	client := httpClient(t, s)
	url := networksURL(s, "v1", ns)
	body := func(name string) []byte {
		return []byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network","metadata":{"name":"` + name +
			`"},"spec":{"cidr":"10.5.1.0/24","bogus":"x"}}`)
	}

	// Strict: 400 naming the unknown field, nothing stored.
	resp := doRaw(t, client, http.MethodPost, url+"?fieldValidation=Strict", contentTypeJSON, contentTypeJSON, body("strict"))
	if resp.Code != http.StatusBadRequest {
		t.Fatalf("strict create with spec.bogus: %d %s, want 400", resp.Code, resp.Body)
	}
	if st := decodeStatus(t, resp.Body); !strings.Contains(st.Message, `unknown field "spec.bogus"`) || st.Reason != metav1.StatusReasonBadRequest {
		t.Fatalf("strict create: status reason %s message %q, want BadRequest naming spec.bogus", st.Reason, st.Message)
	}
	if resp := doRaw(t, client, http.MethodGet, url+"/strict", "", contentTypeJSON, nil); resp.Code != http.StatusNotFound {
		t.Fatalf("get after the refused strict create: %d, want 404", resp.Code)
	}

	// Warn: created, with a warning naming the field.
	resp = doRaw(t, client, http.MethodPost, url+"?fieldValidation=Warn", contentTypeJSON, contentTypeJSON, body("warn"))
	if resp.Code != http.StatusCreated {
		t.Fatalf("warn create: %d %s, want 201", resp.Code, resp.Body)
	}
	warnings, errs := utilnet.ParseWarningHeaders(resp.Header.Values("Warning"))
	if len(errs) != 0 || len(warnings) != 1 || warnings[0].Text != `unknown field "spec.bogus"` {
		t.Fatalf("warn create: warnings %+v (%v), want one naming spec.bogus", warnings, errs)
	}

	// Strict applies to updates too: the stored object is unchanged.
	get := doRaw(t, client, http.MethodGet, url+"/warn", "", contentTypeJSON, nil)
	if get.Code != http.StatusOK {
		t.Fatalf("get warn: %d", get.Code)
	}
	updated := strings.Replace(string(get.Body), `"spec":{`, `"spec":{"bogus":"y",`, 1)
	updated = strings.Replace(updated, `"gateway":"10.5.1.1"`, `"gateway":"10.5.1.2"`, 1)
	resp = doRaw(t, client, http.MethodPut, url+"/warn?fieldValidation=Strict", contentTypeJSON, contentTypeJSON, []byte(updated))
	if resp.Code != http.StatusBadRequest || !strings.Contains(decodeStatus(t, resp.Body).Message, `unknown field "spec.bogus"`) {
		t.Fatalf("strict update with spec.bogus: %d %s, want 400 naming spec.bogus", resp.Code, resp.Body)
	}
	again := doRaw(t, client, http.MethodGet, url+"/warn", "", contentTypeJSON, nil)
	if string(again.Body) != string(get.Body) {
		t.Fatalf("the refused strict update changed the network:\nbefore %s\nafter  %s", get.Body, again.Body)
	}
}
