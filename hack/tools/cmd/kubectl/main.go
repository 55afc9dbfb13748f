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
