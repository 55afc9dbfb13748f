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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// ovlAllocationsPrefix is where the server keeps the allocations in etcd.
const ovlAllocationsPrefix = "/registry/samplecrd.k8s.io/allocations/"

// ovlClient returns a client without client-side rate limiting (the stress tests send hundreds
// of requests at once) and with a bound on every request. It talks to s.URL: after a restart on
// the same data directory, s.Config may hold the previous run's address, read from the old
// admin kubeconfig before the new server rewrote it (the token and CA stay the same).
func ovlClient(t testing.TB, s *framework.Server) *versioned.Clientset {
	t.Helper()
	cfg := rest.CopyConfig(s.Config)
	cfg.Host = s.URL
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = time.Minute
	c, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ovlNetwork(name, cidr string) *v1.Network {
	return &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NetworkSpec{CIDR: cidr}}
}

func ovlCreate(c *versioned.Clientset, namespace string, n *v1.Network, dryRun bool) (*v1.Network, error) {
	opts := metav1.CreateOptions{}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	return c.SamplecrdV1().Networks(namespace).Create(context.Background(), n, opts)
}

// ovlCheckInvalid returns nil when err is a 422 Invalid whose causes include field and whose
// message contains want.
func ovlCheckInvalid(err error, field, want string) error {
	if err == nil {
		return errors.New("succeeded, want a 422 Invalid")
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return fmt.Errorf("error %v is not an API status", err)
	}
	st := status.Status()
	if st.Code != http.StatusUnprocessableEntity || st.Reason != metav1.StatusReasonInvalid {
		return fmt.Errorf("status %d %s (%s), want 422 Invalid", st.Code, st.Reason, st.Message)
	}
	if !strings.Contains(st.Message, want) {
		return fmt.Errorf("message %q does not contain %q", st.Message, want)
	}
	if st.Details == nil {
		return fmt.Errorf("status %q has no details", st.Message)
	}
	for _, cause := range st.Details.Causes {
		if cause.Field == field {
			return nil
		}
	}
	return fmt.Errorf("causes %+v name no field %s", st.Details.Causes, field)
}

func ovlExpectInvalid(t *testing.T, err error, field, want string) {
	t.Helper()
	if err := ovlCheckInvalid(err, field, want); err != nil {
		t.Fatal(err)
	}
}

func ovlEtcd(t *testing.T, s *framework.Server) *clientv3.Client {
	t.Helper()
	c, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ovlRecord is a stored allocation.
type ovlRecord struct {
	CIDR      string `json:"cidr"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

// ovlAllocations reads every allocation in etcd, by key.
func ovlAllocations(t *testing.T, c *clientv3.Client) map[string]ovlRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, ovlAllocationsPrefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	out := make(map[string]ovlRecord, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var r ovlRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Fatalf("allocation %s = %q: %v", kv.Key, kv.Value, err)
		}
		out[string(kv.Key)] = r
	}
	return out
}

// ovlAllNetworks lists the Networks of every namespace.
func ovlAllNetworks(t *testing.T, c *versioned.Clientset) []v1.Network {
	t.Helper()
	list, err := c.SamplecrdV1().Networks(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// ovlAssertDisjoint fails when two of the Networks overlap, and returns their prefixes.
func ovlAssertDisjoint(t *testing.T, items []v1.Network) []netip.Prefix {
	t.Helper()
	prefixes := make([]netip.Prefix, len(items))
	for i, n := range items {
		p, err := netip.ParsePrefix(n.Spec.CIDR)
		if err != nil {
			t.Fatalf("stored network %s/%s has cidr %q: %v", n.Namespace, n.Name, n.Spec.CIDR, err)
		}
		prefixes[i] = p
	}
	for i := range prefixes {
		for j := i + 1; j < len(prefixes); j++ {
			if prefixes[i].Overlaps(prefixes[j]) {
				t.Errorf("stored networks overlap: %s/%s %s and %s/%s %s", items[i].Namespace, items[i].Name, prefixes[i],
					items[j].Namespace, items[j].Name, prefixes[j])
			}
		}
	}
	return prefixes
}

func TestOvlOverlapErrors(t *testing.T) {
	s := framework.StartForTest(t)
	c := ovlClient(t, s)

	if _, err := ovlCreate(c, "team-a", ovlNetwork("backend", "10.0.0.0/8"), false); err != nil {
		t.Fatal(err)
	}

	// Same namespace: the message names the other Network.
	_, err := ovlCreate(c, "team-a", ovlNetwork("frontend", "10.1.0.0/16"), false)
	ovlExpectInvalid(t, err, "spec.cidr", `spec.cidr: Invalid value: "10.1.0.0/16": overlaps network team-a/backend (10.0.0.0/8)`)
	if want := `Network.samplecrd.k8s.io "frontend" is invalid: spec.cidr: Invalid value: "10.1.0.0/16": overlaps network team-a/backend (10.0.0.0/8)`; err.Error() != want {
		t.Errorf("error %q, want exactly %q", err, want)
	}
	if code := apierrors.ReasonForError(err); code != metav1.StatusReasonInvalid {
		t.Errorf("reason %s, want Invalid", code)
	}

	// A containing prefix is an overlap too.
	_, err = ovlCreate(c, "team-a", ovlNetwork("all", "8.0.0.0/5"), false)
	ovlExpectInvalid(t, err, "spec.cidr", `spec.cidr: Invalid value: "8.0.0.0/5": overlaps network team-a/backend (10.0.0.0/8)`)

	// Another namespace: the other Network is not named.
	_, err = ovlCreate(c, "team-b", ovlNetwork("other", "10.2.0.0/16"), false)
	ovlExpectInvalid(t, err, "spec.cidr", `spec.cidr: Invalid value: "10.2.0.0/16": overlaps a network in another namespace`)
	if strings.Contains(err.Error(), "backend") || strings.Contains(err.Error(), "team-a") {
		t.Errorf("error %q reveals the Network of another namespace", err)
	}

	// Disjoint prefixes are fine, in any namespace.
	if _, err := ovlCreate(c, "team-b", ovlNetwork("other", "192.168.0.0/16"), false); err != nil {
		t.Fatal(err)
	}

	// Deleting a Network frees its range for the next create.
	if err := c.SamplecrdV1().Networks("team-a").Delete(context.Background(), "backend", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := ovlCreate(c, "team-b", ovlNetwork("reuse", "10.1.0.0/16"), false); err != nil {
		t.Fatalf("the range of a deleted Network is still taken: %v", err)
	}
}

func TestOvlDryRunDoesNotClaim(t *testing.T) {
	s := framework.StartForTest(t)
	c := ovlClient(t, s)
	etcd := ovlEtcd(t, s)
	defer etcd.Close()

	got, err := ovlCreate(c, "dry", ovlNetwork("first", "10.50.0.0/16"), true)
	if err != nil {
		t.Fatalf("dry-run create: %v", err)
	}
	if got.Spec.Gateway != "10.50.0.1" {
		t.Errorf("dry-run result gateway %q, want 10.50.0.1", got.Spec.Gateway)
	}
	// Had the dry run claimed 10.50.0.0/16, this overlapping dry run would fail.
	if _, err := ovlCreate(c, "dry", ovlNetwork("second", "10.50.1.0/24"), true); err != nil {
		t.Fatalf("a second dry run overlapping the first: %v", err)
	}
	if allocs := ovlAllocations(t, etcd); len(allocs) != 0 {
		t.Fatalf("dry runs left allocations: %v", allocs)
	}
	if _, err := c.SamplecrdV1().Networks("dry").Get(context.Background(), "first", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("dry-run Network was stored: %v", err)
	}

	if _, err := ovlCreate(c, "dry", ovlNetwork("real", "10.50.0.0/16"), false); err != nil {
		t.Fatalf("real create after dry runs: %v", err)
	}
	// A dry run still reports an overlap.
	_, err = ovlCreate(c, "dry", ovlNetwork("third", "10.50.2.0/24"), true)
	ovlExpectInvalid(t, err, "spec.cidr", `spec.cidr: Invalid value: "10.50.2.0/24": overlaps network dry/real (10.50.0.0/16)`)
	_, err = ovlCreate(c, "wet", ovlNetwork("third", "10.50.2.0/24"), true)
	ovlExpectInvalid(t, err, "spec.cidr", "overlaps a network in another namespace")

	// Deleting with dryRun keeps the allocation.
	if err := c.SamplecrdV1().Networks("dry").Delete(context.Background(), "real", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Fatal(err)
	}
	_, err = ovlCreate(c, "dry", ovlNetwork("fourth", "10.50.3.0/24"), false)
	ovlExpectInvalid(t, err, "spec.cidr", "overlaps network dry/real (10.50.0.0/16)")
	if allocs := ovlAllocations(t, etcd); len(allocs) != 1 {
		t.Fatalf("allocations %v, want only dry/real's", allocs)
	}
}

func TestOvlNamespaceScope(t *testing.T) {
	s := framework.StartForTest(t, "--overlap-scope=namespace")
	c := ovlClient(t, s)
	for _, ns := range []string{"ns-1", "ns-2"} {
		if _, err := ovlCreate(c, ns, ovlNetwork("a", "10.0.0.0/16"), false); err != nil {
			t.Fatalf("the same cidr in namespace %s: %v", ns, err)
		}
	}
	_, err := ovlCreate(c, "ns-1", ovlNetwork("b", "10.0.0.0/16"), false)
	ovlExpectInvalid(t, err, "spec.cidr", `spec.cidr: Invalid value: "10.0.0.0/16": overlaps network ns-1/a (10.0.0.0/16)`)
	_, err = ovlCreate(c, "ns-2", ovlNetwork("b", "10.0.1.0/24"), false)
	ovlExpectInvalid(t, err, "spec.cidr", `spec.cidr: Invalid value: "10.0.1.0/24": overlaps network ns-2/a (10.0.0.0/16)`)
}

// ovlJob is one create of the stress tests.
type ovlJob struct {
	group     int
	namespace string
	name      string
	prefix    netip.Prefix
}

// ovlStressJobs builds 400 creates in 100 groups of 4. The members of a group are nested (or
// equal) prefixes, so every two overlap; prefixes of different groups are disjoint. Exactly one
// create per group can therefore succeed, whatever the order: 100 in all.
func ovlStressJobs() []ovlJob {
	rng := rand.New(rand.NewPCG(1, 2))
	var groups [][]ovlJob
	add := func(cidrs ...string) {
		g := len(groups)
		var jobs []ovlJob
		for m, cidr := range cidrs {
			jobs = append(jobs, ovlJob{
				group:     g,
				namespace: fmt.Sprintf("stress-%d", (g+m)%3),
				name:      fmt.Sprintf("g%03d-m%d", g, m),
				prefix:    netip.MustParsePrefix(cidr),
			})
		}
		rng.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
		groups = append(groups, jobs)
	}
	// 10 groups led by a /16: 10.0.0.0/16 … 10.9.0.0/16.
	for i := range 10 {
		add(fmt.Sprintf("10.%d.0.0/16", i), fmt.Sprintf("10.%d.%d.0/20", i, 16*(i%16)),
			fmt.Sprintf("10.%d.%d.0/24", i, 16*(i%16)+i%16), fmt.Sprintf("10.%d.%d.0/24", i, 16*(i%16)+i%16))
	}
	// 90 groups led by a /20, in 10.10.0.0/16 … 10.15.0.0/16.
	for j := range 90 {
		second, third := 10+j/16, 16*(j%16)
		add(fmt.Sprintf("10.%d.%d.0/20", second, third), fmt.Sprintf("10.%d.%d.0/24", second, third+j%16),
			fmt.Sprintf("10.%d.%d.0/24", second, third+j%16), fmt.Sprintf("10.%d.%d.0/20", second, third))
	}
	rng.Shuffle(len(groups), func(i, j int) { groups[i], groups[j] = groups[j], groups[i] })
	var jobs []ovlJob
	for _, g := range groups {
		jobs = append(jobs, g...) // the members of a group are next to each other, so they race
	}
	return jobs
}

// ovlStress runs the 400 creates from 20 goroutines, job i through clients[i%len(clients)], then
// checks what each replica lists and what etcd holds.
func ovlStress(t *testing.T, clients []*versioned.Clientset, etcdOf *framework.Server) {
	jobs := ovlStressJobs()
	if len(jobs) != 400 {
		t.Fatalf("%d jobs, want 400", len(jobs))
	}
	for i, a := range jobs {
		for _, b := range jobs[i+1:] {
			if (a.group == b.group) != a.prefix.Overlaps(b.prefix) {
				t.Fatalf("bad job set: %v (group %d) and %v (group %d)", a.prefix, a.group, b.prefix, b.group)
			}
		}
	}

	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range 20 {
		wg.Go(func() {
			for i := range next {
				_, errs[i] = ovlCreate(clients[i%len(clients)], jobs[i].namespace, ovlNetwork(jobs[i].name, jobs[i].prefix.String()), false)
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	t.Logf("400 creates through %d replica(s) in %v", len(clients), time.Since(start))

	succeeded := map[string]ovlJob{}
	var rejected []ovlJob
	for i, err := range errs {
		if err == nil {
			succeeded[jobs[i].namespace+"/"+jobs[i].name] = jobs[i]
			continue
		}
		if bad := ovlCheckInvalid(err, "spec.cidr", "overlaps"); bad != nil {
			t.Errorf("create %s/%s %s: %v", jobs[i].namespace, jobs[i].name, jobs[i].prefix, bad)
		}
		rejected = append(rejected, jobs[i])
	}

	for r, c := range clients {
		items := ovlAllNetworks(t, c)
		if len(items) != len(succeeded) {
			t.Errorf("replica %d lists %d Networks, but %d creates succeeded", r, len(items), len(succeeded))
		}
		perGroup := map[int]int{}
		for _, n := range items {
			j, ok := succeeded[n.Namespace+"/"+n.Name]
			if !ok {
				t.Errorf("replica %d lists %s/%s, whose create failed", r, n.Namespace, n.Name)
				continue
			}
			if n.Spec.CIDR != j.prefix.String() {
				t.Errorf("%s/%s stored with cidr %s, created with %s", n.Namespace, n.Name, n.Spec.CIDR, j.prefix)
			}
			perGroup[j.group]++
		}
		stored := ovlAssertDisjoint(t, items)
		// Maximal: every rejected prefix overlaps a stored one, so none could have been added.
		for _, j := range rejected {
			if !ovlOverlapsAny(j.prefix, stored) {
				t.Errorf("%s/%s %s was rejected but overlaps no stored Network", j.namespace, j.name, j.prefix)
			}
		}
		for g := range 100 {
			if perGroup[g] != 1 {
				t.Errorf("group %d has %d stored Networks, want exactly 1", g, perGroup[g])
			}
		}
	}
	if len(succeeded) != 100 || len(rejected) != 300 {
		t.Errorf("%d creates succeeded and %d were rejected, want exactly 100 and 300", len(succeeded), len(rejected))
	}

	// No claim of a rejected create is left behind.
	etcd := ovlEtcd(t, etcdOf)
	defer etcd.Close()
	allocs := ovlAllocations(t, etcd)
	if len(allocs) != len(succeeded) {
		t.Errorf("%d allocations in etcd for %d Networks", len(allocs), len(succeeded))
	}
	for key, r := range allocs {
		if j, ok := succeeded[r.Namespace+"/"+r.Name]; !ok || j.prefix.String() != r.CIDR {
			t.Errorf("allocation %s = %+v belongs to no stored Network", key, r)
		}
	}
	ovlAssertInvariant(t, clients[0], etcd)
}

// ovlAssertInvariant checks what the server promises at every etcd revision, here at the
// current one: the allocations are exactly the stored Networks (scope, prefix, namespace, name
// and UID), and no two stored Networks overlap.
func ovlAssertInvariant(t *testing.T, c *versioned.Clientset, etcd *clientv3.Client) {
	t.Helper()
	items := ovlAllNetworks(t, c)
	ovlAssertDisjoint(t, items)
	allocs := ovlAllocations(t, etcd)
	want := map[string]ovlRecord{}
	for _, n := range items {
		p := netip.MustParsePrefix(n.Spec.CIDR)
		family := "4"
		if p.Addr().Is6() {
			family = "6"
		}
		key := fmt.Sprintf("%s_cluster/%s/%x", ovlAllocationsPrefix, family, p.Addr().AsSlice())
		want[key] = ovlRecord{CIDR: n.Spec.CIDR, Namespace: n.Namespace, Name: n.Name, UID: string(n.UID)}
	}
	for key, r := range allocs {
		if want[key] != r {
			t.Errorf("allocation %s = %+v, but the stored Networks imply %+v", key, r, want[key])
		}
	}
	for key, r := range want {
		if _, ok := allocs[key]; !ok {
			t.Errorf("stored network %s/%s (%s) has no allocation at %s", r.Namespace, r.Name, r.CIDR, key)
		}
	}
}

func ovlOverlapsAny(p netip.Prefix, set []netip.Prefix) bool {
	for _, q := range set {
		if p.Overlaps(q) {
			return true
		}
	}
	return false
}

func TestOvlStressOneServer(t *testing.T) {
	s := framework.StartForTest(t)
	ovlStress(t, []*versioned.Clientset{ovlClient(t, s)}, s)
}

func TestOvlStressTwoReplicas(t *testing.T) {
	s1 := framework.StartForTest(t)
	s2 := framework.StartForTest(t, s1.EtcdFlags()...)
	if s1.URL == s2.URL {
		t.Fatalf("both replicas serve at %s", s1.URL)
	}
	ovlStress(t, []*versioned.Clientset{ovlClient(t, s1), ovlClient(t, s2)}, s1)
}

// ovlRestart stops *s and starts a server on the same data directory in its place; *s is nil
// while no server runs, so that a cleanup stops only a running one.
func ovlRestart(t *testing.T, s **framework.Server) {
	t.Helper()
	old := *s
	*s = nil
	if err := old.Stop(); err != nil {
		t.Fatalf("stopping: %v", err)
	}
	restarted, err := framework.Start(old.DataDir)
	if err != nil {
		t.Fatalf("restarting on %s: %v", old.DataDir, err)
	}
	*s = restarted
}

func TestOvlAllocationsSurviveRestartAndAreVerified(t *testing.T) {
	s, err := framework.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if s == nil {
			return
		}
		if err := s.Stop(); err != nil {
			t.Errorf("stopping: %v", err)
		}
	})
	c := ovlClient(t, s)
	keep, err := ovlCreate(c, "repair", ovlNetwork("keep", "10.30.0.0/16"), false)
	if err != nil {
		t.Fatal(err)
	}
	wide, err := ovlCreate(c, "repair", ovlNetwork("wide", "10.31.0.0/16"), false)
	if err != nil {
		t.Fatal(err)
	}

	// After a restart the stored allocations still enforce the guarantee.
	ovlRestart(t, &s)
	c = ovlClient(t, s)
	_, err = ovlCreate(c, "repair", ovlNetwork("probe", "10.30.1.0/24"), false)
	ovlExpectInvalid(t, err, "spec.cidr", "overlaps network repair/keep (10.30.0.0/16)")

	etcd := ovlEtcd(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keepKey, wideKey := ovlAllocationsPrefix+"_cluster/4/0a1e0000", ovlAllocationsPrefix+"_cluster/4/0a1f0000"
	allocs := ovlAllocations(t, etcd)
	if want := (ovlRecord{CIDR: "10.30.0.0/16", Namespace: "repair", Name: "keep", UID: string(keep.UID)}); len(allocs) != 2 || allocs[keepKey] != want {
		t.Fatalf("allocations %v, want keep's and wide's, keep's = %+v", allocs, want)
	}
	// Break the invariant around the API in every way the verifier knows:
	// - keep's record as an older server wrote it (no UID): a mismatch it rewrites;
	if _, err := etcd.Put(ctx, keepKey, `{"cidr":"10.30.0.0/16","namespace":"repair","name":"keep","claimed":1}`); err != nil {
		t.Fatal(err)
	}
	// - an allocation of a Network that does not exist: an orphan it removes;
	stale := ovlAllocationsPrefix + "_cluster/4/0a280000"
	if _, err := etcd.Put(ctx, stale, `{"cidr":"10.40.0.0/16","namespace":"ghost","name":"gone","uid":"gone-uid"}`); err != nil {
		t.Fatal(err)
	}
	// - wide's allocation deleted by hand, and an overlapping Network created meanwhile: a
	//   missing allocation it cannot restore, and an overlap it reports.
	if del, err := etcd.Delete(ctx, wideKey); err != nil || del.Deleted != 1 {
		t.Fatalf("deleting wide's allocation: %v (deleted %v)", err, del)
	}
	if _, err := ovlCreate(c, "repair", ovlNetwork("inner", "10.31.2.0/24"), false); err != nil {
		t.Fatalf("with wide's allocation gone, an overlapping create still fails: %v", err)
	}
	etcd.Close()
	ovlRestart(t, &s) // the verifier runs once at start, and then every --allocation-verify-interval
	c = ovlClient(t, s)
	want := map[string]float64{"overlap": 1, "missing": 1, "mismatch": 1, "orphan": 1, "invalid": 0}
	ovlWaitForMetrics(t, s, "network_allocation_violations", want)
	etcd = ovlEtcd(t, s) // the embedded etcd serves on a new port after a restart

	allocs = ovlAllocations(t, etcd)
	if want := (ovlRecord{CIDR: "10.30.0.0/16", Namespace: "repair", Name: "keep", UID: string(keep.UID)}); allocs[keepKey] != want {
		t.Errorf("keep's record after verification %+v, want %+v", allocs[keepKey], want)
	}
	if _, ok := allocs[stale]; ok {
		t.Errorf("the orphan allocation %s was not removed", stale)
	}
	if r, ok := allocs[wideKey]; ok {
		t.Errorf("wide's allocation was restored over inner's: %+v", r)
	}
	if _, err := ovlCreate(c, "repair", ovlNetwork("late", "10.40.0.0/16"), false); err != nil {
		t.Fatalf("the orphan allocation still blocks its prefix: %v", err)
	}
	_, err = ovlCreate(c, "repair", ovlNetwork("probe", "10.30.1.0/24"), false)
	ovlExpectInvalid(t, err, "spec.cidr", "overlaps network repair/keep (10.30.0.0/16)")

	// Deleting inner lets the next verification restore wide's allocation.
	if err := c.SamplecrdV1().Networks("repair").Delete(context.Background(), "inner", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	etcd.Close()
	ovlRestart(t, &s)
	ovlWaitForMetrics(t, s, "network_allocation_violations", map[string]float64{"overlap": 0, "missing": 1, "mismatch": 0, "orphan": 0})
	etcd = ovlEtcd(t, s)
	defer etcd.Close()
	if r := ovlAllocations(t, etcd)[wideKey]; r.UID != string(wide.UID) {
		t.Errorf("wide's allocation after verification %+v, want its UID %s", r, wide.UID)
	}
	ovlAssertInvariant(t, ovlClient(t, s), etcd)
}

// ovlWaitForMetrics waits until the server's /metrics shows want for every kind label of name.
func ovlWaitForMetrics(t *testing.T, s *framework.Server, name string, want map[string]float64) {
	t.Helper()
	var last string
	err := ovlPollMetrics(t, s, func(body string) bool {
		got := map[string]float64{}
		var lines []string
		for _, line := range strings.Split(body, "\n") {
			var kind string
			var v float64
			if _, err := fmt.Sscanf(line, name+"{kind=%q} %g", &kind, &v); err == nil {
				got[kind] = v
				lines = append(lines, line)
			}
		}
		last = strings.Join(lines, "; ")
		for k, v := range want {
			if g, ok := got[k]; !ok || g != v {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("%s never showed %v; last: %s", name, want, last)
	}
}

// ovlPollMetrics reads the server's /metrics every 100 ms until done says so of its text, for at
// most a minute.
func ovlPollMetrics(t *testing.T, s *framework.Server, done func(body string) bool) error {
	t.Helper()
	cfg := rest.CopyConfig(s.Config)
	cfg.Host = s.URL
	client, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		resp, err := client.Get(s.URL + "/metrics")
		if err != nil {
			return false, nil
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			return false, nil
		}
		return done(string(body)), nil
	})
}

// TestOvlKeysOnlyVerificationFindsChangedKeys: after the first verification, which reads every
// allocation value, the server's verifications read the allocation keys without their values and
// trust those written with their Network's create. Keys changed around the API since (a record
// overwritten, an orphan) are still read, found and fixed, without a restart; an untouched key
// stays as it is.
func TestOvlKeysOnlyVerificationFindsChangedKeys(t *testing.T) {
	s := framework.StartForTest(t, "--allocation-verify-interval=1s")
	c := ovlClient(t, s)
	keep, err := ovlCreate(c, "keysonly", ovlNetwork("keep", "10.50.0.0/16"), false)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ovlCreate(c, "keysonly", ovlNetwork("other", "10.51.0.0/16"), false)
	if err != nil {
		t.Fatal(err)
	}
	etcd := ovlEtcd(t, s)
	defer etcd.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Two verifications done: the next ones read keys only.
	ovlWaitForVerifications(t, s, 2)
	keepKey, otherKey := ovlAllocationsPrefix+"_cluster/4/0a320000", ovlAllocationsPrefix+"_cluster/4/0a330000"
	before := ovlAllocations(t, etcd)
	if want := (ovlRecord{CIDR: "10.51.0.0/16", Namespace: "keysonly", Name: "other", UID: string(other.UID)}); before[otherKey] != want {
		t.Fatalf("other's allocation %+v, want %+v", before[otherKey], want)
	}
	otherRev := ovlModRevision(t, etcd, otherKey)
	if _, err := etcd.Put(ctx, keepKey, `{"cidr":"10.50.0.0/16","namespace":"keysonly","name":"keep","uid":"someone-else"}`); err != nil {
		t.Fatal(err)
	}
	stale := ovlAllocationsPrefix + "_cluster/4/0a340000"
	if _, err := etcd.Put(ctx, stale, `{"cidr":"10.52.0.0/16","namespace":"ghost","name":"gone","uid":"gone-uid"}`); err != nil {
		t.Fatal(err)
	}
	want := ovlRecord{CIDR: "10.50.0.0/16", Namespace: "keysonly", Name: "keep", UID: string(keep.UID)}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		allocs := ovlAllocations(t, etcd)
		_, orphan := allocs[stale]
		return allocs[keepKey] == want && !orphan, nil
	})
	if err != nil {
		t.Fatalf("the verifier did not rewrite keep's record and remove the orphan: %v", ovlAllocations(t, etcd))
	}
	if rev := ovlModRevision(t, etcd, otherKey); rev != otherRev {
		t.Errorf("other's untouched allocation was written (ModRevision %d, was %d)", rev, otherRev)
	}
	ovlAssertInvariant(t, c, etcd)
}

// ovlModRevision is key's ModRevision now.
func ovlModRevision(t *testing.T, etcd *clientv3.Client, key string) int64 {
	t.Helper()
	resp, err := etcd.Get(context.Background(), key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading %s: %v (%d keys)", key, err, len(resp.Kvs))
	}
	return resp.Kvs[0].ModRevision
}

// ovlWaitForVerifications waits until the server has ended at least n verifications.
func ovlWaitForVerifications(t *testing.T, s *framework.Server, n float64) {
	t.Helper()
	var total float64
	err := ovlPollMetrics(t, s, func(body string) bool {
		total = verificationsIn(body)
		return total >= n
	})
	if err != nil {
		t.Fatalf("%v verifications after 60 s, want %v", total, n)
	}
}
