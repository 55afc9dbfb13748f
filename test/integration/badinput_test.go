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
	"slices"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// networkBody is a v1 Network as JSON, built from a map so that any field can be set to anything.
func networkBody(t *testing.T, mutate func(obj map[string]any)) []byte {
	t.Helper()
	obj := map[string]any{
		"apiVersion": "samplecrd.k8s.io/v1",
		"kind":       "Network",
		"metadata":   map[string]any{"name": "bad"},
		"spec":       map[string]any{"cidr": "10.30.0.0/24"},
	}
	if mutate != nil {
		mutate(obj)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func withSpec(cidr, gateway string) func(map[string]any) {
	return func(obj map[string]any) {
		spec := map[string]any{}
		if cidr != "" {
			spec["cidr"] = cidr
		}
		if gateway != "" {
			spec["gateway"] = gateway
		}
		obj["spec"] = spec
	}
}

func withName(name string) func(map[string]any) {
	return func(obj map[string]any) { obj["metadata"].(map[string]any)["name"] = name }
}

type badInput struct {
	name        string
	method      string // default POST
	subpath     string // appended to the namespace's networks URL
	query       string
	contentType string // default JSON
	body        []byte
	wantCode    int
	wantReason  metav1.StatusReason
	// wantFields must all be among the Status details causes.
	wantFields []string
	// wantMessage must all be in the Status message.
	wantMessage []string
}

func TestBadInputIsRejected(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	otherNS := ns + "-other"
	ctx := testContext(t)
	client := httpClient(t, s)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)

	// One good Network, the target of the bad updates; it must come out of every case unchanged.
	existing, err := networks.Create(ctx, newNetwork("existing", "10.20.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	existingBody := func(mutate func(obj map[string]any)) []byte {
		return networkBody(t, func(obj map[string]any) {
			obj["metadata"] = map[string]any{"name": "existing", "resourceVersion": existing.ResourceVersion}
			obj["spec"] = map[string]any{"cidr": "10.20.0.0/24", "gateway": "10.20.0.1"}
			if mutate != nil {
				mutate(obj)
			}
		})
	}
	validProtobuf := encodeProtobuf(t, &v1.Network{
		TypeMeta:   metav1.TypeMeta{APIVersion: "samplecrd.k8s.io/v1", Kind: "Network"},
		ObjectMeta: metav1.ObjectMeta{Name: "bad"},
		Spec:       v1.NetworkSpec{CIDR: "10.30.0.0/24"},
	})
	huge := networkBody(t, func(obj map[string]any) {
		obj["metadata"].(map[string]any)["annotations"] = map[string]any{"big": strings.Repeat("x", 4<<20)}
	})

	const (
		badRequest = http.StatusBadRequest
		invalid    = http.StatusUnprocessableEntity
	)
	cases := []badInput{
		// Bodies that do not decode.
		{name: "malformed JSON", body: []byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network","metadata":{"name":"bad"`),
			wantCode: badRequest, wantReason: metav1.StatusReasonBadRequest},
		{name: "malformed YAML", contentType: contentTypeYAML,
			body:     []byte("apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: [bad\nspec:\n  cidr: 10.30.0.0/24\n"),
			wantCode: badRequest, wantReason: metav1.StatusReasonBadRequest},
		{name: "YAML with an unknown field, strict", contentType: contentTypeYAML, query: "fieldValidation=Strict",
			body:     []byte("apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: bad\nspec:\n  cidr: 10.30.0.0/24\n  bogus: 1\n"),
			wantCode: badRequest, wantMessage: []string{`unknown field "spec.bogus"`}},
		{name: "empty body", body: []byte{}, wantCode: badRequest, wantReason: metav1.StatusReasonBadRequest},
		{name: "JSON array", body: []byte(`[]`), wantCode: badRequest},
		{name: "JSON array of a network", body: append(append([]byte("["), networkBody(t, nil)...), ']'), wantCode: badRequest},
		{name: "JSON string", body: []byte(`"network"`), wantCode: badRequest},
		{name: "JSON null", body: []byte("null"), wantCode: badRequest, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: []string{"null"}},
		{name: "YAML null", contentType: contentTypeYAML, body: []byte("~\n"), wantCode: badRequest, wantReason: metav1.StatusReasonBadRequest,
			wantMessage: []string{"null"}},
		{name: "update whose body is JSON null", method: http.MethodPut, subpath: "/existing", body: []byte(" null "),
			wantCode: badRequest, wantReason: metav1.StatusReasonBadRequest},
		{name: "wrong apiVersion", body: networkBody(t, func(o map[string]any) { o["apiVersion"] = "samplecrd.k8s.io/v2" }),
			wantCode: badRequest, wantMessage: []string{"samplecrd.k8s.io/v2"}},
		{name: "apiVersion of another group", body: networkBody(t, func(o map[string]any) { o["apiVersion"] = "apps/v1" }),
			wantCode: badRequest, wantMessage: []string{"apps/v1"}},
		{name: "v1beta1 body on the v1 endpoint", body: networkBody(t, func(o map[string]any) {
			o["apiVersion"] = "samplecrd.k8s.io/v1beta1"
			o["spec"] = map[string]any{"subnet": "10.30.0.0/24"}
		}), wantCode: badRequest, wantMessage: []string{"v1beta1"}},
		{name: "wrong kind", body: networkBody(t, func(o map[string]any) { o["kind"] = "Pod" }),
			wantCode: badRequest, wantMessage: []string{"Pod"}},
		{name: "list kind", body: networkBody(t, func(o map[string]any) { o["kind"] = "NetworkList" }),
			wantCode: badRequest, wantMessage: []string{"NetworkList"}},
		{name: "unknown field, strict", query: "fieldValidation=Strict",
			body:     networkBody(t, func(o map[string]any) { o["spec"].(map[string]any)["bogus"] = "x" }),
			wantCode: badRequest, wantMessage: []string{`unknown field "spec.bogus"`}},
		{name: "duplicate field, strict", query: "fieldValidation=Strict",
			body:     []byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network","metadata":{"name":"bad"},"spec":{"cidr":"10.30.0.0/24","cidr":"10.31.0.0/24"}}`),
			wantCode: badRequest, wantMessage: []string{`duplicate field "spec.cidr"`}},
		{name: "cidr of the wrong type", body: networkBody(t, func(o map[string]any) { o["spec"] = map[string]any{"cidr": 42} }),
			wantCode: badRequest, wantMessage: []string{"spec.cidr"}},

		// Bodies that decode but do not validate.
		{name: "missing cidr", body: networkBody(t, withSpec("", "")), wantCode: invalid, wantReason: metav1.StatusReasonInvalid,
			wantFields: []string{"spec.cidr"}},
		{name: "host bits set", body: networkBody(t, withSpec("192.168.0.1/16", "")), wantCode: invalid,
			wantFields: []string{"spec.cidr"}, wantMessage: []string{"192.168.0.0/16"}},
		{name: "IPv4 /31", body: networkBody(t, withSpec("10.30.0.0/31", "")), wantCode: invalid,
			wantFields: []string{"spec.cidr"}, wantMessage: []string{"/31"}},
		{name: "IPv4 /32", body: networkBody(t, withSpec("10.30.0.1/32", "")), wantCode: invalid,
			wantFields: []string{"spec.cidr"}, wantMessage: []string{"/32"}},
		{name: "IPv6 /127", body: networkBody(t, withSpec("fd00:30::/127", "")), wantCode: invalid,
			wantFields: []string{"spec.cidr"}, wantMessage: []string{"/127"}},
		{name: "IPv6 /128", body: networkBody(t, withSpec("fd00:30::1/128", "")), wantCode: invalid,
			wantFields: []string{"spec.cidr"}, wantMessage: []string{"/128"}},
		{name: "non-canonical IPv6", body: networkBody(t, withSpec("FD00:0030:0::/64", "")), wantCode: invalid,
			wantFields: []string{"spec.cidr"}, wantMessage: []string{"fd00:30::/64"}},
		{name: "garbage cidr", body: networkBody(t, withSpec("ten-dot-zero", "")), wantCode: invalid,
			wantFields: []string{"spec.cidr"}, wantMessage: []string{"ten-dot-zero"}},
		{name: "gateway outside the cidr", body: networkBody(t, withSpec("10.30.0.0/24", "10.30.1.1")), wantCode: invalid,
			wantFields: []string{"spec.gateway"}, wantMessage: []string{"inside spec.cidr 10.30.0.0/24"}},
		{name: "gateway is the network address", body: networkBody(t, withSpec("10.30.0.0/24", "10.30.0.0")), wantCode: invalid,
			wantFields: []string{"spec.gateway"}, wantMessage: []string{"network address"}},
		{name: "gateway is the IPv4 broadcast", body: networkBody(t, withSpec("10.30.0.0/24", "10.30.0.255")), wantCode: invalid,
			wantFields: []string{"spec.gateway"}, wantMessage: []string{"broadcast"}},
		{name: "IPv6 gateway in an IPv4 network", body: networkBody(t, withSpec("10.30.0.0/24", "fd00:30::1")), wantCode: invalid,
			wantFields: []string{"spec.gateway"}, wantMessage: []string{"IPv4"}},
		{name: "IPv4 gateway in an IPv6 network", body: networkBody(t, withSpec("fd00:30::/64", "10.30.0.1")), wantCode: invalid,
			wantFields: []string{"spec.gateway"}, wantMessage: []string{"IPv6"}},
		{name: "garbage gateway", body: networkBody(t, withSpec("10.30.0.0/24", "the-router")), wantCode: invalid,
			wantFields: []string{"spec.gateway"}, wantMessage: []string{"the-router"}},
		{name: "garbage cidr and gateway", body: networkBody(t, withSpec("nope", "nope-either")), wantCode: invalid,
			wantFields: []string{"spec.cidr", "spec.gateway"}},
		{name: "prefixLength not matching the cidr", body: networkBody(t, func(o map[string]any) {
			o["spec"] = map[string]any{"cidr": "10.30.0.0/24", "prefixLength": 20}
		}), wantCode: invalid, wantFields: []string{"spec.prefixLength"}},
		{name: "nodeSelector with a bad label key", body: networkBody(t, func(o map[string]any) {
			o["spec"] = map[string]any{"cidr": "10.30.0.0/24", "nodeSelector": map[string]any{"matchLabels": map[string]any{"bad key!": "a"}}}
		}), wantCode: invalid, wantFields: []string{"spec.nodeSelector.matchLabels"}, wantMessage: []string{"bad key!"}},
		{name: "nodeSelector with an unknown operator", body: networkBody(t, func(o map[string]any) {
			o["spec"] = map[string]any{"cidr": "10.30.0.0/24", "nodeSelector": map[string]any{"matchExpressions": []any{
				map[string]any{"key": "zone", "operator": "Near"}}}}
		}), wantCode: invalid, wantFields: []string{"spec.nodeSelector.matchExpressions[0].operator"}, wantMessage: []string{"Near"}},
		{name: "nodeSelector In without values", body: networkBody(t, func(o map[string]any) {
			o["spec"] = map[string]any{"cidr": "10.30.0.0/24", "nodeSelector": map[string]any{"matchExpressions": []any{
				map[string]any{"key": "zone", "operator": "In"}}}}
		}), wantCode: invalid, wantFields: []string{"spec.nodeSelector.matchExpressions[0].values"}},
		{name: "nodeSelector that is not an object", body: networkBody(t, func(o map[string]any) {
			o["spec"] = map[string]any{"cidr": "10.30.0.0/24", "nodeSelector": "zone=a"}
		}), wantCode: badRequest},
		{name: "name with upper case", body: networkBody(t, withName("BadName")), wantCode: invalid,
			wantFields: []string{"metadata.name"}},
		{name: "name longer than 63 characters", body: networkBody(t, withName(strings.Repeat("n", 64))), wantCode: invalid,
			wantFields: []string{"metadata.name"}, wantMessage: []string{"63"}},
		{name: "name with dots", body: networkBody(t, withName("net.work")), wantCode: invalid,
			wantFields: []string{"metadata.name"}},
		{name: "no name", body: networkBody(t, func(o map[string]any) { o["metadata"] = map[string]any{} }), wantCode: invalid,
			wantFields: []string{"metadata.name"}},
		{name: "overlapping the existing network", body: networkBody(t, withSpec("10.20.0.128/25", "")), wantCode: invalid,
			wantFields: []string{"spec.cidr"}, wantMessage: []string{"overlaps network " + ns + "/existing"}},
		{name: "duplicate name", body: networkBody(t, func(o map[string]any) {
			o["metadata"] = map[string]any{"name": "existing"}
			o["spec"] = map[string]any{"cidr": "10.30.0.0/24"}
		}), wantCode: http.StatusConflict, wantReason: metav1.StatusReasonAlreadyExists},

		// Wrong framing.
		{name: "body over the size limit", body: huge, wantCode: http.StatusRequestEntityTooLarge},
		{name: "protobuf garbage", contentType: contentTypeProtobuf, body: []byte("\x0a\xff\xff\xff\xff\x0fnot protobuf at all"),
			wantCode: badRequest},
		{name: "truncated protobuf", contentType: contentTypeProtobuf, body: validProtobuf[:len(validProtobuf)-7], wantCode: badRequest},
		{name: "unsupported content type", contentType: "text/plain", body: networkBody(t, nil),
			wantCode: http.StatusUnsupportedMediaType},
		{name: "namespace mismatch between URL and body", body: networkBody(t, func(o map[string]any) {
			o["metadata"].(map[string]any)["namespace"] = otherNS
		}), wantCode: badRequest, wantMessage: []string{"namespace"}},

		// Bad updates of the existing Network.
		{name: "update changing spec.cidr", method: http.MethodPut, subpath: "/existing",
			body:     existingBody(func(o map[string]any) { o["spec"] = map[string]any{"cidr": "10.21.0.0/24", "gateway": "10.21.0.1"} }),
			wantCode: invalid, wantFields: []string{"spec.cidr"}, wantMessage: []string{"immutable"}},
		{name: "update with an invalid gateway", method: http.MethodPut, subpath: "/existing",
			body:     existingBody(func(o map[string]any) { o["spec"].(map[string]any)["gateway"] = "10.20.0.255" }),
			wantCode: invalid, wantFields: []string{"spec.gateway"}},
		{name: "merge patch setting a bad nodeSelector value", method: http.MethodPatch, subpath: "/existing",
			contentType: string(types.MergePatchType), body: []byte(`{"spec":{"nodeSelector":{"matchLabels":{"zone":"not valid!"}}}}`),
			wantCode: invalid, wantFields: []string{"spec.nodeSelector.matchLabels"}},
		{name: "update with a stale resourceVersion", method: http.MethodPut, subpath: "/existing",
			body: existingBody(func(o map[string]any) {
				o["metadata"].(map[string]any)["resourceVersion"] = "1"
				o["spec"].(map[string]any)["gateway"] = "10.20.0.2"
			}), wantCode: http.StatusConflict, wantReason: metav1.StatusReasonConflict},
		{name: "update with a resourceVersion that is not a number", method: http.MethodPut, subpath: "/existing",
			body:     existingBody(func(o map[string]any) { o["metadata"].(map[string]any)["resourceVersion"] = "abc" }),
			wantCode: invalid, wantFields: []string{"metadata.resourceVersion"}},
		{name: "status update with a resourceVersion that is not a number", method: http.MethodPut, subpath: "/existing/status",
			body:     existingBody(func(o map[string]any) { o["metadata"].(map[string]any)["resourceVersion"] = "abc" }),
			wantCode: invalid, wantFields: []string{"metadata.resourceVersion"}},
		{name: "merge patch setting a resourceVersion that is not a number", method: http.MethodPatch, subpath: "/existing",
			contentType: string(types.MergePatchType), body: []byte(`{"metadata":{"resourceVersion":"abc"}}`),
			wantCode: invalid, wantFields: []string{"metadata.resourceVersion"}},
		{name: "create with a resourceVersion", body: networkBody(t, func(o map[string]any) { o["metadata"].(map[string]any)["resourceVersion"] = "5" }),
			wantCode: invalid, wantFields: []string{"metadata.resourceVersion"}},
		{name: "dry-run create with a resourceVersion", query: "dryRun=All",
			body:     networkBody(t, func(o map[string]any) { o["metadata"].(map[string]any)["resourceVersion"] = "5" }),
			wantCode: invalid, wantFields: []string{"metadata.resourceVersion"}},
		{name: "update whose body names another object", method: http.MethodPut, subpath: "/existing",
			body: existingBody(func(o map[string]any) { o["metadata"].(map[string]any)["name"] = "someone-else" }), wantCode: badRequest},
		{name: "update with a malformed body", method: http.MethodPut, subpath: "/existing", body: []byte(`{"spec":`), wantCode: badRequest},
		{name: "merge patch changing spec.cidr", method: http.MethodPatch, subpath: "/existing", contentType: string(types.MergePatchType),
			body: []byte(`{"spec":{"cidr":"10.22.0.0/24"}}`), wantCode: invalid, wantFields: []string{"spec.cidr"}},
		{name: "malformed merge patch", method: http.MethodPatch, subpath: "/existing", contentType: string(types.MergePatchType),
			body: []byte(`{"spec":`), wantCode: badRequest},
		{name: "JSON patch with an unknown op", method: http.MethodPatch, subpath: "/existing", contentType: string(types.JSONPatchType),
			body: []byte(`[{"op":"explode","path":"/spec/gateway"}]`), wantCode: invalid},
		{name: "JSON patch whose test fails", method: http.MethodPatch, subpath: "/existing", contentType: string(types.JSONPatchType),
			body:     []byte(`[{"op":"test","path":"/spec/gateway","value":"10.20.0.9"},{"op":"replace","path":"/spec/gateway","value":"10.20.0.9"}]`),
			wantCode: invalid},
		{name: "apply with an invalid gateway", method: http.MethodPatch, subpath: "/existing", query: "fieldManager=bad-applier",
			contentType: string(types.ApplyYAMLPatchType),
			body:        []byte("apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: existing\nspec:\n  cidr: 10.20.0.0/24\n  gateway: 10.20.1.1\n"),
			wantCode:    invalid, wantFields: []string{"spec.gateway"}},
		{name: "apply without a field manager", method: http.MethodPatch, subpath: "/existing", contentType: string(types.ApplyYAMLPatchType),
			body:     []byte("apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: existing\nspec:\n  gateway: 10.20.0.3\n"),
			wantCode: invalid, wantFields: []string{"fieldManager"}},
		{name: "apply with an unknown field", method: http.MethodPatch, subpath: "/existing", query: "fieldManager=bad-applier",
			contentType: string(types.ApplyYAMLPatchType),
			body:        []byte("apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: existing\nspec:\n  cidr: 10.20.0.0/24\n  bogus: 1\n"),
			wantCode:    badRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: []string{".spec.bogus"}},
		{name: "apply creating a Network with an unknown field", method: http.MethodPatch, subpath: "/bad", query: "fieldManager=bad-applier",
			contentType: string(types.ApplyYAMLPatchType),
			body:        []byte("apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: bad\nspec:\n  cidr: 10.30.0.0/24\n  bogus: 1\n"),
			wantCode:    badRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: []string{".spec.bogus"}},
		{name: "apply to status with an unknown field", method: http.MethodPatch, subpath: "/existing/status", query: "fieldManager=bad-applier",
			contentType: string(types.ApplyYAMLPatchType),
			body:        []byte("apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: existing\nstatus:\n  bogus: 1\n"),
			wantCode:    badRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: []string{".status.bogus"}},
		{name: "apply with a cidr of the wrong type", method: http.MethodPatch, subpath: "/existing", query: "fieldManager=bad-applier",
			contentType: string(types.ApplyYAMLPatchType),
			body:        []byte("apiVersion: samplecrd.k8s.io/v1\nkind: Network\nmetadata:\n  name: existing\nspec:\n  cidr: [10, 20]\n"),
			wantCode:    badRequest, wantReason: metav1.StatusReasonBadRequest, wantMessage: []string{".spec.cidr"}},
		{name: "status with a negative observedGeneration", method: http.MethodPut, subpath: "/existing/status",
			body:     existingBody(func(o map[string]any) { o["status"] = map[string]any{"observedGeneration": -1} }),
			wantCode: invalid, wantFields: []string{"status.observedGeneration"}},
		{name: "status with a bad condition", method: http.MethodPatch, subpath: "/existing/status", contentType: string(types.MergePatchType),
			body:     []byte(`{"status":{"conditions":[{"type":"Ready","status":"Perhaps","reason":"Unsure","lastTransitionTime":"2025-01-01T00:00:00Z"}]}}`),
			wantCode: invalid, wantFields: []string{"status.conditions[0].status"}},
		{name: "delete with malformed options", method: http.MethodDelete, subpath: "/existing", body: []byte(`{"gracePeriodSeconds":"soon"`),
			wantCode: badRequest},
		{name: "delete with a stale precondition", method: http.MethodDelete, subpath: "/existing",
			body:     []byte(`{"apiVersion":"v1","kind":"DeleteOptions","preconditions":{"resourceVersion":"1"}}`),
			wantCode: http.StatusConflict},
	}
	if len(cases) < 25 {
		t.Fatalf("only %d cases", len(cases))
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			method, contentType := tc.method, tc.contentType
			if method == "" {
				method = http.MethodPost
			}
			if contentType == "" {
				contentType = contentTypeJSON
			}
			url := networksURL(s, "v1", ns) + tc.subpath
			if tc.query != "" {
				url += "?" + tc.query
			}
			resp := doRaw(t, client, method, url, contentType, contentTypeJSON, tc.body)
			if resp.Code < 400 || resp.Code >= 500 {
				t.Fatalf("%s %s: status %d, want a 4xx: %.500s", method, tc.subpath, resp.Code, resp.Body)
			}
			if resp.Code != tc.wantCode {
				t.Fatalf("status %d, want %d: %.500s", resp.Code, tc.wantCode, resp.Body)
			}
			st := decodeStatus(t, resp.Body)
			if st.Status != metav1.StatusFailure || int(st.Code) != resp.Code {
				t.Fatalf("Status %+v does not match the response code %d", st, resp.Code)
			}
			if tc.wantReason != "" && st.Reason != tc.wantReason {
				t.Fatalf("reason %s, want %s (%s)", st.Reason, tc.wantReason, st.Message)
			}
			for _, m := range tc.wantMessage {
				if !strings.Contains(st.Message, m) {
					t.Fatalf("message %q does not contain %q", st.Message, m)
				}
			}
			if len(tc.wantFields) > 0 {
				if st.Details == nil {
					t.Fatalf("no details in %+v", st)
				}
				var fields []string
				for _, c := range st.Details.Causes {
					fields = append(fields, c.Field)
				}
				for _, f := range tc.wantFields {
					if !slices.Contains(fields, f) {
						t.Fatalf("causes name fields %v, want %s among them (%s)", fields, f, st.Message)
					}
				}
			}

			// Nothing was stored: the namespace holds the existing Network alone, unchanged, and
			// nothing went to the other namespace.
			list, err := networks.List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(list.Items) != 1 || list.Items[0].Name != "existing" || list.Items[0].ResourceVersion != existing.ResourceVersion {
				t.Fatalf("after a rejected request the namespace holds %v (rv %v), want existing at rv %s",
					networkNames(list.Items), resourceVersions(list.Items), existing.ResourceVersion)
			}
			if got := list.Items[0]; got.Spec != existing.Spec || len(got.Status.Conditions) != 0 || got.Status.ObservedGeneration != 0 {
				t.Fatalf("existing network changed: %+v", got)
			}
			other, err := jsonClient(t, s).SamplecrdV1().Networks(otherNS).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(other.Items) != 0 {
				t.Fatalf("a rejected request stored %v in %s", networkNames(other.Items), otherNS)
			}
		})
	}
}

func resourceVersions(items []v1.Network) []string {
	var rvs []string
	for _, n := range items {
		rvs = append(rvs, n.ResourceVersion)
	}
	return rvs
}
