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

// Package localcluster starts network-apiserver and its neighbours on this machine for the e2e
// tests, the bench and the robustness suite: hack/local-up-cluster.sh (and local-up-nodes.sh)
// in a state dir of its own, and the building blocks a test composes itself (processes with
// logs, free ports, a throwaway PKI, a TLS etcd cluster).
package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Cluster is a local cluster run by hack/local-up-cluster.sh or hack/local-up-nodes.sh in the
// state dir State (LOCAL_CLUSTER_DIR), with etcd, kube-apiserver and network-apiserver on free
// loopback ports.
type Cluster struct {
	Root  string // the repository
	State string
	Env   []string

	EtcdPort, APIServerPort, NetworkPort int
}

// New picks free loopback ports for a cluster in state; extraEnv (NAME=value) goes to the
// scripts after the defaults. The scripts number their ports from a base (etcd member i on
// ETCD_PORT+2i and ETCD_PEER_PORT+2i, replica i on NETWORK_APISERVER_PORT+i), so New takes one
// range of consecutive free ports for all of them, sized by ETCD_MEMBERS and REPLICAS in
// extraEnv. Nothing runs yet.
func New(root, state string, extraEnv ...string) (*Cluster, error) {
	members, err := envCount(extraEnv, "ETCD_MEMBERS")
	if err != nil {
		return nil, err
	}
	replicas, err := envCount(extraEnv, "REPLICAS")
	if err != nil {
		return nil, err
	}
	base, err := FreeRange(2*members + 1 + replicas)
	if err != nil {
		return nil, err
	}
	c := &Cluster{Root: root, State: state, EtcdPort: base, APIServerPort: base + 2*members, NetworkPort: base + 2*members + 1}
	c.Env = append(os.Environ(), "LOCAL_CLUSTER_DIR="+state,
		fmt.Sprintf("ETCD_PORT=%d", c.EtcdPort), fmt.Sprintf("ETCD_PEER_PORT=%d", c.EtcdPort+1),
		fmt.Sprintf("APISERVER_PORT=%d", c.APIServerPort), fmt.Sprintf("NETWORK_APISERVER_PORT=%d", c.NetworkPort))
	c.Env = append(c.Env, extraEnv...)
	return c, nil
}

// envCount is the last NAME=value of env as a count, 1 when absent.
func envCount(env []string, name string) (int, error) {
	n := 1
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, name+"="); ok {
			i, err := strconv.Atoi(v)
			if err != nil || i < 1 {
				return 0, fmt.Errorf("%s=%q: want a count of at least 1", name, v)
			}
			n = i
		}
	}
	return n, nil
}

// Command is `hack/<script> args...` for this cluster (up, down, restart-apiserver, ...).
// A cancelled ctx asks the script to stop with SIGTERM, so that it cleans up what it started.
func (c *Cluster) Command(ctx context.Context, script string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.Root, "hack", script), args...)
	cmd.Dir, cmd.Env = c.Root, c.Env
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	return cmd
}

// Path is a file in the state dir.
func (c *Cluster) Path(name string) string { return filepath.Join(c.State, name) }

// RepoRoot is the nearest directory up from the working directory holding
// hack/local-up-cluster.sh.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "hack", "local-up-cluster.sh")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no hack/local-up-cluster.sh above the working directory")
		}
		dir = parent
	}
}
