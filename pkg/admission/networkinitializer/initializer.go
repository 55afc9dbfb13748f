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

// Package networkinitializer hands network-apiserver's admission plugins what they need: the
// network template source and the scheme.
package networkinitializer

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"

	"github.com/samplecrd/network-apiserver/pkg/admission/nodeidentity"
	"github.com/samplecrd/network-apiserver/pkg/admission/template"
)

// WantsTemplateSource is implemented by plugins that read the network template.
type WantsTemplateSource interface {
	SetTemplateSource(template.Source)
	admission.InitializationValidator
}

// WantsAgentIdentity is implemented by plugins that tell node agents' requests apart.
type WantsAgentIdentity interface {
	SetAgentIdentity(nodeidentity.Identity)
	admission.InitializationValidator
}

// WantsScheme is implemented by plugins that convert between API versions.
type WantsScheme interface {
	SetScheme(*runtime.Scheme)
	admission.InitializationValidator
}

type initializer struct {
	templates template.Source
	scheme    *runtime.Scheme
	agents    nodeidentity.Identity
}

// New returns the initializer.
func New(templates template.Source, scheme *runtime.Scheme, agents nodeidentity.Identity) admission.PluginInitializer {
	return initializer{templates: templates, scheme: scheme, agents: agents}
}

// Initialize hands each plugin what it asks for.
func (i initializer) Initialize(plugin admission.Interface) {
	if p, ok := plugin.(WantsTemplateSource); ok {
		p.SetTemplateSource(i.templates)
	}
	if p, ok := plugin.(WantsScheme); ok {
		p.SetScheme(i.scheme)
	}
	if p, ok := plugin.(WantsAgentIdentity); ok {
		p.SetAgentIdentity(i.agents)
	}
}
