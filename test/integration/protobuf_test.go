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
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptrace"
	"slices"
	"strings"
	"sync"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	clientscheme "github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/scheme"
)

// protobufMagic starts every protobuf-encoded Kubernetes object.
var protobufMagic = []byte("k8s\x00")

// contentTypeRecorder records the Content-Type of every request body and response.
type contentTypeRecorder struct {
	mu    sync.Mutex
	calls []string // "METHOD request-type -> response-type"
	next  http.RoundTripper
}

func (r *contentTypeRecorder) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := r.next.RoundTrip(req)
	if err == nil {
		r.mu.Lock()
		r.calls = append(r.calls, req.Method+" "+req.Header.Get("Content-Type")+" -> "+resp.Header.Get("Content-Type"))
		r.mu.Unlock()
	}
	return resp, err
}

func (r *contentTypeRecorder) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	calls := r.calls
	r.calls = nil
	return calls
}

func TestProtobufClient(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	rec := &contentTypeRecorder{}
	cfg := clientConfig(s)
	cfg.ContentType = contentTypeProtobuf
	cfg.AcceptContentTypes = contentTypeProtobuf
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { rec.next = rt; return rec }
	networks := versioned.NewForConfigOrDie(cfg).SamplecrdV1().Networks(ns)

	// expect checks the recorded exchanges: method, request and response content types.
	expect := func(step string, want ...string) {
		t.Helper()
		if got := rec.take(); !slices.Equal(got, want) {
			t.Fatalf("%s: exchanges %q, want %q", step, got, want)
		}
	}
	const pb = contentTypeProtobuf

	list, err := networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("list", "GET  -> "+pb)
	w, err := networks.Watch(ctx, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	expect("watch", "GET  -> "+pb+";stream=watch")

	n := newNetwork("net-pb", "10.9.0.0/24", "")
	n.Labels = map[string]string{"wire": "protobuf"}
	created, err := networks.Create(ctx, n, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("create", "POST "+pb+" -> "+pb)
	if created.Spec.Gateway != "10.9.0.1" || created.Labels["wire"] != "protobuf" || created.UID == "" {
		t.Fatalf("created %+v", created)
	}

	got, err := networks.Get(ctx, "net-pb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("get", "GET  -> "+pb)
	if got.ResourceVersion != created.ResourceVersion || got.Spec != created.Spec {
		t.Fatalf("get %+v, want %+v", got, created)
	}

	got.Spec.Gateway = "10.9.0.2"
	updated, err := networks.Update(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("update", "PUT "+pb+" -> "+pb)
	if updated.Spec.Gateway != "10.9.0.2" || updated.Generation != 2 {
		t.Fatalf("updated %+v", updated)
	}

	patched, err := networks.Patch(ctx, "net-pb", types.StrategicMergePatchType, []byte(`{"spec":{"gateway":"10.9.0.3"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("patch", "PATCH "+string(types.StrategicMergePatchType)+" -> "+pb)
	if patched.Spec.Gateway != "10.9.0.3" || patched.Generation != 3 {
		t.Fatalf("patched %+v", patched)
	}

	list, err = networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	expect("second list", "GET  -> "+pb)
	if len(list.Items) != 1 || list.Items[0].Spec.Gateway != "10.9.0.3" {
		t.Fatalf("list %+v", list.Items)
	}

	if err := networks.Delete(ctx, "net-pb", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The DELETE sends its options as protobuf too.
	expect("delete", "DELETE "+pb+" -> "+pb)

	for i, want := range []struct {
		typ     watch.EventType
		gateway string
	}{{watch.Added, "10.9.0.1"}, {watch.Modified, "10.9.0.2"}, {watch.Modified, "10.9.0.3"}, {watch.Deleted, "10.9.0.3"}} {
		ev := nextEvent(t, w)
		n, ok := ev.Object.(*v1.Network)
		if !ok || ev.Type != want.typ || n.Name != "net-pb" || n.Spec.Gateway != want.gateway {
			t.Fatalf("protobuf watch event %d: %s %#v, want %s with gateway %s", i, ev.Type, ev.Object, want.typ, want.gateway)
		}
	}
}

// reusedConnections sends a GET and reports whether it went over an already open connection.
func reusedConnection(t *testing.T, client *http.Client, url string) bool {
	t.Helper()
	reused := false
	trace := &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused }}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(t.Context(), trace), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	return reused
}

func encodeProtobuf(t *testing.T, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestProtobufRawAndBadBodies(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	client := httpClient(t, s)
	url := networksURL(s, "v1", ns)

	valid := &v1.Network{
		TypeMeta:   metav1.TypeMeta{APIVersion: "samplecrd.k8s.io/v1", Kind: "Network"},
		ObjectMeta: metav1.ObjectMeta{Name: "raw-pb", Labels: map[string]string{"a": "b"}},
		Spec:       v1.NetworkSpec{CIDR: "10.9.1.0/24", Gateway: "10.9.1.1"},
	}
	encoded := encodeProtobuf(t, valid)
	if !bytes.HasPrefix(encoded, protobufMagic) {
		t.Fatalf("client-side encoding lacks the magic prefix: %q", encoded[:8])
	}

	t.Run("bad bodies are 400 and keep the connection", func(t *testing.T) {
		reusedConnection(t, client, url) // opens the connection the bad requests then share
		for _, bad := range []struct {
			name string
			body []byte
		}{
			{"garbage", []byte("\x00\x01\x02 this is not protobuf \xff\xfe")},
			{"magic then garbage", append(slices.Clone(protobufMagic), 0xff, 0xff, 0xff, 0x01, 0x02)},
			{"truncated", encoded[:len(encoded)/2]},
			{"magic only", slices.Clone(protobufMagic)},
		} {
			t.Run(bad.name, func(t *testing.T) {
				resp := doRaw(t, client, http.MethodPost, url, contentTypeProtobuf, contentTypeJSON, bad.body)
				if resp.Code != http.StatusBadRequest {
					t.Fatalf("POST %q as protobuf: %d %s, want 400", bad.body, resp.Code, resp.Body)
				}
				if st := decodeStatus(t, resp.Body); st.Code != http.StatusBadRequest || st.Reason != metav1.StatusReasonBadRequest {
					t.Fatalf("status %+v", st)
				}
				if !reusedConnection(t, client, url) {
					t.Fatalf("the connection did not survive the bad protobuf body")
				}
			})
		}
		resp := doRaw(t, client, http.MethodGet, url, "", contentTypeJSON, nil)
		var list v1.NetworkList
		if err := json.Unmarshal(resp.Body, &list); err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 0 {
			t.Fatalf("bad protobuf bodies stored %v", networkNames(list.Items))
		}
	})

	t.Run("raw create and list", func(t *testing.T) {
		resp := doRaw(t, client, http.MethodPost, url, contentTypeProtobuf, contentTypeProtobuf, encoded)
		if resp.Code != http.StatusCreated || !bytes.HasPrefix(resp.Body, protobufMagic) {
			t.Fatalf("protobuf create: %d %q", resp.Code, resp.Body)
		}
		resp = doRaw(t, client, http.MethodGet, url, "", contentTypeProtobuf, nil)
		if resp.Code != http.StatusOK {
			t.Fatalf("protobuf list: %d %s", resp.Code, resp.Body)
		}
		if ct := resp.Header.Get("Content-Type"); ct != contentTypeProtobuf {
			t.Fatalf("protobuf list Content-Type %q", ct)
		}
		if !bytes.HasPrefix(resp.Body, protobufMagic) {
			t.Fatalf("protobuf list starts with %q, want %q", resp.Body[:min(8, len(resp.Body))], protobufMagic)
		}
		obj, gvk, err := protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme).Decode(resp.Body, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		list, ok := obj.(*v1.NetworkList)
		if !ok || gvk.Kind != "NetworkList" || gvk.GroupVersion() != v1.SchemeGroupVersion {
			t.Fatalf("decoded %s %T", gvk, obj)
		}
		if len(list.Items) != 1 || list.Items[0].Name != "raw-pb" || list.Items[0].Spec != valid.Spec || list.Items[0].Labels["a"] != "b" {
			t.Fatalf("decoded list %+v", list.Items)
		}
	})
}

func TestTableAndPartialObjectMetadata(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	client := httpClient(t, s)
	url := networksURL(s, "v1", ns)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	for _, n := range []*v1.Network{newNetwork("tab-a", "10.10.0.0/24", "10.10.0.7"), newNetwork("tab-b", "fd00:10::/64", "")} {
		if _, err := networks.Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("table", func(t *testing.T) {
		for _, target := range []struct {
			url  string
			rows [][]any
		}{
			{url, [][]any{{"tab-a", "10.10.0.0/24", "10.10.0.7", "Unknown"}, {"tab-b", "fd00:10::/64", "fd00:10::1", "Unknown"}}},
			{url + "/tab-a", [][]any{{"tab-a", "10.10.0.0/24", "10.10.0.7", "Unknown"}}},
		} {
			resp := doRaw(t, client, http.MethodGet, target.url, "", "application/json;as=Table;v=v1;g=meta.k8s.io", nil)
			if resp.Code != http.StatusOK {
				t.Fatalf("table %s: %d %s", target.url, resp.Code, resp.Body)
			}
			var table metav1.Table
			if err := json.Unmarshal(resp.Body, &table); err != nil {
				t.Fatal(err)
			}
			if table.Kind != "Table" || table.APIVersion != "meta.k8s.io/v1" {
				t.Fatalf("got %s %s", table.APIVersion, table.Kind)
			}
			var defaultColumns []string
			for _, c := range table.ColumnDefinitions {
				if c.Priority == 0 {
					defaultColumns = append(defaultColumns, c.Name)
				}
			}
			if want := []string{"Name", "CIDR", "Gateway", "Ready", "Used", "Available", "Age"}; !slices.Equal(defaultColumns, want) {
				t.Fatalf("columns %v, want %v", defaultColumns, want)
			}
			if len(table.Rows) != len(target.rows) {
				t.Fatalf("%d rows, want %d", len(table.Rows), len(target.rows))
			}
			for i, row := range table.Rows {
				if len(row.Cells) != len(table.ColumnDefinitions) {
					t.Fatalf("row %d has %d cells for %d columns", i, len(row.Cells), len(table.ColumnDefinitions))
				}
				if !slices.Equal(row.Cells[:4], target.rows[i]) {
					t.Fatalf("row %d cells %v, want %v", i, row.Cells[:4], target.rows[i])
				}
				ageAt := slices.IndexFunc(table.ColumnDefinitions, func(c metav1.TableColumnDefinition) bool { return c.Name == "Age" })
				if age, _ := row.Cells[ageAt].(string); age == "" {
					t.Fatalf("row %d has no age: %v", i, row.Cells)
				}
				var meta metav1.PartialObjectMetadata
				if err := json.Unmarshal(row.Object.Raw, &meta); err != nil || meta.Name != target.rows[i][0] {
					t.Fatalf("row %d object %s: %v", i, row.Object.Raw, err)
				}
			}
		}
	})

	t.Run("partial object metadata JSON", func(t *testing.T) {
		resp := doRaw(t, client, http.MethodGet, url, "", "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", nil)
		if resp.Code != http.StatusOK {
			t.Fatalf("%d %s", resp.Code, resp.Body)
		}
		if strings.Contains(string(resp.Body), "10.10.0.0/24") {
			t.Fatalf("metadata-only list carries the spec: %s", resp.Body)
		}
		var list metav1.PartialObjectMetadataList
		if err := json.Unmarshal(resp.Body, &list); err != nil {
			t.Fatal(err)
		}
		checkPartialList(t, &list, ns, true)
	})

	t.Run("partial object metadata protobuf", func(t *testing.T) {
		resp := doRaw(t, client, http.MethodGet, url, "", contentTypeProtobuf+";as=PartialObjectMetadataList;g=meta.k8s.io;v=v1", nil)
		if resp.Code != http.StatusOK {
			t.Fatalf("%d %s", resp.Code, resp.Body)
		}
		if !bytes.HasPrefix(resp.Body, protobufMagic) {
			t.Fatalf("protobuf metadata list starts with %q", resp.Body[:min(8, len(resp.Body))])
		}
		scheme := runtime.NewScheme()
		if err := metav1.AddMetaToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		obj, _, err := protobuf.NewSerializer(scheme, scheme).Decode(resp.Body, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		list, ok := obj.(*metav1.PartialObjectMetadataList)
		if !ok {
			t.Fatalf("decoded a %T", obj)
		}
		checkPartialList(t, list, ns, false)

		// A single object as protobuf PartialObjectMetadata.
		resp = doRaw(t, client, http.MethodGet, url+"/tab-b", "", contentTypeProtobuf+";as=PartialObjectMetadata;g=meta.k8s.io;v=v1", nil)
		if resp.Code != http.StatusOK {
			t.Fatalf("%d %s", resp.Code, resp.Body)
		}
		obj, _, err = protobuf.NewSerializer(scheme, scheme).Decode(resp.Body, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if m, ok := obj.(*metav1.PartialObjectMetadata); !ok || m.Name != "tab-b" || m.Namespace != ns || m.Generation != 1 {
			t.Fatalf("decoded %#v", obj)
		}
	})
}

// checkPartialList checks a metadata-only list of tab-a and tab-b. Protobuf does not carry the
// items' apiVersion and kind (meta.k8s.io/v1 PartialObjectMetadata), so they are only checked
// with JSON.
func checkPartialList(t *testing.T, list *metav1.PartialObjectMetadataList, ns string, itemTypeMeta bool) {
	t.Helper()
	if len(list.Items) != 2 || list.ResourceVersion == "" {
		t.Fatalf("metadata list %+v", list)
	}
	for i, name := range []string{"tab-a", "tab-b"} {
		m := list.Items[i]
		if m.Name != name || m.Namespace != ns || m.UID == "" || m.Generation != 1 ||
			(itemTypeMeta && (m.APIVersion != "meta.k8s.io/v1" || m.Kind != "PartialObjectMetadata")) {
			t.Fatalf("item %d: %+v", i, m)
		}
	}
}
