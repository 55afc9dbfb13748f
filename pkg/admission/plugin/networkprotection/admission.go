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

// Package networkprotection is the NetworkProtection mutating admission plugin: every new Network
// gets the finalizer samplecrd.k8s.io/network-protection in its create, as Kubernetes'
// StorageObjectInUseProtection plugin gives every new PersistentVolumeClaim
// kubernetes.io/pvc-protection, so that no second write (once by every node's agent) is needed
// before a pod may attach. The server removes it (see the network storage) once the Network is
// being deleted and no node reports attachments.
package networkprotection

import (
	"context"
	"io"
	"slices"

	"k8s.io/apiserver/pkg/admission"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// PluginName is the name to enable or disable the plugin with.
const PluginName = "NetworkProtection"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) {
		return New(), nil
	})
}

// Plugin adds the protection finalizer to Networks being created.
type Plugin struct {
	*admission.Handler
}

var _ admission.MutationInterface = &Plugin{}

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create)}
}

// Admit adds samplecrd.ProtectionFinalizer to a Network being created, whoever creates it and
// through whichever verb (a create, or a server-side apply or update that creates).
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != samplecrd.Resource("networks") || a.GetSubresource() != "" {
		return nil
	}
	n, ok := a.GetObject().(*samplecrd.Network)
	if !ok || slices.Contains(n.Finalizers, samplecrd.ProtectionFinalizer) {
		return nil
	}
	n.Finalizers = append(n.Finalizers, samplecrd.ProtectionFinalizer)
	return nil
}
