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
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// cluster is a local control plane started by hack/local-up-cluster.sh in a temporary state dir:
// etcd, kube-apiserver and network-apiserver behind its aggregation layer, all on loopback.
type cluster struct{ *localcluster.Cluster }

// kubeAPIServerShutdownArg ends kube-apiserver's open watches when it is asked to stop, as
// network-apiserver does by default (5 s). Without it (the generic default is 0), SIGTERM closes
// the listener and then net/http's Server.Shutdown waits for every connection to go idle: a watch
// never does, so kube-apiserver exits only when that wait times out, after --request-timeout
// (60 s). The bench restarts kube-apiserver while network-apiserver runs, and network-apiserver's
// informers (the authentication ConfigMap, namespaces, admission webhooks and policies) watch it:
// every restart of the CRD side cost a minute ("Failed to shutdown server: context deadline
// exceeded" in its log, 60 s after "Stopped listening").
const kubeAPIServerShutdownArg = "--shutdown-watch-termination-grace-period=5s"

// newCluster picks free loopback ports and a state dir; nothing runs yet.
func newCluster(root string) (*cluster, error) {
	dir, err := os.MkdirTemp("", "network-bench-")
	if err != nil {
		return nil, err
	}
	// Nothing but the two servers and etcd: no controller adds load while we measure.
	c, err := localcluster.New(root, filepath.Join(dir, "cluster"), "KUBE_CONTROLLER_MANAGER=false",
		"KUBE_APISERVER_ARGS="+kubeAPIServerShutdownArg)
	if err != nil {
		return nil, err
	}
	return &cluster{c}, nil
}

// script runs hack/local-up-cluster.sh ARG, its output going to our stderr.
func (c *cluster) script(ctx context.Context, arg string) error {
	cmd := c.Command(ctx, "local-up-cluster.sh", arg)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// stopCluster stops the cluster, first keeping its logs in the output dir if the run failed.
func (b *bench) stopCluster(cl *cluster) {
	if len(b.res.Errors) > 0 {
		logs := filepath.Join(b.cfg.Out, "logs-"+b.res.Started.Format("20060102-150405"))
		if err := os.MkdirAll(logs, 0o755); err == nil {
			cl.SaveLogs(logs)
			fmt.Fprintf(os.Stderr, "bench: server logs saved in %s\n", logs)
		}
	}
	step("stopping the cluster")
	t := time.Now()
	if err := cl.down(); err != nil {
		b.res.Errors = append(b.res.Errors, "cluster-down: "+err.Error())
	}
	step("cluster stopped in %.1f s", time.Since(t).Seconds())
}

func (c *cluster) up(ctx context.Context) error { return c.script(ctx, "up") }

// down stops every process the cluster runs (including those restart started) and removes the
// state dir; it runs on its own deadline, since it is called when the bench's context is done.
func (c *cluster) down() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	err := c.script(ctx, "down")
	if rmErr := os.Remove(filepath.Dir(c.State)); rmErr != nil && !errors.Is(rmErr, os.ErrNotExist) && err == nil {
		err = rmErr
	}
	return err
}
