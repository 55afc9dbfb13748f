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
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apiserver/pkg/admission"
	admissionmetrics "k8s.io/apiserver/pkg/admission/metrics"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"

	"github.com/samplecrd/network-apiserver/pkg/admission/networkinitializer"
	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
	"github.com/samplecrd/network-apiserver/pkg/admission/plugin/networkprotection"
	"github.com/samplecrd/network-apiserver/pkg/admission/plugin/networktemplate"
	"github.com/samplecrd/network-apiserver/pkg/admission/plugin/noderestriction"
	"github.com/samplecrd/network-apiserver/pkg/admission/template"
	"github.com/samplecrd/network-apiserver/pkg/apiserver"
)

// ourPlugins are the admission plugins of network-apiserver; they run in both modes.
var ourPlugins = []string{networktemplate.PluginName, networkprotection.PluginName, noderestriction.PluginName}

// registerAdmissionPlugins adds our plugins to the registry and to the recommended order: the
// template right after NamespaceLifecycle, so webhooks and policies see the merged Network; the
// protection finalizer after it (a template cannot drop it); the node restriction last (it
// validates only).
func registerAdmissionPlugins(a *genericoptions.AdmissionOptions) {
	networktemplate.Register(a.Plugins)
	networkprotection.Register(a.Plugins)
	noderestriction.Register(a.Plugins)
	order := a.RecommendedPluginOrder
	at := slices.Index(order, lifecycle.PluginName) + 1
	a.RecommendedPluginOrder = slices.Insert(slices.Clone(order), at, ourPlugins...)
}

// ownNamespace is where the template ConfigMap lives: --template-namespace, else the pod's
// namespace when running in a cluster.
func (o *Options) ownNamespace() string {
	if o.TemplateNamespace != "" {
		return o.TemplateNamespace
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		return strings.TrimSpace(string(b))
	}
	return "network-apiserver"
}

// templateSource returns the file source when --network-template-file is set, else (attached) a
// ConfigMap source whose informer is started by a post-start hook. The hook returns once the
// informer has synced, so /readyz fails until then; creates meanwhile wait in the plugin.
func (o *Options) templateSource(c *genericapiserver.RecommendedConfig) (template.Source, error) {
	if o.TemplateFile != "" || c.ClientConfig == nil {
		return &template.FileSource{Path: o.TemplateFile}, nil
	}
	client, err := kubernetes.NewForConfig(c.ClientConfig)
	if err != nil {
		return nil, err
	}
	ns := o.ownNamespace()
	factory := kubeinformers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, kubeinformers.WithNamespace(ns))
	configMaps := factory.Core().V1().ConfigMaps()
	source := &template.ConfigMapSource{Namespace: ns, Lister: configMaps.Lister(), HasSynced: configMaps.Informer().HasSynced}
	if err := c.AddPostStartHook("start-network-template-informer", func(hook genericapiserver.PostStartHookContext) error {
		factory.Start(hook.Done())
		factory.WaitForCacheSync(hook.Done())
		return nil
	}); err != nil {
		return nil, err
	}
	return source, nil
}

// admissionInitializers is RecommendedOptions' hook for the initializers of our plugins.
func (o *Options) admissionInitializers(c *genericapiserver.RecommendedConfig) ([]admission.PluginInitializer, error) {
	source, err := o.templateSource(c)
	if err != nil {
		return nil, err
	}
	return []admission.PluginInitializer{networkinitializer.New(source, apiserver.Scheme, o.agentIdentity())}, nil
}

// agentIdentity is --agent-identity: whose requests are node agents'.
func (o *Options) agentIdentity() nodeidentity.Identity {
	return nodeidentity.Identity{Agents: slices.Clone(o.AgentIdentity)}
}

// validateStandaloneAdmission refuses plugins that need a core Kubernetes API.
func validateStandaloneAdmission(a *genericoptions.AdmissionOptions) error {
	if needCore := sets.New(a.EnablePlugins...).Difference(sets.New(ourPlugins...)); needCore.Len() > 0 {
		return fmt.Errorf("--enable-admission-plugins %v need a core Kubernetes API; standalone mode runs only %v", sets.List(needCore), ourPlugins)
	}
	return nil
}

// standaloneAdmission builds the chain of our plugins alone, honouring --enable-admission-plugins
// and --disable-admission-plugins; plugins that need a core API are refused.
func (o *Options) standaloneAdmission(c *genericapiserver.RecommendedConfig) error {
	a := o.admission
	if err := validateStandaloneAdmission(a); err != nil {
		return err
	}
	off := sets.New(a.DisablePlugins...).Union(a.DefaultOffPlugins.Difference(sets.New(a.EnablePlugins...)))
	var names []string
	for _, name := range ourPlugins {
		if !off.Has(name) {
			names = append(names, name)
		}
	}
	initializers, err := o.admissionInitializers(c)
	if err != nil {
		return err
	}
	config, err := admission.ReadAdmissionConfiguration(names, a.ConfigFile, nil)
	if err != nil {
		return err
	}
	chain, err := a.Plugins.NewFromPlugins(names, config, admission.PluginInitializers(initializers), a.Decorators)
	if err != nil {
		return err
	}
	c.AdmissionControl = admissionmetrics.WithStepMetrics(chain)
	return nil
}
