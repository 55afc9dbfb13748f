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

package server

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/client-go/kubernetes"
	clientscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apiserver/inprocess"
	"github.com/samplecrd/network-apiserver/pkg/cmd/agent"
	"github.com/samplecrd/network-apiserver/pkg/cmd/installcni"
	"github.com/samplecrd/network-apiserver/pkg/embeddedetcd"
	"github.com/samplecrd/network-apiserver/pkg/standaloneauth"
)

// NewCommand returns the network-apiserver command.
func NewCommand(ctx context.Context, o *Options) *cobra.Command {
	var printVersion bool
	cmd := &cobra.Command{
		Use:   "network-apiserver",
		Short: "Serve the samplecrd.k8s.io Network API",
		Long: "network-apiserver serves samplecrd.k8s.io Networks from its own etcd. Without a core Kubernetes API " +
			"it runs standalone with an embedded etcd and writes an admin kubeconfig; with --kubeconfig (or in a " +
			"cluster) it runs behind kube-apiserver's aggregation layer with delegated authentication and authorization.",
		SilenceUsage: true,
		RunE: func(c *cobra.Command, _ []string) error {
			if printVersion {
				v := version.Get()
				fmt.Fprintf(o.Out, "network-apiserver %s (commit %s, tree %s, built %s, %s %s)\n",
					v.GitVersion, v.GitCommit, v.GitTreeState, v.BuildDate, v.GoVersion, v.Platform)
				return nil
			}
			if err := o.Complete(); err != nil {
				return err
			}
			setGCPercent(os.LookupEnv)
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(c.Context())
		},
	}
	cmd.SetContext(ctx)
	o.AddFlags(cmd.Flags())
	cmd.Flags().BoolVar(&printVersion, "version", false, "Print the version, commit and build date, then exit.")
	cmd.AddCommand(agent.NewCommand(ctx), installcni.NewCommand())
	return cmd
}

// Run starts the embedded etcd if there is one, then serves until ctx is done, then stops etcd.
func (o *Options) Run(ctx context.Context) error {
	if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
		return err
	}
	if o.EmbeddedEtcd() {
		etcd, err := embeddedetcd.Start(ctx, o.DataDir, o.EmbeddedEtcdPort)
		if err != nil {
			return err
		}
		defer etcd.Stop()
		o.embedded = etcd
		// The storage and the allocator's client present the embedded etcd's client certificate.
		transport := &o.Recommended.Etcd.StorageConfig.Transport
		transport.ServerList = []string{etcd.Endpoint}
		transport.TrustedCAFile, transport.CertFile, transport.KeyFile = etcd.PKI.CAFile, etcd.PKI.CertFile, etcd.PKI.KeyFile
		// For etcdctl, and for a second replica sharing this etcd.
		if err := os.WriteFile(filepath.Join(o.DataDir, "etcd.endpoint"), []byte(etcd.Endpoint+"\n"), 0o600); err != nil {
			return err
		}
	}

	config, err := o.Config()
	defer func() {
		for _, c := range o.etcdClients {
			c.Close()
		}
	}()
	if err != nil {
		return err
	}
	// Attached mode: one Node informer for the node lifecycle loop, the block release and the
	// block claims' spec.nodeSelector check.
	var nodes *coreNodes
	if client := config.GenericConfig.ClientConfig; client != nil && !o.Standalone {
		if nodes, err = newCoreNodes(client); err != nil {
			return err
		}
		config.Extra.Nodes = nodes.release()
		config.Extra.NodeLabels = nodes.release().Labels
	}
	// Attached mode: the Events of Networks crossing 80% used go to the core API. Standalone
	// mode has no Events API: it records none.
	if client := config.GenericConfig.ClientConfig; client != nil && !o.Standalone {
		kube, err := kubernetes.NewForConfig(client)
		if err != nil {
			return err
		}
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		host, _ := os.Hostname()
		config.Extra.Events = broadcaster.NewRecorder(clientscheme.Scheme, corev1.EventSource{Component: "network-apiserver", Host: host})
	}
	server, err := config.Complete().New()
	if err != nil {
		return err
	}
	// The in-process clients (the controller, the node lifecycle loop) reach the handler over
	// socket pairs, without TLS; closed after they have stopped (defers run last first).
	inProcess := inprocess.Serve(server.GenericAPIServer.Handler)
	defer func() { _ = inProcess.Close() }()
	if nodes != nil {
		server.GenericAPIServer.AddPostStartHookOrDie("start-node-informer", func(hook genericapiserver.PostStartHookContext) error {
			nodes.start(hook)
			return nil
		})
	}
	if o.Controller.Enabled {
		// Events and the Node need the core API: attached mode has it, standalone mode does not.
		var core agent.Core
		if client := config.GenericConfig.ClientConfig; client != nil && !o.Standalone {
			if core.Events, err = kubernetes.NewForConfig(client); err != nil {
				return err
			}
			core.Nodes = core.Events
			core.Leases = core.Events
		}
		// A controller that fails fails /livez: the process no longer does one of its jobs and
		// will not recover by itself, so an orchestrator should restart it and a person see it.
		// /readyz is left alone, so a broken node controller does not stop the API being served.
		controller := o.Controller.NewBackground()
		if err := server.GenericAPIServer.AddLivezChecks(0, controller); err != nil {
			return err
		}
		server.GenericAPIServer.AddPostStartHookOrDie("start-network-controller", func(hook genericapiserver.PostStartHookContext) error {
			controller.Start(hook, inProcess.ClientConfig(hook.LoopbackClientConfig), core)
			return nil
		})
		// After the server has stopped (and before the embedded etcd does), wait for the
		// controller, so that it has closed its backend when Run returns.
		defer controller.Wait()
	}
	if nodes != nil && o.NodeLifecycle {
		loop := newNodeLifecycle(nodes, o.Controller.Lease.Namespace)
		server.GenericAPIServer.AddPostStartHookOrDie("start-node-lifecycle", func(hook genericapiserver.PostStartHookContext) error {
			return loop.start(hook, inProcess.ClientConfig(hook.LoopbackClientConfig))
		})
		defer loop.wait()
	}
	if o.Standalone {
		server.GenericAPIServer.AddPostStartHookOrDie("write-admin-kubeconfig", func(genericapiserver.PostStartHookContext) error {
			return o.announceAdminKubeconfig()
		})
	}
	return server.GenericAPIServer.PrepareRun().RunWithContext(ctx)
}

// announceAdminKubeconfig writes the admin kubeconfig and prints the kubectl line to use it.
func (o *Options) announceAdminKubeconfig() error {
	serving := o.Recommended.SecureServing
	host := serving.BindAddress.String()
	if serving.BindAddress.IsUnspecified() || serving.BindAddress.IsLoopback() {
		host = "127.0.0.1"
	}
	port := serving.BindPort
	if serving.Listener != nil {
		port = serving.Listener.Addr().(*net.TCPAddr).Port
	}
	caPEM, err := os.ReadFile(serving.ServerCert.CertKey.CertFile)
	if err != nil {
		return fmt.Errorf("reading the serving certificate for the kubeconfig: %w", err)
	}
	token, err := standaloneauth.LoadOrCreateAdminToken(filepath.Join(o.DataDir, "admin.token"))
	if err != nil {
		return err
	}
	file, err := filepath.Abs(filepath.Join(o.DataDir, "admin.kubeconfig"))
	if err != nil {
		return err
	}
	server := "https://" + net.JoinHostPort(host, strconv.Itoa(port))
	if err := standaloneauth.WriteAdminKubeconfig(file, server, caPEM, token); err != nil {
		return err
	}
	klog.InfoS("Admin kubeconfig written", "path", file, "server", server)
	for _, node := range o.AgentKubeconfigNodes {
		file, err := filepath.Abs(filepath.Join(o.DataDir, "agent-"+node+".kubeconfig"))
		if err != nil {
			return err
		}
		if err := standaloneauth.WriteAgentKubeconfig(file, server, caPEM, token, node); err != nil {
			return err
		}
		klog.InfoS("Agent kubeconfig written", "node", node, "path", file)
	}
	fmt.Fprintf(o.Out, "\nnetwork-apiserver is serving at %s. Try:\n\n  kubectl --kubeconfig %s get networks\n\n", server, file)
	return nil
}
