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
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/wait"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// oldRelease is the release before blocks: every node's configuration gives host-local the
// whole prefix (UPGRADE_OLD_COMMIT overrides it).
const oldRelease = "2fa1134"

// oldBinary returns network-apiserver built from the old release, building it once into
// _output/upgrade/old (kept, with the commit it was built from, for the next runs).
func oldBinary(t *testing.T) string {
	t.Helper()
	commit := os.Getenv("UPGRADE_OLD_COMMIT")
	if commit == "" {
		commit = oldRelease
	}
	return binaryAt(t, commit, "old")
}

// binaryAt returns network-apiserver built from commit, building it once into
// _output/upgrade/<dir> (kept, with the commit it was built from, for the next runs).
func binaryAt(t *testing.T, commit, dir string) string {
	t.Helper()
	dir = filepath.Join(repoRoot, "_output", "upgrade", dir)
	bin, stamp := filepath.Join(dir, "network-apiserver"), filepath.Join(dir, "commit")
	if got, err := os.ReadFile(stamp); err == nil && strings.TrimSpace(string(got)) == commit {
		if _, err := os.Stat(bin); err == nil {
			return bin
		}
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive %q | tar -x -C %q", repoRoot, commit, src))
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("extracting %s: %v\n%s", commit, err, out)
	}
	build := exec.Command("nice", "-n", "10", "go", "build", "-o", bin, "./cmd/network-apiserver")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building network-apiserver of %s: %v\n%s", commit, err, out)
	}
	if err := os.WriteFile(stamp, []byte(commit+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return bin
}

// waitEntry polls Network name until check accepts node's entry, and returns the entry.
func waitEntry(t *testing.T, client versioned.Interface, name, node, what string, check func(v1.NetworkNodeStatus) bool) v1.NetworkNodeStatus {
	t.Helper()
	var last v1.NetworkNodeStatus
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		nw, err := client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, e := range nw.Status.Nodes {
			if e.NodeName == node {
				last = e
				return check(e), nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("%s's entry never %s; last: %+v", node, what, last)
	}
	return last
}

// nodeBlocks returns node's blocks of the Network in the default namespace.
func nodeBlocks(t *testing.T, client versioned.Interface, node string) []v1.Block {
	t.Helper()
	list, err := client.SamplecrdV1().BlockAllocations("default").List(context.Background(), metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("nodeName", node).String()})
	if err != nil {
		t.Fatal(err)
	}
	var out []v1.Block
	for _, o := range list.Items {
		out = append(out, o.Blocks...)
	}
	return out
}

func inBlocks(a netip.Addr, blocks []v1.Block, origin string) bool {
	for _, b := range blocks {
		if p, err := netip.ParsePrefix(b.CIDR); err == nil && p.Contains(a) && (origin == "" || b.Origin == origin) {
			return true
		}
	}
	return false
}

// TestUpgradeFromWholePrefix: the release before blocks (old server, old agents on two nodes,
// each node's host-local handing out the whole prefix, so both nodes' first pods get the same
// address), then the server and the agents swapped for this build, one node at a time: the
// first new agent keeps its pods' addresses by covering them with blocks (origin
// CoversLeases) and waits for the other node before claiming fresh blocks (WaitingForUpgrade);
// the second finds its first pod's address inside the first node's block and says so
// (AddressConflict naming the address, its container and the other node's block); the existing
// pods keep reaching each other within their node, and new pods get addresses no node holds.
func TestUpgradeFromWholePrefix(t *testing.T) {
	netnstest.RequireRoot(t)
	pluginDir := requireCNIPlugins(t, "bridge", "host-local", "loopback")
	old := oldBinary(t)
	t.Setenv("E2E_KUBECTL", tool(t, "KUBECTL", "kubectl"))
	s := startStandaloneFrom(t, standaloneFiles{binary: old}, "--controllers=false")
	client := s.clientset(t)
	ctx := context.Background()

	ul := newUnderlay(t)
	n1, n2 := ul.addNode(t, 1, pluginDir), ul.addNode(t, 2, pluginDir)
	for _, n := range []*mnNode{n1, n2} {
		n.binary = old
		n.startAgent(s.kubeconfig)
	}
	const name, key = "legacy", "default/legacy"
	prefix := netip.MustParsePrefix("10.66.0.0/24")
	if _, err := client.SamplecrdV1().Networks("default").Create(ctx, &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NetworkSpec{CIDR: prefix.String()},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	n1.waitConfList(key)
	n2.waitConfList(key)

	addPod := func(n *mnNode, id string) *mnPod {
		t.Helper()
		ns := netnstest.New(t, "pod")
		ns.DisableDAD(t)
		p, err := n.add(key, id, ns)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Three pods on n1, one on n2: today's bug gives n2's pod n1's first address.
	a0, a1, a2 := addPod(n1, "n1-old0"), addPod(n1, "n1-old1"), addPod(n1, "n1-old2")
	b0 := addPod(n2, "n2-old0")
	if a0.ip != b0.ip {
		t.Fatalf("the old release gave n1-old0 %s and n2-old0 %s: the collision this test starts from did not happen", a0.ip, b0.ip)
	}
	collided := b0.ip
	t.Logf("old release: n1 pods %s %s %s, n2 pod %s", a0.ip, a1.ip, a2.ip, b0.ip)

	// A continuous ping within n1 through the whole upgrade: its lost pings and longest outage
	// are reported (the figures), and it must be answered at the end.
	within := startPing(t, "n1-old1 -> n1-old0 during the upgrade", a1.ns.Path, a0.ip, pingInterval)

	// The server first, in place (same etcd data, certificate, port): the old agents keep running.
	s.stop()
	s = startStandaloneFrom(t, standaloneFiles{dataDir: s.dataDir, port: s.port}, "--controllers=false")
	client = s.clientset(t)

	// n1's agent: its leases are covered by blocks; fresh blocks wait for n2.
	n1.stopAgent()
	n1.binary = ""
	n1.startAgent(s.kubeconfig, "--underlay-interface", "eth0")
	e1 := waitEntry(t, client, name, "n1", "said WaitingForUpgrade with its leases covered", func(e v1.NetworkNodeStatus) bool {
		return e.IPAMMode == "Blocks" && e.Reason == "WaitingForUpgrade" && len(e.Blocks) > 0
	})
	if e1.Ready || !strings.Contains(e1.Message, "n2 (no ipamMode: an agent from before blocks") {
		t.Errorf("n1's entry while n2 runs the old agent: %+v, want not ready, naming n2", e1)
	}
	blocks1 := nodeBlocks(t, client, "n1")
	for _, p := range []*mnPod{a0, a1, a2} {
		if !inBlocks(p.ip, blocks1, "CoversLeases") {
			t.Errorf("%s's address %s is not inside a CoversLeases block of n1: %+v", p.id, p.ip, blocks1)
		}
	}
	// n1's configuration now holds its blocks only.
	var conf []byte
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		conf = n1.waitConfList(key).Bytes
		return strings.Contains(string(conf), "rangeStart"), nil
	}); err != nil {
		t.Errorf("n1's configuration after the cover still hands out the whole prefix:\n%s", conf)
	}

	// n2's agent: its pod's address is inside n1's block: a named conflict; it gets a fresh
	// block of its own, and n1's wait ends.
	n2.stopAgent()
	n2.binary = ""
	n2.startAgent(s.kubeconfig, "--underlay-interface", "eth0")
	e2 := waitEntry(t, client, name, "n2", "reported the AddressConflict", func(e v1.NetworkNodeStatus) bool {
		return e.Reason == "AddressConflict" && e.IPAMMode == "Blocks" && len(e.Blocks) > 0
	})
	var conflictBlock string
	for _, b := range blocks1 {
		if netip.MustParsePrefix(b.CIDR).Contains(collided) {
			conflictBlock = b.CIDR
		}
	}
	for _, want := range []string{collided.String() + " leased on node n2 by container n2-old0", "inside node n1's block " + conflictBlock} {
		if !strings.Contains(e2.Message, want) {
			t.Errorf("n2's AddressConflict message %q lacks %q", e2.Message, want)
		}
	}
	if e2.Ready {
		t.Errorf("n2's entry is ready despite the conflict: %+v", e2)
	}
	t.Logf("n2's entry: %s: %s", e2.Reason, e2.Message)
	waitEntry(t, client, name, "n1", "became ready with a fresh block once n2 upgraded", func(e v1.NetworkNodeStatus) bool {
		return e.Ready && e.IPAMMode == "Blocks"
	})
	blocks1, blocks2 := nodeBlocks(t, client, "n1"), nodeBlocks(t, client, "n2")
	for _, x := range blocks1 {
		for _, y := range blocks2 {
			if netip.MustParsePrefix(x.CIDR).Overlaps(netip.MustParsePrefix(y.CIDR)) {
				t.Errorf("n1's block %s overlaps n2's block %s", x.CIDR, y.CIDR)
			}
		}
	}

	stats := within.stop()
	t.Logf("ping within n1 across the server and agent swaps: %s", stats)
	if !stats.LastOK {
		t.Errorf("the ping within n1 is not answered after the upgrade: %s", stats)
	}
	// The existing pods keep reaching each other within their node, and the gateway.
	pingOnceNS(t, "n1-old1 -> n1-old0", a1.ns.Path, a0.ip)
	pingOnceNS(t, "n1-old2 -> n1-old1", a2.ns.Path, a1.ip)
	pingOnceNS(t, "n2-old0 -> gateway", b0.ns.Path, netip.MustParseAddr("10.66.0.1"))

	// New pods: unique, inside their node's blocks, never an address leased anywhere before.
	held := map[netip.Addr]string{a0.ip: a0.id, a1.ip: a1.id, a2.ip: a2.id}
	var fresh []*mnPod
	for i := range 2 {
		fresh = append(fresh, addPod(n1, fmt.Sprintf("n1-new%d", i)), addPod(n2, fmt.Sprintf("n2-new%d", i)))
	}
	blocks1, blocks2 = nodeBlocks(t, client, "n1"), nodeBlocks(t, client, "n2")
	for _, p := range fresh {
		if other, ok := held[p.ip]; ok || p.ip == collided {
			t.Errorf("new pod %s got %s, already held (%s)", p.id, p.ip, other)
		}
		held[p.ip] = p.id
		mine := blocks1
		if p.node == n2 {
			mine = blocks2
		}
		if !inBlocks(p.ip, mine, "") {
			t.Errorf("new pod %s on %s got %s, outside its node's blocks %+v", p.id, p.node.name, p.ip, mine)
		}
	}
	// Across nodes, through the segment the upgrade brought (the new server gave the Network
	// from before VNIs one).
	nw, err := client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nw.Status.VNI == 0 {
		t.Fatalf("the Network created by the old server has no VNI after the upgrade: %+v", nw.Status)
	}
	waitEntry(t, client, name, "n2", "reported its segment", func(e v1.NetworkNodeStatus) bool { return e.VXLAN != "" })
	waitEntry(t, client, name, "n1", "reported its segment", func(e v1.NetworkNodeStatus) bool { return e.VXLAN != "" })
	pingOnceNS(t, "n1-new0 -> n2-new0", fresh[0].ns.Path, fresh[1].ip)
	pingOnceNS(t, "n2-new1 -> n1-new1", fresh[3].ns.Path, fresh[2].ip)
}

// TestUpgradeMixedReplicas: a server of the release before blocks and one of this build side by
// side on one etcd, agents of this build on two nodes. The old replica's status write decodes
// the Network with its old types and so drops every field it does not know (status.vni, the
// entries' blocks, ipamMode, vxlan, mtu, leases); what must not be lost lives elsewhere: the
// block keys and BlockAllocations (the old replica never writes them) and the segment keys.
// The copies heal: the new replica's segment loop restores status.vni, each agent re-applies
// its entry, and fresh claims (held back while entries lack ipamMode: Blocks) go on again.
func TestUpgradeMixedReplicas(t *testing.T) {
	netnstest.RequireRoot(t)
	pluginDir := filepath.Join(repoRoot, "_output", "bin", "cni")
	old := oldBinary(t)
	etcdDir := t.TempDir()
	etcd, err := localcluster.StartEtcd(context.Background(), etcdDir, filepath.Join(repoRoot, "_output", "bin"), 1)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(etcd.Stop)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(etcdDir, "etcd-0.log"))
			t.Logf("etcd's log (warnings and worse):\n%s", tailN(bytes.NewBuffer(b), 20000))
		}
	})
	etcdArgs := []string{"--controllers=false", "--etcd-servers", strings.Join(etcd.Endpoints, ","),
		"--etcd-cafile", etcd.PKI.CAFile, "--etcd-certfile", etcd.Client.Cert, "--etcd-keyfile", etcd.Client.Key}
	s := startStandaloneFrom(t, standaloneFiles{}, etcdArgs...)
	olds := startStandaloneFrom(t, standaloneFiles{binary: old}, etcdArgs...)
	client, oldClient := s.clientset(t), olds.clientset(t)
	ctx := context.Background()

	ul := newUnderlay(t)
	n1, n2 := ul.addNode(t, 1, pluginDir), ul.addNode(t, 2, pluginDir)
	for _, n := range []*mnNode{n1, n2} {
		n.startAgent(s.kubeconfig, "--underlay-interface", "eth0")
	}
	const name = "mixed"
	if _, err := client.SamplecrdV1().Networks("default").Create(ctx, &v1.Network{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.NetworkSpec{CIDR: "10.67.0.0/24"},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	complete := func(e v1.NetworkNodeStatus) bool {
		return e.Ready && e.IPAMMode == "Blocks" && len(e.Blocks) > 0 && e.VXLAN != "" && e.MTU == 1450 && e.Leases != nil
	}
	before := map[string]v1.NetworkNodeStatus{}
	for _, node := range []string{"n1", "n2"} {
		before[node] = waitEntry(t, client, name, node, "reported blocks, segment and MTU", complete)
	}
	nw, err := client.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vni := nw.Status.VNI
	if vni == 0 {
		t.Fatal("no status.vni from the new replica")
	}
	blkBefore, err := client.SamplecrdV1().BlockAllocations("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	etcdClient, err := clientv3.New(clientv3.Config{Endpoints: etcd.Endpoints, TLS: etcd.TLS, DialTimeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcdClient.Close()
	blockKeys := func() string {
		t.Helper()
		resp, err := etcdClient.Get(ctx, "/registry/samplecrd.k8s.io/blocks/"+string(nw.UID)+"/", clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, kv := range resp.Kvs {
			out = append(out, fmt.Sprintf("%s@%d=%s", kv.Key, kv.ModRevision, kv.Value))
		}
		return strings.Join(out, "\n")
	}
	keysBefore := blockKeys()
	if strings.Count(keysBefore, "\n") < 2 {
		t.Fatalf("block keys before the old replica's write: %s, want the gateway key and a block per node", keysBefore)
	}

	// Watch through the new replica, then write the status through the old one.
	w, err := client.SamplecrdV1().Networks("default").Watch(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String(), ResourceVersion: nw.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	oldView, err := oldClient.SamplecrdV1().Networks("default").Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	if _, err := oldClient.SamplecrdV1().Networks("default").UpdateStatus(ctx, oldView, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("status write through the old replica: %v", err)
	}
	// The drop is seen, then the heal: status.vni back, each entry complete again.
	dropped, healed := false, false
	deadline := time.After(90 * time.Second)
	for !healed {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			got, ok := ev.Object.(*v1.Network)
			if !ok {
				continue
			}
			full := got.Status.VNI == vni && len(got.Status.Nodes) == 2
			for _, e := range got.Status.Nodes {
				full = full && complete(e)
				if e.IPAMMode == "" || len(e.Blocks) == 0 {
					dropped = true
				}
			}
			if got.Status.VNI == 0 {
				dropped = true
			}
			healed = dropped && full
		case <-deadline:
			t.Fatalf("never healed after the old replica's write (drop seen: %v); agents:\n%s\n%s", dropped, n1.log.tail(), n2.log.tail())
		}
	}
	t.Logf("healed %v after the old replica's status write", time.Since(written).Round(time.Millisecond))
	// Nothing of the blocks was lost or rewritten.
	blkAfter, err := client.SamplecrdV1().BlockAllocations("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(blkAfter.Items) != len(blkBefore.Items) {
		t.Fatalf("BlockAllocations %d after, %d before", len(blkAfter.Items), len(blkBefore.Items))
	}
	for i := range blkBefore.Items {
		b, a := blkBefore.Items[i], blkAfter.Items[i]
		if a.Name != b.Name || a.ResourceVersion != b.ResourceVersion || fmt.Sprint(a.Blocks) != fmt.Sprint(b.Blocks) {
			t.Errorf("BlockAllocation %s changed: %+v, was %+v", b.Name, a, b)
		}
	}
	if after := blockKeys(); after != keysBefore {
		t.Errorf("block keys changed by the old replica:\n%s\nwere:\n%s", after, keysBefore)
	}
	// Fresh claims go on once the entries are healed (they waited while ipamMode was gone).
	if _, err := client.SamplecrdV1().Networks("default").ClaimBlocks(ctx, name, &v1.BlockClaim{NodeName: "n3"}, metav1.CreateOptions{}); err != nil {
		t.Errorf("a fresh claim after the heal: %v", err)
	}
}
