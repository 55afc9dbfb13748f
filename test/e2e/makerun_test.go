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

package e2e

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// demoNetNS is the network namespace `make run` confines its controller to by default.
const demoNetNS = "network-apiserver-demo"

// syncBuffer is a log written by a child's output copier and read by the test.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *syncBuffer) tail() string {
	s := b.String()
	if len(s) > 6000 {
		s = s[len(s)-6000:]
	}
	return s
}

// userEnv is this process's environment without what an outer make or the Makefile's own
// variables would carry into `make run`: the test runs it the way a person types it.
func userEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES", "CONTROLLER_FLAGS", "DEMO_NETNS", "UNSAFE_HOST_NETWORK", "KUBECONFIG":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// process is `make run` (or hack/run.sh) running in a process group of its own, as in a terminal.
type process struct {
	cmd        *exec.Cmd
	log        *syncBuffer
	exited     chan struct{}
	err        error
	kubeconfig string
}

func startProcess(t *testing.T, cmd *exec.Cmd, dataDir string) *process {
	t.Helper()
	p := &process{cmd: cmd, log: &syncBuffer{}, exited: make(chan struct{}), kubeconfig: filepath.Join(dataDir, "admin.kubeconfig")}
	cmd.Dir = repoRoot
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
			return
		default:
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		if !p.waitExit(90 * time.Second) {
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			t.Errorf("%s still running 90s after SIGTERM", strings.Join(cmd.Args, " "))
		}
		// A server left behind (its own session) must not outlive the test.
		if pid := serverPid(dataDir); pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	// The kubectl line is printed once the server serves and the admin kubeconfig is written.
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 5*time.Minute, true, func(context.Context) (bool, error) {
		select {
		case <-p.exited:
			return false, fmt.Errorf("exited: %v", p.err)
		default:
		}
		return strings.Contains(p.log.String(), "kubectl --kubeconfig "+p.kubeconfig+" get networks"), nil
	})
	if err != nil {
		t.Fatalf("%s never served: %v\n%s", strings.Join(cmd.Args, " "), err, p.log.tail())
	}
	return p
}

func (p *process) waitExit(timeout time.Duration) bool {
	select {
	case <-p.exited:
		return true
	case <-time.After(timeout):
		return false
	}
}

func (p *process) kubectl(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command(tool(t, "KUBECTL", "kubectl"), append([]string{"--kubeconfig", p.kubeconfig}, args...)...)
	cmd.Dir = repoRoot
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s\n--- server log:\n%s", strings.Join(args, " "), err, out, p.log.tail())
	}
	return string(out)
}

// startMakeRun runs `make run` with the default flags but for a free port and the data dir.
func startMakeRun(t *testing.T, port int, dataDir string, vars ...string) *process {
	t.Helper()
	cmd := exec.Command("make", append([]string{"run", fmt.Sprintf("PORT=%d", port), "DATA_DIR=" + dataDir}, vars...)...)
	cmd.Env = userEnv()
	return startProcess(t, cmd, dataDir)
}

// serverPid finds the network-apiserver serving dataDir (0: none). `make run` starts it in a
// session of its own, so it is not in make's process group.
func serverPid(dataDir string) int {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if filepath.Base(args[0]) != "network-apiserver" {
			continue
		}
		if i := slices.Index(args, "--data-dir"); i >= 0 && i+1 < len(args) && args[i+1] == dataDir {
			return pid
		}
	}
	return 0
}

// hostState is what a demo must leave alone in this machine's own network namespace.
type hostState struct {
	links, addrs, routes, cniConf []string
}

func snapshotHost(t *testing.T) hostState {
	t.Helper()
	var s hostState
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range links {
		a := l.Attrs()
		s.links = append(s.links, fmt.Sprintf("%d %s %s %s alias=%q", a.Index, a.Name, l.Type(), a.HardwareAddr, a.Alias))
	}
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		s.addrs = append(s.addrs, fmt.Sprintf("%d %s", a.LinkIndex, a.IPNet))
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: unix.RT_TABLE_UNSPEC}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range routes {
		s.routes = append(s.routes, fmt.Sprintf("table %d dev %d dst %v gw %v src %v proto %d scope %d type %d", r.Table, r.LinkIndex, r.Dst, r.Gw, r.Src, r.Protocol, r.Scope, r.Type))
	}
	err = filepath.WalkDir("/etc/cni/net.d", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s.cniConf = append(s.cniConf, fmt.Sprintf("%s %x", path, sha256.Sum256(b)))
		return nil
	})
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	for _, l := range [][]string{s.links, s.addrs, s.routes, s.cniConf} {
		slices.Sort(l)
	}
	return s
}

// assertHostUnchanged compares the host with before, and looks for anything of ours on it.
func assertHostUnchanged(t *testing.T, before hostState, when string) {
	t.Helper()
	now := snapshotHost(t)
	for _, c := range []struct {
		what        string
		before, now []string
	}{{"interfaces", before.links, now.links}, {"addresses", before.addrs, now.addrs}, {"routes", before.routes, now.routes}, {"/etc/cni/net.d", before.cniConf, now.cniConf}} {
		if !slices.Equal(c.before, c.now) {
			t.Errorf("%s: the host's %s changed:\nbefore:\n  %s\nnow:\n  %s", when, c.what, strings.Join(c.before, "\n  "), strings.Join(c.now, "\n  "))
		}
	}
	for _, l := range now.links {
		if strings.Contains(l, "samplecrd.k8s.io/network=") {
			t.Errorf("%s: a bridge of ours is on the host: %s", when, l)
		}
	}
}

// requireNoMakeRun fails the test when a make run holds the demo namespace (hack/run.sh's lock):
// the test's own make run could not start. A namespace a killed run left is no obstacle.
func requireNoMakeRun(t *testing.T) {
	t.Helper()
	dir := "/run/lock"
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		dir = "/run"
	}
	f, err := os.OpenFile(filepath.Join(dir, demoNetNS+".lock"), os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("a make run is using the network namespace %s (%v): stop it before this test", demoNetNS, err)
	}
	_ = unix.Flock(int(f.Fd()), unix.LOCK_UN)
}

func demoNetNSExists() bool {
	_, err := os.Stat("/var/run/netns/" + demoNetNS)
	return err == nil
}

// waitBridgeInDemoNS waits until `ip -n network-apiserver-demo link` shows the bridge.
func waitBridgeInDemoNS(t *testing.T, p *process, bridge, key string) {
	t.Helper()
	var out []byte
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		var err error
		out, err = exec.Command("ip", "-n", demoNetNS, "-d", "link", "show", bridge).CombinedOutput()
		return err == nil && strings.Contains(string(out), "alias samplecrd.k8s.io/network="+key), nil
	})
	if err != nil {
		t.Fatalf("ip -n %s link show %s never showed the bridge: %s\n--- log:\n%s", demoNetNS, bridge, out, p.log.tail())
	}
}

// ctrlCReachesChildren makes sure the processes this test starts can act on SIGINT: a process
// started with SIGINT ignored (a background job of a non-interactive shell) passes that on, and
// then neither make nor hack/run.sh could see a Ctrl-C. While this process handles SIGINT, its
// children start with the default action.
func ctrlCReachesChildren(t *testing.T) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			ignored, _ := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if ignored&(1<<(syscall.SIGINT-1)) != 0 {
				c := make(chan os.Signal, 1)
				signal.Notify(c, os.Interrupt)
				t.Cleanup(func() { signal.Stop(c) })
			}
		}
	}
}

// TestMakeRun runs `make run` as a user would, as root: the controller realises a Network in the
// demo namespace, and the host's interfaces, addresses, routes and /etc/cni/net.d stay as they
// were, during each run and after it. The namespace goes when make run is stopped with Ctrl-C or
// SIGTERM; one left behind by a killed run is replaced at the next start.
func TestMakeRun(t *testing.T) {
	netnstest.RequireRoot(t)
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make not found: %v", err)
	}
	requireNoMakeRun(t)
	ctrlCReachesChildren(t)
	tool(t, "KUBECTL", "kubectl")
	host := snapshotHost(t)
	t.Cleanup(func() { assertHostUnchanged(t, host, "after the test") })
	dataDir := t.TempDir()
	port := freePort(t)
	key := "default/backend"
	bridge := netbackend.BridgeName(key)
	conf := linux.ConfPath(filepath.Join(dataDir, "cni", "net.d"), key)
	pluginDir := requireCNIPlugins(t, "bridge", "host-local", "portmap", "loopback", linux.AttachPluginType)

	// 1. The README's quick start; stopped with Ctrl-C (SIGINT to make's process group).
	p := startMakeRun(t, port, dataDir)
	if !strings.Contains(p.log.String(), "confined to the network namespace "+demoNetNS) {
		t.Errorf("make run does not say where the controller acts:\n%s", p.log.tail())
	}
	if out := p.kubectl(t, "apply", "-f", "artifacts/examples/network.yaml"); !strings.Contains(out, "network.samplecrd.k8s.io/backend created") {
		t.Fatalf("apply:\n%s", out)
	}
	p.kubectl(t, "wait", "--for=condition=Ready", "network/backend", "--timeout=60s")
	if out := p.kubectl(t, "get", "networks"); !regexpLine(out, `backend\s+10\.10\.0\.0/24\s+10\.10\.0\.1\s+True\s+\S+\s+\S+\s+\S+`) {
		t.Errorf("kubectl get networks:\n%s", out)
	}
	// Ready with its list in the data dir, first our plugin, and no bridge until a pod attaches
	// (the default, --bridge-on-attach).
	demo := &node{t: t, ns: &netnstest.NS{Name: demoNetNS, Path: "/var/run/netns/" + demoNetNS},
		confDir: filepath.Dir(conf), cni: libcni.NewCNIConfigWithCacheDir([]string{pluginDir}, t.TempDir(), nil)}
	if list := demo.confList(key); len(list.Plugins) == 0 || list.Plugins[0].Network.Type != linux.AttachPluginType {
		t.Fatalf("the list in the data dir does not start with %s", linux.AttachPluginType)
	}
	if out, err := exec.Command("ip", "-n", demoNetNS, "link", "show", bridge).CombinedOutput(); err == nil {
		t.Errorf("Ready with the bridge already made in %s, before any pod:\n%s", demoNetNS, out)
	}
	// A pod (a namespace of this test's) attached through the list from the demo namespace, as
	// a runtime there would: its ADD makes the bridge, and the pod reaches the gateway.
	pod := demo.add(key, "demo-pod")
	waitBridgeInDemoNS(t, p, bridge, key)
	pingOnce(t, "the gateway from a pod", pod, netip.MustParseAddr("10.10.0.1"))
	demo.del(pod)
	assertHostUnchanged(t, host, "during make run")

	if err := syscall.Kill(-p.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if !p.waitExit(90 * time.Second) {
		t.Fatalf("make run still running 90s after Ctrl-C:\n%s", p.log.tail())
	}
	checkStopped(t, p, dataDir, "Ctrl-C")
	assertHostUnchanged(t, host, "after Ctrl-C")

	// 2. Again on the same data, with a bridge per Network (CONTROLLER_FLAGS reach the server):
	// the controller makes the bridge again in a new namespace, without a pod. Then the run
	// crashes: everything is killed with SIGKILL, the namespace stays behind.
	perNetwork := "CONTROLLER_FLAGS=--bridge-on-attach=false"
	p = startMakeRun(t, port, dataDir, perNetwork)
	waitBridgeInDemoNS(t, p, bridge, key)
	pid := serverPid(dataDir)
	if pid == 0 {
		t.Fatalf("no network-apiserver process for %s", dataDir)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	if !p.waitExit(30 * time.Second) {
		t.Fatal("make run still running after SIGKILL")
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return serverPid(dataDir) == 0, nil
	}); err != nil {
		t.Fatal("network-apiserver still running after SIGKILL")
	}
	if !demoNetNSExists() {
		t.Fatalf("a killed make run left no namespace behind; the next start has nothing to clean")
	}
	assertHostUnchanged(t, host, "after a killed make run")

	// 3. The next start replaces the leftover; stopped with SIGTERM to make.
	p = startMakeRun(t, port, dataDir, perNetwork)
	if !strings.Contains(p.log.String(), "deleted the network namespace "+demoNetNS+" that an earlier run left behind") {
		t.Errorf("make run does not say it replaced the leftover namespace:\n%s", p.log.tail())
	}
	waitBridgeInDemoNS(t, p, bridge, key)
	p.kubectl(t, "wait", "--for=condition=Ready", "network/backend", "--timeout=60s")
	assertHostUnchanged(t, host, "during the make run after a crash")
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.waitExit(90 * time.Second) {
		t.Fatalf("make run still running 90s after SIGTERM:\n%s", p.log.tail())
	}
	checkStopped(t, p, dataDir, "SIGTERM")
}

// checkStopped asserts that a stopped make run shut the server down gracefully and removed the
// demo namespace.
func checkStopped(t *testing.T, p *process, dataDir, how string) {
	t.Helper()
	log := p.log.String()
	if pid := serverPid(dataDir); pid != 0 {
		t.Errorf("after %s network-apiserver (pid %d) still runs", how, pid)
	}
	if demoNetNSExists() {
		t.Errorf("after %s the network namespace %s is still there", how, demoNetNS)
	}
	if !strings.Contains(log, "run: deleted the network namespace "+demoNetNS+"\n") {
		t.Errorf("after %s make run does not say it deleted the namespace:\n%s", how, p.log.tail())
	}
	if !strings.Contains(log, `"Stopping network controller"`) || strings.Contains(log, "network-apiserver exited with status") {
		t.Errorf("after %s network-apiserver did not shut down gracefully:\n%s", how, p.log.tail())
	}
}

// TestMakeRunWithoutNetAdmin runs what `make run` runs (hack/run.sh, with the variables the
// Makefile passes) as an unprivileged user: no namespace is made, the server says once that the
// controller needs CAP_NET_ADMIN and serves the API alone, and a Network's Ready condition is
// Unknown with a reason that says why, instead of a PermissionDenied per Network.
func TestMakeRunWithoutNetAdmin(t *testing.T) {
	netnstest.RequireRoot(t) // to become someone else
	bin := filepath.Dir(tool(t, "SERVER", "network-apiserver"))
	host := snapshotHost(t)
	hadDemoNS := demoNetNSExists()

	// A data dir the user nobody owns (test temp dirs are private to root).
	dataDir, err := os.MkdirTemp("", "makerun-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dataDir) })
	if err := os.Chown(dataDir, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(repoRoot, "hack", "run.sh"))
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME=/nonexistent",
		"BIN=" + bin, "DATA_DIR=" + dataDir, fmt.Sprintf("PORT=%d", freePort(t))}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}}
	p := startProcess(t, cmd, dataDir)

	p.kubectl(t, "apply", "-f", "artifacts/examples/network.yaml")
	p.kubectl(t, "wait", `--for=jsonpath={.status.conditions[?(@.type=="Ready")].reason}=ControllerNeedsNetAdmin`, "network/backend", "--timeout=60s")
	if out := p.kubectl(t, "get", "net", "-o", "wide"); !regexpLine(out, `backend\s+10\.10\.0\.0/24\s+10\.10\.0\.1\s+Unknown\s+\S+\s+\S+\s+\S+\s+ControllerNeedsNetAdmin\s+1\s+\S+\s+\S+`) {
		t.Errorf("kubectl get net -o wide:\n%s", out)
	}
	msg := p.kubectl(t, "get", "net", "backend", "-o", `jsonpath={.status.conditions[?(@.type=="Ready")].message}`)
	if !strings.Contains(msg, "needs CAP_NET_ADMIN") || !strings.Contains(msg, "is not running") {
		t.Errorf("the Ready message does not say why: %q", msg)
	}
	// The node says so in its own entry (not ready, the reason, nothing realised); the server
	// derives Ready from it.
	if out := p.kubectl(t, "get", "net", "backend", "-o", `jsonpath={range .status.nodes[*]}{.ready} {.reason} {.attachments} {.bridge};{end}`); out != "false ControllerNeedsNetAdmin  ;" {
		t.Errorf("status.nodes (ready reason attachments bridge): %q", out)
	}

	log := p.log.String()
	line := "The Network controller needs CAP_NET_ADMIN, which this process lacks (run it as root): serving the API alone."
	if n := strings.Count(log, line); n != 1 {
		t.Errorf("the log says %d times %q:\n%s", n, line, p.log.tail())
	}
	if strings.Contains(log, "PermissionDenied") || strings.Contains(log, "operation not permitted") {
		t.Errorf("the controller still tried, and failed, per Network:\n%s", p.log.tail())
	}
	if !hadDemoNS && demoNetNSExists() {
		t.Errorf("an unprivileged run made the network namespace %s", demoNetNS)
	}
	if entries, _ := os.ReadDir(filepath.Join(dataDir, "cni", "net.d")); len(entries) != 0 {
		t.Errorf("an unprivileged run wrote CNI configuration lists: %v", entries)
	}
	assertHostUnchanged(t, host, "during an unprivileged run")

	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if !p.waitExit(90 * time.Second) {
		t.Fatalf("hack/run.sh still running 90s after SIGTERM:\n%s", p.log.tail())
	}
	if p.err != nil {
		t.Errorf("hack/run.sh: %v\n%s", p.err, p.log.tail())
	}
	assertHostUnchanged(t, host, "after an unprivileged run")
}
