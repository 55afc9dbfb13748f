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

package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"
)

// NewCommand returns `network-apiserver agent`: the Network controller alone, against any
// endpoint serving samplecrd.k8s.io (the form a DaemonSet runs on every node).
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewControllerOptions()
	client := defaultClientOptions
	var metricsAddress string
	var recordEvents bool
	cmd := &cobra.Command{
		Use:          "agent",
		Short:        "Run only the Network controller for this node",
		SilenceUsage: true,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := utilerrors.NewAggregate(append(o.Validate(), client.validate()...)); err != nil {
				return err
			}
			config, err := client.config()
			if err != nil {
				return err
			}
			if metricsAddress != "" {
				if err := serveMetrics(c.Context(), metricsAddress); err != nil {
					return err
				}
			}
			var core Core
			if recordEvents || o.WatchNode || o.Lease.Namespace != "" {
				client, err := kubernetes.NewForConfig(config)
				if err != nil {
					return err
				}
				if recordEvents {
					core.Events = client
				}
				if o.WatchNode {
					core.Nodes = client
				}
				if o.Lease.Namespace != "" {
					core.Leases = client
				}
			}
			return o.Run(c.Context(), config, core)
		},
	}
	cmd.SetContext(ctx)
	fs := cmd.Flags()
	client.addFlags(fs)
	fs.StringVar(&metricsAddress, "metrics-bind-address", "127.0.0.1:9469", "Address serving /metrics; empty turns it off.")
	fs.BoolVar(&recordEvents, "record-events", true, "Record Kubernetes Events on Networks (needs the core API at the same endpoint).")
	o.AddFlags(fs, false)
	return cmd
}

// clientOptions: where the agent's API is and how fast the agent may call it.
type clientOptions struct {
	kubeconfig string
	qps        float32
	burst      int
}

// defaultClientOptions: kubelet's rate (--kube-api-qps 50, --kube-api-burst 100), not
// client-go's 5 and 10. An agent writes its entry of every Network at once when its Node
// turns Ready again; at 5 a second a node with 120 Networks read ready again only after 24 s.
var defaultClientOptions = clientOptions{qps: 50, burst: 100}

func (c *clientOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&c.kubeconfig, "kubeconfig", c.kubeconfig, "kubeconfig of the API serving samplecrd.k8s.io; empty uses the in-cluster config.")
	fs.Float32Var(&c.qps, "kube-api-qps", c.qps, "Requests per second the agent sends the API at most (client-side; API Priority and Fairness still applies), as kubelet's flag of that name.")
	fs.IntVar(&c.burst, "kube-api-burst", c.burst, "Requests the agent may send at once before --kube-api-qps paces them, as kubelet's flag of that name.")
}

func (c *clientOptions) validate() []error {
	var errs []error
	if c.qps <= 0 {
		errs = append(errs, fmt.Errorf("--kube-api-qps must be positive, not %v", c.qps))
	}
	if c.burst < 1 {
		errs = append(errs, fmt.Errorf("--kube-api-burst must be at least 1, not %d", c.burst))
	}
	return errs
}

// config is the client configuration of the flags: the kubeconfig's (or the in-cluster one)
// with the rate limits set.
func (c *clientOptions) config() (*rest.Config, error) {
	var config *rest.Config
	var err error
	if c.kubeconfig == "" {
		config, err = rest.InClusterConfig()
	} else {
		config, err = clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	}
	if err != nil {
		return nil, err
	}
	config.QPS, config.Burst = c.qps, c.burst
	return config, nil
}

// serveMetrics serves the controller's and client-go's metrics until ctx is done.
func serveMetrics(ctx context.Context, address string) error {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", legacyregistry.Handler())
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = server.Shutdown(shutdown)
	}()
	go func() {
		if err := server.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.ErrorS(err, "Serving metrics failed")
		}
	}()
	klog.InfoS("Serving metrics", "address", ln.Addr().String())
	return nil
}
