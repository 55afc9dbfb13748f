//go:build tools

// Package cni pins the reference CNI plugins that hack/build-tools.sh builds into
// _output/bin/cni for the tests that attach pods the way a container runtime does. It is a
// module of its own so that the plugins' dependencies never move the versions of the server or
// of the Kubernetes tools.
package cni

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
)
