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
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// beforeLengthRecords is the last release whose creates neither read nor write the length
// records (UPGRADE_LENGTHS_OLD_COMMIT overrides it).
const beforeLengthRecords = "8f45bc4"

// TestUpgradeToLengthRecords is the rolling upgrade of docs/allocation.md ("The length
// record") with two builds on one etcd, under racing creates of prefixes of many lengths
// (each new to the record when its first create races the others), creates through every
// replica at once:
//  1. the release before the records beside this build with --allocation-guards=all: no two
//     stored Networks overlap; this build's verifier records the lengths the old replica
//     stored, without reporting a violation; the old replica's verifier removes or rewrites
//     nothing of this build's (its allocations are the same; the length keys are outside its
//     keyspace) and reports nothing;
//  2. the old replica gone, a replica with --allocation-guards=recorded beside the one with
//     all: no overlap, every stored length recorded at once, and no violation in either log.
func TestUpgradeToLengthRecords(t *testing.T) {
	commit := os.Getenv("UPGRADE_LENGTHS_OLD_COMMIT")
	if commit == "" {
		commit = beforeLengthRecords
	}
	old := binaryAt(t, commit, "before-lengths")
	args, etcdClient := sharedEtcd(t)

	olds := startStandaloneFrom(t, standaloneFiles{binary: old}, args...)
	all := startStandaloneFrom(t, standaloneFiles{}, append(args, "--allocation-guards=all")...)
	// A length only the old replica has stored: the new one, guarding every length, refuses a
	// prefix inside it at once (a replica trusting the record would not see it until a
	// verification recorded it), and its verifier records it.
	if _, err := fastClient(t, olds).SamplecrdV1().Networks("default").Create(context.Background(), &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "old-13"}, Spec: v1.NetworkSpec{CIDR: "10.200.0.0/13"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := fastClient(t, all).SamplecrdV1().Networks("default").Create(context.Background(), &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: "inside-13"}, Spec: v1.NetworkSpec{CIDR: "10.201.0.0/24"}}, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("create inside the old replica's /13 through the new one: %v, want 422 (overlaps)", err)
	}
	won := raceLengths(t, 1, fastClient(t, olds), fastClient(t, all))
	lengths := waitLengthsRecorded(t, etcdClient, all.clientset(t))
	if !slices.Contains(lengths, "13") {
		t.Fatalf("lengths recorded %v, want the old replica's 13 among them", lengths)
	}
	// Both verifiers pass again over everything, find nothing, and neither touches the length
	// keys or the allocations.
	allocs := allocationKeys(t, etcdClient)
	waitVerified(t, map[string]versioned.Interface{"old": olds.clientset(t), "all": all.clientset(t)})
	if again := lengthKeys(t, etcdClient); !slices.Equal(again, lengths) {
		t.Fatalf("length keys after both verifiers ran: %v, before %v", again, lengths)
	}
	if again := allocationKeys(t, etcdClient); again != allocs {
		t.Fatalf("the verifiers changed the allocations:\n%s\nbefore:\n%s", again, allocs)
	}
	t.Logf("round 1: %d creates won; lengths recorded %v", won, lengths)

	olds.stop()
	recorded := startStandaloneFrom(t, standaloneFiles{}, append(args, "--allocation-guards=recorded")...)
	won = raceLengths(t, 2, fastClient(t, all), fastClient(t, recorded))
	// Every create recorded its length in its own transaction: nothing waits for a verifier.
	lengths = checkLengthsRecorded(t, etcdClient, recorded.clientset(t))
	waitVerified(t, map[string]versioned.Interface{"all": all.clientset(t), "recorded": recorded.clientset(t)})
	t.Logf("round 2: %d creates won; lengths recorded %v", won, lengths)
}

// sharedEtcd starts a one-member etcd for the replicas of a two-build test, stopped when the test
// ends. It returns the replicas' arguments (that etcd, controllers off, a verification every 2 s)
// and a client of it, closed when the test ends.
func sharedEtcd(t *testing.T) ([]string, *clientv3.Client) {
	t.Helper()
	etcd, err := localcluster.StartEtcd(context.Background(), t.TempDir(), filepath.Join(repoRoot, "_output", "bin"), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Stop)
	args := []string{"--controllers=false", "--etcd-servers", strings.Join(etcd.Endpoints, ","),
		"--etcd-cafile", etcd.PKI.CAFile, "--etcd-certfile", etcd.Client.Cert, "--etcd-keyfile", etcd.Client.Key,
		"--allocation-verify-interval", "2s"}
	client, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints, TLS: etcd.TLS, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return args, client
}

// fastClient is a clientset for s without client-side rate limits: the races are not spaced out.
func fastClient(t *testing.T, s *standalone) versioned.Interface {
	t.Helper()
	cfg := s.restConfig(t)
	cfg.QPS, cfg.Burst = -1, 0
	client, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// raceLengths creates 240 Networks of lengths 12 to 28 inside 10.<16·round>.0.0/12 from 24
// workers, each through the clients in turn, and checks that no two stored Networks overlap. It
// returns how many creates won.
func raceLengths(t *testing.T, round int, clients ...versioned.Interface) int {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(round), 11))
	type want struct {
		name string
		p    netip.Prefix
	}
	var wants []want
	for i := range 240 {
		bits := 12 + rng.IntN(17)
		addr := netip.AddrFrom4([4]byte{10, byte(16*round + rng.IntN(16)), byte(rng.IntN(256)), byte(rng.IntN(256))})
		wants = append(wants, want{fmt.Sprintf("r%d-%d", round, i), netip.PrefixFrom(addr, bits).Masked()})
	}
	var mu sync.Mutex
	won := 0
	var wg sync.WaitGroup
	work := make(chan want)
	for w := range 24 {
		client := clients[w%len(clients)]
		wg.Go(func() {
			for x := range work {
				_, err := client.SamplecrdV1().Networks("default").Create(context.Background(), &v1.Network{
					ObjectMeta: metav1.ObjectMeta{Name: x.name}, Spec: v1.NetworkSpec{CIDR: x.p.String()}}, metav1.CreateOptions{})
				switch {
				case err == nil:
					mu.Lock()
					won++
					mu.Unlock()
				case apierrors.IsInvalid(err) && strings.Contains(err.Error(), "overlaps"):
				default:
					t.Errorf("create %s %s: %v", x.name, x.p, err)
				}
			}
		})
	}
	for _, x := range wants {
		work <- x
	}
	close(work)
	wg.Wait()
	list, err := clients[0].SamplecrdV1().Networks("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var stored []netip.Prefix
	for _, n := range list.Items {
		stored = append(stored, netip.MustParsePrefix(n.Spec.CIDR))
	}
	for i := range stored {
		for j := i + 1; j < len(stored); j++ {
			if stored[i].Overlaps(stored[j]) {
				t.Fatalf("round %d: %s and %s are both stored", round, stored[i], stored[j])
			}
		}
	}
	if won < 16 {
		t.Fatalf("round %d: only %d creates won", round, won)
	}
	return won
}

// allocationKeys lists the allocation keys with their ModRevisions.
func allocationKeys(t *testing.T, c *clientv3.Client) string {
	t.Helper()
	resp, err := c.Get(context.Background(), "/registry/samplecrd.k8s.io/allocations/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, fmt.Sprintf("%s@%d", kv.Key, kv.ModRevision))
	}
	return strings.Join(out, "\n")
}

// lengthKeys lists the IPv4 lengths recorded in the cluster scope.
func lengthKeys(t *testing.T, c *clientv3.Client) []string {
	t.Helper()
	const prefix = "/registry/samplecrd.k8s.io/allocation-lengths/_cluster/4/"
	resp, err := c.Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), prefix))
	}
	slices.Sort(out)
	return out
}

// storedLengths lists the lengths of the stored Networks.
func storedLengths(t *testing.T, client versioned.Interface) []string {
	t.Helper()
	list, err := client.SamplecrdV1().Networks("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range list.Items {
		if b := fmt.Sprint(netip.MustParsePrefix(n.Spec.CIDR).Bits()); !slices.Contains(out, b) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

// missingLengths lists the stored lengths not recorded.
func missingLengths(t *testing.T, c *clientv3.Client, client versioned.Interface) (missing, recorded []string) {
	recorded = lengthKeys(t, c)
	for _, b := range storedLengths(t, client) {
		if !slices.Contains(recorded, b) {
			missing = append(missing, b)
		}
	}
	return missing, recorded
}

// waitLengthsRecorded waits until every stored length is recorded (the verifier of a replica
// that keeps the records adds those an older one stored) and returns the lengths recorded.
func waitLengthsRecorded(t *testing.T, c *clientv3.Client, client versioned.Interface) []string {
	t.Helper()
	var missing, recorded []string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		missing, recorded = missingLengths(t, c, client)
		return len(missing) == 0, nil
	})
	if err != nil {
		t.Fatalf("stored lengths %v never recorded; recorded %v", missing, recorded)
	}
	return recorded
}

// checkLengthsRecorded checks that every stored length is recorded now.
func checkLengthsRecorded(t *testing.T, c *clientv3.Client, client versioned.Interface) []string {
	t.Helper()
	missing, recorded := missingLengths(t, c, client)
	if len(missing) > 0 {
		t.Fatalf("stored lengths %v not recorded (recorded %v)", missing, recorded)
	}
	return recorded
}

// verifications sums the server's completed verifications (network_allocation_verifications_total,
// any result) and its violations found by the last one (network_allocation_violations, by kind).
func verifications(t *testing.T, client versioned.Interface) (done float64, violations map[string]float64) {
	t.Helper()
	raw, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the server's /metrics: %v", err)
	}
	violations = map[string]float64{}
	for line := range strings.Lines(string(raw)) {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		v, err := strconv.ParseFloat(f[1], 64)
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(f[0], "network_allocation_verifications_total{"):
			done += v
		case strings.HasPrefix(f[0], "network_allocation_violations{") && v != 0:
			violations[label(f[0], "kind")] = v
		}
	}
	return done, violations
}

// waitVerified waits until each server has completed two more verifications than now (so one
// began after this call), and fails if the last one of any found a violation.
func waitVerified(t *testing.T, clients map[string]versioned.Interface) {
	t.Helper()
	before := map[string]float64{}
	for name, c := range clients {
		before[name], _ = verifications(t, c)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for name, c := range clients {
			if done, _ := verifications(t, c); done < before[name]+2 {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatal("the verifiers did not run twice within a minute")
	}
	for name, c := range clients {
		if _, violations := verifications(t, c); len(violations) > 0 {
			t.Errorf("the %s replica's verifier found violations: %v", name, violations)
		}
	}
}
