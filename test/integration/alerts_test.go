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

package integration

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// scrapeLines returns the lines of the server's /metrics that start with one of prefixes.
func scrapeLines(t *testing.T, s *framework.Server, prefixes ...string) []string {
	t.Helper()
	cfg := rest.CopyConfig(s.Config)
	cfg.Host = s.URL
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Get(s.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("GET /metrics: %d %v", resp.StatusCode, err)
	}
	var out []string
	for _, line := range strings.Split(string(body), "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) {
				out = append(out, line)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// waitForGauges waits until the capacity gauges on /metrics are exactly want (sorted): they
// follow the watch cache, moments behind a write.
func waitForGauges(t *testing.T, s *framework.Server, step string, want []string) {
	t.Helper()
	var got []string
	err := wait.PollUntilContextTimeout(testContext(t), 50*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		got = scrapeLines(t, s, "network_apiserver_network_addresses{", "network_apiserver_namespace_network_addresses{",
			"network_apiserver_network_addresses_omitted_networks ")
		return slices.Equal(got, want), nil
	})
	if err != nil {
		t.Fatalf("%s: /metrics:\n%s\nwant:\n%s", step, strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestAddressesExhaustedAndGauges fills a /28 (blocks of /30) as agents do: each node claims a
// block and applies its entry with its leases, until a claim answers 409 AddressesExhausted and
// that node's entry says so. The Network's AddressesExhausted condition follows the entries (no
// client can set it), and /metrics carries the exact counts, bounded to one Network by
// --capacity-metrics-max-networks=1 with the other counted as omitted.
func TestAddressesExhaustedAndGauges(t *testing.T) {
	s := framework.StartForTest(t, "--capacity-metrics-max-networks=1")
	ns := testNamespace(t)
	ctx := testContext(t)
	client := jsonClient(t, s)
	networks := client.SamplecrdV1().Networks(ns)

	small, err := networks.Create(ctx, newNetwork("small", "10.77.0.0/28", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := networks.Create(ctx, newNetwork("idle", "10.78.0.0/28", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gw := small.Spec.Gateway

	// Claim one block per node until none is left.
	var allBlocks []string
	var exhaustedMsg string
	nodeBlocks := map[string][]string{}
	for i := 1; exhaustedMsg == ""; i++ {
		if i > 16 {
			t.Fatalf("a /28 still gave blocks to %d nodes", i-1)
		}
		node := fmt.Sprintf("n%d", i)
		b, err := networks.ClaimBlocks(ctx, "small", &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{})
		switch {
		case err == nil:
			for _, blk := range b.Blocks {
				nodeBlocks[node] = append(nodeBlocks[node], blk.CIDR)
				allBlocks = append(allBlocks, blk.CIDR)
			}
		case string(apierrors.ReasonForError(err)) == samplecrd.ReasonAddressesExhausted && apierrors.IsConflict(err):
			exhaustedMsg = err.Error()
		default:
			t.Fatalf("claim for %s: %v", node, err)
		}
	}
	exhaustedNode := fmt.Sprintf("n%d", len(nodeBlocks)+1)
	t.Logf("blocks %v; %s's claim: %s", nodeBlocks, exhaustedNode, exhaustedMsg)

	condition := func(step string, want metav1.ConditionStatus, reason, msgHas string) {
		t.Helper()
		n, err := networks.Get(ctx, "small", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		c := meta.FindStatusCondition(n.Status.Conditions, samplecrd.ConditionAddressesExhausted)
		if want == "" {
			if c != nil {
				t.Fatalf("%s: AddressesExhausted %+v, want none", step, c)
			}
			return
		}
		if c == nil || c.Status != want || c.Reason != reason || !strings.Contains(c.Message, msgHas) {
			t.Fatalf("%s: AddressesExhausted %+v, want %s %s containing %q", step, c, want, reason, msgHas)
		}
	}
	condition("no entries", "", "", "")

	// Every node with a block uses all of it, as its agent reports.
	used := 0
	for node, blocks := range nodeBlocks {
		leases := usableIn(t, "10.77.0.0/28", gw, blocks)
		used += leases
		entry := v1.NetworkNodeStatus{NodeName: node, Ready: true, ObservedGeneration: small.Generation, Blocks: blocks,
			IPAMMode: "Blocks", Leases: ptr.To(int32(leases))}
		if _, err := nodestatus.ApplyNodeEntry(ctx, client, small, entry, ""); err != nil {
			t.Fatalf("%s's entry: %v", node, err)
		}
	}
	condition("all nodes have blocks", metav1.ConditionFalse, "AddressesAvailable", fmt.Sprintf("none of the %d node(s)", len(nodeBlocks)))

	// A client cannot set the condition.
	patch := `{"status":{"conditions":[{"type":"AddressesExhausted","status":"True","reason":"Client","message":"m","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`
	if _, err := networks.Patch(ctx, "small", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatalf("status merge patch: %v", err)
	}
	condition("a client's True", metav1.ConditionFalse, "AddressesAvailable", "lacks an address block")

	// The node whose claim answered 409 reports it, with the claim's message, as its agent does.
	entry := v1.NetworkNodeStatus{NodeName: exhaustedNode, Ready: false, ObservedGeneration: small.Generation,
		Reason: samplecrd.ReasonAddressesExhausted, Message: exhaustedMsg, IPAMMode: "Blocks", Leases: ptr.To(int32(0))}
	if _, err := nodestatus.ApplyNodeEntry(ctx, client, small, entry, ""); err != nil {
		t.Fatal(err)
	}
	condition("a node without a block", metav1.ConditionTrue, samplecrd.ReasonAddressesExhausted, "that need one: "+exhaustedNode)

	// The gauges: total 13 (16 - network, broadcast, gateway); small has series of its own,
	// idle (emptier) is left out; the namespace sums hold both.
	allocated := usableIn(t, "10.77.0.0/28", gw, allBlocks)
	// gauges: small's series, and the namespace's sums over small and idle (whose 13 addresses
	// are all available) while idle is stored.
	gauges := func(idleStored bool) []string {
		idle, omitted := 0, 0
		if idleStored {
			idle, omitted = 13, 1
		}
		want := []string{
			fmt.Sprintf(`network_apiserver_namespace_network_addresses{namespace="%s",state="allocated"} %d`, ns, allocated),
			fmt.Sprintf(`network_apiserver_namespace_network_addresses{namespace="%s",state="available"} %d`, ns, 13-used+idle),
			fmt.Sprintf(`network_apiserver_namespace_network_addresses{namespace="%s",state="total"} %d`, ns, 13+idle),
			fmt.Sprintf(`network_apiserver_namespace_network_addresses{namespace="%s",state="used"} %d`, ns, used),
			fmt.Sprintf(`network_apiserver_network_addresses{name="small",namespace="%s",state="allocated"} %d`, ns, allocated),
			fmt.Sprintf(`network_apiserver_network_addresses{name="small",namespace="%s",state="available"} %d`, ns, 13-used),
			fmt.Sprintf(`network_apiserver_network_addresses{name="small",namespace="%s",state="total"} 13`, ns),
			fmt.Sprintf(`network_apiserver_network_addresses{name="small",namespace="%s",state="used"} %d`, ns, used),
			fmt.Sprintf(`network_apiserver_network_addresses_omitted_networks %d`, omitted),
		}
		slices.Sort(want)
		return want
	}
	waitForGauges(t, s, "the agents' entries", gauges(true))
	t.Logf("small: allocated %d, used %d of 13", allocated, used)

	// The node goes (its entry withdrawn): nothing lacks a block any more.
	current, err := networks.Get(ctx, "small", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nodestatus.WithdrawNodeEntry(ctx, client, current, exhaustedNode, ""); err != nil {
		t.Fatal(err)
	}
	condition("the node withdrawn", metav1.ConditionFalse, "AddressesAvailable", "lacks an address block")

	// idle deleted: it leaves the namespace sums, and nothing is omitted any more.
	if err := networks.Delete(ctx, "idle", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitForGauges(t, s, "idle deleted", gauges(false))
}

// TestCapacityScrapeCost measures what a scrape of /metrics costs a real server holding
// CAPACITY_SCRAPE_NETWORKS Networks (skipped without it), with per-Network series for
// CAPACITY_SCRAPE_MAX of them (default half; CAPACITY_SCRAPE_MODE=namespace: none): the time and
// CPU of a whole /metrics answer and its bytes, logged for docs/operations.md. It checks the
// series it counts, not the time.
func TestCapacityScrapeCost(t *testing.T) {
	count, _ := strconv.Atoi(os.Getenv("CAPACITY_SCRAPE_NETWORKS"))
	if count <= 0 {
		t.Skip("set CAPACITY_SCRAPE_NETWORKS to measure")
	}
	maxNetworks := count / 2
	if v := os.Getenv("CAPACITY_SCRAPE_MAX"); v != "" {
		var err error
		if maxNetworks, err = strconv.Atoi(v); err != nil {
			t.Fatalf("CAPACITY_SCRAPE_MAX: %v", err)
		}
	}
	perNetwork := min(maxNetworks, count)
	mode := os.Getenv("CAPACITY_SCRAPE_MODE")
	if mode == "namespace" {
		perNetwork = 0
	}
	s := framework.StartForTest(t, "--capacity-metrics-max-networks="+strconv.Itoa(maxNetworks), "--capacity-metrics="+cmp.Or(mode, "network"))
	// Filling takes minutes at hundreds of thousands: longer than testContext allows.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	client := jsonClient(t, s)
	namespaces := []string{testNamespace(t), testNamespace(t), testNamespace(t), testNamespace(t)}
	var wg sync.WaitGroup
	var failed atomic.Int32
	next := atomic.Int64{}
	for range 8 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= count {
					return
				}
				n := newNetwork(fmt.Sprintf("net-%06d", i), fmt.Sprintf("10.%d.%d.%d/28", 100+i/4096, i/16%256, i%16*16), "")
				if _, err := client.SamplecrdV1().Networks(namespaces[i%4]).Create(ctx, n, metav1.CreateOptions{}); err != nil {
					t.Error(err)
					failed.Add(1)
					return
				}
			}
		})
	}
	wg.Wait()
	if failed.Load() > 0 {
		t.FailNow()
	}
	cfg := rest.CopyConfig(s.Config)
	cfg.Host = s.URL
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// The gauges follow the watch cache: wait until they count every Network.
	omitted := fmt.Sprintf("network_apiserver_network_addresses_omitted_networks %d", count-perNetwork)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return slices.Equal(scrapeLines(t, s, "network_apiserver_network_addresses_omitted_networks "), []string{omitted}), nil
	}); err != nil {
		t.Fatalf("/metrics never said %q", omitted)
	}
	cpu := func() time.Duration {
		var u syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
			t.Fatal(err)
		}
		return time.Duration(u.Utime.Nano() + u.Stime.Nano())
	}
	for round := range 3 {
		start, startCPU := time.Now(), cpu()
		resp, err := hc.Get(s.URL + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		took, tookCPU := time.Since(start), cpu()-startCPU
		if err != nil {
			t.Fatal(err)
		}
		series, bytes := 0, 0
		for _, line := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(line, "network_apiserver_network_addresses{") {
				series++
				bytes += len(line) + 1
			}
		}
		// A new Network's capacity has all four states (used 0).
		if series != 4*perNetwork {
			t.Fatalf("%d per-Network series, want %d", series, 4*perNetwork)
		}
		t.Logf("scrape %d: %d Networks, %d per-Network series (%d bytes of them), whole /metrics %d bytes in %s, %s of CPU (server and client)",
			round, count, series, bytes, len(body), took.Round(time.Millisecond), tookCPU.Round(time.Millisecond))
	}
}
