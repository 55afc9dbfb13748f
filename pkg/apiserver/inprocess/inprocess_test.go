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

package inprocess

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// handler answers /hello with the protocol and the Authorization header it saw and /stream
// with one line now and one line each time next is sent to, until the request ends.
func testHandler(next <-chan string, streamEnded *atomic.Bool) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%s %s", r.Proto, r.Header.Get("Authorization"))
	})
	mux.HandleFunc("/stream", func(w http.ResponseWriter, r *http.Request) {
		defer streamEnded.Store(true)
		fmt.Fprintln(w, "first")
		w.(http.Flusher).Flush()
		for {
			select {
			case line := <-next:
				fmt.Fprintln(w, line)
				w.(http.Flusher).Flush()
			case <-r.Context().Done():
				return
			}
		}
	})
	return mux
}

func get(ctx context.Context, client *http.Client, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, Host+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer func() { _ = resp.Body.Close() }()
	return io.ReadAll(resp.Body)
}

func TestClientConfigReachesTheHandler(t *testing.T) {
	var ended atomic.Bool
	s := Serve(testHandler(nil, &ended))
	t.Cleanup(func() { _ = s.Close() })
	loopback := &rest.Config{
		Host:            "https://127.0.0.1:1",
		BearerToken:     "loopback-token",
		TLSClientConfig: rest.TLSClientConfig{CAData: []byte("not used"), ServerName: "apiserver-loopback-client"},
	}
	c := s.ClientConfig(loopback)
	if c.Host != Host || len(c.TLSClientConfig.CAData) != 0 || c.TLSClientConfig.ServerName != "" {
		t.Fatalf("config still points at the secure port: host %q, TLS %+v", c.Host, c.TLSClientConfig)
	}
	if loopback.Transport != nil || loopback.Host != "https://127.0.0.1:1" {
		t.Fatalf("the loopback configuration was changed: %+v", loopback)
	}
	client, err := rest.HTTPClientFor(c)
	if err != nil {
		t.Fatal(err)
	}
	// Several at once, so that they share the HTTP/2 connection.
	errs := make(chan error, 20)
	for range 20 {
		go func() {
			body, err := get(context.Background(), client, "/hello")
			if err == nil && string(body) != "HTTP/2.0 Bearer loopback-token" {
				err = fmt.Errorf("got %q, want HTTP/2 with the loopback token", body)
			}
			errs <- err
		}()
	}
	for range 20 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

func TestCloseEndsStreamsAndRefusesNewRequests(t *testing.T) {
	next := make(chan string)
	var ended atomic.Bool
	s := Serve(testHandler(next, &ended))
	client, err := rest.HTTPClientFor(s.ClientConfig(&rest.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, Host+"/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	stream := resp.Body
	defer func() { _ = stream.Close() }()
	lines := bufio.NewReader(stream)
	for _, want := range []string{"first", "second"} {
		if want != "first" {
			next <- want
		}
		line, err := lines.ReadString('\n')
		if err != nil || strings.TrimSpace(line) != want {
			t.Fatalf("read %q, %v; want %q", line, err, want)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := lines.ReadString('\n'); err == nil {
		t.Fatal("the stream went on after Close")
	}
	if _, err := get(ctx, client, "/hello"); err == nil {
		t.Fatal("a request after Close was served")
	}
	if !ended.Load() {
		t.Fatal("the handler of the stream did not return on Close")
	}
}

func TestCloseReportsAHandlerThatIgnoresItsEnd(t *testing.T) {
	defer func(grace time.Duration) { handlersGrace = grace }(handlersGrace)
	handlersGrace = 100 * time.Millisecond
	entered, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	s := Serve(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		close(entered)
		<-release // ignores its request's context
	}))
	client, err := rest.HTTPClientFor(s.ClientConfig(&rest.Config{}))
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = get(context.Background(), client, "/stuck") }()
	<-entered
	err = s.Close()
	if err == nil || !strings.Contains(err.Error(), "handlers still running") {
		t.Fatalf("Close returned %v; want the handler reported as still running", err)
	}
}
