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
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/fake"
)

func TestServesBlocks(t *testing.T) {
	c := fake.NewClientset()
	if servesBlocks(c) {
		t.Fatal("an endpoint without samplecrd.k8s.io/v1 serves blocks")
	}
	c.Resources = []*metav1.APIResourceList{{GroupVersion: "samplecrd.k8s.io/v1", APIResources: []metav1.APIResource{{Name: "networks"}}}}
	if servesBlocks(c) {
		t.Fatal("a server from before blocks (networks only) serves blocks")
	}
	c.Resources[0].APIResources = append(c.Resources[0].APIResources, metav1.APIResource{Name: "blockallocations"})
	if !servesBlocks(c) {
		t.Fatal("a server with blockallocations does not serve blocks")
	}
}

func TestUnderlayFlags(t *testing.T) {
	o := NewControllerOptions()
	if addr, mtu, err := o.underlay(); err != nil || addr.IsValid() || mtu != 0 {
		t.Fatalf("no underlay flags: %v %d %v", addr, mtu, err)
	}
	o.UnderlayAddress = "192.168.77.1"
	if addr, mtu, err := o.underlay(); err != nil || addr.String() != "192.168.77.1" || mtu != 1450 {
		t.Fatalf("--underlay-address: %v %d %v", addr, mtu, err)
	}
	o.UnderlayAddress = "fd00::1"
	if _, mtu, err := o.underlay(); err != nil || mtu != 1430 {
		t.Fatalf("IPv6 --underlay-address: MTU %d %v", mtu, err)
	}
	o.OverlayMTU = 1400
	if _, mtu, _ := o.underlay(); mtu != 1400 {
		t.Fatalf("--overlay-mtu: %d", mtu)
	}
	o.UnderlayAddress = "not-an-address"
	if errs := o.Validate(); len(errs) == 0 {
		t.Fatal("a bad --underlay-address validated")
	}
}

func TestNodeLabelsFlag(t *testing.T) {
	o := NewControllerOptions()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	o.AddFlags(fs, false)
	if len(o.NodeLabels) != 0 {
		t.Fatalf("default --node-labels: %v; want none", o.NodeLabels)
	}
	if err := fs.Parse([]string{"--node-labels", "zone=a,example.com/rack=r1"}); err != nil {
		t.Fatal(err)
	}
	if o.NodeLabels["zone"] != "a" || o.NodeLabels["example.com/rack"] != "r1" || len(o.NodeLabels) != 2 {
		t.Fatalf("--node-labels zone=a,example.com/rack=r1 parsed as %v", o.NodeLabels)
	}
	if errs := o.Validate(); len(errs) != 0 {
		t.Fatalf("valid labels: %v", errs)
	}
	o.NodeLabels = map[string]string{"bad key!": "a", "zone": "not valid!"}
	errs := o.Validate()
	if len(errs) != 2 {
		t.Fatalf("two bad labels gave %d errors: %v", len(errs), errs)
	}
	for _, err := range errs {
		if !strings.Contains(err.Error(), "--node-labels") {
			t.Errorf("error does not name the flag: %v", err)
		}
	}
}

func TestLeaseReclaimFlags(t *testing.T) {
	o := NewControllerOptions()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	o.AddFlags(fs, false)
	if o.ContainerRuntimeEndpoint != "" || o.LeaseReclaimGrace != 5*time.Minute {
		t.Fatalf("defaults: endpoint %q, grace %v; want none and 5m", o.ContainerRuntimeEndpoint, o.LeaseReclaimGrace)
	}
	if err := fs.Parse([]string{"--container-runtime-endpoint", "unix:///run/containerd/containerd.sock", "--lease-reclaim-grace", "30s"}); err != nil {
		t.Fatal(err)
	}
	if errs := o.Validate(); len(errs) != 0 {
		t.Fatalf("valid flags: %v", errs)
	}
	for _, tc := range []struct {
		endpoint string
		grace    time.Duration
		flag     string
	}{
		{"tcp://10.0.0.1:1234", time.Minute, "--container-runtime-endpoint"},
		{"run/containerd.sock", time.Minute, "--container-runtime-endpoint"},
		{"", 0, "--lease-reclaim-grace"},
		{"", 10 * time.Millisecond, "--lease-reclaim-grace"},
		{"", -time.Minute, "--lease-reclaim-grace"},
	} {
		o.ContainerRuntimeEndpoint, o.LeaseReclaimGrace = tc.endpoint, tc.grace
		errs := o.Validate()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.flag) {
			t.Errorf("endpoint %q grace %v: errors %v, want one naming %s", tc.endpoint, tc.grace, errs, tc.flag)
		}
	}
}

func TestCountReportIntervalFlag(t *testing.T) {
	o := NewControllerOptions()
	fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
	o.AddFlags(fs, false)
	if o.CountReportInterval != 30*time.Second {
		t.Fatalf("default --count-report-interval: %v; want 30s", o.CountReportInterval)
	}
	if err := fs.Parse([]string{"--count-report-interval", "2s"}); err != nil {
		t.Fatal(err)
	}
	if o.CountReportInterval != 2*time.Second || len(o.Validate()) != 0 {
		t.Fatalf("--count-report-interval 2s: %v, %v", o.CountReportInterval, o.Validate())
	}
	o.CountReportInterval = 0
	errs := o.Validate()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "--count-report-interval") {
		t.Fatalf("--count-report-interval 0: %v; want one error naming the flag", errs)
	}
}
