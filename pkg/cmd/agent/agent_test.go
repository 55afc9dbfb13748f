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
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

// TestClientRateLimits: the agent's client sends at kubelet's rate unless told otherwise
// (client-go's own default, 5 a second, made a node that came back Ready rewrite its entries of
// 120 Networks over 24 s), the flags set it, and a rate that is not positive is refused naming
// its flag.
func TestClientRateLimits(t *testing.T) {
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, x := range []struct {
		args  []string
		qps   float32
		burst int
	}{
		{nil, 50, 100},
		{[]string{"--kube-api-qps", "7.5", "--kube-api-burst", "9"}, 7.5, 9},
	} {
		c := defaultClientOptions
		fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		c.addFlags(fs)
		if err := fs.Parse(append([]string{"--kubeconfig", kubeconfig}, x.args...)); err != nil {
			t.Fatal(err)
		}
		if errs := c.validate(); len(errs) > 0 {
			t.Fatalf("%v: %v", x.args, errs)
		}
		config, err := c.config()
		if err != nil {
			t.Fatal(err)
		}
		if config.QPS != x.qps || config.Burst != x.burst || config.Host != "https://127.0.0.1:6443" {
			t.Errorf("%v: host %s, QPS %v, burst %d; want QPS %v, burst %d", x.args, config.Host, config.QPS, config.Burst, x.qps, x.burst)
		}
	}
	for _, x := range []struct {
		args []string
		want string
	}{
		{[]string{"--kube-api-qps", "0"}, "--kube-api-qps must be positive"},
		{[]string{"--kube-api-qps", "-1"}, "--kube-api-qps must be positive"},
		{[]string{"--kube-api-burst", "0"}, "--kube-api-burst must be at least 1"},
	} {
		c := defaultClientOptions
		fs := pflag.NewFlagSet("agent", pflag.ContinueOnError)
		c.addFlags(fs)
		if err := fs.Parse(x.args); err != nil {
			t.Fatal(err)
		}
		errs := c.validate()
		if len(errs) != 1 || !strings.Contains(errs[0].Error(), x.want) {
			t.Errorf("%v: %v, want one error saying %q", x.args, errs, x.want)
		}
	}
	// The command carries the flags with these defaults (what --help shows).
	fs := NewCommand(context.Background()).Flags()
	for name, want := range map[string]string{"kube-api-qps": "50", "kube-api-burst": "100"} {
		if f := fs.Lookup(name); f == nil || f.DefValue != want {
			t.Errorf("the agent command's --%s: %+v, want default %s", name, f, want)
		}
	}
}
