package apiserver

import (
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
)

// Config is the configuration of a network-apiserver.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
	Extra         ExtraConfig
}

// ExtraConfig is what network-apiserver needs beyond a generic apiserver.
type ExtraConfig struct {
	// Allocations keeps Networks from overlapping; required outside unit tests.
	Allocations *networkstorage.Allocations
	// RepairInterval is how often allocations are rebuilt from the stored Networks after the
	// repair at start; RepairGrace is how old an unowned allocation must be to be removed.
	RepairInterval, RepairGrace time.Duration
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
	if c.Extra.RepairInterval == 0 {
		c.Extra.RepairInterval = 10 * time.Minute
	}
	if c.Extra.RepairGrace == 0 {
		c.Extra.RepairGrace = time.Minute
	}
	return CompletedConfig{generic: c.GenericConfig.Complete(), extra: c.Extra}
}

// New builds the server and installs samplecrd.k8s.io: v1 (preferred, storage) and v1beta1.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("network-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	networks, status, err := networkstorage.NewStorage(Scheme, c.generic.RESTOptionsGetter, c.extra.Allocations)
	if err != nil {
		return nil, fmt.Errorf("creating network storage: %w", err)
	}

	group := genericapiserver.NewDefaultAPIGroupInfo(samplecrd.GroupName, Scheme, metav1.ParameterCodec, Codecs)
	// Both versions share one storage (and so one watch cache): storage works on the internal
	// version and the handlers convert.
	for _, version := range []string{v1.SchemeGroupVersion.Version, v1beta1.SchemeGroupVersion.Version} {
		group.VersionedResourcesStorageMap[version] = map[string]rest.Storage{
			"networks":        networks,
			"networks/status": status,
		}
	}
	if err := generic.InstallAPIGroup(&group); err != nil {
		return nil, err
	}
	if a := c.extra.Allocations; a != nil {
		// The server is not ready until the allocations match the stored Networks.
		generic.AddPostStartHookOrDie("repair-network-allocations", func(hook genericapiserver.PostStartHookContext) error {
			if err := a.Repair(hook, networks, c.extra.RepairGrace); err != nil {
				return fmt.Errorf("repairing network allocations: %w", err)
			}
			go wait.Until(func() {
				if err := a.Repair(hook, networks, c.extra.RepairGrace); err != nil {
					klog.ErrorS(err, "Repairing network allocations failed")
				}
			}, c.extra.RepairInterval, hook.Done())
			return nil
		})
	}
	return &Server{GenericAPIServer: generic}, nil
}
