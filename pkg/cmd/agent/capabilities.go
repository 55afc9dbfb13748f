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

package agent

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	networkcontroller "github.com/samplecrd/network-apiserver/pkg/controller/network"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
)

// Reasons of the node's entry (and of Ready where only such entries exist) when the bundled
// controller cannot run.
const (
	ReasonNeedsNetAdmin = samplecrd.ReasonControllerNeedsNetAdmin
	ReasonNeedsSysAdmin = samplecrd.ReasonControllerNeedsSysAdmin
)

// effectiveCapabilities returns this process's effective capability set; tests replace it.
var effectiveCapabilities = func() (uint64, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	return parseCapEff(status)
}

// parseCapEff reads the CapEff line of a /proc/<pid>/status file.
func parseCapEff(status []byte) (uint64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapEff:"); ok {
			return strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		}
	}
	return 0, fmt.Errorf("no CapEff line in the process status")
}

// MissingCapabilities names the capabilities the controller needs and this process lacks:
// CAP_NET_ADMIN to make bridges and addresses, and with --backend-netns CAP_SYS_ADMIN to reach
// into that namespace. When the set cannot be read it names none, and the controller reports
// what the kernel refuses per Network.
func (c *ControllerOptions) MissingCapabilities() []string {
	caps, err := effectiveCapabilities()
	if err != nil {
		klog.V(2).InfoS("Cannot read this process's capabilities", "err", err)
		return nil
	}
	var missing []string
	if caps&(1<<unix.CAP_NET_ADMIN) == 0 {
		missing = append(missing, "CAP_NET_ADMIN")
	}
	if c.BackendNetNS != "" && caps&(1<<unix.CAP_SYS_ADMIN) == 0 {
		missing = append(missing, "CAP_SYS_ADMIN")
	}
	return missing
}

// unavailable returns the Ready reason and message, and the log line, for a bundled controller
// that lacks the capabilities missing.
func (c *ControllerOptions) unavailable(missing []string) (reason, message, logLine string) {
	reason = ReasonNeedsNetAdmin
	if missing[0] != "CAP_NET_ADMIN" {
		reason = ReasonNeedsSysAdmin
	}
	needs := strings.Join(missing, " and ")
	if c.BackendNetNS != "" {
		needs += " (for --backend-netns " + c.BackendNetNS + ")"
	}
	message = fmt.Sprintf("the Network controller of node %s is not running: it needs %s, which network-apiserver "+
		"lacks (run it as root); nothing is realised on this node", c.NodeName, needs)
	logLine = fmt.Sprintf("The Network controller needs %s, which this process lacks (run it as root): serving the API "+
		"alone. Each Network's entry of this node says so (reason %s); --controllers=false turns the controller off.", needs, reason)
	return reason, message, logLine
}

// RunUnavailable runs the stand-in for a controller that lacks the capabilities missing: it
// writes the node's entry of every Network, not ready with a reason that says why, until ctx is
// done.
func (c *ControllerOptions) RunUnavailable(ctx context.Context, config *rest.Config, missing []string) error {
	client, err := versioned.NewForConfig(protobufConfig(config))
	if err != nil {
		return err
	}
	reason, message, _ := c.unavailable(missing)
	factory := externalversions.NewSharedInformerFactory(client, c.ResyncPeriod)
	stand, err := networkcontroller.NewUnavailable(client, factory.Samplecrd().V1().Networks(), c.NodeName, reason, message)
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	return stand.Run(ctx)
}
