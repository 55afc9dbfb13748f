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

package apiserver

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/apiserver/pkg/server/healthz"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/allocator/repair"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/storage"
)

// allocatorPingTimeout bounds /readyz's check of the allocator's etcd client.
const allocatorPingTimeout = 2 * time.Second

// Config is the configuration of a network-apiserver.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	Extra         ExtraConfig
}

// ExtraConfig is what network-apiserver needs beyond a generic apiserver.
type ExtraConfig struct {
	// Allocator keeps Networks from overlapping (required); Scoping says which must not.
	Allocator *allocator.Allocator
	Scoping   allocator.Scoping
	// Pools are where prefixes for spec.prefixLength come from, tried in order.
	Pools []netip.Prefix
	// VerifyInterval is how often the allocation invariant is verified (and what is safe to fix,
	// fixed), starting right after the server starts.
	VerifyInterval time.Duration
}

// CompletedConfig is a Config whose defaults have been filled in; only it can build a server.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
	extra   ExtraConfig
}

// Server is a running network-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// Complete fills in defaults. It changes the receiver.
func (c *Config) Complete() CompletedConfig {
	if c.Extra.VerifyInterval == 0 {
		c.Extra.VerifyInterval = 10 * time.Minute
	}
	return CompletedConfig{generic: c.GenericConfig.Complete(), extra: c.Extra}
}

// New builds the server and installs samplecrd.k8s.io: v1 (preferred, storage) and v1beta1.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("network-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	if c.extra.Allocator == nil {
		return nil, fmt.Errorf("creating network storage: no allocator")
	}
	storage, err := networkstorage.NewStorage(Scheme, c.generic.RESTOptionsGetter,
		&networkstorage.Allocations{Allocator: c.extra.Allocator, Scoping: c.extra.Scoping, Pools: c.extra.Pools})
	if err != nil {
		return nil, fmt.Errorf("creating network storage: %w", err)
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(samplecrd.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	group.NegotiatedSerializer = groupSerializer(group.NegotiatedSerializer)
	// Both versions share one storage (and so one watch cache): storage works on the internal
	// version and the handlers convert. v1beta1's errors name its own spec fields.
	group.VersionedResourcesStorageMap[v1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"networks":        storage.Network,
		"networks/status": storage.Status,
	}
	group.VersionedResourcesStorageMap[v1beta1.SchemeGroupVersion.Version] = map[string]rest.Storage{
		"networks":        &v1beta1Networks{storage.Network},
		"networks/status": storage.Status,
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, err
	}
	// Creates and deletes keep the allocations exactly the stored Networks, so readiness does not
	// wait for the repair; it reports (and where safe fixes) what data written around the API, or
	// by older versions of this server, broke.
	verifier := repair.New(c.extra.Allocator, c.extra.Scoping, storage.Etcd.KeyPrefix(), storage.Etcd.Decode)
	generic.AddPostStartHookOrDie("verify-network-allocations", func(hook genericapiserver.PostStartHookContext) error {
		go verifier.Run(hook, c.extra.VerifyInterval)
		return nil
	})
	// Creates and deletes use the allocator's own etcd client: readiness covers it too.
	if err := generic.AddReadyzChecks(healthz.NamedCheck("etcd-allocator", func(r *http.Request) error {
		ctx, cancel := context.WithTimeout(r.Context(), allocatorPingTimeout)
		defer cancel()
		return c.extra.Allocator.Ping(ctx)
	})); err != nil {
		return nil, err
	}
	return &Server{GenericAPIServer: generic}, nil
}
