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
	"context"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/cri"
	"github.com/samplecrd/network-apiserver/pkg/cri/critest"
	"github.com/samplecrd/network-apiserver/pkg/netbackend"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
)

// dirStore is host-local's data directory: one directory per network, named by its key here.
type dirStore struct{ dataDir string }

func (s dirStore) Keys(context.Context) ([]string, error) {
	entries, err := os.ReadDir(s.dataDir)
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range entries {
		if e.IsDir() {
			keys = append(keys, e.Name())
		}
	}
	return keys, nil
}

func (s dirStore) LeaseRecords(_ context.Context, key string) ([]netbackend.Lease, error) {
	return linux.ReadLeases(filepath.Join(s.dataDir, key))
}

func (s dirStore) ReleaseLease(ctx context.Context, key string, l netbackend.Lease) (bool, error) {
	return linux.ReleaseLease(ctx, filepath.Join(s.dataDir, key), l)
}

// writeLease writes a lease record as host-local v1.9.1 does, written at t.
func writeLease(t *testing.T, dir, addr, id string, at time.Time) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, addr)
	if err := os.WriteFile(path, []byte(id+"\r\neth1"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(path, at, at); err != nil {
		t.Fatal(err)
	}
}

func leaseFiles(t *testing.T, dir string) []string {
	t.Helper()
	leases, err := linux.ReadLeases(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range leases {
		out = append(out, l.Address.String()+"="+l.ContainerID)
	}
	return out
}

type fixture struct {
	runtime *critest.Runtime
	dir     string
	clock   *clocktesting.FakePassiveClock
	r       *Reclaimer
}

const grace = time.Minute

func newFixture(t *testing.T) *fixture {
	t.Helper()
	rt := critest.Start(t)
	client, err := cri.New(rt.Socket, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	data := t.TempDir()
	r, err := New(client, dirStore{data}, grace)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{runtime: rt, dir: filepath.Join(data, "net1"), clock: clocktesting.NewFakePassiveClock(time.Now()), r: r}
	r.clock = f.clock
	return f
}

func (f *fixture) pass(t *testing.T) []string {
	t.Helper()
	released, err := f.r.Pass(context.Background())
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	var out []string
	for _, r := range released {
		out = append(out, r.Lease.Address.String()+"="+r.Lease.ContainerID)
	}
	return out
}

// TestReleasesOnlyOrphansAfterGrace: a lease whose sandbox does not exist is released once it
// has been seen orphaned for the grace and its record is older than the grace; leases of ready
// and of stopped (NOTREADY) sandboxes stay, and so does a fresh orphan (a pod whose ADD has not
// returned yet).
func TestReleasesOnlyOrphansAfterGrace(t *testing.T) {
	f := newFixture(t)
	old := f.clock.Now().Add(-time.Hour)
	f.runtime.Add("ready")
	f.runtime.Add("stopped")
	f.runtime.SetNotReady("stopped")
	writeLease(t, f.dir, "10.0.0.2", "ready", old)
	writeLease(t, f.dir, "10.0.0.3", "stopped", old)
	writeLease(t, f.dir, "10.0.0.4", "leaked", old)
	writeLease(t, f.dir, "10.0.0.5", "creating", f.clock.Now().Add(time.Second))

	if got := f.pass(t); len(got) != 0 {
		t.Fatalf("first sighting released %v; want nothing before the grace", got)
	}
	if s := f.r.State(); s != samplecrd.LeaseReclaimContainerRuntime {
		t.Errorf("state %q, want %q", s, samplecrd.LeaseReclaimContainerRuntime)
	}
	f.clock.SetTime(f.clock.Now().Add(grace - time.Second))
	if got := f.pass(t); len(got) != 0 {
		t.Fatalf("released %v before the grace", got)
	}
	f.clock.SetTime(f.clock.Now().Add(time.Second))
	if got := f.pass(t); !slices.Equal(got, []string{"10.0.0.4=leaked"}) {
		t.Fatalf("released %v, want only 10.0.0.4=leaked", got)
	}
	// "creating" was seen orphaned for the grace, but its record is younger than the grace.
	if got := leaseFiles(t, f.dir); !slices.Equal(got, []string{"10.0.0.2=ready", "10.0.0.3=stopped", "10.0.0.5=creating"}) {
		t.Fatalf("leases left %v", got)
	}
	f.runtime.Add("creating") // its ADD returned: listed now
	f.clock.SetTime(f.clock.Now().Add(grace))
	if got := f.pass(t); len(got) != 0 {
		t.Fatalf("released %v; every remaining lease has a sandbox", got)
	}
	// The stopped sandbox is removed without a DEL: its lease is now a leak, with a new clock.
	f.runtime.Remove("stopped")
	if got := f.pass(t); len(got) != 0 {
		t.Fatalf("released %v at the first sighting", got)
	}
	f.clock.SetTime(f.clock.Now().Add(grace))
	if got := f.pass(t); !slices.Equal(got, []string{"10.0.0.3=stopped"}) {
		t.Fatalf("released %v, want 10.0.0.3=stopped", got)
	}
}

// TestSightingsMustBeUnbroken: a lease that was listed in between (its sandbox came back, or
// the runtime could not be asked) starts its grace again.
func TestSightingsMustBeUnbroken(t *testing.T) {
	f := newFixture(t)
	writeLease(t, f.dir, "10.0.0.2", "x", f.clock.Now().Add(-time.Hour))
	f.pass(t)
	f.clock.SetTime(f.clock.Now().Add(grace / 2))
	f.runtime.Fail(codes.Unavailable)
	if _, err := f.r.Pass(context.Background()); err == nil {
		t.Fatal("a pass whose ListPodSandbox failed reported no error")
	}
	if s := f.r.State(); s != StateUnreachable {
		t.Errorf("state %q, want %q", s, StateUnreachable)
	}
	f.runtime.Fail(codes.OK)
	f.clock.SetTime(f.clock.Now().Add(grace / 2))
	if got := f.pass(t); len(got) != 0 {
		t.Fatalf("released %v although the runtime could not be asked within the grace", got)
	}
	f.clock.SetTime(f.clock.Now().Add(grace))
	if got := f.pass(t); !slices.Equal(got, []string{"10.0.0.2=x"}) {
		t.Fatalf("released %v after an unbroken grace, want 10.0.0.2=x", got)
	}
}

// TestNoRuntimeReleasesNothing: without an endpoint, with the socket gone, or while the runtime
// fails, nothing is released however old the leases are, and the state says why.
func TestNoRuntimeReleasesNothing(t *testing.T) {
	data := t.TempDir()
	dir := filepath.Join(data, "net1")
	clk := clocktesting.NewFakePassiveClock(time.Now())
	writeLease(t, dir, "10.0.0.2", "gone", clk.Now().Add(-time.Hour))

	off, err := New(nil, dirStore{data}, grace)
	if err != nil {
		t.Fatal(err)
	}
	off.clock = clk
	for range 3 {
		if released, err := off.Pass(context.Background()); err != nil || len(released) != 0 {
			t.Fatalf("no endpoint: released %v, err %v", released, err)
		}
		clk.SetTime(clk.Now().Add(grace))
	}
	if s := off.State(); s != StateNoEndpoint {
		t.Errorf("state %q, want %q", s, StateNoEndpoint)
	}

	missing, err := cri.New(filepath.Join(t.TempDir(), "none.sock"), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer missing.Close()
	r, err := New(missing, dirStore{data}, grace)
	if err != nil {
		t.Fatal(err)
	}
	r.clock = clk
	for range 3 {
		released, err := r.Pass(context.Background())
		if !errors.Is(err, cri.ErrNoSocket) || len(released) != 0 {
			t.Fatalf("socket missing: released %v, err %v", released, err)
		}
		clk.SetTime(clk.Now().Add(grace))
	}
	if s := r.State(); s != StateNoSocket {
		t.Errorf("state %q, want %q", s, StateNoSocket)
	}
	if got := leaseFiles(t, dir); !slices.Equal(got, []string{"10.0.0.2=gone"}) {
		t.Fatalf("leases left %v", got)
	}
	if _, err := New(nil, dirStore{data}, 0); err == nil {
		t.Error("a zero grace was accepted")
	}
}

// TestReleaseRechecksUnderLock: the record is read again under host-local's lock; a lease given
// to another container meanwhile, or released, is left alone, and the release waits for the
// lock.
func TestReleaseRechecksUnderLock(t *testing.T) {
	dir := t.TempDir()
	at := time.Now().Add(-time.Hour)
	writeLease(t, dir, "10.0.0.2", "old", at)
	judged, err := linux.ReadLeases(dir)
	if err != nil || len(judged) != 1 {
		t.Fatalf("read %v, %v", judged, err)
	}
	ctx := context.Background()
	// Released by its DEL and given to another pod since.
	writeLease(t, dir, "10.0.0.2", "new", time.Now())
	if ok, err := linux.ReleaseLease(ctx, dir, judged[0]); ok || err != nil {
		t.Fatalf("released a lease given to another container: %v, %v", ok, err)
	}
	// The same container, a record written again (another ADD): also left alone.
	writeLease(t, dir, "10.0.0.2", "old", at.Add(time.Second))
	if ok, err := linux.ReleaseLease(ctx, dir, judged[0]); ok || err != nil {
		t.Fatalf("released a record written again: %v, %v", ok, err)
	}
	writeLease(t, dir, "10.0.0.2", "old", at)

	// host-local holds its lock: the release waits for it.
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := flock(lock); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if ok, err := linux.ReleaseLease(short, dir, judged[0]); ok || err == nil || !strings.Contains(err.Error(), "host-local's lock") {
		t.Fatalf("released while host-local held its lock: %v, %v", ok, err)
	}
	if got := leaseFiles(t, dir); !slices.Equal(got, []string{"10.0.0.2=old"}) {
		t.Fatalf("leases %v while the lock was held", got)
	}
	done := make(chan error, 1)
	go func() {
		ok, err := linux.ReleaseLease(ctx, dir, judged[0])
		if err == nil && !ok {
			err = errors.New("not released")
		}
		done <- err
	}()
	if err := unflock(lock); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("release after the lock was dropped: %v", err)
	}
	if got := leaseFiles(t, dir); len(got) != 0 {
		t.Fatalf("leases %v after the release", got)
	}
	// A record naming no container is never released.
	if _, err := linux.ReleaseLease(ctx, dir, netbackend.Lease{Address: netip.MustParseAddr("10.0.0.3")}); err == nil {
		t.Error("a lease naming no container was accepted")
	}
}
