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

// Package critest is a fake container runtime for tests: a real gRPC server on a unix socket
// that implements the CRI RuntimeService's ListPodSandbox over a set of sandboxes the test
// adds and removes (every other call answers Unimplemented).
package critest

import (
	"context"
	"net"
	"path/filepath"
	"sort"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Runtime is the fake runtime.
type Runtime struct {
	runtimeapi.UnimplementedRuntimeServiceServer

	// Socket is the path of its unix socket.
	Socket string

	mu        sync.Mutex
	sandboxes map[string]runtimeapi.PodSandboxState
	fail      error
	calls     int
	server    *grpc.Server
}

// Start serves a fake runtime on a socket in a temporary directory of t until t ends.
func Start(t testing.TB) *Runtime {
	t.Helper()
	r := &Runtime{Socket: filepath.Join(t.TempDir(), "cri.sock"), sandboxes: map[string]runtimeapi.PodSandboxState{}}
	l, err := net.Listen("unix", r.Socket)
	if err != nil {
		t.Fatalf("listening on %s: %v", r.Socket, err)
	}
	r.server = grpc.NewServer()
	runtimeapi.RegisterRuntimeServiceServer(r.server, r)
	go func() { _ = r.server.Serve(l) }()
	t.Cleanup(r.Stop)
	return r
}

// Stop stops serving (the socket goes).
func (r *Runtime) Stop() { r.server.Stop() }

// Add makes a ready sandbox id exist.
func (r *Runtime) Add(id string) { r.set(id, runtimeapi.PodSandboxState_SANDBOX_READY) }

// SetNotReady marks sandbox id stopped (it still exists and is still listed).
func (r *Runtime) SetNotReady(id string) { r.set(id, runtimeapi.PodSandboxState_SANDBOX_NOTREADY) }

func (r *Runtime) set(id string, s runtimeapi.PodSandboxState) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sandboxes[id] = s
}

// Remove makes sandbox id not exist.
func (r *Runtime) Remove(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.sandboxes, id)
}

// Fail makes ListPodSandbox answer code (codes.OK: answer again).
func (r *Runtime) Fail(code codes.Code) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fail = nil
	if code != codes.OK {
		r.fail = status.Error(code, "injected failure")
	}
}

// Calls is the number of ListPodSandbox calls received.
func (r *Runtime) Calls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls
}

// ListPodSandbox implements the CRI: every sandbox, in id order (filters are not supported and
// refused, since the agent sends none).
func (r *Runtime) ListPodSandbox(_ context.Context, req *runtimeapi.ListPodSandboxRequest) (*runtimeapi.ListPodSandboxResponse, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.calls++
	if r.fail != nil {
		return nil, r.fail
	}
	if req.Filter != nil {
		return nil, status.Error(codes.InvalidArgument, "the fake runtime supports no filter")
	}
	resp := &runtimeapi.ListPodSandboxResponse{}
	for id, s := range r.sandboxes {
		resp.Items = append(resp.Items, &runtimeapi.PodSandbox{Id: id, State: s})
	}
	sort.Slice(resp.Items, func(i, j int) bool { return resp.Items[i].Id < resp.Items[j].Id })
	return resp, nil
}
