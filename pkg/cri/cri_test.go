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

package cri_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/samplecrd/network-apiserver/pkg/cri"
	"github.com/samplecrd/network-apiserver/pkg/cri/critest"
)

// TestSandboxIDs: every sandbox is listed, ready or not; a failing runtime and a missing socket
// are errors, the latter wrapping ErrNoSocket.
func TestSandboxIDs(t *testing.T) {
	rt := critest.Start(t)
	rt.Add("a")
	rt.Add("b")
	rt.SetNotReady("b")
	c, err := cri.New("unix://"+rt.Socket, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	ids, err := c.SandboxIDs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, a := ids["a"]; !a || len(ids) != 2 {
		t.Fatalf("sandboxes %v, want a and b", ids)
	}
	if _, b := ids["b"]; !b {
		t.Fatalf("the NOTREADY sandbox b is not listed: %v", ids)
	}
	rt.Fail(codes.Unavailable)
	if _, err := c.SandboxIDs(ctx); status.Code(errors.Unwrap(err)) != codes.Unavailable {
		t.Fatalf("failing runtime: %v", err)
	}
	rt.Fail(codes.OK)
	rt.Remove("a")
	if ids, err := c.SandboxIDs(ctx); err != nil || len(ids) != 1 {
		t.Fatalf("after a removal: %v, %v", ids, err)
	}
	rt.Stop()
	if _, err := c.SandboxIDs(ctx); !errors.Is(err, cri.ErrNoSocket) {
		t.Fatalf("stopped runtime (socket gone): %v, want ErrNoSocket", err)
	}
	missing, err := cri.New(filepath.Join(t.TempDir(), "x.sock"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	if _, err := missing.SandboxIDs(ctx); !errors.Is(err, cri.ErrNoSocket) {
		t.Fatalf("missing socket: %v", err)
	}
}

func TestSocketPath(t *testing.T) {
	for in, want := range map[string]string{"/run/containerd/containerd.sock": "/run/containerd/containerd.sock",
		"unix:///run/crio/crio.sock": "/run/crio/crio.sock", "tcp://1.2.3.4:5": "", "relative.sock": "", "unix://rel": ""} {
		got, err := cri.SocketPath(in)
		if got != want || (err != nil) != (want == "") {
			t.Errorf("SocketPath(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}
