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

package linux

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// The test binary doubles as the unprivileged process of TestPermissionDenied: started with
// these variables set it runs epermChild instead of the tests.
const (
	epermChildEnv  = "NETBACKEND_TEST_EPERM_CHILD" // the network key to Ensure
	epermMarkEnv   = "NETBACKEND_TEST_EPERM_MARK"  // a link that exists only in the test's namespace
	epermConfEnv   = "NETBACKEND_TEST_EPERM_CONF"  // the CNI configuration directory
	epermResultTag = "EPERM-CHILD-RESULT"
)

func TestMain(m *testing.M) {
	if key := os.Getenv(epermChildEnv); key != "" {
		os.Exit(epermChild(key))
	}
	os.Exit(m.Run())
}

// epermChild runs as an unprivileged user, in the namespace of the test that started it
// (inherited from the thread that started it), and Ensures key in its own namespace.
func epermChild(key string) int {
	// Never act anywhere but in the test's namespace.
	if _, err := netlink.LinkByName(os.Getenv(epermMarkEnv)); err != nil {
		fmt.Printf("not in the test's network namespace (no link %q: %v)\n", os.Getenv(epermMarkEnv), err)
		return 3
	}
	b, err := New(Config{CNIConfDir: os.Getenv(epermConfEnv)})
	if err != nil {
		fmt.Printf("New: %v\n", err)
		return 4
	}
	defer func() { _ = b.Close() }()
	changes, _, err := b.Ensure(context.Background(), desired4(key))
	fmt.Printf("%s reason=%s changes=%q err=%v\n", epermResultTag, netbackend.ReasonOf(err), changes, err)
	return 0
}

// TestPermissionDenied runs Ensure as an unprivileged user (no CAP_NET_ADMIN) inside a test
// namespace: creating the bridge fails with EPERM and writing the configuration with EACCES,
// both reported as netbackend.ReasonPermissionDenied, and nothing is changed.
func TestPermissionDenied(t *testing.T) {
	e := newEnv(t)
	e.ns.addVeth(t, "epermmark0", "epermmark1", "")

	// A copy of this binary and a configuration directory that the unprivileged user can reach
	// (the test's own temporary directories are private to root) but not write.
	dir, err := os.MkdirTemp("", "netbackend-eperm-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "netbackend.test")
	copyExecutable(t, bin)
	confDir := filepath.Join(dir, "net.d")
	if err := os.Mkdir(confDir, 0o755); err != nil {
		t.Fatal(err)
	}

	run := func(key string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var out []byte
		var runErr error
		err := inNS(e.ns.path, func() error {
			cmd := exec.CommandContext(ctx, bin, "-test.run=^$")
			cmd.Env = []string{"PATH=/usr/bin:/bin", epermChildEnv + "=" + key, epermMarkEnv + "=epermmark0", epermConfEnv + "=" + confDir}
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
			out, runErr = cmd.CombinedOutput()
			return nil
		})
		if err != nil {
			t.Fatalf("entering %s: %v", e.ns.name, err)
		}
		if runErr != nil {
			t.Fatalf("unprivileged child: %v\n%s", runErr, out)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, epermResultTag) {
				return line
			}
		}
		t.Fatalf("unprivileged child printed no result:\n%s", out)
		return ""
	}

	// No bridge yet: creating it is refused by the kernel.
	d := desired4("default/eperm")
	line := run(d.Key)
	if !strings.Contains(line, "reason="+netbackend.ReasonPermissionDenied) || !strings.Contains(line, "operation not permitted") {
		t.Errorf("creating the bridge unprivileged: %s", line)
	}
	if l := e.ns.link(t, stagingName(d.Key)); l != nil {
		t.Errorf("an unprivileged Ensure left %s", l.Attrs().Name)
	}
	if l := e.ns.link(t, netbackend.BridgeName(d.Key)); l != nil {
		t.Errorf("an unprivileged Ensure created %s", l.Attrs().Name)
	}

	// The bridge is right (made by root), only the configuration is missing: writing it into
	// root's directory is refused.
	root := e.newBackend(Config{CNIConfDir: confDir})
	if _, _, err := root.Ensure(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(ConfPath(confDir, d.Key)); err != nil {
		t.Fatal(err)
	}
	line = run(d.Key)
	if !strings.Contains(line, "reason="+netbackend.ReasonPermissionDenied) || !strings.Contains(line, "permission denied") ||
		!strings.Contains(line, "changes=[]") {
		t.Errorf("writing the configuration unprivileged: %s", line)
	}
	if files := confFiles(t, confDir); len(files) != 0 {
		t.Errorf("an unprivileged Ensure left %v", files)
	}
}

func copyExecutable(t *testing.T, dst string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = in.Close() }()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		_ = out.Close()
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
