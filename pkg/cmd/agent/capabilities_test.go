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
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCapEff(t *testing.T) {
	status := "Name:\tnetwork-apiserver\nCapInh:\t0000000000000000\nCapPrm:\t000001ffffffffff\nCapEff:\t0000000000001000\nCapBnd:\t000001ffffffffff\n"
	caps, err := parseCapEff([]byte(status))
	if err != nil {
		t.Fatal(err)
	}
	if caps != 1<<unix.CAP_NET_ADMIN {
		t.Errorf("CapEff: got %#x, want CAP_NET_ADMIN only", caps)
	}
	if _, err := parseCapEff([]byte("Name:\tx\n")); err == nil {
		t.Error("a status without CapEff parsed")
	}
	if _, err := parseCapEff([]byte("CapEff:\tnothex\n")); err == nil {
		t.Error("a CapEff that is not hex parsed")
	}
}

func TestMissingCapabilities(t *testing.T) {
	const netAdmin, sysAdmin = uint64(1) << unix.CAP_NET_ADMIN, uint64(1) << unix.CAP_SYS_ADMIN
	for _, tc := range []struct {
		name    string
		caps    uint64
		netns   string
		missing []string
		reason  string
	}{
		{name: "root", caps: 1<<41 - 1},
		{name: "root in a namespace", caps: 1<<41 - 1, netns: "/var/run/netns/demo"},
		{name: "net admin is enough on its own network", caps: netAdmin},
		{name: "unprivileged", caps: 0, missing: []string{"CAP_NET_ADMIN"}, reason: ReasonNeedsNetAdmin},
		{name: "unprivileged with a namespace", caps: 0, netns: "/var/run/netns/demo",
			missing: []string{"CAP_NET_ADMIN", "CAP_SYS_ADMIN"}, reason: ReasonNeedsNetAdmin},
		{name: "net admin without sys admin cannot enter a namespace", caps: netAdmin, netns: "/var/run/netns/demo",
			missing: []string{"CAP_SYS_ADMIN"}, reason: ReasonNeedsSysAdmin},
		{name: "sys admin alone", caps: sysAdmin, netns: "/var/run/netns/demo", missing: []string{"CAP_NET_ADMIN"}, reason: ReasonNeedsNetAdmin},
	} {
		t.Run(tc.name, func(t *testing.T) {
			caps := tc.caps
			defer func(f func() (uint64, error)) { effectiveCapabilities = f }(effectiveCapabilities)
			effectiveCapabilities = func() (uint64, error) { return caps, nil }
			o := NewControllerOptions()
			o.NodeName, o.BackendNetNS = "node-a", tc.netns
			missing := o.MissingCapabilities()
			if !slices.Equal(missing, tc.missing) {
				t.Fatalf("missing %v, want %v", missing, tc.missing)
			}
			if len(missing) == 0 {
				return
			}
			reason, message, line := o.unavailable(missing)
			if reason != tc.reason {
				t.Errorf("reason %s, want %s", reason, tc.reason)
			}
			for _, c := range missing {
				if !strings.Contains(message, "needs "+missing[0]) || !strings.Contains(message, c) || !strings.Contains(line, c) {
					t.Errorf("message %q or log line %q does not name %s", message, line, c)
				}
			}
			if !strings.Contains(message, "node-a is not running") || !strings.Contains(line, "serving the API alone") ||
				!strings.Contains(line, reason) {
				t.Errorf("message %q, log line %q", message, line)
			}
			if tc.netns != "" && !strings.Contains(message, tc.netns) {
				t.Errorf("message %q does not name the namespace", message)
			}
		})
	}
}

// An unreadable capability set names nothing missing: the controller runs and the kernel's
// refusals are reported per Network, as before.
func TestMissingCapabilitiesUnreadable(t *testing.T) {
	defer func(f func() (uint64, error)) { effectiveCapabilities = f }(effectiveCapabilities)
	effectiveCapabilities = func() (uint64, error) { return 0, unix.ENOENT }
	if missing := NewControllerOptions().MissingCapabilities(); missing != nil {
		t.Errorf("missing %v", missing)
	}
}

// This process's own set, as /proc says it, is what capget(2) says.
func TestEffectiveCapabilities(t *testing.T) {
	caps, err := effectiveCapabilities()
	if err != nil {
		t.Fatal(err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3 fills two
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		t.Fatal(err)
	}
	if want := uint64(data[1].Effective)<<32 | uint64(data[0].Effective); caps != want {
		t.Errorf("CapEff %#x, capget %#x", caps, want)
	}
}
