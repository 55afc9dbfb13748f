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

// Package agent wires the Network controller: its options and flags, Run (informers, events,
// Linux backend), the bundled form started inside the server, and `network-apiserver agent`, the
// controller alone against any endpoint serving samplecrd.k8s.io.
package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/spf13/pflag"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	networkcontroller "github.com/samplecrd/network-apiserver/pkg/controller/network"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/cri"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	clientscheme "github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
	"github.com/samplecrd/network-apiserver/pkg/leasereclaim"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
)

// ControllerOptions configure the Network controller, bundled or as `network-apiserver agent`.
type ControllerOptions struct {
	Enabled      bool
	NodeName     string
	CNIConfDir   string
	BackendNetNS string
	// IPAMDataDir is host-local's dataDir in the configuration lists; empty is its default.
	IPAMDataDir string
	// BridgeOnAttach (the default) leaves a Network's bridge on the node to its first pod's ADD,
	// where the samplecrd-bridge plugin (installed beside the reference plugins) makes it; off,
	// every Network gets its bridge on every node it selects as soon as it exists.
	BridgeOnAttach bool
	Workers        int
	ResyncPeriod   time.Duration
	GCInterval     time.Duration
	// WatchNode watches the Node named NodeName when a core API client is at hand: while it is
	// not Ready the node's status entries say NodeNotReady; once it is deleted they say
	// NodeDeleted while the agent holds its Lease and pods hold addresses, else are withdrawn.
	WatchNode bool
	// MinFreeAddresses is the free addresses the node keeps in its blocks of each Network.
	MinFreeAddresses int
	// CountReportInterval: a change of an entry's counts alone (leases, attachments) is
	// written at most once per interval per Network.
	CountReportInterval time.Duration
	// UnderlayAddress, UnderlayInterface and OverlayMTU place the node on the network between
	// nodes (see AddFlags); all empty: no segment, one node alone.
	UnderlayAddress   string
	UnderlayInterface string
	OverlayMTU        int
	// NodeLabels are the node's labels for Networks' spec.nodeSelector while no Node of the
	// node is watched or seen (standalone mode); the Node's labels count once it is.
	NodeLabels map[string]string
	// Lease is the agent's Lease (lease.go).
	Lease LeaseOptions
	// ContainerRuntimeEndpoint is the node's CRI socket (a path or unix:// URL): leases whose
	// pod sandbox it no longer has are released after LeaseReclaimGrace. Empty: none are.
	ContainerRuntimeEndpoint string
	LeaseReclaimGrace        time.Duration
}

// Core is what the controller uses of the core Kubernetes API; a nil field turns that use off
// (standalone mode has no core API).
type Core struct {
	// Events records Kubernetes Events on Networks.
	Events kubernetes.Interface
	// Nodes reads this node's Node (with ControllerOptions.WatchNode).
	Nodes kubernetes.Interface
	// Leases holds the agent's Lease (ControllerOptions.Lease).
	Leases kubernetes.Interface
}

// NewControllerOptions returns the defaults; the node name defaults to the hostname.
func NewControllerOptions() *ControllerOptions {
	host, _ := os.Hostname()
	return &ControllerOptions{
		Enabled:        true,
		NodeName:       host,
		CNIConfDir:     "/etc/cni/net.d",
		BridgeOnAttach: true,
		Workers:        8,
		ResyncPeriod:   10 * time.Minute,
		GCInterval:     5 * time.Minute,
		WatchNode:      true,

		MinFreeAddresses:    networkcontroller.DefaultMinFreeAddresses,
		CountReportInterval: networkcontroller.DefaultCountReportInterval,
		Lease:               DefaultLeaseOptions,

		LeaseReclaimGrace: leasereclaim.DefaultGrace,
	}
}

// AddFlags adds the controller's flags; withToggle adds --controllers (the bundled form only).
func (c *ControllerOptions) AddFlags(fs *pflag.FlagSet, withToggle bool) {
	if withToggle {
		fs.BoolVar(&c.Enabled, "controllers", c.Enabled,
			"Run the Network controller in-process, against this server, once it serves.")
	}
	fs.StringVar(&c.NodeName, "node-name", c.NodeName, "Name of this node in status.nodes and in the controller's field manager.")
	fs.StringVar(&c.CNIConfDir, "cni-conf-dir", c.CNIConfDir, "Directory the controller writes each Network's CNI configuration list to.")
	fs.StringVar(&c.BackendNetNS, "backend-netns", c.BackendNetNS,
		"Path of a network namespace (for example /var/run/netns/test) to confine bridges to; empty is the controller's own.")
	fs.StringVar(&c.IPAMDataDir, "cni-ipam-data-dir", c.IPAMDataDir,
		"host-local's dataDir in the CNI configuration lists (empty: host-local's default, /var/lib/cni/networks); a Network's leftover reservations there are removed with it.")
	fs.BoolVar(&c.BridgeOnAttach, "bridge-on-attach", c.BridgeOnAttach,
		"Make a Network's bridge on the node in its first pod's CNI ADD, by the samplecrd-bridge plugin that comes first in the configuration list (it must be installed beside the reference plugins: install-cni-plugin), so that a Network no pod uses here has its configuration list and no interface; false makes every Network's bridge (and VXLAN device) on the node as soon as the Network exists.")
	fs.IntVar(&c.Workers, "controller-workers", c.Workers, "Networks reconciled in parallel.")
	fs.DurationVar(&c.ResyncPeriod, "controller-resync-period", c.ResyncPeriod, "How often every Network is compared with the node again.")
	fs.DurationVar(&c.GCInterval, "controller-gc-interval", c.GCInterval, "How often bridges and configurations without a Network are removed.")
	fs.IntVar(&c.MinFreeAddresses, "min-free-addresses", c.MinFreeAddresses,
		"Free addresses the node keeps in its address blocks of each Network: below that it claims another block from the server (a pod ADD itself never asks the server).")
	fs.DurationVar(&c.CountReportInterval, "count-report-interval", c.CountReportInterval,
		"A change of this node's address counts alone (leases and attachments in a Network's status.nodes entry) is written at most once per interval per Network; the last change is written when the interval ends. Any other change of the entry is written at once, with the counts as they are.")
	fs.StringVar(&c.UnderlayAddress, "underlay-address", c.UnderlayAddress,
		"This node's address on the network between nodes: the source of its VXLAN traffic and what the other nodes send to. Empty: --underlay-interface's address.")
	fs.StringVar(&c.UnderlayInterface, "underlay-interface", c.UnderlayInterface,
		"Interface (in --backend-netns) of the network between nodes; its first global address is the underlay address unless --underlay-address is set. Neither set: no segment across nodes.")
	fs.IntVar(&c.OverlayMTU, "overlay-mtu", c.OverlayMTU,
		"MTU of each Network's bridge, VXLAN device and pods when the node has an underlay; 0: the underlay interface's MTU (1500 without one) minus the VXLAN overhead (50, 70 over IPv6).")
	fs.StringToStringVar(&c.NodeLabels, "node-labels", c.NodeLabels,
		"This node's labels (k=v,...) that Networks' spec.nodeSelector is matched against while no Node of it is watched (standalone mode); with a Node (--watch-node), the Node's labels count instead. Default none: only Networks without a selector, or with one that requires no label, are realised here.")
	c.Lease.addFlags(fs)
	fs.StringVar(&c.ContainerRuntimeEndpoint, "container-runtime-endpoint", c.ContainerRuntimeEndpoint,
		"The node's container runtime socket (CRI, for example /run/containerd/containerd.sock): an address leased to a pod sandbox the runtime no longer has, in any state, is released after --lease-reclaim-grace. Empty: no lease is ever released, and every status.nodes entry says leaseReclaim \"Off: no container runtime endpoint\".")
	fs.DurationVar(&c.LeaseReclaimGrace, "lease-reclaim-grace", c.LeaseReclaimGrace,
		"How long a lease must have had no pod sandbox in the container runtime, in every look, and its record have existed, before it is released. It must be longer than any CNI ADD takes: a runtime lists a sandbox only once its ADD has returned.")
	fs.BoolVar(&c.WatchNode, "watch-node", c.WatchNode,
		"Watch the Node named --node-name through the core API (attached mode): while it is not Ready this node's status.nodes entries say NodeNotReady; once it is deleted they say NodeDeleted while this agent holds its Lease and pods hold addresses, and are withdrawn otherwise. Without such a Node, nothing changes.")
}

// Validate checks the flags.
func (c *ControllerOptions) Validate() []error {
	if !c.Enabled {
		return nil
	}
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, fmt.Errorf("--node-name must not be empty"))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("--controller-workers must be at least 1"))
	}
	if c.CNIConfDir == "" {
		errs = append(errs, fmt.Errorf("--cni-conf-dir must not be empty"))
	}
	if c.UnderlayAddress != "" {
		if _, err := netip.ParseAddr(c.UnderlayAddress); err != nil {
			errs = append(errs, fmt.Errorf("--underlay-address: %v", err))
		}
	}
	if c.OverlayMTU != 0 && (c.OverlayMTU < 68 || c.OverlayMTU > 65535) {
		errs = append(errs, fmt.Errorf("--overlay-mtu must be 0 or between 68 and 65535"))
	}
	for k, v := range c.NodeLabels {
		for _, msg := range validation.IsQualifiedName(k) {
			errs = append(errs, fmt.Errorf("--node-labels: key %q: %s", k, msg))
		}
		for _, msg := range validation.IsValidLabelValue(v) {
			errs = append(errs, fmt.Errorf("--node-labels: value %q of %s: %s", v, k, msg))
		}
	}
	if c.MinFreeAddresses < 1 {
		errs = append(errs, fmt.Errorf("--min-free-addresses must be at least 1"))
	}
	if c.ContainerRuntimeEndpoint != "" {
		if _, err := cri.SocketPath(c.ContainerRuntimeEndpoint); err != nil {
			errs = append(errs, fmt.Errorf("--container-runtime-endpoint: %v", err))
		}
	}
	if c.LeaseReclaimGrace < time.Second {
		errs = append(errs, fmt.Errorf("--lease-reclaim-grace must be at least 1s (longer than any CNI ADD), not %v", c.LeaseReclaimGrace))
	}
	if c.CountReportInterval <= 0 {
		errs = append(errs, fmt.Errorf("--count-report-interval must be positive"))
	}
	if c.ResyncPeriod <= 0 || c.GCInterval <= 0 {
		errs = append(errs, fmt.Errorf("--controller-resync-period and --controller-gc-interval must be positive"))
	}
	return errs
}

// Run runs the controller against the API at config until ctx is done, using core's clients of
// the core API: Events recorded on Networks, and this node's Node watched (with WatchNode).
func (c *ControllerOptions) Run(ctx context.Context, config *rest.Config, core Core) error {
	client, err := versioned.NewForConfig(protobufConfig(config))
	if err != nil {
		return err
	}
	backend, err := linux.New(linux.Config{NetNSPath: c.BackendNetNS, CNIConfDir: c.CNIConfDir, IPAMDataDir: c.IPAMDataDir, BridgeOnAttach: c.BridgeOnAttach})
	if err != nil {
		return fmt.Errorf("network backend: %w", err)
	}
	// Deferred first, so run last: after the informers, and after controller.Run has waited
	// for everything that uses the backend.
	defer backend.Close()

	opts := networkcontroller.Options{NodeName: c.NodeName, GCInterval: c.GCInterval, MinFreeAddresses: c.MinFreeAddresses,
		NodeLabels: labels.Set(c.NodeLabels), CountReportInterval: c.CountReportInterval}
	if opts.Underlay, opts.OverlayMTU, err = c.underlay(); err != nil {
		return err
	}
	opts.UnderlayLink = c.UnderlayInterface
	if c.ContainerRuntimeEndpoint != "" {
		runtime, err := cri.New(c.ContainerRuntimeEndpoint, cri.DefaultTimeout)
		if err != nil {
			return err
		}
		defer runtime.Close()
		if opts.LeaseReclaim, err = leasereclaim.New(runtime, backendLeases{backend}, c.LeaseReclaimGrace); err != nil {
			return err
		}
		opts.LeaseReclaimGrace = c.LeaseReclaimGrace
	}
	if core.Events != nil {
		broadcaster := record.NewBroadcaster(record.WithContext(ctx))
		broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: core.Events.CoreV1().Events("")})
		defer broadcaster.Shutdown()
		opts.Recorder = broadcaster.NewRecorder(clientscheme.Scheme, corev1.EventSource{Component: "network-controller", Host: c.NodeName})
	}
	if c.WatchNode && core.Nodes != nil && servesNodes(core.Nodes) {
		nodes := kubeinformers.NewSharedInformerFactoryWithOptions(core.Nodes, c.ResyncPeriod,
			kubeinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
				o.FieldSelector = fields.OneTermEqualSelector("metadata.name", c.NodeName).String()
			}))
		opts.Node = nodes.Core().V1().Nodes()
		if err := opts.Node.Informer().SetTransform(nodestatus.TrimNode); err != nil {
			return err
		}
		nodes.Start(ctx.Done())
		defer nodes.Shutdown()
	}
	if core.Leases != nil {
		leaseCtx, stopLease := context.WithCancel(ctx)
		holder := &leaseHolder{options: c.Lease}
		opts.LeaseHeld = holder.held
		var holding sync.WaitGroup
		holding.Go(func() { holder.hold(leaseCtx, core.Leases, c.NodeName) })
		defer holding.Wait()
		defer stopLease()
	}
	factory := externalversions.NewSharedInformerFactory(client, c.ResyncPeriod)
	// Only this node's BlockAllocations: the blocks its configurations hand out.
	blocks := externalversions.NewSharedInformerFactoryWithOptions(client, c.ResyncPeriod,
		externalversions.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("nodeName", c.NodeName).String()
		}))
	if servesBlocks(client) {
		opts.Blocks = blocks.Samplecrd().V1().BlockAllocations()
	}
	controller, err := networkcontroller.New(client, factory.Samplecrd().V1().Networks(), backend, opts)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	blocks.Start(ctx.Done())
	defer blocks.Shutdown()
	return controller.Run(ctx, c.Workers)
}

// servesNodes says whether client's endpoint serves Nodes; a standalone network-apiserver does
// not, and there is no Node to watch. Other errors count as serving: the informer retries.
func servesNodes(client kubernetes.Interface) bool {
	resources, err := client.Discovery().ServerResourcesForGroupVersion("v1")
	if err == nil && !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "nodes" }) ||
		apierrors.IsNotFound(err) {
		klog.InfoS("The endpoint serves no Nodes: this node's Node is not watched (--watch-node)")
		return false
	}
	return true
}

// servesBlocks says whether client's endpoint serves BlockAllocations. A server from before
// blocks does not: the node then keeps the whole prefix in its configurations (as that server's
// agents do) rather than waiting for an informer that never syncs. Other errors count as
// serving: the informer retries.
func servesBlocks(client versioned.Interface) bool {
	resources, err := client.Discovery().ServerResourcesForGroupVersion("samplecrd.k8s.io/v1")
	if err == nil && !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "blockallocations" }) ||
		apierrors.IsNotFound(err) {
		klog.InfoS("The endpoint serves no BlockAllocations (a server from before blocks): this node hands out addresses from the whole prefix of each Network")
		return false
	}
	return true
}

// protobufConfig is config speaking protobuf.
func protobufConfig(config *rest.Config) *rest.Config {
	config = rest.CopyConfig(config)
	config.ContentType = runtime.ContentTypeProtobuf
	config.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return config
}

// Background is the controller run inside the server. It is a health check that fails once the
// controller has stopped with an error, so that a failed controller shows in /livez rather than
// only in the log, and the server waits for it at shutdown.
type Background struct {
	options *ControllerOptions

	mu   sync.Mutex
	done chan struct{}
	err  error
}

// NewBackground returns the controller to run in the background with options c.
func (c *ControllerOptions) NewBackground() *Background {
	return &Background{options: c}
}

// Start runs the controller until ctx is done; a failure is logged and turns the check failing.
// When the process lacks the capabilities the controller needs, it says so once and runs the
// stand-in instead, which marks Networks Ready=Unknown with a reason that says why: the server
// then serves the API alone.
func (b *Background) Start(ctx context.Context, config *rest.Config, core Core) {
	done := make(chan struct{})
	b.mu.Lock()
	b.done = done
	b.mu.Unlock()
	run := func() error { return b.options.Run(ctx, config, core) }
	if missing := b.options.MissingCapabilities(); len(missing) > 0 {
		_, _, line := b.options.unavailable(missing)
		klog.Warning(line)
		run = func() error { return b.options.RunUnavailable(ctx, config, missing) }
	}
	go func() {
		defer close(done)
		err := run()
		if err == nil || ctx.Err() != nil {
			return // stopped because the server stops
		}
		klog.ErrorS(err, "The Network controller stopped")
		b.mu.Lock()
		b.err = err
		b.mu.Unlock()
	}()
}

// Wait returns once a started controller has stopped.
func (b *Background) Wait() {
	b.mu.Lock()
	done := b.done
	b.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Name is the health check's name: /livez/network-controller.
func (b *Background) Name() string { return "network-controller" }

// Check fails once the controller has stopped with an error.
func (b *Background) Check(*http.Request) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.err != nil {
		return fmt.Errorf("the Network controller stopped: %w", b.err)
	}
	return nil
}

// backendLeases is the Linux backend's leases for the lease reclaim: those of every Network of
// ours on the node.
type backendLeases struct{ *linux.Backend }

func (b backendLeases) Keys(ctx context.Context) ([]string, error) { return b.List(ctx) }
