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

package localcluster

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFreePortsDistinct(t *testing.T) {
	ports, err := FreePorts(8)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, p := range ports {
		if p <= 0 || seen[p] {
			t.Fatalf("ports %v: want 8 distinct ones", ports)
		}
		seen[p] = true
	}
}

// A range is consecutive, free, below the kernel's ephemeral range (which the kernel hands to
// outgoing connections), and never overlaps one handed out before.
func TestFreeRange(t *testing.T) {
	_, high, err := portWindow()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		t.Skip("no ip_local_port_range:", err)
	}
	ephemeral, _ := strconv.Atoi(strings.Fields(string(b))[0])
	taken := map[int]bool{}
	for range 50 {
		base, err := FreeRange(12)
		if err != nil {
			t.Fatal(err)
		}
		for p := base; p < base+12; p++ {
			if p >= ephemeral || p >= high {
				t.Fatalf("port %d: at or above the ephemeral range's start %d", p, ephemeral)
			}
			if taken[p] {
				t.Fatalf("port %d handed out twice", p)
			}
			taken[p] = true
			l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
			if err != nil {
				t.Fatalf("port %d of range %d+12 is not free: %v", p, base, err)
			}
			l.Close()
		}
	}
}

// New takes one range for every port the scripts derive from its bases: etcd members at
// ETCD_PORT+2i and ETCD_PEER_PORT+2i, replicas at NETWORK_APISERVER_PORT+i; none of them may fall
// on another's port or outside what New reserved.
func TestNewReservesEveryDerivedPort(t *testing.T) {
	c, err := New(t.TempDir(), t.TempDir(), "ETCD_MEMBERS=3", "REPLICAS=4")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]int{}
	for _, kv := range c.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && strings.HasSuffix(k, "_PORT") {
			env[k], _ = strconv.Atoi(v)
		}
	}
	var used []int
	for i := range 3 {
		used = append(used, env["ETCD_PORT"]+2*i, env["ETCD_PEER_PORT"]+2*i)
	}
	used = append(used, env["APISERVER_PORT"])
	for i := range 4 {
		used = append(used, env["NETWORK_APISERVER_PORT"]+i)
	}
	seen := map[int]bool{}
	for _, p := range used {
		if seen[p] || p < c.EtcdPort || p >= c.EtcdPort+len(used) || !handedOut[p] {
			t.Fatalf("ports %v (env %v): want %d distinct ports in the range reserved from %d", used, env, len(used), c.EtcdPort)
		}
		seen[p] = true
	}
	if c.APIServerPort != env["APISERVER_PORT"] || c.NetworkPort != env["NETWORK_APISERVER_PORT"] {
		t.Errorf("Cluster ports %d/%d, env %v", c.APIServerPort, c.NetworkPort, env)
	}
	if _, err := New(t.TempDir(), t.TempDir(), "REPLICAS=zero"); err == nil {
		t.Error("REPLICAS=zero: no error")
	}
}

func TestProcessRestartKeepsOneLog(t *testing.T) {
	log := filepath.Join(t.TempDir(), "sleep.log")
	p := NewProcess("sleeper", log, "sleep", "600")
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if !p.Running() {
		t.Fatal("not running after Start")
	}
	if err := p.Start(); err == nil {
		t.Error("a second Start of a running process succeeded")
	}
	if err := p.Stop(syscall.SIGTERM, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if p.Running() {
		t.Fatal("running after Stop")
	}
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(syscall.SIGKILL, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "starting sleeper"); n != 2 {
		t.Errorf("the log has %d start lines, want 2:\n%s", n, b)
	}
}

func TestPKIIssuesServingCertificates(t *testing.T) {
	p, err := NewPKI(t.TempDir(), "test-ca")
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.Issue("member-0", true)
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, err := os.ReadFile(p.CAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		t.Fatalf("no certificate in %s", p.CAFile)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1", KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("usage %v: %v", usage, err)
		}
	}
}

// TestProcessOutlivesTheThreadThatStartedIt: Linux sends Pdeathsig when the forking thread
// exits, and the Go runtime ends a thread whose goroutine exits locked to it (as netnstest.New's
// goroutines do). A Process started there must keep running until it is stopped.
func TestProcessOutlivesTheThreadThatStartedIt(t *testing.T) {
	p := NewProcess("sleeper", filepath.Join(t.TempDir(), "sleep.log"), "sleep", "600")
	t.Cleanup(func() { _ = p.Stop(syscall.SIGKILL, 10*time.Second) })
	tid, started := make(chan int, 1), make(chan error, 1)
	start := func() {
		runtime.LockOSThread() // never unlocked: the thread ends with this goroutine
		tid <- syscall.Gettid()
		started <- p.Start()
	}
	go func() {
		runtime.LockOSThread()
		if syscall.Gettid() != os.Getpid() {
			start()
			return
		}
		// The runtime never ends the main thread; holding it puts start on another one.
		defer runtime.UnlockOSThread()
		done := make(chan struct{})
		go func() {
			defer close(done)
			start()
		}()
		<-done
	}()
	task := fmt.Sprintf("/proc/self/task/%d", <-tid)
	if err := <-started; err != nil {
		t.Fatal(err)
	}
	// Once the thread is gone from /proc the kernel has sent its children their Pdeathsig.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(task); os.IsNotExist(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the thread that started the process still exists (%s)", task)
		}
	}
	if err := p.Signal(syscall.SIGTERM); err != nil {
		t.Logf("SIGTERM: %v", err)
	}
	<-p.Exited()
	ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGTERM {
		t.Fatalf("the process ended with %v, not by the test's SIGTERM: the exit of the thread that started it killed it", p.cmd.ProcessState)
	}
}
