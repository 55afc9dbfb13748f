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

// Package networktemplate is the NetworkTemplate mutating admission plugin: every new Network gets
// the operator's template (labels, annotations, spec fields) merged in with a strategic merge
// patch in which the user's own fields win. A broken template never blocks creates: it is
// logged, counted in metrics, and Networks are admitted without it.
package networktemplate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/component-base/metrics"
	"k8s.io/component-base/metrics/legacyregistry"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/admission/networkinitializer"
	"github.com/samplecrd/network-apiserver/pkg/admission/template"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/validation"
)

// PluginName is the name to enable or disable the plugin with.
const PluginName = "NetworkTemplate"

const (
	// OptOutAnnotation set to "false" on a Network keeps the template off it.
	OptOutAnnotation = "samplecrd.k8s.io/template"
	// AppliedAnnotation records the identity of the template applied to a Network.
	AppliedAnnotation = "samplecrd.k8s.io/applied-template"
)

var (
	templateErrors = metrics.NewCounterVec(&metrics.CounterOpts{
		Subsystem:      "network_template",
		Name:           "errors_total",
		Help:           "Creates admitted without the network template because the template was broken, by reason.",
		StabilityLevel: metrics.ALPHA,
	}, []string{"reason"})
	templateBroken = metrics.NewGauge(&metrics.GaugeOpts{
		Subsystem:      "network_template",
		Name:           "broken",
		Help:           "1 while the network template last seen is broken, else 0.",
		StabilityLevel: metrics.ALPHA,
	})
	registerMetrics sync.Once
)

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		registerMetrics.Do(func() { legacyregistry.MustRegister(templateErrors, templateBroken) })
		return &Plugin{Handler: admission.NewHandler(admission.Create)}, nil
	})
}

// Plugin merges the template into new Networks.
type Plugin struct {
	*admission.Handler
	source template.Source
	scheme *runtime.Scheme

	mu         sync.Mutex
	lastLogged string
}

var (
	_ admission.MutationInterface            = &Plugin{}
	_ networkinitializer.WantsTemplateSource = &Plugin{}
	_ networkinitializer.WantsScheme         = &Plugin{}
)

// SetTemplateSource is called by the initializer. A source that fills a cache (the ConfigMap
// informer) makes the plugin wait for it, so that no Network is admitted without the template
// only because the cache was still empty.
func (p *Plugin) SetTemplateSource(s template.Source) {
	p.source = s
	if syncing, ok := s.(template.SyncingSource); ok {
		p.SetReadyFunc(syncing.Synced)
	}
}

// SetScheme is called by the initializer; the scheme converts between internal and v1.
func (p *Plugin) SetScheme(s *runtime.Scheme) { p.scheme = s }

// ValidateInitialization checks that the initializer ran.
func (p *Plugin) ValidateInitialization() error {
	if p.source == nil || p.scheme == nil {
		return errors.New("NetworkTemplate needs a template source and a scheme")
	}
	return nil
}

// Admit applies the template to a Network being created.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != samplecrd.Resource("networks") || a.GetSubresource() != "" {
		return nil
	}
	n, ok := a.GetObject().(*samplecrd.Network)
	if !ok || n.Annotations[OptOutAnnotation] == "false" {
		return nil
	}
	if !p.WaitForReady() {
		return admission.NewForbidden(a, errors.New("the network template is not loaded yet; try again"))
	}
	tmpl, err := p.source.Load()
	if err != nil {
		p.broken("load", "", err)
		return nil
	}
	if tmpl == nil {
		p.healthy("")
		return nil
	}
	merged, err := p.merge(n, tmpl)
	if err != nil {
		p.broken("merge", tmpl.Identity, err)
		return nil
	}
	if added := newErrors(validateDefaulted(n), validateDefaulted(merged)); added.Len() > 0 {
		p.broken("invalid", tmpl.Identity, fmt.Errorf("template %s would make Networks invalid: %v", tmpl.Identity, sets.List(added)))
		return nil
	}
	if merged.Annotations == nil {
		merged.Annotations = map[string]string{}
	}
	merged.Annotations[AppliedAnnotation] = tmpl.Identity
	*n = *merged
	p.healthy(tmpl.Identity)
	return nil
}

// merge returns the template with n patched over it, so n's own fields win.
func (p *Plugin) merge(n *samplecrd.Network, tmpl *template.Template) (*samplecrd.Network, error) {
	external := &v1.Network{}
	if err := p.scheme.Convert(n, external, nil); err != nil {
		return nil, err
	}
	user, err := json.Marshal(external)
	if err != nil {
		return nil, err
	}
	mergedJSON, err := strategicpatch.StrategicMergePatch(tmpl.JSON, user, &v1.Network{})
	if err != nil {
		return nil, err
	}
	mergedExternal := &v1.Network{}
	if err := json.Unmarshal(mergedJSON, mergedExternal); err != nil {
		return nil, err
	}
	merged := &samplecrd.Network{}
	if err := p.scheme.Convert(mergedExternal, merged, nil); err != nil {
		return nil, err
	}
	merged.TypeMeta = n.TypeMeta
	return merged, nil
}

// validateDefaulted validates a copy of n with the defaults the strategy will apply.
func validateDefaulted(n *samplecrd.Network) sets.Set[string] {
	c := n.DeepCopy()
	samplecrd.SetDefaultGateway(&c.Spec)
	out := sets.New[string]()
	for _, e := range validation.ValidateNetwork(c) {
		out.Insert(e.Error())
	}
	// Validation cannot check a gateway against a prefix that is yet to be allocated for
	// spec.prefixLength; it will not be inside it, so a template must not bring one.
	if c.Spec.CIDR == "" && c.Spec.PrefixLength > 0 && c.Spec.Gateway != "" {
		out.Insert(field.Invalid(field.NewPath("spec", "gateway"), c.Spec.Gateway,
			"cannot be chosen before spec.cidr is allocated from spec.prefixLength").Error())
	}
	return out
}

func newErrors(before, after sets.Set[string]) sets.Set[string] { return after.Difference(before) }

// broken reports a template problem once per template version and counts every affected create.
func (p *Plugin) broken(reason, identity string, err error) {
	templateErrors.WithLabelValues(reason).Inc()
	templateBroken.Set(1)
	p.mu.Lock()
	defer p.mu.Unlock()
	if key := reason + "|" + identity + "|" + err.Error(); key != p.lastLogged {
		p.lastLogged = key
		klog.ErrorS(err, "Network template is broken; admitting Networks without it", "reason", reason, "template", identity)
	}
}

func (p *Plugin) healthy(identity string) {
	templateBroken.Set(0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastLogged != "" {
		p.lastLogged = ""
		klog.InfoS("Network template is usable again", "template", identity)
	}
}
