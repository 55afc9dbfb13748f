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

package leasereclaim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/cri"
	"github.com/samplecrd/network-apiserver/pkg/cri/critest"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
)

// withoutLiveness makes TestReclaimRace run the reclaimer without its liveness check (build tag
// reclaim_without_liveness): the test must then fail, which shows that it can.
var withoutLiveness = false

// hostLocal returns the real host-local plugin: _output/bin/cni/host-local, else one built from
// the module pinned in hack/tools/cmd/cni.
func hostLocal(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if p := filepath.Join(root, "_output", "bin", "cni", "host-local"); fileExists(p) {
		return p
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(t.TempDir(), "host-local")
	cmd := exec.Command(goBin, "build", "-C", filepath.Join(root, "hack", "tools", "cmd", "cni"), "-o", out,
		"github.com/containernetworking/plugins/plugins/ipam/host-local")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building host-local: %v\n%s", err, b)
	}
	return out
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// ipam runs host-local once as a runtime's CNI call would reach it (command ADD or DEL for
// container id, interface eth1) and returns ADD's address.
func ipam(plugin, conf, command, id string) (netip.Addr, error) {
	cmd := exec.Command(plugin)
	cmd.Env = []string{"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + id, "CNI_IFNAME=eth1",
		"CNI_NETNS=/var/run/netns/" + id, "CNI_PATH=" + filepath.Dir(plugin), "PATH=/usr/bin:/bin"}
	cmd.Stdin = strings.NewReader(conf)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return netip.Addr{}, fmt.Errorf("host-local %s %s: %v: %s%s", command, id, err, stdout.String(), stderr.String())
	}
	if command != "ADD" {
		return netip.Addr{}, nil
	}
	var result struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &result); err != nil || len(result.IPs) != 1 {
		return netip.Addr{}, fmt.Errorf("host-local ADD %s: result %q: %v", id, stdout.String(), err)
	}
	p, err := netip.ParsePrefix(result.IPs[0].Address)
	return p.Addr(), err
}

// raceState is what the pods of TestReclaimRace hold, and every violation seen.
type raceState struct {
	mu         sync.Mutex
	live       map[netip.Addr]string // address → container of a pod between ADD's return and its DEL
	leaked     map[string]netip.Addr // container → address of pods that vanished without DEL
	reclaimed  map[string]netip.Addr // container → address released by the reclaimer
	leakedAt   map[string]time.Time
	violations []string
	kinds      map[string]int // violations by kind
	maxLeakAge time.Duration
}

func (s *raceState) violate(kind, format string, args ...any) {
	s.violations = append(s.violations, fmt.Sprintf(format, args...))
	if s.kinds == nil {
		s.kinds = map[string]int{}
	}
	s.kinds[kind]++
}

// checkLive, with s.mu held, checks that every live pod's lease record is there and its own.
func (s *raceState) checkLive(dir string) {
	for addr, id := range s.live {
		content, err := os.ReadFile(filepath.Join(dir, addr.String()))
		holder, _, _ := strings.Cut(string(content), "\r\n")
		if err != nil || holder != id {
			s.violate("live lease removed", "live pod %s's lease of %s is gone or not its own (record %q, %v)", id, addr, content, err)
		}
	}
}

// TestReclaimRace races the reclaimer, with a tiny grace, against pods that the real host-local
// gives addresses from a range of 5, so that every address is given again and again: pods are
// listed by the (fake) runtime only after their ADD has returned and stay listed (NOTREADY)
// until their DEL has returned, as containerd does; one in five vanishes without a DEL (its
// sandbox simply gone, as after a node crash). It fails when a live pod's lease record is
// removed, when an address is given to two live pods, or when a vanished pod's lease is not
// reclaimed; only vanished pods' leases may be reclaimed.
func TestReclaimRace(t *testing.T) {
	plugin := hostLocal(t)
	rt := critest.Start(t)
	client, err := cri.New(rt.Socket, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	data := t.TempDir()
	dir := filepath.Join(data, "race")
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"race","type":"bridge","ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.99.0.0/29"}]]}}`, data)
	const (
		raceGrace = 300 * time.Millisecond
		workers   = 6
		duration  = 6 * time.Second
	)
	r, err := New(client, dirStore{data}, raceGrace)
	if err != nil {
		t.Fatal(err)
	}
	r.skipLiveness = withoutLiveness
	s := &raceState{live: map[netip.Addr]string{}, leaked: map[string]netip.Addr{}, reclaimed: map[string]netip.Addr{},
		leakedAt: map[string]time.Time{}}

	ctx, stopReclaim := context.WithCancel(context.Background())
	var reclaiming sync.WaitGroup
	passes := 0
	reclaiming.Go(func() {
		for ctx.Err() == nil {
			released, err := r.Pass(ctx)
			passes++
			if err != nil && ctx.Err() == nil {
				t.Errorf("reclaim pass: %v", err)
			}
			s.mu.Lock()
			for _, rel := range released {
				id, addr := rel.Lease.ContainerID, rel.Lease.Address
				if s.live[addr] == id {
					s.violate("live address reclaimed", "reclaimed live pod %s's address %s", id, addr)
				}
				if prev, ok := s.reclaimed[id]; ok {
					s.violate("reclaimed twice", "reclaimed %s's lease twice (%s, %s)", id, prev, addr)
				}
				s.reclaimed[id] = addr
				if at, ok := s.leakedAt[id]; ok && time.Since(at) > s.maxLeakAge {
					s.maxLeakAge = time.Since(at)
				}
			}
			s.checkLive(dir)
			s.mu.Unlock()
			time.Sleep(2 * time.Millisecond) // pacing: a pass every few ms, not synchronisation
		}
	})

	var pods, exhausted int
	var countMu sync.Mutex
	var maxAdd time.Duration
	deadline := time.Now().Add(duration)
	var running sync.WaitGroup
	for w := range workers {
		running.Go(func() {
			for n := 0; time.Now().Before(deadline); n++ {
				id := fmt.Sprintf("%016x%04x%04x", rand.Uint64(), w, n)
				start := time.Now()
				addr, err := ipam(plugin, conf, "ADD", id)
				took := time.Since(start)
				if err != nil {
					if !strings.Contains(err.Error(), "no IP addresses available") {
						t.Errorf("%v", err)
						return
					}
					countMu.Lock()
					exhausted++
					countMu.Unlock()
					time.Sleep(10 * time.Millisecond) // pacing: the runtime retries the pod later
					continue
				}
				s.mu.Lock()
				if other, ok := s.live[addr]; ok {
					s.violate("address given twice", "address %s given to %s while live pod %s holds it", addr, id, other)
				}
				s.live[addr] = id
				s.mu.Unlock()
				rt.Add(id) // listed only once its ADD has returned
				countMu.Lock()
				pods++
				maxAdd = max(maxAdd, took)
				countMu.Unlock()

				time.Sleep(time.Duration(rand.Int64N(int64(3 * raceGrace)))) // the pod's lifetime

				vanish := rand.IntN(5) == 0
				s.mu.Lock()
				s.checkLive(dir)
				delete(s.live, addr)
				if vanish {
					s.leaked[id] = addr
					s.leakedAt[id] = time.Now()
				}
				s.mu.Unlock()
				if vanish {
					rt.Remove(id) // gone without a DEL
					continue
				}
				rt.SetNotReady(id) // stopped: still listed while its network is torn down
				if _, err := ipam(plugin, conf, "DEL", id); err != nil {
					t.Errorf("%v", err)
				}
				rt.Remove(id)
			}
		})
	}
	running.Wait()

	// Every vanished pod's lease is reclaimed: wait for it (the reclaimer keeps running).
	wait := time.Now().Add(10*raceGrace + 10*time.Second)
	for {
		s.mu.Lock()
		missing := 0
		for id := range s.leaked {
			if _, ok := s.reclaimed[id]; !ok {
				missing++
			}
		}
		s.mu.Unlock()
		if missing == 0 || time.Now().After(wait) {
			break
		}
		time.Sleep(20 * time.Millisecond) // polling for the condition
	}
	stopReclaim()
	reclaiming.Wait()

	s.mu.Lock()
	defer s.mu.Unlock()
	for id, addr := range s.leaked {
		if got, ok := s.reclaimed[id]; !ok || got != addr {
			s.violate("leak not reclaimed", "vanished pod %s's lease of %s was not reclaimed", id, addr)
		}
	}
	for id, addr := range s.reclaimed {
		if _, ok := s.leaked[id]; !ok {
			s.violate("reclaimed a pod that did not vanish", "reclaimed %s of pod %s, which did not vanish", addr, id)
		}
	}
	left, err := linux.ReadLeases(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("leases left after every pod went: %v", left)
	}
	t.Logf("%d pods (%d ADDs answered no address) on 5 addresses, %d vanished and reclaimed, %d reclaim passes; longest ADD %v, longest from vanishing to reclaim %v (grace %v)",
		pods, exhausted, len(s.reclaimed), passes, maxAdd.Round(time.Millisecond), s.maxLeakAge.Round(time.Millisecond), raceGrace)
	const show = 10
	for i, v := range s.violations {
		if i == show {
			t.Errorf("... and %d more violations", len(s.violations)-show)
			break
		}
		t.Error(v)
	}
	if len(s.violations) > 0 {
		t.Errorf("%d violations: %v", len(s.violations), s.kinds)
	}
}
