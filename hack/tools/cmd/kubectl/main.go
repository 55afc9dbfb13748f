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

// Command kubectl is the Kubernetes command-line client, built from the k8s.io/kubectl module
// pinned in hack/tools/go.mod (that module ships the commands but no main package).
// hack/build-tools.sh sets its version with -ldflags -X.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	"k8s.io/component-base/logs"
	"k8s.io/kubectl/pkg/cmd"
	cmdutil "k8s.io/kubectl/pkg/cmd/util"

	// Registers the client-go credential plugins (OIDC and friends) that kubeconfigs may name.
	_ "k8s.io/client-go/plugin/pkg/client/auth"
)

func main() {
	// Apply -v early so that klog is already at the wanted level while the command tree is
	// built (kuberc and plugin lookup log before cobra parses the flags).
	_, _ = logs.GlogSetter(cmd.GetLogVerbosity(os.Args))
	if err := cli.RunNoErrOutput(cmd.NewDefaultKubectlCommand()); err != nil {
		cmdutil.CheckErr(err)
	}
}
