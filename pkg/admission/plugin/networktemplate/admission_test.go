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

package networktemplate

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/samplecrd/network-apiserver/pkg/admission/template"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/apiserver"
)

// admStatic is a Source that always yields the same result.
type admStatic struct {
	tmpl *template.Template
	err  error
}

func (s admStatic) Load() (*template.Template, error) { return s.tmpl, s.err }

func admPlugin(t *testing.T, src template.Source) *Plugin {
	t.Helper()
	p := &Plugin{Handler: admission.NewHandler(admission.Create)}
	if err := p.ValidateInitialization(); err == nil {
		t.Fatal("ValidateInitialization passed without a source and a scheme")
	}
	p.SetScheme(apiserver.Scheme)
	p.SetTemplateSource(src)
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p
}

func admTemplate(t *testing.T, yaml string) admStatic {
	t.Helper()
	tmpl, err := template.Parse("unit@1", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return admStatic{tmpl: tmpl}
}

func admNetwork(cidr, gateway string, labels, annotations map[string]string) *samplecrd.Network {
	return &samplecrd.Network{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "net", Labels: labels, Annotations: annotations},
		Spec:       samplecrd.NetworkSpec{CIDR: cidr, Gateway: gateway},
	}
}

var admNetworks = samplecrd.Resource("networks").WithVersion("v1")

func admAttrs(obj, old runtime.Object, resource schema.GroupVersionResource, subresource string, op admission.Operation) admission.Attributes {
	var opts runtime.Object = &metav1.CreateOptions{}
	if op == admission.Update {
		opts = &metav1.UpdateOptions{}
	}
	return admission.NewAttributesRecord(obj, old, samplecrd.Kind("Network").WithVersion("v1"), "team-a", "net",
		resource, subresource, op, opts, false, &user.DefaultInfo{Name: "admin"})
}

// admCreate admits a create of n through a chain holding only p, as the server does.
func admCreate(t *testing.T, p *Plugin, n *samplecrd.Network) {
	t.Helper()
	var chain admission.MutationInterface = admission.NewChainHandler(p)
	if err := chain.Admit(context.Background(), admAttrs(n, nil, admNetworks, "", admission.Create), nil); err != nil {
		t.Fatalf("Admit: %v", err)
	}
}

const admFullTemplate = `
metadata:
  labels:
    team: platform
    env: prod
  annotations:
    example.com/owner: netops
spec:
  gateway: 10.9.0.254
`

func TestAdmitMergesTemplateUserFieldsWin(t *testing.T) {
	p := admPlugin(t, admTemplate(t, admFullTemplate))
	n := admNetwork("10.9.0.0/24", "", map[string]string{"env": "dev", "app": "web"}, map[string]string{"example.com/note": "mine"})
	admCreate(t, p, n)

	wantLabels := map[string]string{"team": "platform", "env": "dev", "app": "web"}
	if !apiequality.Semantic.DeepEqual(n.Labels, wantLabels) {
		t.Errorf("labels %v, want %v (template merged, the user's env wins)", n.Labels, wantLabels)
	}
	wantAnnotations := map[string]string{"example.com/owner": "netops", "example.com/note": "mine", AppliedAnnotation: "unit@1"}
	if !apiequality.Semantic.DeepEqual(n.Annotations, wantAnnotations) {
		t.Errorf("annotations %v, want %v", n.Annotations, wantAnnotations)
	}
	if n.Spec.Gateway != "10.9.0.254" || n.Spec.CIDR != "10.9.0.0/24" {
		t.Errorf("spec %+v, want the user's cidr and the template's gateway 10.9.0.254", n.Spec)
	}
	if n.Namespace != "team-a" || n.Name != "net" {
		t.Errorf("identity changed to %s/%s", n.Namespace, n.Name)
	}
}

func TestAdmitUserGatewayWins(t *testing.T) {
	p := admPlugin(t, admTemplate(t, admFullTemplate))
	n := admNetwork("10.9.0.0/24", "10.9.0.10", nil, nil)
	admCreate(t, p, n)
	if n.Spec.Gateway != "10.9.0.10" {
		t.Fatalf("gateway %q, want the user's 10.9.0.10", n.Spec.Gateway)
	}
	if n.Labels["team"] != "platform" || n.Annotations[AppliedAnnotation] != "unit@1" {
		t.Fatalf("template not applied: labels %v annotations %v", n.Labels, n.Annotations)
	}
}

func TestAdmitLeavesObjectUntouched(t *testing.T) {
	full := admTemplate(t, admFullTemplate)
	for name, tc := range map[string]struct {
		source template.Source
		n      *samplecrd.Network
	}{
		"opted out": {full, admNetwork("10.9.0.0/24", "", map[string]string{"env": "dev"}, map[string]string{OptOutAnnotation: "false"})},
		// The template's gateway is outside the user's cidr: applying it would make the Network invalid.
		"template would make it invalid": {full, admNetwork("10.1.0.0/24", "", map[string]string{"env": "dev"}, nil)},
		// The prefix is yet to be allocated, so the template's gateway cannot be inside it.
		"prefix to be allocated": {full, &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "net"},
			Spec: samplecrd.NetworkSpec{PrefixLength: 24}}},
		"no template":     {admStatic{}, admNetwork("10.9.0.0/24", "", nil, nil)},
		"broken template": {admStatic{err: errors.New("template file:x is not YAML")}, admNetwork("10.9.0.0/24", "", nil, nil)},
	} {
		t.Run(name, func(t *testing.T) {
			p := admPlugin(t, tc.source)
			before := tc.n.DeepCopy()
			admCreate(t, p, tc.n)
			if !apiequality.Semantic.DeepEqual(tc.n, before) {
				t.Fatalf("object changed:\n got %+v\nwant %+v", tc.n, before)
			}
		})
	}
}

func TestAdmitOptOutOnlyForFalse(t *testing.T) {
	p := admPlugin(t, admTemplate(t, admFullTemplate))
	n := admNetwork("10.9.0.0/24", "", nil, map[string]string{OptOutAnnotation: "true"})
	admCreate(t, p, n)
	if n.Annotations[AppliedAnnotation] != "unit@1" || n.Spec.Gateway != "10.9.0.254" {
		t.Fatalf("template not applied with %s=true: %+v", OptOutAnnotation, n)
	}
}

func TestAdmitIgnoresUpdates(t *testing.T) {
	p := admPlugin(t, admTemplate(t, admFullTemplate))
	if p.Handles(admission.Update) || p.Handles(admission.Delete) || !p.Handles(admission.Create) {
		t.Fatal("the plugin must handle creates only")
	}
	old := admNetwork("10.9.0.0/24", "10.9.0.1", nil, nil)
	n := old.DeepCopy()
	n.Labels = map[string]string{"env": "dev"}
	before := n.DeepCopy()
	var chain admission.MutationInterface = admission.NewChainHandler(p)
	if err := chain.Admit(context.Background(), admAttrs(n, old, admNetworks, "", admission.Update), nil); err != nil {
		t.Fatal(err)
	}
	if !apiequality.Semantic.DeepEqual(n, before) {
		t.Fatalf("update changed:\n got %+v\nwant %+v", n, before)
	}
}

func TestAdmitIgnoresOtherResources(t *testing.T) {
	p := admPlugin(t, admTemplate(t, admFullTemplate))
	for name, tc := range map[string]struct {
		resource    schema.GroupVersionResource
		subresource string
	}{
		"status subresource":    {admNetworks, "status"},
		"other resource":        {samplecrd.Resource("widgets").WithVersion("v1"), ""},
		"same name, core group": {schema.GroupVersionResource{Version: "v1", Resource: "networks"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			n := admNetwork("10.9.0.0/24", "", nil, nil)
			before := n.DeepCopy()
			if err := p.Admit(context.Background(), admAttrs(n, nil, tc.resource, tc.subresource, admission.Create), nil); err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(n, before) {
				t.Fatalf("object changed:\n got %+v\nwant %+v", n, before)
			}
		})
	}
}

// admInit hands the plugin a source and the scheme, like the server's initializer.
type admInit struct{ source template.Source }

func (i admInit) Initialize(plugin admission.Interface) {
	if p, ok := plugin.(*Plugin); ok {
		p.SetTemplateSource(i.source)
		p.SetScheme(apiserver.Scheme)
	}
}

// TestAdmitThroughRegistry builds the plugin by name, as the server does.
func TestAdmitThroughRegistry(t *testing.T) {
	plugins := admission.NewPlugins()
	Register(plugins)
	config, err := admission.ReadAdmissionConfiguration([]string{PluginName}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	chain, err := plugins.NewFromPlugins([]string{PluginName}, config, admission.PluginInitializers{admInit{admTemplate(t, admFullTemplate)}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := admNetwork("10.9.0.0/24", "", nil, nil)
	if err := chain.(admission.MutationInterface).Admit(context.Background(), admAttrs(n, nil, admNetworks, "", admission.Create), nil); err != nil {
		t.Fatal(err)
	}
	if n.Spec.Gateway != "10.9.0.254" || n.Annotations[AppliedAnnotation] != "unit@1" {
		t.Fatalf("template not applied through the registry: %+v", n)
	}

	if _, err := plugins.NewFromPlugins([]string{PluginName}, config, admission.PluginInitializers{}, nil); err == nil {
		t.Fatal("the plugin was built without its initializer")
	}
}

func TestAdmitTemplateWithoutGatewayOnAllocatedPrefix(t *testing.T) {
	p := admPlugin(t, admTemplate(t, "metadata:\n  labels:\n    team: platform\n"))
	n := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "net"}, Spec: samplecrd.NetworkSpec{PrefixLength: 24}}
	admCreate(t, p, n)
	if n.Labels["team"] != "platform" || n.Spec.Gateway != "" || n.Spec.CIDR != "" || n.Spec.PrefixLength != 24 {
		t.Fatalf("got labels %v spec %+v, want the template's label and the spec unchanged", n.Labels, n.Spec)
	}
}

// While the ConfigMap informer syncs, a create waits for it and then gets the template; before,
// it was admitted without the template for good.
func TestAdmitWaitsForTheConfigMapInformer(t *testing.T) {
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	if err := indexer.Add(&corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "netops", Name: template.ConfigMapName, ResourceVersion: "1"},
		Data:       map[string]string{template.ConfigMapKey: "metadata:\n  labels:\n    team: platform\n"},
	}); err != nil {
		t.Fatal(err)
	}
	// Not synced on the first two looks; synced from the third on.
	var looks atomic.Int32
	src := &template.ConfigMapSource{
		Namespace: "netops",
		Lister:    corev1listers.NewConfigMapLister(indexer),
		HasSynced: func() bool { return looks.Add(1) > 2 },
	}
	p := admPlugin(t, src)
	n := admNetwork("10.0.0.0/24", "", nil, nil)
	admCreate(t, p, n)
	if n.Labels["team"] != "platform" {
		t.Fatalf("created while the informer synced: labels %v, want the template's team=platform", n.Labels)
	}
}
