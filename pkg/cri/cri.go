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

// Package cri asks a node's container runtime, over the Container Runtime Interface on its unix
// socket, which pod sandboxes exist.
package cri

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// DefaultTimeout bounds one ListPodSandbox call.
const DefaultTimeout = 10 * time.Second

// maxMessageSize is the largest answer accepted (the kubelet's own limit): a node's sandboxes.
const maxMessageSize = 16 * 1024 * 1024

// ErrNoSocket is returned (wrapped) when the runtime's socket does not exist.
var ErrNoSocket = errors.New("container runtime socket missing")

// Client lists a runtime's pod sandboxes.
type Client struct {
	path    string
	timeout time.Duration
	conn    *grpc.ClientConn
	runtime runtimeapi.RuntimeServiceClient
}

// SocketPath returns the socket path of endpoint: a path, or a unix:// URL.
func SocketPath(endpoint string) (string, error) {
	path, found := strings.CutPrefix(endpoint, "unix://")
	if !found && strings.Contains(endpoint, "://") {
		return "", fmt.Errorf("container runtime endpoint %q: only unix sockets are supported", endpoint)
	}
	if !strings.HasPrefix(path, "/") {
		return "", fmt.Errorf("container runtime endpoint %q: must be an absolute path of a unix socket", endpoint)
	}
	return path, nil
}

// New returns a client of the runtime at endpoint (a unix socket path or unix:// URL); timeout
// bounds each call (0: DefaultTimeout). It does not connect until the first call, so a runtime
// that starts later is found then.
func New(endpoint string, timeout time.Duration) (*Client, error) {
	path, err := SocketPath(endpoint)
	if err != nil {
		return nil, err
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	conn, err := grpc.NewClient("unix://"+path,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessageSize)))
	if err != nil {
		return nil, fmt.Errorf("container runtime endpoint %q: %w", endpoint, err)
	}
	return &Client{path: path, timeout: timeout, conn: conn, runtime: runtimeapi.NewRuntimeServiceClient(conn)}, nil
}

// Endpoint is the socket path the client talks to.
func (c *Client) Endpoint() string { return c.path }

// SandboxIDs returns the ids of every pod sandbox the runtime has, in any state: a NOTREADY
// sandbox (stopped, its network possibly torn down) still exists until it is removed. The error
// wraps ErrNoSocket when the socket is missing.
func (c *Client) SandboxIDs(ctx context.Context) (map[string]struct{}, error) {
	if _, err := os.Stat(c.path); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNoSocket, c.path)
	}
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp, err := c.runtime.ListPodSandbox(ctx, &runtimeapi.ListPodSandboxRequest{})
	if err != nil {
		return nil, fmt.Errorf("ListPodSandbox on %s: %w", c.path, err)
	}
	ids := make(map[string]struct{}, len(resp.Items))
	for _, s := range resp.Items {
		ids[s.Id] = struct{}{}
	}
	return ids, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }
