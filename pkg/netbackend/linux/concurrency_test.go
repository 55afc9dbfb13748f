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
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// TestConcurrentNetworks: operations on different Networks run at once (no backend-wide lock);
// each Network still ends exactly as it would alone, and a second round changes nothing.
func TestConcurrentNetworks(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	const n = 48
	desired := make([]netbackend.Desired, n)
	for i := range desired {
		desired[i] = netbackend.Desired{Key: fmt.Sprintf("team/n%d", i),
			Prefix:  netip.MustParsePrefix(fmt.Sprintf("10.97.%d.0/24", i)),
			Gateway: netip.MustParseAddr(fmt.Sprintf("10.97.%d.1", i))}
	}
	run := func(what string, f func(d netbackend.Desired) error) {
		t.Helper()
		var wg sync.WaitGroup
		errs := make([]error, n)
		for i, d := range desired {
			wg.Go(func() { errs[i] = f(d) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("%s %s: %v", what, desired[i].Key, err)
			}
		}
	}
	run("Ensure", func(d netbackend.Desired) error {
		changes, _, err := e.b.Ensure(ctx, d)
		if err == nil && !hasChange(changes, "created bridge") {
			err = fmt.Errorf("changes %q, want the bridge created", changes)
		}
		return err
	})
	for _, d := range desired {
		bridge := netbackend.BridgeName(d.Key)
		want := []netip.Prefix{netip.PrefixFrom(d.Gateway, 24)}
		if got := e.ns.globalAddrs(t, bridge); !slices.Equal(got, want) {
			t.Errorf("%s: addresses %v, want %v", bridge, got, want)
		}
		if _, err := os.Stat(ConfPath(e.confDir, d.Key)); err != nil {
			t.Errorf("%s: %v", d.Key, err)
		}
	}
	// Half removed while the other half is ensured again (nothing to change) and observed.
	run("Remove or Ensure", func(d netbackend.Desired) error {
		var i int
		fmt.Sscanf(d.Key, "team/n%d", &i)
		if i%2 == 0 {
			return e.b.Remove(ctx, d.Key)
		}
		changes, _, err := e.b.Ensure(ctx, d)
		if err == nil && len(changes) != 0 {
			return fmt.Errorf("second Ensure changed %q", changes)
		}
		if a, oerr := e.b.Observe(ctx, d.Key); oerr != nil || a == nil || !a.Up {
			return fmt.Errorf("Observe: %+v, %v", a, oerr)
		}
		return err
	})
	keys, err := e.b.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i, d := range desired {
		if i%2 == 1 {
			want = append(want, d.Key)
		}
	}
	slices.Sort(want)
	if !slices.Equal(keys, want) {
		t.Errorf("List after the second round: %q, want %q", keys, want)
	}
}

// TestKeyLocks: one holder per key at a time; other keys are not held up.
func TestKeyLocks(t *testing.T) {
	var k keyLocks
	unlockA := k.lock("a")
	got := make(chan string, 2)
	var wg sync.WaitGroup
	for _, key := range []string{"a", "b"} {
		wg.Go(func() {
			unlock := k.lock(key)
			got <- key
			unlock()
		})
	}
	select {
	case key := <-got:
		if key != "b" {
			t.Fatalf("%q locked while a was held", key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b not locked within 5s while only a was held")
	}
	unlockA()
	select {
	case key := <-got:
		if key != "a" {
			t.Fatalf("got %q, want a", key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a not locked within 5s after its holder unlocked")
	}
	wg.Wait()
	if len(k.locks) != 0 {
		t.Errorf("%d key locks left after every holder unlocked", len(k.locks))
	}
}
