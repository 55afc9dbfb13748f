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

// Package server holds network-apiserver's options and flags, its admission wiring and the command
// that runs it, in one of two modes: standalone (no core Kubernetes API: embedded etcd by default,
// its own admin credential) or attached (behind kube-apiserver's aggregation layer, with delegated
// authn/authz). The embedded etcd, the standalone credential and the controller live in packages
// of their own (pkg/embeddedetcd, pkg/standaloneauth, pkg/cmd/agent).
package server

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apimachineryvalidation "k8s.io/apimachinery/pkg/api/validation"
	"k8s.io/apimachinery/pkg/runtime"
	utilerrors "k8s.io/apimachinery/pkg/util/errors"
	"k8s.io/apiserver/pkg/endpoints/openapi"
	"k8s.io/apiserver/pkg/features"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	serverstorage "k8s.io/apiserver/pkg/server/storage"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	netutils "k8s.io/utils/net"

	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apiserver"
	"github.com/samplecrd/network-apiserver/pkg/apiserver/frontproxy"
	"github.com/samplecrd/network-apiserver/pkg/cmd/agent"
	"github.com/samplecrd/network-apiserver/pkg/embeddedetcd"
	generatedopenapi "github.com/samplecrd/network-apiserver/pkg/generated/openapi"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/blockallocation/release"
	blockstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/blockallocation/storage"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/capacitymetrics"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/segment"
	"github.com/samplecrd/network-apiserver/pkg/standaloneauth"
)

const etcdPathPrefix = "/registry/samplecrd.k8s.io"

// Options are everything network-apiserver can be told on its command line.
type Options struct {
	Recommended *genericoptions.RecommendedOptions
	// ServerRun holds the generic request limits and shutdown timings.
	ServerRun *genericoptions.ServerRunOptions

	// DataDir holds the embedded etcd data, the generated serving certificate, the admin token
	// and the admin kubeconfig.
	DataDir string
	// EmbeddedEtcdPort is the loopback client port of the embedded etcd; 0 picks a free one.
	EmbeddedEtcdPort int
	// OverlapScope is where two Networks may not overlap: the cluster, or each namespace.
	OverlapScope string
	// AllocationGuards says which container keys a create guards: "all", or only the
	// "recorded" prefix lengths' (allocator.Guards).
	AllocationGuards string
	// NetworkPools are the prefixes spec.prefixLength allocates from, in order.
	NetworkPools []string
	// AllocationVerifyInterval is how often the allocation invariant is verified.
	AllocationVerifyInterval time.Duration
	// BlockPrefixLengthV4 and V6 are the preferred sizes of the nodes' address blocks, and
	// MaxBlocksPerNode caps the blocks a node holds in one Network.
	BlockPrefixLengthV4, BlockPrefixLengthV6, MaxBlocksPerNode int
	// MaxFreeAddressesPerNode is the claim quota of node agents (0: none).
	MaxFreeAddressesPerNode int
	// AgentIdentity are the user names and groups of the node agents (NetworkNodeRestriction).
	AgentIdentity []string
	// AgentKubeconfigNodes (standalone) are the nodes whose agent kubeconfigs are written to
	// <data-dir>/agent-<node>.kubeconfig.
	AgentKubeconfigNodes []string
	// VNIRange is the range Networks' VNIs come from, "first-last".
	VNIRange string
	// VNIKeys is which keys a create writes for its VNI: "pair" or "single" (segment.Layout).
	VNIKeys string
	// GatewayKeys is whether Networks' gateways have keys among the blocks: "write" or "none"
	// (allocator.GatewayKeys).
	GatewayKeys string
	// BlockReleaseGrace is the least time between the two observations that release a node's
	// blocks (pkg/registry/samplecrd/blockallocation/release).
	BlockReleaseGrace time.Duration
	// Controller configures the bundled Network controller.
	Controller *agent.ControllerOptions
	// NodeLifecycle runs the node lifecycle loop in attached mode (pkg/controller/nodelifecycle).
	NodeLifecycle bool
	// TemplateFile is the network template file; standalone mode's template source.
	TemplateFile string
	// TemplateNamespace is where the network-template ConfigMap is read from in attached mode.
	TemplateNamespace string
	// CapacityMetrics bounds the capacity gauges on /metrics (--capacity-metrics,
	// --capacity-metrics-max-networks).
	CapacityMetrics capacitymetrics.Options
	// Standalone is decided by Complete: true when no core Kubernetes API is configured.
	Standalone bool

	Out io.Writer

	// admission is the admission options kept aside in standalone mode, where only our plugins run.
	admission *genericoptions.AdmissionOptions
	// embedded is the embedded etcd member while Run runs one.
	embedded *embeddedetcd.Etcd
	// etcdClients are closed when Run returns.
	etcdClients []io.Closer
}

// NewOptions returns the defaults: protobuf storage, watch cache on, port 8443.
func NewOptions(out io.Writer) *Options {
	o := &Options{
		Recommended: genericoptions.NewRecommendedOptions(etcdPathPrefix,
			apiserver.Codecs.LegacyCodec(v1.SchemeGroupVersion)),
		DataDir:                  "network-apiserver.data",
		Controller:               agent.NewControllerOptions(),
		NodeLifecycle:            true,
		OverlapScope:             OverlapScopeCluster,
		AllocationGuards:         AllocationGuardsAll,
		NetworkPools:             append([]string(nil), DefaultNetworkPools...),
		AllocationVerifyInterval: 10 * time.Minute,
		BlockPrefixLengthV4:      blockstorage.DefaultBlockSizes.IPv4,
		BlockPrefixLengthV6:      blockstorage.DefaultBlockSizes.IPv6,
		MaxBlocksPerNode:         blockstorage.DefaultBlockSizes.MaxPerNode,
		MaxFreeAddressesPerNode:  blockstorage.DefaultMaxFreeAddresses,
		AgentIdentity:            slices.Clone(nodeidentity.DefaultAgents),
		VNIRange:                 segment.DefaultRange.String(),
		VNIKeys:                  string(segment.LayoutPair),
		GatewayKeys:              string(allocator.GatewayKeysWrite),
		BlockReleaseGrace:        release.DefaultGrace,
		CapacityMetrics:          capacitymetrics.Options{Mode: capacitymetrics.ModeNetwork, MaxNetworks: capacitymetrics.DefaultMaxNetworks},
		Out:                      out,
	}
	// Cache snapshots answer paged LISTs and LISTs at an older resourceVersion from the watch
	// cache, but every write keeps a copy-on-write B-tree snapshot while its event is in the
	// watch history. In make bench they doubled our live heap per Network (3225 B instead of
	// 1651 B at 20,000). Without them the first page of a paged LIST still comes from the watch
	// cache and the Network storage reads continue pages from etcd without counting the rest of
	// the range (network/storage/pages.go), still well ahead of a CRD (docs/performance.md).
	// --feature-gates=ListFromCacheSnapshot=true turns them back on.
	if err := utilfeature.DefaultMutableFeatureGate.SetFromMap(map[string]bool{string(features.ListFromCacheSnapshot): false}); err != nil {
		panic(err) // the gate is known and not locked in the k8s.io/apiserver we build with
	}
	o.ServerRun = genericoptions.NewServerRunOptions()
	// Watches held through the aggregator (the garbage collector and namespace controller watch
	// every resource) would otherwise keep the HTTP server from shutting down for its full 60 s.
	o.ServerRun.ShutdownWatchTerminationGracePeriod = 5 * time.Second
	o.Recommended.Etcd.DefaultStorageMediaType = runtime.ContentTypeProtobuf
	registerAdmissionPlugins(o.Recommended.Admission)
	o.Recommended.ExtraAdmissionInitializers = o.admissionInitializers
	o.Recommended.SecureServing.BindPort = 8443
	o.Recommended.SecureServing.ServerCert.CertDirectory = ""
	return o
}

// AddFlags adds the generic apiserver flags and ours.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	o.Recommended.AddFlags(fs)
	o.ServerRun.AddUniversalFlags(fs)
	fs.StringVar(&o.DataDir, "data-dir", o.DataDir,
		"Directory for the embedded etcd's data, the generated serving certificate, and (standalone) the admin token and kubeconfig.")
	fs.IntVar(&o.EmbeddedEtcdPort, "embedded-etcd-port", o.EmbeddedEtcdPort,
		"Loopback client port of the embedded etcd started when --etcd-servers is empty; 0 picks a free port.")
	o.Controller.AddFlags(fs, true)
	fs.BoolVar(&o.NodeLifecycle, "node-lifecycle", o.NodeLifecycle,
		"In attached mode, watch Nodes: mark the status.nodes entries of a Node that is not Ready NodeNotReady, and remove those of a deleted Node "+
			"(releasing a Network being deleted that only they held) once its agent's Lease (--agent-lease-namespace) is not held or the entry reports leases: 0; "+
			"until then they say NodeDeleted. Needs get, list and watch on nodes (attached mode needs them anyway: the block release checks that a Node is gone).")
	fs.StringVar(&o.TemplateFile, "network-template-file", o.TemplateFile,
		"YAML file holding the network template (labels, annotations, spec fields merged into every new Network); re-read when it changes. "+
			"Without it, attached mode reads the ConfigMap network-template (key template) in --template-namespace.")
	fs.StringVar(&o.TemplateNamespace, "template-namespace", o.TemplateNamespace,
		"Namespace of the network-template ConfigMap; default the pod's namespace, else network-apiserver.")
	fs.StringVar(&o.OverlapScope, "overlap-scope", o.OverlapScope,
		"Where no two Networks may overlap: \"cluster\" (all namespaces) or \"namespace\" (each namespace on its own).")
	fs.StringVar(&o.AllocationGuards, "allocation-guards", o.AllocationGuards,
		"Which shorter prefixes a create guards against: \"all\" (every shorter length, as builds before the length "+
			"record did; safe beside them) or \"recorded\" (only the lengths its scope's length record holds: fewer "+
			"compares per create, but only once every replica runs a build that keeps the record, this one or later). "+
			"Every build since the record keeps it in both modes.")
	fs.DurationVar(&o.AllocationVerifyInterval, "allocation-verify-interval", o.AllocationVerifyInterval,
		"How often the server checks that the allocations in etcd are exactly the stored Networks and that none overlap, "+
			"reporting every violation in its log and metrics and fixing what is safe; also once at start.")
	fs.IntVar(&o.BlockPrefixLengthV4, "block-prefix-length-v4", o.BlockPrefixLengthV4,
		"Preferred prefix length of the IPv4 address blocks nodes claim; per Network it is adapted so that the prefix holds at least 16 blocks (at most /30).")
	fs.IntVar(&o.BlockPrefixLengthV6, "block-prefix-length-v6", o.BlockPrefixLengthV6,
		"Preferred prefix length of the IPv6 address blocks nodes claim; adapted per Network like the IPv4 one (at most /126).")
	fs.IntVar(&o.MaxBlocksPerNode, "max-blocks-per-node", o.MaxBlocksPerNode,
		"Most address blocks one node may hold in one Network.")
	fs.IntVar(&o.MaxFreeAddressesPerNode, "max-free-addresses-per-node", o.MaxFreeAddressesPerNode,
		"A node agent (--agent-identity) whose address blocks of a Network already hold this many free addresses, counting the leases its status.nodes entry reports, "+
			"may claim no more blocks of it (403). Keep it well above the agents' --min-free-addresses; 0 turns the quota off.")
	fs.StringSliceVar(&o.AgentIdentity, "agent-identity", o.AgentIdentity,
		"User names and groups whose requests are node agents': with a node name (user extra authentication.kubernetes.io/node-name, or a user name "+
			"system:network-agent:<node>) they may change only their node's status.nodes entry and claim blocks for their node (NetworkNodeRestriction admission plugin); "+
			"without one they may write nothing.")
	fs.StringSliceVar(&o.AgentKubeconfigNodes, "agent-kubeconfig-nodes", o.AgentKubeconfigNodes,
		"Standalone: write <data-dir>/agent-<node>.kubeconfig for each of these nodes, with a token (derived from the admin token) "+
			"that authenticates as system:network-agent:<node>, for `network-apiserver agent --kubeconfig` on that node.")
	fs.StringVar(&o.VNIRange, "vni-range", o.VNIRange,
		"The VXLAN network identifiers Networks get, first-last (inclusive, 1 to 16777215); each Network holds one, unique cluster-wide. Narrowing it leaves VNIs outside it held.")
	fs.StringVar(&o.VNIKeys, "vni-keys", o.VNIKeys,
		"Which etcd keys a create writes for its Network's VNI: \"pair\" (the VNI's key and the Network's uid key, as builds before the single layout; "+
			"safe beside them) or \"single\" (the VNI's key alone, status.vni pointing at it: one key less per Network, "+
			"but only once every replica runs a build that reads it, this one or later). Every build since reads both.")
	fs.StringVar(&o.GatewayKeys, "gateway-keys", o.GatewayKeys,
		"Whether a Network's gateway has an etcd key among its address blocks: \"write\" (a create writes it, a gateway change moves it, "+
			"as builds before \"none\"; safe beside them) or \"none\" (claims are guarded by the Network's allocation key instead: one key less per Network, "+
			"but only once every replica runs a build that guards claims so, this one or later). Every build since guards claims both ways.")
	fs.DurationVar(&o.BlockReleaseGrace, "block-release-grace", o.BlockReleaseGrace,
		"A node's address blocks of a Network are released when two observations this far apart both find that none of its pods can hold an address "+
			"in them (standalone: the node has no status.nodes entry; attached: its Node is deleted and its entry is gone or reports leases: 0), "+
			"with the Network and the node's BlockAllocation unchanged in between.")
	fs.StringVar(&o.CapacityMetrics.Mode, "capacity-metrics", o.CapacityMetrics.Mode,
		"Which capacity gauges /metrics exports: \"network\" (network_apiserver_network_addresses for at most --capacity-metrics-max-networks Networks, "+
			"the fullest, and the per-namespace sums network_apiserver_namespace_network_addresses), \"namespace\" (the sums only) or \"none\".")
	fs.IntVar(&o.CapacityMetrics.MaxNetworks, "capacity-metrics-max-networks", o.CapacityMetrics.MaxNetworks,
		"Most Networks with network_apiserver_network_addresses series of their own (4 each); beyond it the fullest (used/total) keep theirs and "+
			"network_apiserver_network_addresses_omitted_networks counts the rest. 0 exports none.")
	fs.StringSliceVar(&o.NetworkPools, "network-pool", o.NetworkPools,
		"Prefix from which Networks with spec.prefixLength and no spec.cidr get theirs; repeatable, IPv4 and IPv6, tried in order.")
}

// EmbeddedEtcd says whether the server runs its own etcd member.
func (o *Options) EmbeddedEtcd() bool {
	return len(o.Recommended.Etcd.StorageConfig.Transport.ServerList) == 0
}

// Complete decides the mode and fills in what depends on it.
func (o *Options) Complete() error {
	// --feature-gates and --emulated-version take effect here, right after flag parsing, rather
	// than whenever the generic server first looks at them.
	if err := o.ServerRun.ComponentGlobalsRegistry.Set(); err != nil {
		return err
	}
	auth := o.Recommended.Authentication
	inCluster := os.Getenv("KUBERNETES_SERVICE_HOST") != ""
	o.Standalone = !inCluster && o.Recommended.CoreAPI.CoreAPIKubeconfigPath == "" &&
		auth.RemoteKubeConfigFile == "" && o.Recommended.Authorization.RemoteKubeConfigFile == ""
	if kubeconfig := o.Recommended.CoreAPI.CoreAPIKubeconfigPath; !o.Standalone && kubeconfig != "" {
		// One --kubeconfig is enough to attach: delegated authn/authz use it unless told otherwise.
		if auth.RemoteKubeConfigFile == "" {
			auth.RemoteKubeConfigFile = kubeconfig
		}
		if o.Recommended.Authorization.RemoteKubeConfigFile == "" {
			o.Recommended.Authorization.RemoteKubeConfigFile = kubeconfig
		}
	}
	if err := o.ServerRun.Complete(); err != nil {
		return err
	}
	if o.Recommended.SecureServing.ServerCert.CertDirectory == "" {
		o.Recommended.SecureServing.ServerCert.CertDirectory = filepath.Join(o.DataDir, "certs")
	}
	if o.Standalone {
		// No core API: authn/authz are ours (standaloneauth), and whatever needs a
		// kube-apiserver's informers (namespace lifecycle, webhooks, policies, flow control) is off.
		o.Recommended.CoreAPI = nil
		o.Recommended.Authentication = nil
		o.Recommended.Authorization = nil
		o.admission, o.Recommended.Admission = o.Recommended.Admission, nil
		o.Recommended.Features.EnablePriorityAndFairness = false
	}
	return nil
}

// Validate checks the flags after Complete.
func (o *Options) Validate() error {
	var errs []error
	etcd := o.Recommended.Etcd
	if o.EmbeddedEtcd() {
		// The embedded member's address is known only once it runs; validate the rest now.
		copied := *etcd
		copied.StorageConfig.Transport.ServerList = []string{"http://127.0.0.1:0"}
		o.Recommended.Etcd = &copied
		defer func() { o.Recommended.Etcd = etcd }()
	}
	errs = append(errs, o.Recommended.Validate()...)
	errs = append(errs, o.ServerRun.Validate()...)
	if o.admission != nil {
		errs = append(errs, o.admission.Validate()...)
		if err := validateStandaloneAdmission(o.admission); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, o.Controller.Validate()...)
	if o.DataDir == "" {
		errs = append(errs, fmt.Errorf("--data-dir must not be empty"))
	}
	if o.OverlapScope != OverlapScopeCluster && o.OverlapScope != OverlapScopeNamespace {
		errs = append(errs, fmt.Errorf("--overlap-scope %q must be %q or %q", o.OverlapScope, OverlapScopeCluster, OverlapScopeNamespace))
	}
	if o.AllocationGuards != AllocationGuardsAll && o.AllocationGuards != AllocationGuardsRecorded {
		errs = append(errs, fmt.Errorf("--allocation-guards %q must be %q or %q", o.AllocationGuards, AllocationGuardsAll, AllocationGuardsRecorded))
	}
	if _, err := parsePools(o.NetworkPools); err != nil {
		errs = append(errs, err)
	}
	if o.BlockPrefixLengthV4 < 1 || o.BlockPrefixLengthV4 > 32 {
		errs = append(errs, fmt.Errorf("--block-prefix-length-v4 %d must be between 1 and 32", o.BlockPrefixLengthV4))
	}
	if o.BlockPrefixLengthV6 < 1 || o.BlockPrefixLengthV6 > 128 {
		errs = append(errs, fmt.Errorf("--block-prefix-length-v6 %d must be between 1 and 128", o.BlockPrefixLengthV6))
	}
	if o.MaxBlocksPerNode < 1 || o.MaxBlocksPerNode > 64 {
		// A release deletes every block of a node in one transaction: within etcd's default --max-txn-ops of 128.
		errs = append(errs, fmt.Errorf("--max-blocks-per-node %d must be between 1 and 64", o.MaxBlocksPerNode))
	}
	for _, node := range o.AgentKubeconfigNodes {
		if msgs := apimachineryvalidation.NameIsDNSSubdomain(node, false); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("--agent-kubeconfig-nodes %q: %s", node, strings.Join(msgs, "; ")))
		}
	}
	if o.MaxFreeAddressesPerNode < 0 {
		errs = append(errs, fmt.Errorf("--max-free-addresses-per-node %d must not be negative", o.MaxFreeAddressesPerNode))
	}
	if o.VNIKeys != string(segment.LayoutPair) && o.VNIKeys != string(segment.LayoutSingle) {
		errs = append(errs, fmt.Errorf("--vni-keys %q must be %q or %q", o.VNIKeys, segment.LayoutPair, segment.LayoutSingle))
	}
	if o.GatewayKeys != string(allocator.GatewayKeysWrite) && o.GatewayKeys != string(allocator.GatewayKeysNone) {
		errs = append(errs, fmt.Errorf("--gateway-keys %q must be %q or %q", o.GatewayKeys, allocator.GatewayKeysWrite, allocator.GatewayKeysNone))
	}
	if _, err := segment.ParseRange(o.VNIRange); err != nil {
		errs = append(errs, fmt.Errorf("--vni-range: %w", err))
	}
	if o.BlockReleaseGrace <= 0 {
		errs = append(errs, fmt.Errorf("--block-release-grace must be positive"))
	}
	if o.AllocationVerifyInterval <= 0 {
		errs = append(errs, fmt.Errorf("--allocation-verify-interval must be positive"))
	}
	errs = append(errs, o.CapacityMetrics.Validate()...)
	if o.EmbeddedEtcdPort < 0 || o.EmbeddedEtcdPort > 65535 {
		errs = append(errs, fmt.Errorf("--embedded-etcd-port %d is not a port", o.EmbeddedEtcdPort))
	}
	return utilerrors.NewAggregate(errs)
}

// Config builds the server configuration. The etcd servers must be known by now.
func (o *Options) Config() (*apiserver.Config, error) {
	if err := o.Recommended.SecureServing.MaybeDefaultWithSelfSignedCerts("localhost", nil,
		[]net.IP{netutils.ParseIPSloppy("127.0.0.1"), net.IPv6loopback}); err != nil {
		return nil, fmt.Errorf("creating a self-signed serving certificate: %w", err)
	}

	etcd := o.Recommended.Etcd
	codec, versioner, err := serverstorage.NewStorageCodec(serverstorage.StorageCodecConfig{
		StorageMediaType:  etcd.DefaultStorageMediaType,
		StorageSerializer: apiserver.Codecs,
		StorageVersion:    v1.SchemeGroupVersion,
		MemoryVersion:     samplecrd.SchemeGroupVersion,
		Config:            etcd.StorageConfig,
	})
	if err != nil {
		return nil, fmt.Errorf("--storage-media-type: %w", err)
	}
	etcd.StorageConfig.Codec, etcd.StorageConfig.EncodeVersioner = codec, versioner

	config := genericapiserver.NewRecommendedConfig(apiserver.Codecs)
	if err := o.ServerRun.ApplyTo(&config.Config); err != nil {
		return nil, err
	}
	namer := openapi.NewDefinitionNamer(apiserver.Scheme)
	config.OpenAPIConfig = genericapiserver.DefaultOpenAPIConfig(generatedopenapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIConfig.Info.Title = "network-apiserver"
	config.OpenAPIV3Config = genericapiserver.DefaultOpenAPIV3Config(generatedopenapi.GetOpenAPIDefinitions, namer)
	config.OpenAPIV3Config.Info.Title = "network-apiserver"

	if err := o.Recommended.ApplyTo(config); err != nil {
		return nil, err
	}
	// The aggregator's requests are authenticated from their headers without verifying its
	// client certificate chain again on each one (frontproxy).
	config.Authentication.Authenticator = frontproxy.New(config.Authentication.Authenticator, config.Authentication.RequestHeaderConfig)
	if o.Standalone {
		token, err := standaloneauth.LoadOrCreateAdminToken(filepath.Join(o.DataDir, "admin.token"))
		if err != nil {
			return nil, fmt.Errorf("admin token: %w", err)
		}
		if err := standaloneauth.Apply(&config.Config, token); err != nil {
			return nil, err
		}
		if err := o.standaloneAdmission(config); err != nil {
			return nil, err
		}
		klog.InfoS("Standalone mode: no core Kubernetes API is configured, so delegated authentication and authorization, " +
			"namespace lifecycle, admission webhooks and admission policies are off; the admin kubeconfig is the only credential")
	}
	extra, etcdClient, err := o.allocations()
	if err != nil {
		return nil, err
	}
	o.etcdClients = append(o.etcdClients, etcdClient)
	extra.CapacityMetrics = o.CapacityMetrics
	return &apiserver.Config{GenericConfig: config, Extra: extra}, nil
}
