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

package integration

import (
	"context"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/cmd/server"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

const (
	admAppliedAnnotation = "samplecrd.k8s.io/applied-template"
	admOptOutAnnotation  = "samplecrd.k8s.io/template"
)

const admTemplateV1 = `apiVersion: samplecrd.k8s.io/v1
kind: Network
metadata:
  labels:
    team: platform
    env: prod
  annotations:
    example.com/owner: netops
spec:
  gateway: 10.9.0.254
`

// admTemplateV2 has no cidr and no gateway, only a prefix length: a Network with an empty spec,
// which validation rejects on its own, becomes valid with it and gets a prefix from the pools.
const admTemplateV2 = `metadata:
  labels:
    version: two
spec:
  prefixLength: 24
`

// admWriteFile replaces the template file; each version gets a later modification time so that
// the change is seen whatever the clock granularity of the file system.
func admWriteFile(t *testing.T, path, content string) {
	t.Helper()
	info, statErr := os.Stat(path)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	if statErr == nil {
		at := info.ModTime().Add(time.Second)
		if err := os.Chtimes(path, at, at); err != nil {
			t.Fatal(err)
		}
	}
}

func admGet(t *testing.T, c *versioned.Clientset, namespace, name string) *v1.Network {
	t.Helper()
	n, err := c.SamplecrdV1().Networks(namespace).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// admCreate creates a Network and returns it as stored.
func admCreate(t *testing.T, c *versioned.Clientset, namespace string, n *v1.Network) *v1.Network {
	t.Helper()
	if _, err := ovlCreate(c, namespace, n, false); err != nil {
		t.Fatalf("creating %s/%s: %v", namespace, n.Name, err)
	}
	return admGet(t, c, namespace, n.Name)
}

// admWaitForTemplate dry-runs creates of probe until the server applies a template whose
// identity satisfies ok (or, with ok nil, applies none), and returns the identity seen.
func admWaitForTemplate(t *testing.T, c *versioned.Clientset, namespace string, probe *v1.Network, ok func(identity string) bool) string {
	t.Helper()
	var identity string
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		got, err := ovlCreate(c, namespace, probe.DeepCopy(), true)
		if err != nil {
			return false, nil
		}
		var applied bool
		identity, applied = got.Annotations[admAppliedAnnotation]
		if ok == nil {
			return !applied, nil
		}
		return applied && ok(identity), nil
	})
	if err != nil {
		t.Fatalf("the server did not pick up the template change (last identity %q): %v", identity, err)
	}
	return identity
}

// admMetrics returns the server's metric samples by name and labels, as written in the text format.
func admMetrics(t *testing.T, c *versioned.Clientset) map[string]float64 {
	t.Helper()
	body, err := c.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	out := map[string]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func TestAdmTemplateFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "template.yaml")
	admWriteFile(t, path, admTemplateV1)
	// Per-namespace overlap lets the cases below use the same cidr.
	s := framework.StartForTest(t, "--network-template-file", path, "--overlap-scope=namespace")
	c := ovlClient(t, s)

	// Applied before defaulting: the template's gateway, not the default .1.
	plain := admCreate(t, c, "adm-1", ovlNetwork("plain", "10.9.0.0/24"))
	if plain.Spec.Gateway != "10.9.0.254" {
		t.Errorf("gateway %q, want the template's 10.9.0.254", plain.Spec.Gateway)
	}
	if plain.Labels["team"] != "platform" || plain.Labels["env"] != "prod" || plain.Annotations["example.com/owner"] != "netops" {
		t.Errorf("template metadata missing: labels %v annotations %v", plain.Labels, plain.Annotations)
	}
	v1Identity := plain.Annotations[admAppliedAnnotation]
	if !strings.HasPrefix(v1Identity, "file:"+path+"@sha256:") {
		t.Errorf("applied-template annotation %q, want file:%s@sha256:…", v1Identity, path)
	}

	// The user's fields win.
	mine := ovlNetwork("mine", "10.9.0.0/24")
	mine.Spec.Gateway = "10.9.0.10"
	mine.Labels = map[string]string{"env": "dev"}
	mine = admCreate(t, c, "adm-2", mine)
	if mine.Spec.Gateway != "10.9.0.10" || mine.Labels["env"] != "dev" || mine.Labels["team"] != "platform" {
		t.Errorf("got gateway %q labels %v, want the user's gateway 10.9.0.10 and env=dev with team=platform", mine.Spec.Gateway, mine.Labels)
	}

	// Opting out.
	out := ovlNetwork("out", "10.9.0.0/24")
	out.Annotations = map[string]string{admOptOutAnnotation: "false"}
	out = admCreate(t, c, "adm-3", out)
	if out.Spec.Gateway != "10.9.0.1" || len(out.Labels) != 0 || out.Annotations[admAppliedAnnotation] != "" {
		t.Errorf("opted-out Network got gateway %q labels %v annotations %v", out.Spec.Gateway, out.Labels, out.Annotations)
	}

	// A template that does not fit a Network (its gateway is outside the cidr) is left off it.
	misfit := admCreate(t, c, "adm-4", ovlNetwork("misfit", "10.7.0.0/24"))
	if misfit.Spec.Gateway != "10.7.0.1" || misfit.Annotations[admAppliedAnnotation] != "" || len(misfit.Labels) != 0 {
		t.Errorf("misfit got gateway %q labels %v annotations %v, want no template", misfit.Spec.Gateway, misfit.Labels, misfit.Annotations)
	}

	// Nor is it put on a Network whose prefix is yet to be allocated: its gateway could not be
	// inside that prefix, and the create would fail.
	allocated, err := ovlCreate(c, "adm-4", &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: "allocated"}, Spec: v1.NetworkSpec{PrefixLength: 24}}, false)
	if err != nil {
		t.Fatalf("a template with a gateway blocks creates with spec.prefixLength: %v", err)
	}
	if p, err := netip.ParsePrefix(allocated.Spec.CIDR); err != nil || allocated.Spec.Gateway != p.Addr().Next().String() ||
		allocated.Annotations[admAppliedAnnotation] != "" || len(allocated.Labels) != 0 {
		t.Errorf("allocated Network got cidr %q gateway %q labels %v annotations %v, want its default gateway and no template",
			allocated.Spec.CIDR, allocated.Spec.Gateway, allocated.Labels, allocated.Annotations)
	}

	// A changed file takes effect for the next create, without a restart.
	admWriteFile(t, path, admTemplateV2)
	v2Identity := admWaitForTemplate(t, c, "adm-5", &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: "probe"}},
		func(id string) bool { return id != v1Identity })
	auto := admCreate(t, c, "adm-5", &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: "auto"}})
	p, err := netip.ParsePrefix(auto.Spec.CIDR)
	if err != nil || p.Bits() != 24 || !netip.MustParsePrefix("10.64.0.0/10").Contains(p.Addr()) {
		t.Errorf("a Network with an empty spec got cidr %q, want a /24 of the default pool 10.64.0.0/10", auto.Spec.CIDR)
	}
	if auto.Spec.PrefixLength != 24 || auto.Spec.Gateway != p.Addr().Next().String() || auto.Labels["version"] != "two" ||
		auto.Annotations[admAppliedAnnotation] != v2Identity {
		t.Errorf("got %+v with labels %v annotations %v, want template two applied", auto.Spec, auto.Labels, auto.Annotations)
	}

	// A broken template: creates go on without it, and the metrics say so.
	admWriteFile(t, path, "metadata: {labels: [unclosed\n")
	probe := ovlNetwork("probe", "10.8.0.0/24")
	admWaitForTemplate(t, c, "adm-6", probe, nil)
	before := admMetrics(t, c)
	bare := admCreate(t, c, "adm-6", ovlNetwork("bare", "10.8.0.0/24"))
	if bare.Spec.Gateway != "10.8.0.1" || bare.Annotations[admAppliedAnnotation] != "" || len(bare.Labels) != 0 {
		t.Errorf("with a broken template got gateway %q labels %v annotations %v, want none of it", bare.Spec.Gateway, bare.Labels, bare.Annotations)
	}
	after := admMetrics(t, c)
	if got, ok := after["network_template_broken"]; !ok || got != 1 {
		t.Errorf("network_template_broken = %v (present %v), want 1", got, ok)
	}
	const loadErrors = `network_template_errors_total{reason="load"}`
	if after[loadErrors] < before[loadErrors]+1 || after[loadErrors] < 1 {
		t.Errorf("%s went from %v to %v, want it to count the create", loadErrors, before[loadErrors], after[loadErrors])
	}

	// Fixed again: applied, and no longer reported broken.
	admWriteFile(t, path, admTemplateV1)
	admWaitForTemplate(t, c, "adm-7", ovlNetwork("probe", "10.9.0.0/24"), func(id string) bool { return id == v1Identity })
	if got := admCreate(t, c, "adm-7", ovlNetwork("healed", "10.9.0.0/24")); got.Spec.Gateway != "10.9.0.254" {
		t.Errorf("after the fix: gateway %q, want 10.9.0.254", got.Spec.Gateway)
	}
	if got := admMetrics(t, c)["network_template_broken"]; got != 0 {
		t.Errorf("network_template_broken = %v after the fix, want 0", got)
	}
}

func TestAdmTemplatePluginDisabled(t *testing.T) {
	path := filepath.Join(t.TempDir(), "template.yaml")
	admWriteFile(t, path, admTemplateV1)
	s := framework.StartForTest(t, "--network-template-file", path, "--disable-admission-plugins=NetworkTemplate")
	c := ovlClient(t, s)
	n := admCreate(t, c, "adm", ovlNetwork("plain", "10.9.0.0/24"))
	if n.Spec.Gateway != "10.9.0.1" || len(n.Labels) != 0 || len(n.Annotations) != 0 {
		t.Fatalf("with NetworkTemplate disabled got gateway %q labels %v annotations %v, want no template", n.Spec.Gateway, n.Labels, n.Annotations)
	}
}

// TestAdmStandaloneRefusesCorePlugins runs the command itself rather than framework.Start: when
// the server exits during start-up, framework.Start takes a minute to report it.
func TestAdmStandaloneRefusesCorePlugins(t *testing.T) {
	dir := t.TempDir()
	o := server.NewOptions(io.Discard)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := server.NewCommand(ctx, o)
	cmd.SetArgs([]string{"--data-dir", dir, "--bind-address", "127.0.0.1", "--secure-port", "0",
		"--enable-admission-plugins=ValidatingAdmissionWebhook"})
	cmd.SetOut(io.Discard)
	cmd.SetErr(io.Discard)
	done := make(chan error, 1)
	go func() { done <- cmd.Execute() }()

	var runErr error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 45*time.Second, true, func(context.Context) (bool, error) {
		select {
		case runErr = <-done:
			return true, nil
		default:
		}
		if _, err := os.Stat(filepath.Join(dir, "admin.kubeconfig")); err == nil {
			cancel()
			runErr = <-done
			t.Fatalf("the server started (and then stopped with %v)", runErr)
		}
		return false, nil
	})
	if err != nil {
		cancel()
		<-done
		t.Fatalf("the server neither failed nor started: %v", err)
	}
	if runErr == nil || !strings.Contains(runErr.Error(), "ValidatingAdmissionWebhook") {
		t.Fatalf("start-up error %v, want one naming ValidatingAdmissionWebhook", runErr)
	}
}
