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
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/linux"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// capacityWait is how long a count may take to show: the agents' --count-report-interval
// (30s, their default) plus a resync and the writes.
const capacityWait = 45 * time.Second

// capPods are the pods a test attached on the nodes of one Network, by node.
type capPods struct {
	t    *testing.T
	key  string
	mu   sync.Mutex
	pods map[string][]*mnPod
	next int
	// leaked are lease files the test wrote by hand on a node, without a pod (what a failed ADD
	// leaves behind).
	leaked map[string][]string
}

func newCapPods(t *testing.T, key string) *capPods {
	return &capPods{t: t, key: key, pods: map[string][]*mnPod{}, leaked: map[string][]string{}}
}

// leak writes a lease file on n for a free address of its first block, as host-local leaves one
// when an ADD fails after the reservation and no DEL comes, and returns its path.
func (p *capPods) leak(client versioned.Interface, network string, n *mnNode) string {
	p.t.Helper()
	a, err := client.SamplecrdV1().BlockAllocations("default").Get(context.Background(), network+"."+n.name, metav1.GetOptions{})
	if err != nil || len(a.Blocks) == 0 {
		p.t.Fatalf("%s's blocks of %s: %+v, %v", n.name, network, a, err)
	}
	block := netip.MustParsePrefix(a.Blocks[0].CIDR)
	dir := filepath.Join(n.ipamDir, linux.NetworkName(p.key))
	// The block's last address but one: never the gateway, the network or the broadcast
	// address, and host-local hands out from the start of the range.
	addr := block.Addr()
	for range 1<<(32-block.Bits()) - 2 {
		addr = addr.Next()
	}
	path := filepath.Join(dir, addr.String())
	if _, err := os.Stat(path); err == nil {
		p.t.Fatalf("%s is leased already", path)
	}
	if err := os.WriteFile(path, []byte("leaked-container\r\neth0"), 0o644); err != nil {
		p.t.Fatal(err)
	}
	p.mu.Lock()
	p.leaked[n.name] = append(p.leaked[n.name], path)
	p.mu.Unlock()
	return path
}

// unleak removes the lease files leak wrote on n (as a reclaim, or an operator, releases them).
func (p *capPods) unleak(n *mnNode) {
	p.t.Helper()
	p.mu.Lock()
	paths := p.leaked[n.name]
	delete(p.leaked, n.name)
	p.mu.Unlock()
	for _, path := range paths {
		if err := os.Remove(path); err != nil {
			p.t.Fatal(err)
		}
	}
}

// leases is how many lease files n should hold: a pod's each, and the leaked ones.
func (p *capPods) leases(n *mnNode) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pods[n.name]) + len(p.leaked[n.name])
}

// addMany ADDs count pods on each of nodes, all at once; it fails the test on an ADD's error.
func (p *capPods) addMany(count int, nodes ...*mnNode) {
	p.t.Helper()
	type job struct {
		node *mnNode
		id   string
		ns   *netnstest.NS
	}
	var jobs []job
	for _, n := range nodes {
		for range count {
			p.next++
			ns := netnstest.New(p.t, "pod") // on the test goroutine
			jobs = append(jobs, job{n, fmt.Sprintf("%s-%s-pod%d", n.name, strings.ReplaceAll(p.key, "/", "-"), p.next), ns})
		}
	}
	errs := make([]error, len(jobs))
	var wg sync.WaitGroup
	for i, j := range jobs {
		wg.Go(func() {
			pod, err := j.node.add(p.key, j.id, j.ns)
			if err != nil {
				errs[i] = err
				return
			}
			p.mu.Lock()
			p.pods[j.node.name] = append(p.pods[j.node.name], pod)
			p.mu.Unlock()
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		p.t.Fatal(err)
	}
}

// delMany DELs count of the pods on each of nodes (the oldest first), all at once.
func (p *capPods) delMany(count int, nodes ...*mnNode) {
	p.t.Helper()
	var gone []*mnPod
	p.mu.Lock()
	for _, n := range nodes {
		take := min(count, len(p.pods[n.name]))
		gone = append(gone, p.pods[n.name][:take]...)
		p.pods[n.name] = p.pods[n.name][take:]
	}
	p.mu.Unlock()
	errs := make([]error, len(gone))
	var wg sync.WaitGroup
	for i, pod := range gone {
		wg.Go(func() { errs[i] = capDel(pod, p.key) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		p.t.Fatal(err)
	}
}

// on returns how many pods the test has attached on n.
func (p *capPods) on(n *mnNode) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pods[n.name])
}

// capDel is the runtime's DEL of pod with its node's configuration list of key as it is now.
func capDel(pod *mnPod, key string) error {
	list, err := libcni.ConfListFromFile(linux.ConfPath(pod.node.confDir, key))
	if err != nil {
		return err
	}
	rt := &libcni.RuntimeConf{ContainerID: pod.id, NetNS: pod.ns.Path, IfName: "eth0"}
	return netnstest.InNS(pod.node.ns.Path, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := pod.node.cni.DelNetworkList(ctx, list, rt); err != nil {
			return fmt.Errorf("CNI DEL of %s on %s: %w", pod.id, pod.node.name, err)
		}
		return nil
	})
}

// capLeaseFiles counts host-local's lease files of key on n (0 without its directory).
func capLeaseFiles(n *mnNode, key string) (int, error) {
	entries, err := os.ReadDir(filepath.Join(n.ipamDir, linux.NetworkName(key)))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	count := 0
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			count++
		}
	}
	return count, nil
}

// capUsable counts the addresses of blocks host-local may hand out: inside prefix (IPv4), but
// not its network or broadcast address or the gateway.
func capUsable(prefix netip.Prefix, gateway netip.Addr, blocks []netip.Prefix) *big.Int {
	a4 := prefix.Addr().As4()
	first := uint32(a4[0])<<24 | uint32(a4[1])<<16 | uint32(a4[2])<<8 | uint32(a4[3])
	last := first + uint32(1)<<(32-prefix.Bits()) - 1
	broadcast := netip.AddrFrom4([4]byte{byte(last >> 24), byte(last >> 16), byte(last >> 8), byte(last)})
	sum := new(big.Int)
	for _, b := range blocks {
		sum.Add(sum, new(big.Int).Lsh(big.NewInt(1), uint(32-b.Bits())))
		for _, r := range []netip.Addr{prefix.Addr(), broadcast, gateway} {
			if b.Contains(r) {
				sum.Sub(sum, big.NewInt(1))
			}
		}
	}
	return sum
}

// capDiff compares the Network's capacity and its entries of nodes (and only those) with what
// the nodes hold: host-local's lease files, the pods the test attached, and the blocks of their
// BlockAllocations. It returns "" when every figure is equal, else what differs.
func capDiff(ctx context.Context, client versioned.Interface, name, key string, pods *capPods, nodes []*mnNode) (string, *v1.Network) {
	nw, err := client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err.Error(), nil
	}
	prefix, err1 := netip.ParsePrefix(nw.Spec.CIDR)
	gateway, err2 := netip.ParseAddr(nw.Spec.Gateway)
	if err := errors.Join(err1, err2); err != nil {
		return err.Error(), nw
	}
	var diffs []string
	differ := func(what string, got, want any) {
		if fmt.Sprint(got) != fmt.Sprint(want) {
			diffs = append(diffs, fmt.Sprintf("%s: %v, want %v", what, got, want))
		}
	}
	total := capUsable(prefix, gateway, []netip.Prefix{prefix})
	allocated, used := new(big.Int), new(big.Int)
	for _, n := range nodes {
		files, err := capLeaseFiles(n, key)
		if err != nil {
			return err.Error(), nw
		}
		differ(n.name+" lease files against the pods attached and the leases leaked", files, pods.leases(n))
		list, err := client.SamplecrdV1().BlockAllocations("default").List(ctx, metav1.ListOptions{
			FieldSelector: fields.OneTermEqualSelector("nodeName", n.name).String()})
		if err != nil {
			return err.Error(), nw
		}
		var blocks []netip.Prefix
		for _, a := range list.Items {
			if a.Network == name {
				for _, b := range a.Blocks {
					blocks = append(blocks, netip.MustParsePrefix(b.CIDR))
				}
			}
		}
		nodeAllocated := capUsable(prefix, gateway, blocks)
		allocated.Add(allocated, nodeAllocated)
		used.Add(used, big.NewInt(int64(files)))
		e := entryOf(nw, n.name)
		if e == nil {
			diffs = append(diffs, n.name+": no entry")
			continue
		}
		if e.Leases == nil {
			diffs = append(diffs, n.name+": leases not reported")
		} else {
			differ(n.name+" leases", *e.Leases, files)
		}
		differ(n.name+" attachments", e.Attachments, pods.on(n))
		if e.Capacity == nil {
			diffs = append(diffs, n.name+": no capacity")
		} else {
			differ(n.name+" capacity.used", e.Capacity.Used, files)
			differ(n.name+" capacity.allocated", e.Capacity.Allocated, nodeAllocated)
		}
	}
	if len(nw.Status.Nodes) != len(nodes) {
		var names []string
		for _, e := range nw.Status.Nodes {
			names = append(names, e.NodeName)
		}
		diffs = append(diffs, fmt.Sprintf("entries of %v, want %d", names, len(nodes)))
	}
	c := nw.Status.Capacity
	if c == nil {
		return strings.Join(append(diffs, "no status.capacity"), "; "), nw
	}
	differ("capacity.total", c.Total, total)
	differ("capacity.allocated", c.Allocated, allocated)
	differ("capacity.used", c.Used, used)
	differ("capacity.available", c.Available, new(big.Int).Sub(total, used))
	differ("capacity.nodesWithoutLeases", c.NodesWithoutLeases, 0)
	return strings.Join(diffs, "; "), nw
}

// capWait waits until capDiff finds every figure equal and returns how long that took; it fails
// the test with the last difference seen.
func capWait(t *testing.T, client versioned.Interface, name, key string, pods *capPods, nodes []*mnNode, what string) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	var nw *v1.Network
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, capacityWait, true, func(context.Context) (bool, error) {
		// Not the poll's context: the last look must not end in its deadline's error.
		last, nw = capDiff(context.Background(), client, name, key, pods, nodes)
		return last == "", nil
	})
	if err != nil {
		capacity := "none"
		if nw != nil && nw.Status.Capacity != nil {
			capacity = fmt.Sprintf("%+v", *nw.Status.Capacity)
		}
		t.Fatalf("%s: counts not exact within %v: %s (status.capacity %s)", what, capacityWait, last, capacity)
	}
	took := time.Since(start)
	t.Logf("%s: counts exact after %v: %+v", what, took.Round(10*time.Millisecond), *nw.Status.Capacity)
	return took
}

// TestMultiNodeCapacityExact: the counts of status.capacity and of each node's entry equal what
// the nodes hold (host-local's lease files, the pods attached, the blocks held), checked after
// the first pod on each node, an ADD/DEL storm on three nodes, after an agent restart during which its node's pods changed,
// and after a node claimed a second block as its free addresses ran low. The agents coalesce
// count writes with --count-report-interval=5s: every change must show within it (and the sync
// that writes it), with no resync to catch what they missed. (The default, 30s, works the same
// way with a longer wait: TestMultiNodeCapacityCost runs with it; at 30s each of this test's
// steps waited half a minute.)
func TestMultiNodeCapacityExact(t *testing.T) {
	// /28 blocks and a headroom of 4 addresses, so that a node claims a second block after a
	// dozen pods. No resync within the test (the harness's is 2s): what the agents write follows
	// what they notice, a lease host-local writes after the pod's veth joined the bridge too.
	c := newMNClusterWith(t, []string{"--block-prefix-length-v4=28"}, 3, "--min-free-addresses", "4",
		"--controller-resync-period", "10m", "--count-report-interval", "5s")
	const name = "cap"
	key := c.createNetwork(name, "10.66.0.0/22")
	for _, n := range c.nodes {
		n.waitConfList(key)
	}
	pods := newCapPods(t, key)
	ctx := context.Background()

	// The first pod on each node: the sync on its veth joining the bridge may come before
	// host-local has written its lease, and only the agents' watch of host-local's files (there
	// is no resync here) sees the lease come.
	pods.addMany(1, c.nodes...)
	capWait(t, c.client, name, key, pods, c.nodes, "after the first pod on each node")

	// (a) The storm: 5 ADDs on every node at once; then on every node 4 DELs and 2 ADDs at once.
	pods.addMany(5, c.nodes...)
	capWait(t, c.client, name, key, pods, c.nodes, "after 15 more ADDs on 3 nodes")
	var wg sync.WaitGroup
	wg.Go(func() { pods.delMany(4, c.nodes...) })
	pods.addMany(2, c.nodes...)
	wg.Wait()
	capWait(t, c.client, name, key, pods, c.nodes, "after 12 DELs and 6 ADDs at once on 3 nodes")

	// (b) n2's agent restarts; while it is down its node loses 4 pods and gains 1.
	n2 := c.nodes[1]
	n2.stopAgent()
	pods.delMany(4, n2)
	pods.addMany(1, n2)
	if diff, _ := capDiff(ctx, c.client, name, key, pods, c.nodes); !strings.Contains(diff, "n2 leases") {
		t.Fatalf("with n2's agent down the counts already follow n2's changes (%q): the restart checks nothing", diff)
	}
	n2.startAgent(c.s.kubeconfig, c.agentArgs...)
	capWait(t, c.client, name, key, pods, c.nodes, "after n2's agent restarted (4 DELs, 1 ADD while it was down)")

	// A lease without a pod on n3 (a failed ADD's leftover): no link changes, only the lease
	// watch sees it come and go (as a reclaim, or an operator, removes it).
	n3 := c.nodes[2]
	pods.leak(c.client, name, n3)
	capWait(t, c.client, name, key, pods, c.nodes, "after a lease without a pod appeared on n3")
	pods.unleak(n3)
	capWait(t, c.client, name, key, pods, c.nodes, "after n3's lease without a pod was removed")

	// (d) n1 runs low: ADDs one by one until it claims a second block.
	n1 := c.nodes[0]
	blocksOf := func() int {
		a, err := c.client.SamplecrdV1().BlockAllocations("default").Get(ctx, name+"."+n1.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return len(a.Blocks)
	}
	before := blocksOf()
	if before != 1 {
		t.Fatalf("n1 holds %d blocks before running low, want 1", before)
	}
	// The claim follows the lease that leaves fewer than 4 addresses free at once; the next
	// ADD waits for it (it could find the first block full otherwise).
	for i := 0; ; i++ {
		if i == 16 {
			t.Fatalf("n1 never ran low after %d more pods (%d attached)", i, pods.on(n1))
		}
		pods.addMany(1, n1)
		if blocksOf() > before {
			break
		}
		nw, err := c.client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		a, err := c.client.SamplecrdV1().BlockAllocations("default").Get(ctx, name+"."+n1.name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var blocks []netip.Prefix
		for _, b := range a.Blocks {
			blocks = append(blocks, netip.MustParsePrefix(b.CIDR))
		}
		free := capUsable(netip.MustParsePrefix(nw.Spec.CIDR), netip.MustParseAddr(nw.Spec.Gateway), blocks).Int64() - int64(pods.on(n1))
		if free >= 4 {
			continue
		}
		if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return blocksOf() > before, nil
		}); err != nil {
			t.Fatalf("n1 has %d addresses free in %v and claimed no other block within 30s", free, blocks)
		}
		break
	}
	t.Logf("n1 claimed a second block with %d pods attached", pods.on(n1))
	pods.addMany(2, n1)
	capWait(t, c.client, name, key, pods, c.nodes, "after n1 claimed a second block")
}

// statusWrites sums the server's apiserver_request_total of writes of networks/status.
func statusWrites(t *testing.T, client versioned.Interface) float64 {
	t.Helper()
	raw, err := client.Discovery().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatalf("reading the server's /metrics: %v", err)
	}
	var sum float64
	for _, line := range strings.Split(string(raw), "\n") {
		if !strings.HasPrefix(line, "apiserver_request_total{") || !strings.Contains(line, `resource="networks"`) ||
			!strings.Contains(line, `subresource="status"`) {
			continue
		}
		if verb := label(line, "verb"); verb != "APPLY" && verb != "PATCH" && verb != "UPDATE" {
			continue
		}
		fieldsOf := strings.Fields(line)
		v, err := strconv.ParseFloat(fieldsOf[len(fieldsOf)-1], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		sum += v
	}
	return sum
}

// label returns the value of name in a metric sample's labels.
func label(sample, name string) string {
	_, rest, ok := strings.Cut(sample, name+`="`)
	if !ok {
		return ""
	}
	value, _, _ := strings.Cut(rest, `"`)
	return value
}

// TestMultiNodeCapacityCost measures what keeping the counts costs: the status writes per pod
// ADD and DEL on 3 nodes × 4 Networks (10 pods per node and Network, ADDed at once per
// Network), with the agents' default --count-report-interval (30s) and, for comparison, with
// every change written (1ms); and the encoded size of a Network by its number of node entries,
// which is what each write sends to every agent watching Networks. It logs the figures
// (docs/controller.md, "What the counts cost") and checks the counts exact after each step.
func TestMultiNodeCapacityCost(t *testing.T) {
	c := newMNCluster(t, 3)
	const networks, perPair = 4, 10
	var names, keys []string
	for i := range networks {
		names = append(names, fmt.Sprintf("cost%d", i))
		keys = append(keys, c.createNetwork(names[i], fmt.Sprintf("10.70.%d.0/22", 4*i)))
	}
	for _, key := range keys {
		for _, n := range c.nodes {
			n.waitConfList(key)
		}
	}
	pods := make([]*capPods, networks)
	for i := range pods {
		pods[i] = newCapPods(t, keys[i])
		capWait(t, c.client, names[i], keys[i], pods[i], c.nodes, names[i]+" realised")
	}
	pairs := networks * len(c.nodes)
	measure := func(mode string) {
		t.Helper()
		before := statusWrites(t, c.client)
		start := time.Now()
		for i := range pods {
			pods[i].addMany(perPair, c.nodes...)
		}
		var slowest time.Duration
		for i := range pods {
			slowest = max(slowest, capWait(t, c.client, names[i], keys[i], pods[i], c.nodes, mode+": "+names[i]+" after the ADDs"))
		}
		adds := statusWrites(t, c.client) - before
		t.Logf("COST %s: %d ADDs (%d per node and Network) in %v: %v status writes, %.2f per ADD, %.2f per node and Network; all counts exact %v after the last ADD",
			mode, pairs*perPair, perPair, time.Since(start).Round(time.Millisecond), adds, adds/float64(pairs*perPair), adds/float64(pairs), slowest.Round(10*time.Millisecond))
		before = statusWrites(t, c.client)
		for i := range pods {
			pods[i].delMany(perPair-1, c.nodes...)
		}
		for i := range pods {
			capWait(t, c.client, names[i], keys[i], pods[i], c.nodes, mode+": "+names[i]+" after the DELs")
		}
		dels := statusWrites(t, c.client) - before
		t.Logf("COST %s: %d DELs (one pod left per node and Network): %v status writes, %.2f per DEL",
			mode, pairs*(perPair-1), dels, dels/float64(pairs*(perPair-1)))
		// A busy node: one pod after the other on n1 in cost0 (each ADD or DEL returned before
		// the next starts), the steady churn that a burst's merged syncs hide.
		n1 := c.nodes[0]
		for _, step := range []string{"ADD", "DEL"} {
			before = statusWrites(t, c.client)
			start = time.Now()
			for range perPair {
				if step == "ADD" {
					pods[0].addMany(1, n1)
				} else {
					pods[0].delMany(1, n1)
				}
			}
			took := time.Since(start)
			capWait(t, c.client, names[0], keys[0], pods[0], c.nodes, mode+": cost0 after one "+step+" after the other on n1")
			writes := statusWrites(t, c.client) - before
			t.Logf("COST %s: %d %ss one after the other on one node in %v: %v status writes, %.2f per %s",
				mode, perPair, step, took.Round(time.Millisecond), writes, writes/float64(perPair), step)
		}
		for i := range pods {
			pods[i].delMany(1, c.nodes...)
		}
		for i := range pods {
			capWait(t, c.client, names[i], keys[i], pods[i], c.nodes, mode+": "+names[i]+" empty")
		}
	}
	measure("coalesced (--count-report-interval=30s)")
	for _, n := range c.nodes {
		n.stopAgent()
		n.startAgent(c.s.kubeconfig, "--count-report-interval", "1ms")
	}
	for i := range pods {
		capWait(t, c.client, names[i], keys[i], pods[i], c.nodes, names[i]+" after the restart")
	}
	measure("every change written (--count-report-interval=1ms)")

	// The size of a Network by its number of entries, from a real one: its entries and their
	// managers' managedFields copied under other node names.
	pods[0].addMany(1, c.nodes...)
	capWait(t, c.client, names[0], keys[0], pods[0], c.nodes, "one pod per node")
	nw, err := c.client.SamplecrdV1().Networks("default").Get(context.Background(), names[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	entry := nw.Status.Nodes[0]
	var managed metav1.ManagedFieldsEntry
	base := nw.DeepCopy()
	base.Status.Nodes = nil
	base.ManagedFields = nil
	for _, mf := range nw.ManagedFields {
		if mf.Manager == "network-controller/"+entry.NodeName {
			managed = mf
		}
		if !strings.HasPrefix(mf.Manager, "network-controller/") {
			base.ManagedFields = append(base.ManagedFields, mf)
		}
	}
	if managed.Manager == "" {
		t.Fatalf("no managedFields entry of %s's agent in %+v", entry.NodeName, nw.ManagedFields)
	}
	withEntries := func(count int) *v1.Network {
		n := base.DeepCopy()
		for i := range count {
			e := *entry.DeepCopy()
			e.NodeName = fmt.Sprintf("node-%04d", i)
			e.UnderlayAddress = fmt.Sprintf("192.168.%d.%d", i/250, 1+i%250)
			n.Status.Nodes = append(n.Status.Nodes, e)
			mf := *managed.DeepCopy()
			mf.Manager = "network-controller/" + e.NodeName
			raw := strings.ReplaceAll(string(mf.FieldsV1.Raw), entry.NodeName, e.NodeName)
			mf.FieldsV1 = &metav1.FieldsV1{Raw: []byte(raw)}
			n.ManagedFields = append(n.ManagedFields, mf)
		}
		return n
	}
	realJSON, _ := json.Marshal(nw)
	t.Logf("COST size: the real Network with %d entries: %d bytes protobuf, %d JSON", len(nw.Status.Nodes), nw.Size(), len(realJSON))
	for _, count := range []int{0, 1, 3, 10, 100, 1000} {
		n := withEntries(count)
		j, err := json.Marshal(n)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("COST size: a Network with %d entries: %d bytes protobuf, %d JSON", count, n.Size(), len(j))
	}
}

// TestAggregatedCapacityNodeDeleted: attached to a real kube-apiserver, two nodes' agents report
// their pods' leases; n2's Node is deleted while its agent runs (its entry stays, NodeDeleted,
// and its leases still count), then the agent stops as a dead machine's would: once its Lease
// expires the node lifecycle loop removes the entry, and n2's leases leave status.capacity.used.
// The counts are exact at each step.
func TestAggregatedCapacityNodeDeleted(t *testing.T) {
	netnstest.RequireRoot(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	pluginDir := filepath.Join(repoRoot, "_output", "bin", "cni")
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(pluginDir, p)); err != nil {
			t.Fatalf("CNI plugin %s: %v (make cni-plugins)", p, err)
		}
	}
	c := localCluster(t, "NETWORK_APISERVER_ARGS=--block-release-grace=3s")
	ctx := context.Background()
	now := time.Now().UTC().Format(time.RFC3339)
	for _, node := range []string{"n1", "n2"} {
		c.kubectl(t, "apply", "-f", writeManifest(t, node+".yaml", "apiVersion: v1\nkind: Node\nmetadata:\n  name: "+node+"\n"))
		c.kubectl(t, "patch", "node", node, "--subresource", "status", "--type", "merge", "-p",
			fmt.Sprintf(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"set by the test","lastHeartbeatTime":%q,"lastTransitionTime":%q}]}}`, now, now))
	}
	client := c.clientset(t)
	const name, key = "capdel", "default/capdel"
	if _, err := client.SamplecrdV1().Networks("default").Create(ctx, &v1.Network{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: v1.NetworkSpec{CIDR: "10.34.0.0/24"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ul := newUnderlay(t)
	n1, n2 := ul.addNode(t, 1, pluginDir), ul.addNode(t, 2, pluginDir)
	for _, n := range []*mnNode{n1, n2} {
		// Counts coalesced for 5s, not the default 30s: the last step waits for one interval.
		n.startAgent(c.kubeconfig, "--min-free-addresses", "2", "--count-report-interval", "5s")
		n.waitConfList(key)
	}
	pods := newCapPods(t, key)
	pods.addMany(3, n1)
	pods.addMany(4, n2)
	capWait(t, client, name, key, pods, []*mnNode{n1, n2}, "3 pods on n1, 4 on n2")

	// n2's Node deleted while its agent runs and its pods hold addresses: the entry stays,
	// marked NodeDeleted, its leases counted.
	c.kubectl(t, "delete", "node", "n2")
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		nw, err := client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		e := entryOf(nw, "n2")
		return e != nil && e.Reason == "NodeDeleted", nil
	})
	if err != nil {
		t.Fatalf("n2's entry never said NodeDeleted: %v", err)
	}
	capWait(t, client, name, key, pods, []*mnNode{n1, n2}, "n2's Node deleted, its agent running")

	// The agent stops: its Lease expires (40s), the entry goes, and so do its leases from used.
	n2.stopAgent()
	stopped := time.Now()
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 120*time.Second, true, func(ctx context.Context) (bool, error) {
		nw, err := client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
		return err == nil && entryOf(nw, "n2") == nil, nil
	})
	if err != nil {
		t.Fatalf("n2's entry not removed within 120s of its agent stopping: %v", err)
	}
	t.Logf("n2's entry removed %v after its agent stopped", time.Since(stopped).Round(100*time.Millisecond))
	capWait(t, client, name, key, pods, []*mnNode{n1}, "n2's entry removed")
	// n1 carries on: its counts still follow its pods.
	pods.delMany(1, n1)
	pods.addMany(2, n1)
	capWait(t, client, name, key, pods, []*mnNode{n1}, "n1's pods changed after n2 went")
}
