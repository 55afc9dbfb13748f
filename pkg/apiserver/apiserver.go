package apiserver

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/registry/rest"
	genericapiserver "k8s.io/apiserver/pkg/server"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
)

// Config is the configuration of a network-apiserver.
type Config struct {
	GenericConfig *genericapiserver.RecommendedConfig
}

// CompletedConfig is a Config whose defaults have been filled in; only it can build a server.
type CompletedConfig struct {
	generic genericapiserver.CompletedConfig
}

// Server is a running network-apiserver.
type Server struct {
	GenericAPIServer *genericapiserver.GenericAPIServer
}

// Complete fills in defaults. It changes the receiver.
func (c *Config) Complete() CompletedConfig {
	return CompletedConfig{generic: c.GenericConfig.Complete()}
}

// New builds the server and installs samplecrd.k8s.io: v1 (preferred, storage) and v1beta1.
func (c CompletedConfig) New() (*Server, error) {
	generic, err := c.generic.New("network-apiserver", genericapiserver.NewEmptyDelegate())
	if err != nil {
		return nil, err
	}
	networks, status, err := networkstorage.NewStorage(Scheme, c.generic.RESTOptionsGetter)
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
	return &Server{GenericAPIServer: generic}, nil
}
