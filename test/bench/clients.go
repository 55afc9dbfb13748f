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

package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
)

// endpoint is one server as the bench talks to it: a REST config and the single HTTP client (and
// so the single transport) every request to it shares.
type endpoint struct {
	config *rest.Config
	http   *http.Client
}

// newEndpoint builds an endpoint for host from the admin kubeconfig's credentials, with the CA
// that signed host's serving certificate. Only loopback hosts are accepted.
func newEndpoint(admin *rest.Config, host, caFile string, compression bool) (*endpoint, error) {
	if err := requireLoopback(host); err != nil {
		return nil, err
	}
	cfg := rest.CopyConfig(admin)
	cfg.Host = host
	if caFile != "" {
		cfg.TLSClientConfig.CAData, cfg.TLSClientConfig.CAFile = nil, caFile
	}
	// No client-side throttling: the servers are what is measured.
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.DisableCompression = !compression
	cfg.UserAgent = "network-bench"
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return &endpoint{config: cfg, http: hc}, nil
}

// loadAdmin reads the admin kubeconfig and checks that it points at loopback.
func loadAdmin(kubeconfig string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	return cfg, requireLoopback(cfg.Host)
}

// requireLoopback refuses a URL whose host is, or resolves to, anything but 127.0.0.1 or ::1.
func requireLoopback(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("refusing %q: no host", raw)
	}
	ips := []net.IP{net.ParseIP(host)}
	if ips[0] == nil {
		if ips, err = net.LookupIP(host); err != nil {
			return fmt.Errorf("refusing %q: %w", raw, err)
		}
	}
	for _, ip := range ips {
		if !ip.Equal(net.IPv4(127, 0, 0, 1)) && !ip.Equal(net.IPv6loopback) {
			return fmt.Errorf("refusing %q: %s is not 127.0.0.1 or ::1", raw, ip)
		}
	}
	return nil
}

// get issues a GET for path with an Accept header and returns the status, body and its length.
func (e *endpoint) get(ctx context.Context, path, accept string) (int, []byte, error) {
	u := e.config.Host + path
	if err := requireLoopback(u); err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, nil, err
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	resp, err := e.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// typed returns the generated clientset (protobuf) on the endpoint's transport.
func (e *endpoint) typed() (*versioned.Clientset, error) {
	return versioned.NewForConfigAndClient(e.config, e.http)
}

// dynamic returns a dynamic client (JSON) on the endpoint's transport.
func (e *endpoint) dynamic() (*dynamic.DynamicClient, error) {
	return dynamic.NewForConfigAndClient(e.config, e.http)
}

// mustExist fails early with a hint when a file the bench needs is missing.
func mustExist(path, hint string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s is missing (%s)", path, hint)
	}
	return nil
}
