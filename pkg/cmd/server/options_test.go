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
	"io"
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/features"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/samplecrd/network-apiserver/pkg/admission/plugin/noderestriction"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/capacitymetrics"
)

func parsedOptions(t *testing.T, args ...string) *Options {
	t.Helper()
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	o := NewOptions(io.Discard)
	cmd := NewCommand(t.Context(), o)
	if err := cmd.ParseFlags(args); err != nil {
		t.Fatalf("parsing %v: %v", args, err)
	}
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	return o
}

func TestStandaloneWithoutCoreAPI(t *testing.T) {
	o := parsedOptions(t, "--data-dir", t.TempDir())
	if !o.Standalone || !o.EmbeddedEtcd() {
		t.Fatalf("standalone=%v embedded=%v, want both true", o.Standalone, o.EmbeddedEtcd())
	}
	if o.Recommended.Authentication != nil || o.Recommended.Authorization != nil || o.Recommended.Admission != nil || o.Recommended.CoreAPI != nil {
		t.Error("standalone mode must not configure delegated authn/authz, core API or core admission plugins")
	}
	if o.Recommended.Features.EnablePriorityAndFairness {
		t.Error("priority and fairness needs a core API and must be off standalone")
	}
	if err := o.Validate(); err != nil {
		t.Fatalf("defaults must validate standalone: %v", err)
	}
	if !o.EmbeddedEtcd() {
		t.Error("Validate must not leave a placeholder etcd server behind")
	}
	if got := o.Recommended.Etcd.DefaultStorageMediaType; got != "application/vnd.kubernetes.protobuf" {
		t.Errorf("default storage media type %q, want protobuf", got)
	}
}

func TestAttachedWithKubeconfigDelegatesToIt(t *testing.T) {
	o := parsedOptions(t, "--kubeconfig", "/etc/k.conf", "--etcd-servers", "https://10.0.0.1:2379")
	if o.Standalone || o.EmbeddedEtcd() {
		t.Fatalf("standalone=%v embedded=%v, want attached with external etcd", o.Standalone, o.EmbeddedEtcd())
	}
	if got := o.Recommended.Authentication.RemoteKubeConfigFile; got != "/etc/k.conf" {
		t.Errorf("authentication kubeconfig %q, want the --kubeconfig", got)
	}
	if got := o.Recommended.Authorization.RemoteKubeConfigFile; got != "/etc/k.conf" {
		t.Errorf("authorization kubeconfig %q, want the --kubeconfig", got)
	}
}

func TestAttachedKeepsExplicitDelegationKubeconfigs(t *testing.T) {
	o := parsedOptions(t, "--kubeconfig", "/a", "--authentication-kubeconfig", "/b", "--authorization-kubeconfig", "/c")
	if o.Recommended.Authentication.RemoteKubeConfigFile != "/b" || o.Recommended.Authorization.RemoteKubeConfigFile != "/c" {
		t.Errorf("explicit kubeconfigs replaced: authn %q authz %q", o.Recommended.Authentication.RemoteKubeConfigFile,
			o.Recommended.Authorization.RemoteKubeConfigFile)
	}
}

func TestInClusterIsAttached(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "10.96.0.1")
	o := NewOptions(io.Discard)
	if err := o.Complete(); err != nil {
		t.Fatal(err)
	}
	if o.Standalone {
		t.Error("a server running in a cluster must attach to it")
	}
}

func TestValidateRejectsBadFlags(t *testing.T) {
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"negative etcd port":   {[]string{"--embedded-etcd-port", "-1"}, "--embedded-etcd-port"},
		"empty data dir":       {[]string{"--data-dir", ""}, "--data-dir"},
		"bad media type":       {[]string{"--storage-media-type", "text/plain"}, "--storage-media-type"},
		"VNI range reversed":   {[]string{"--vni-range", "9-7"}, "--vni-range"},
		"VNI over 24 bits":     {[]string{"--vni-range", "1-16777216"}, "--vni-range"},
		"VNI range no dash":    {[]string{"--vni-range", "5000"}, "--vni-range"},
		"negative quota":       {[]string{"--max-free-addresses-per-node", "-1"}, "--max-free-addresses-per-node"},
		"bad agent node":       {[]string{"--agent-kubeconfig-nodes", "node1,Node_2"}, `--agent-kubeconfig-nodes "Node_2"`},
		"bad metrics mode":     {[]string{"--capacity-metrics", "all"}, `--capacity-metrics "all" must be one of network, namespace, none`},
		"negative metrics max": {[]string{"--capacity-metrics-max-networks", "-1"}, "--capacity-metrics-max-networks -1 must not be negative"},
	} {
		t.Run(name, func(t *testing.T) {
			o := parsedOptions(t, tc.args...)
			err := o.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Validate() = %v, want an error naming %s", err, tc.want)
			}
		})
	}
}

// The node restriction is on by default, for the deployed agents' ServiceAccount and the group of
// per-node credentials, with the claim quota.
func TestNodeRestrictionDefaults(t *testing.T) {
	a := NewOptions(io.Discard).Recommended.Admission
	if !slices.Contains(a.RecommendedPluginOrder, noderestriction.PluginName) || a.DefaultOffPlugins.Has(noderestriction.PluginName) {
		t.Errorf("%s not on by default: order %v", noderestriction.PluginName, a.RecommendedPluginOrder)
	}
	o := parsedOptions(t)
	if !slices.Equal(o.AgentIdentity, []string{"system:serviceaccount:network-agent:network-agent", "system:network-agents"}) ||
		o.MaxFreeAddressesPerNode != 128 {
		t.Errorf("--agent-identity %v, --max-free-addresses-per-node %d", o.AgentIdentity, o.MaxFreeAddressesPerNode)
	}
	o = parsedOptions(t, "--agent-identity", "system:serviceaccount:kube-system:agent,my-agents")
	if got := o.agentIdentity().Agents; !slices.Equal(got, []string{"system:serviceaccount:kube-system:agent", "my-agents"}) {
		t.Errorf("--agent-identity parsed as %v", got)
	}
}

// Cache snapshots are off unless asked for (they cost memory per write; docs/performance.md).
func TestListFromCacheSnapshotDefaultsOff(t *testing.T) {
	parsedOptions(t, "--data-dir", t.TempDir())
	if utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Error("ListFromCacheSnapshot is on by default")
	}
	// The feature gates' flag values live in a process-wide registry, which applies them again
	// at every later Complete: leave it as a process that never set the flag would have it.
	t.Cleanup(func() { parsedOptions(t, "--data-dir", t.TempDir(), "--feature-gates", "ListFromCacheSnapshot=false") })
	parsedOptions(t, "--data-dir", t.TempDir(), "--feature-gates", "ListFromCacheSnapshot=true")
	if !utilfeature.DefaultFeatureGate.Enabled(features.ListFromCacheSnapshot) {
		t.Error("--feature-gates=ListFromCacheSnapshot=true did not turn it on")
	}
}

// The capacity gauges default to per-Network series for the 10,000 fullest Networks, and the
// flags reach the server's configuration.
func TestCapacityMetricsFlags(t *testing.T) {
	o := parsedOptions(t)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := (capacitymetrics.Options{Mode: capacitymetrics.ModeNetwork, MaxNetworks: 10000}); o.CapacityMetrics != want {
		t.Errorf("defaults %+v, want %+v", o.CapacityMetrics, want)
	}
	o = parsedOptions(t, "--capacity-metrics=namespace", "--capacity-metrics-max-networks=0")
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if want := (capacitymetrics.Options{Mode: capacitymetrics.ModeNamespace}); o.CapacityMetrics != want {
		t.Errorf("parsed %+v, want %+v", o.CapacityMetrics, want)
	}
}
