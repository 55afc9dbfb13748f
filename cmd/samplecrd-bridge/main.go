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

// Command samplecrd-bridge is the CNI plugin that comes first in a Network's configuration list
// when the node agent runs with bridges made on attach: in a pod's ADD it makes the Network's
// bridge, as the agent would, when the node has none yet, and hands the chain on unchanged to
// the reference "bridge" plugin. DEL, GC and STATUS leave everything to the agent; CHECK
// checks that the bridge is there, ours and up.
package main

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
)

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{
		Add:    add,
		Check:  check,
		Del:    func(*skel.CmdArgs) error { return nil },
		GC:     func(*skel.CmdArgs) error { return nil },
		Status: func(*skel.CmdArgs) error { return nil },
	}, version.PluginSupports("1.0.0", "1.1.0"), "samplecrd-bridge: makes a Network's bridge in its first pod's ADD")
}

// request reads the plugin's entry and opens the backend on the namespace the plugin runs in
// (the node's, as for the reference bridge plugin).
func request(args *skel.CmdArgs) (linux.AttachRequest, *linux.Backend, error) {
	r, err := linux.ParseAttachConf(args.StdinData)
	if err != nil {
		return r, nil, types.NewError(types.ErrDecodingFailure, "reading the samplecrd-bridge configuration", err.Error())
	}
	b, err := linux.New(linux.Config{CNIConfDir: r.LockDir, IPAMDataDir: r.IPAMDataDir})
	if err != nil {
		return r, nil, err
	}
	return r, b, nil
}

func add(args *skel.CmdArgs) error {
	r, b, err := request(args)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	if _, err := b.EnsureForAttach(context.Background(), r); err != nil {
		return fmt.Errorf("making the bridge of network %s: %w", r.Desired.Key, err)
	}
	// The chain's result so far, unchanged: ours adds no interface or address.
	var conf types.NetConf
	if err := json.Unmarshal(args.StdinData, &conf); err != nil {
		return types.NewError(types.ErrDecodingFailure, "reading the network configuration", err.Error())
	}
	result := types.Result(&current.Result{CNIVersion: conf.CNIVersion})
	if conf.RawPrevResult != nil {
		if err := version.ParsePrevResult(&conf); err != nil {
			return err
		}
		result = conf.PrevResult
	}
	return types.PrintResult(result, conf.CNIVersion)
}

func check(args *skel.CmdArgs) error {
	r, b, err := request(args)
	if err != nil {
		return err
	}
	defer func() { _ = b.Close() }()
	return b.CheckForAttach(r)
}
