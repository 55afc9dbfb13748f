// Package networkinitializer hands network-apiserver's admission plugins what they need: the
// network template source and the scheme.
package networkinitializer

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"

	"github.com/samplecrd/network-apiserver/pkg/admission/template"
)

// WantsTemplateSource is implemented by plugins that read the network template.
type WantsTemplateSource interface {
	SetTemplateSource(template.Source)
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
}

// New returns the initializer.
func New(templates template.Source, scheme *runtime.Scheme) admission.PluginInitializer {
	return initializer{templates: templates, scheme: scheme}
}

// Initialize hands each plugin what it asks for.
func (i initializer) Initialize(plugin admission.Interface) {
	if p, ok := plugin.(WantsTemplateSource); ok {
		p.SetTemplateSource(i.templates)
	}
	if p, ok := plugin.(WantsScheme); ok {
		p.SetScheme(i.scheme)
	}
}
