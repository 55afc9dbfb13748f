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
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

const (
	contentTypeJSON     = "application/json"
	contentTypeYAML     = "application/yaml"
	contentTypeProtobuf = "application/vnd.kubernetes.protobuf"

	// eventTimeout bounds every wait for a watch event.
	eventTimeout = 30 * time.Second
)

var (
	v1GVR      = schema.GroupVersionResource{Group: "samplecrd.k8s.io", Version: "v1", Resource: "networks"}
	v1beta1GVR = schema.GroupVersionResource{Group: "samplecrd.k8s.io", Version: "v1beta1", Resource: "networks"}
)

// shared is the server most tests use: started on first use, stopped by TestMain. It runs with
// --overlap-scope=namespace so that tests, each in its own namespace, cannot collide on prefixes.
var shared struct {
	once sync.Once
	dir  string
	s    *framework.Server
	err  error
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.s != nil {
		if err := shared.s.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "stopping the shared network-apiserver: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}

// sharedServer returns the server shared by the tests of this package.
func sharedServer(t *testing.T) *framework.Server {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "network-apiserver-integration-")
		if shared.err != nil {
			return
		}
		shared.s, shared.err = framework.Start(shared.dir, "--overlap-scope=namespace")
	})
	if shared.err != nil {
		t.Fatalf("starting the shared network-apiserver: %v", shared.err)
	}
	return shared.s
}

var (
	namespaceSeq   atomic.Int64
	notLabelChars  = regexp.MustCompile(`[^a-z0-9]+`)
	maxNamespaceLn = 63
)

// testNamespace returns a namespace name unique to the calling test. In standalone mode
// namespaces need not exist, so nothing has to be created.
func testNamespace(t *testing.T) string {
	t.Helper()
	suffix := fmt.Sprintf("-%d", namespaceSeq.Add(1))
	base := strings.Trim(notLabelChars.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	if len(base)+len(suffix) > maxNamespaceLn {
		base = strings.Trim(base[:maxNamespaceLn-len(suffix)], "-")
	}
	return base + suffix
}

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// clientConfig is the admin config without client-side rate limiting, so that the limiter never
// paces a test.
func clientConfig(s *framework.Server) *rest.Config {
	cfg := rest.CopyConfig(s.Config)
	cfg.QPS = -1
	return cfg
}

// jsonClient is the generated clientset speaking JSON.
func jsonClient(t *testing.T, s *framework.Server) versioned.Interface {
	t.Helper()
	cfg := clientConfig(s)
	cfg.ContentType = contentTypeJSON
	cfg.AcceptContentTypes = contentTypeJSON
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// protobufClient is the generated clientset speaking protobuf only.
func protobufClient(t *testing.T, s *framework.Server) versioned.Interface {
	t.Helper()
	cfg := clientConfig(s)
	cfg.ContentType = contentTypeProtobuf
	cfg.AcceptContentTypes = contentTypeProtobuf
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func dynamicClient(t *testing.T, s *framework.Server) dynamic.Interface {
	t.Helper()
	c, err := dynamic.NewForConfig(clientConfig(s))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func httpClient(t *testing.T, s *framework.Server) *http.Client {
	t.Helper()
	c, err := rest.HTTPClientFor(s.Config)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newNetwork(name, cidr, gateway string) *v1.Network {
	return &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.NetworkSpec{CIDR: cidr, Gateway: gateway},
	}
}

// betaNetwork is a Network in the v1beta1 layout, for the dynamic client.
func betaNetwork(name, subnet, gatewayIP string) *unstructured.Unstructured {
	spec := map[string]any{"subnet": subnet}
	if gatewayIP != "" {
		spec["gatewayIP"] = gatewayIP
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "samplecrd.k8s.io/v1beta1",
		"kind":       "Network",
		"metadata":   map[string]any{"name": name},
		"spec":       spec,
	}}
}

// networksURL is the collection URL of networks in ns for version ("v1" or "v1beta1").
func networksURL(s *framework.Server, version, ns string) string {
	return fmt.Sprintf("%s/apis/samplecrd.k8s.io/%s/namespaces/%s/networks", s.URL, version, ns)
}

// rawResponse is what a raw request returned.
type rawResponse struct {
	Code   int
	Header http.Header
	Body   []byte
}

// doRaw sends one request with the given body and headers and reads the whole response.
func doRaw(t *testing.T, c *http.Client, method, url, contentType, accept string, body []byte) rawResponse {
	t.Helper()
	var reader io.Reader
	if body != nil {
		reader = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, url, reader)
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading the response: %v", method, url, err)
	}
	return rawResponse{Code: resp.StatusCode, Header: resp.Header, Body: b}
}

// decodeStatus decodes a JSON metav1.Status and checks that it is one.
func decodeStatus(t *testing.T, body []byte) *metav1.Status {
	t.Helper()
	status := &metav1.Status{}
	if err := json.Unmarshal(body, status); err != nil {
		t.Fatalf("response body is not a JSON Status: %v\n%s", err, body)
	}
	if status.Kind != "Status" || status.APIVersion != "v1" {
		t.Fatalf("response body has kind %q apiVersion %q, want a v1 Status:\n%s", status.Kind, status.APIVersion, body)
	}
	return status
}

// nextEvent waits for the next watch event, failing the test after eventTimeout.
func nextEvent(t *testing.T, w watch.Interface) watch.Event {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed while waiting for an event")
		}
		return ev
	case <-time.After(eventTimeout):
		t.Fatalf("no watch event within %v", eventTimeout)
	}
	return watch.Event{}
}

// networkNames returns the names of the items, in order.
func networkNames(items []v1.Network) []string {
	names := make([]string, 0, len(items))
	for _, n := range items {
		names = append(names, n.Name)
	}
	return names
}
