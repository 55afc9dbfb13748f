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
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	versionedv1 "github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/typed/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

const blkBlocksRoot = "/registry/samplecrd.k8s.io/blocks/"

// blkRecord is a stored key of the block keyspace.
type blkRecord struct {
	CIDR string `json:"cidr"`
	UID  string `json:"uid"`
	Node string `json:"node"`
	Role string `json:"role"`
}

// blkKeys reads the block keyspace of the Network with uid.
func blkKeys(t *testing.T, c *clientv3.Client, uid string) []blkRecord {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, blkBlocksRoot+uid+"/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	var out []blkRecord
	for _, kv := range resp.Kvs {
		var r blkRecord
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Fatalf("block key %s = %q: %v", kv.Key, kv.Value, err)
		}
		out = append(out, r)
	}
	return out
}

// blkObjectKeys lists the etcd keys of the BlockAllocations of network in ns.
func blkObjectKeys(t *testing.T, c *clientv3.Client, ns, network string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); strings.Contains(k, "/blockallocations/"+ns+"/"+network+".") {
			out = append(out, k)
		}
	}
	return out
}

// blkCheck asserts the invariant of one Network's blocks: the keys are exactly the objects'
// blocks (each owned by its node), none overlaps another, none contains the gateway, all are
// inside the prefix. It returns the number of blocks.
func blkCheck(t *testing.T, c versioned.Interface, etcd *clientv3.Client, ns string, n *v1.Network) int {
	t.Helper()
	return blkCheckGatewayKeys(t, c, etcd, ns, n, 1)
}

// blkCheckGatewayKeys is blkCheck for a Network with gatewayKeys gateway keys (-1: 0 or 1,
// where --gateway-keys=none and write replicas share one etcd).
func blkCheckGatewayKeys(t *testing.T, c versioned.Interface, etcd *clientv3.Client, ns string, n *v1.Network, gatewayKeys int) int {
	t.Helper()
	ctx := testContext(t)
	prefix := netip.MustParsePrefix(n.Spec.CIDR)
	gw := netip.MustParseAddr(n.Spec.Gateway)
	list, err := c.SamplecrdV1().BlockAllocations(ns).List(ctx, metav1.ListOptions{FieldSelector: "network=" + n.Name})
	if err != nil {
		t.Fatal(err)
	}
	fromObjects := map[string]string{} // block -> node
	var all []netip.Prefix
	for _, b := range list.Items {
		if b.NetworkUID != string(n.UID) || b.Network != n.Name || b.Name != n.Name+"."+b.NodeName {
			t.Errorf("block allocation %s: network %s uid %s node %s", b.Name, b.Network, b.NetworkUID, b.NodeName)
		}
		for _, blk := range b.Blocks {
			p := netip.MustParsePrefix(blk.CIDR)
			if !prefix.Contains(p.Addr()) || p.Bits() < prefix.Bits() {
				t.Errorf("block %s of %s is outside %s", p, b.NodeName, prefix)
			}
			if p.Contains(gw) {
				t.Errorf("block %s of %s contains the gateway %s", p, b.NodeName, gw)
			}
			for _, q := range all {
				if q.Overlaps(p) {
					t.Errorf("block %s of %s overlaps %s", p, b.NodeName, q)
				}
			}
			all = append(all, p)
			fromObjects[blk.CIDR] = b.NodeName
		}
	}
	fromKeys := map[string]string{}
	gateways := 0
	for _, r := range blkKeys(t, etcd, string(n.UID)) {
		switch r.Role {
		case "gateway":
			gateways++
			if r.CIDR != netip.PrefixFrom(gw, gw.BitLen()).String() {
				t.Errorf("gateway key %s, want the gateway %s", r.CIDR, gw)
			}
		case "block":
			fromKeys[r.CIDR] = r.Node
		default:
			t.Errorf("key of role %q: %+v", r.Role, r)
		}
	}
	if gateways != gatewayKeys && (gatewayKeys >= 0 || gateways > 1) {
		t.Errorf("%d gateway keys, want %d", gateways, gatewayKeys)
	}
	if fmt.Sprint(fromKeys) != fmt.Sprint(fromObjects) {
		t.Errorf("block keys %v != the objects' blocks %v", fromKeys, fromObjects)
	}
	return len(all)
}

// TestBlockClaims claims blocks from many goroutines for several nodes of one Network, then reads
// them as kubectl does, exhausts the prefix, and checks the invariant at each step.
func TestBlockClaims(t *testing.T) {
	s := sharedServer(t)
	ns, ctx, c, etcd := blkSetup(t, s)

	// A /22 gets /26 blocks (16 of them); the first holds the gateway, so it is handed out in
	// smaller pieces once the other 15 are gone.
	n, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("blk", "10.41.0.0/22", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if keys := blkKeys(t, etcd, string(n.UID)); len(keys) != 1 || keys[0].Role != "gateway" || keys[0].CIDR != "10.41.0.1/32" {
		t.Fatalf("a new Network's block keys: %+v, want its gateway key alone", keys)
	}

	const nodes, perNode = 6, 3
	var wg sync.WaitGroup
	errs := make(chan error, nodes*perNode)
	for i := range nodes * perNode {
		wg.Add(1)
		go func() {
			defer wg.Done()
			node := fmt.Sprintf("node-%d", i%nodes)
			got, err := protobufClient(t, s).SamplecrdV1().Networks(ns).ClaimBlocks(ctx, "blk", &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{})
			switch {
			case err != nil:
				errs <- fmt.Errorf("claim for %s: %w", node, err)
			case got.NodeName != node || len(got.Blocks) == 0:
				errs <- fmt.Errorf("claim for %s answered %+v", node, got)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := blkCheck(t, c, etcd, ns, n); got != nodes*perNode {
		t.Fatalf("%d blocks after %d claims", got, nodes*perNode)
	}

	// kubectl get blk --field-selector nodeName=node-1
	one, err := c.SamplecrdV1().BlockAllocations(ns).List(ctx, metav1.ListOptions{FieldSelector: "nodeName=node-1"})
	if err != nil {
		t.Fatal(err)
	}
	if len(one.Items) != 1 || one.Items[0].Name != "blk.node-1" || len(one.Items[0].Blocks) != perNode {
		t.Fatalf("field selector nodeName=node-1: %+v", one.Items)
	}
	for _, b := range one.Items[0].Blocks {
		if b.Origin != "Claimed" || b.ClaimedAt.IsZero() {
			t.Errorf("block %+v: origin and claimedAt", b)
		}
	}
	// An agent watching its own node sees its next claim, and nothing of the others'.
	w, err := c.SamplecrdV1().BlockAllocations(ns).Watch(ctx, metav1.ListOptions{FieldSelector: "nodeName=node-7", ResourceVersion: one.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for _, node := range []string{"node-0", "node-7"} {
		if _, err := c.SamplecrdV1().Networks(ns).ClaimBlocks(ctx, "blk", &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ev := nextEvent(t, w)
	if b, ok := ev.Object.(*v1.BlockAllocation); ev.Type != watch.Added || !ok || b.NodeName != "node-7" || len(b.Blocks) != 1 {
		t.Fatalf("watch event %s %+v, want node-7's new allocation", ev.Type, ev.Object)
	}

	// The table kubectl prints.
	hc := httpClient(t, s)
	resp := doRaw(t, hc, http.MethodGet, fmt.Sprintf("%s/apis/samplecrd.k8s.io/v1/namespaces/%s/blockallocations", s.URL, ns), "",
		"application/json;as=Table;v=v1;g=meta.k8s.io", nil)
	var table metav1.Table
	if err := json.Unmarshal(resp.Body, &table); resp.Code != http.StatusOK || err != nil {
		t.Fatalf("table: %d %s %v", resp.Code, resp.Body, err)
	}
	var names []string
	for _, col := range table.ColumnDefinitions {
		if col.Priority == 0 {
			names = append(names, col.Name)
		}
	}
	if got := strings.Join(names, " "); got != "Name Network Node Blocks Age" || len(table.Rows) != nodes+1 {
		t.Errorf("table columns %q, %d rows", got, len(table.Rows))
	}

	// Claim until nothing is left: the answer is a 409 with reason AddressesExhausted.
	var exhausted error
	for range 64 {
		if _, err := c.SamplecrdV1().Networks(ns).ClaimBlocks(ctx, "blk", &v1.BlockClaim{NodeName: "node-8"}, metav1.CreateOptions{}); err != nil {
			exhausted = err
			break
		}
	}
	var status apierrors.APIStatus
	if !errors.As(exhausted, &status) || status.Status().Code != http.StatusConflict || apierrors.ReasonForError(exhausted) != "AddressesExhausted" ||
		!strings.Contains(exhausted.Error(), "10.41.0.0/22: no free address block for node-8 (") {
		t.Fatalf("claim of an exhausted prefix: %v (reason %q)", exhausted, apierrors.ReasonForError(exhausted))
	}
	// 15 /26 blocks, and the first /26 less its gateway as /27, /28, /29, /30, /31 and /32.
	if got := blkCheck(t, c, etcd, ns, n); got != 21 {
		t.Errorf("%d blocks in an exhausted /22, want 21", got)
	}
}

// TestBlockAllocationsAreReadOnly: no client, the admin included, writes a BlockAllocation.
func TestBlockAllocationsAreReadOnly(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	c := jsonClient(t, s)
	if _, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("ro", "10.42.0.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SamplecrdV1().Networks(ns).ClaimBlocks(ctx, "ro", &v1.BlockClaim{NodeName: "n1"}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := fmt.Sprintf("%s/apis/samplecrd.k8s.io/v1/namespaces/%s/blockallocations", s.URL, ns)
	body := []byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"BlockAllocation","metadata":{"name":"ro.n1"},"network":"ro","nodeName":"n1","networkUID":"x","blocks":[{"cidr":"10.42.0.0/24"}]}`)
	hc := httpClient(t, s)
	for _, req := range []struct{ method, url, contentType string }{
		{http.MethodPost, base, contentTypeJSON},
		{http.MethodPut, base + "/ro.n1", contentTypeJSON},
		{http.MethodPatch, base + "/ro.n1", "application/merge-patch+json"},
		{http.MethodPatch, base + "/ro.n1?fieldManager=x", "application/apply-patch+yaml"},
		{http.MethodDelete, base + "/ro.n1", ""},
		{http.MethodDelete, base, ""},
	} {
		resp := doRaw(t, hc, req.method, req.url, req.contentType, contentTypeJSON, body)
		if resp.Code != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d %s, want 405", req.method, req.url, resp.Code, resp.Body)
		}
	}
	got, err := c.SamplecrdV1().BlockAllocations(ns).Get(ctx, "ro.n1", metav1.GetOptions{})
	if err != nil || len(got.Blocks) != 1 || got.Blocks[0].CIDR == "10.42.0.0/24" {
		t.Fatalf("after the refused writes: %+v, %v", got, err)
	}
}

// TestBlockClaimBadInput: claims the server cannot honour are 4xx naming the problem.
func TestBlockClaimBadInput(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	if _, err := networks.Create(ctx, newNetwork("bad", "10.43.0.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		network string
		claim   v1.BlockClaim
		check   func(error) bool
		want    string
	}{
		{"bad", v1.BlockClaim{}, apierrors.IsInvalid, "nodeName: Required value"},
		{"bad", v1.BlockClaim{NodeName: "Node_1"}, apierrors.IsInvalid, "nodeName: Invalid value"},
		{"bad", v1.BlockClaim{NodeName: "n1", Cover: []string{"10.43.0.5", "10.43.0.x"}}, apierrors.IsInvalid, "cover[1]: Invalid value"},
		{"bad", v1.BlockClaim{NodeName: "n1", Cover: []string{"10.44.0.5"}}, apierrors.IsInvalid, "cover[0]: Invalid value: \"10.44.0.5\": not inside the Network's prefix 10.43.0.0/24"},
		{"bad", v1.BlockClaim{ObjectMeta: metav1.ObjectMeta{Name: "other"}, NodeName: "n1"}, apierrors.IsInvalid, "metadata.name"},
		{"missing", v1.BlockClaim{NodeName: "n1"}, apierrors.IsNotFound, `"missing" not found`},
	} {
		_, err := networks.ClaimBlocks(ctx, tc.network, &tc.claim, metav1.CreateOptions{})
		if !tc.check(err) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("claim %+v on %s: %v, want an error containing %q", tc.claim, tc.network, err, tc.want)
		}
	}

	// A Network being deleted (held by a finalizer) gives out no more blocks.
	held := newNetwork("held", "10.43.1.0/24", "")
	held.Finalizers = []string{"example.com/hold"}
	if _, err := networks.Create(ctx, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := networks.Delete(ctx, "held", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := networks.ClaimBlocks(ctx, "held", &v1.BlockClaim{NodeName: "n1"}, metav1.CreateOptions{})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "being deleted") {
		t.Errorf("claim on a Network being deleted: %v, want a 409", err)
	}
	if _, err := networks.Patch(ctx, "held", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestBlockGatewayMove: a gateway cannot move into a block (422 on spec.gateway naming it and its
// node); a move elsewhere moves the gateway key with it, and claims then avoid the new gateway.
func TestBlockGatewayMove(t *testing.T) {
	s := sharedServer(t)
	ns, ctx, c, etcd := blkSetup(t, s)
	networks := c.SamplecrdV1().Networks(ns)
	n, err := networks.Create(ctx, newNetwork("gw", "10.44.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A /24 gets /28 blocks, any of the 15 that do not hold the gateway.
	b, err := networks.ClaimBlocks(ctx, "gw", &v1.BlockClaim{NodeName: "node2"}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	block := blkGatewayIntoBlockRefused(ctx, t, networks, n, b)

	// Move it to a free address: the key moves along, in the Network's own write.
	n, err = networks.Get(ctx, "gw", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Spec.Gateway = "10.44.0.254"
	if block.Contains(netip.MustParseAddr(n.Spec.Gateway)) {
		n.Spec.Gateway = "10.44.0.126"
	}
	if n, err = networks.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	blkCheck(t, c, etcd, ns, n)
	// Claims now use 10.44.0.0/28 and never the block holding the new gateway.
	for range 15 {
		if _, err := networks.ClaimBlocks(ctx, "gw", &v1.BlockClaim{NodeName: "node3"}, metav1.CreateOptions{}); err != nil {
			break
		}
	}
	blkCheck(t, c, etcd, ns, n)
}

// TestBlocksGoWithTheirNetwork: a Network's delete removes its block keys, its gateway key and
// its BlockAllocations in its own transaction; another Network's stay.
func TestBlocksGoWithTheirNetwork(t *testing.T) {
	s := sharedServer(t)
	ns, ctx, c, etcd := blkSetup(t, s)
	networks := c.SamplecrdV1().Networks(ns)
	var nets []*v1.Network
	for i, name := range []string{"del", "delx"} {
		n, err := networks.Create(ctx, newNetwork(name, fmt.Sprintf("10.45.%d.0/24", i), ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nets = append(nets, n)
		for _, node := range []string{"a", "b"} {
			if _, err := networks.ClaimBlocks(ctx, name, &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if keys := blkObjectKeys(t, etcd, ns, "del"); len(keys) != 2 {
		t.Fatalf("BlockAllocation keys of del before its delete: %v", keys)
	}
	if err := networks.Delete(ctx, "del", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if keys := blkKeys(t, etcd, string(nets[0].UID)); len(keys) != 0 {
		t.Errorf("block keys left after the delete: %+v", keys)
	}
	if keys := blkObjectKeys(t, etcd, ns, "del"); len(keys) != 0 {
		t.Errorf("BlockAllocations left after the delete: %v", keys)
	}
	if keys := blkKeys(t, etcd, string(nets[1].UID)); len(keys) != 3 {
		t.Errorf("the other Network's block keys: %+v, want its gateway and 2 blocks", keys)
	}
	if keys := blkObjectKeys(t, etcd, ns, "delx"); len(keys) != 2 {
		t.Errorf("the other Network's BlockAllocations: %v", keys)
	}
	// A claim on the deleted Network is a 404.
	if _, err := networks.ClaimBlocks(ctx, "del", &v1.BlockClaim{NodeName: "a"}, metav1.CreateOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("claim on a deleted Network: %v", err)
	}
}

// TestBlockClaimWritesAMissingGatewayKey: a Network created before blocks (no gateway key) gets
// its gateway key from its first claim, so no block covers the gateway.
func TestBlockClaimWritesAMissingGatewayKey(t *testing.T) {
	s := sharedServer(t)
	ns, ctx, c, etcd := blkSetup(t, s)
	n, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("old", "10.46.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Delete(ctx, blkBlocksRoot+string(n.UID)+"/", clientv3.WithPrefix()); err != nil {
		t.Fatal(err)
	}
	for range 16 {
		if _, err := c.SamplecrdV1().Networks(ns).ClaimBlocks(ctx, "old", &v1.BlockClaim{NodeName: "n1"}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	blkCheck(t, c, etcd, ns, n)
}

// TestBlockVerifierFixesKeys breaks the block keyspace around the API (a block key removed, an
// orphan block key, a gateway key removed, keys of a Network that is gone) and waits for the
// verifier to put it right: afterwards the invariant holds again. A Network without a gateway
// key is no fault (claims are guarded by its allocation key): that key stays removed.
func TestBlockVerifierFixesKeys(t *testing.T) {
	s := framework.StartForTest(t, "--allocation-verify-interval=1s")
	ns, ctx, c, etcd := blkSetup(t, s)
	networks := c.SamplecrdV1().Networks(ns)
	n, err := networks.Create(ctx, newNetwork("vf", "10.47.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var claimed *v1.BlockAllocation
	taken := map[string]bool{}
	for _, node := range []string{"a", "b"} {
		if claimed, err = networks.ClaimBlocks(ctx, "vf", &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		taken[claimed.Blocks[0].CIDR] = true
	}
	// An orphan key where no node holds a block (claims pick at random among the free ones).
	orphanBlock := "10.47.0.240/28"
	for _, candidate := range []string{"10.47.0.224/28", "10.47.0.208/28"} {
		if taken[orphanBlock] {
			orphanBlock = candidate
		}
	}
	scope := blkBlocksRoot + string(n.UID) + "/4/"
	hexOf := func(a string) string {
		b := netip.MustParseAddr(a).As4()
		return fmt.Sprintf("%02x%02x%02x%02x", b[0], b[1], b[2], b[3])
	}
	blockAddr := netip.MustParsePrefix(claimed.Blocks[0].CIDR).Addr().String()
	orphan := fmt.Sprintf(`{"cidr":%q,"namespace":%q,"name":"vf","uid":%q,"node":"x","role":"block"}`, orphanBlock, ns, n.UID)
	gone := blkBlocksRoot + "no-such-uid/4/0a2f0000"
	for _, op := range []clientv3.Op{
		clientv3.OpDelete(scope + hexOf(blockAddr)),
		clientv3.OpDelete(scope + hexOf("10.47.0.1")),
		clientv3.OpPut(scope+hexOf(netip.MustParsePrefix(orphanBlock).Addr().String()), orphan),
		clientv3.OpPut(gone, `{"cidr":"10.47.0.0/28","namespace":"x","name":"y","uid":"no-such-uid","node":"x","role":"block"}`),
	} {
		if _, err := etcd.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		keys := blkKeys(t, etcd, string(n.UID))
		resp, err := etcd.Get(ctx, gone)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 2 && len(resp.Kvs) == 0 {
			break // the two blocks, nothing else
		}
		if time.Now().After(deadline) {
			t.Fatalf("the verifier did not fix the block keys within 30s: %+v (gone key left: %d)", keys, len(resp.Kvs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	blkCheckGatewayKeys(t, c, etcd, ns, n, 0)
}

// TestBlockClaimsRaceGatewayMoves moves the gateway around while nodes claim blocks: whichever
// commits first wins, and no block ever ends up holding the gateway.
func TestBlockClaimsRaceGatewayMoves(t *testing.T) {
	s := sharedServer(t)
	ns, ctx, c, etcd := blkSetup(t, s)
	networks := c.SamplecrdV1().Networks(ns)
	if _, err := networks.Create(ctx, newNetwork("race", "10.48.0.0/24", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 24 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := networks.ClaimBlocks(ctx, "race", &v1.BlockClaim{NodeName: fmt.Sprintf("n%d", i%4)}, metav1.CreateOptions{})
			if err != nil && apierrors.ReasonForError(err) != "AddressesExhausted" {
				errs <- fmt.Errorf("claim: %w", err)
			}
		}()
	}
	moved := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range 40 {
			n, err := networks.Get(ctx, "race", metav1.GetOptions{})
			if err != nil {
				errs <- err
				return
			}
			n.Spec.Gateway = fmt.Sprintf("10.48.0.%d", 1+(i*37)%253)
			switch _, err := networks.Update(ctx, n, metav1.UpdateOptions{}); {
			case err == nil:
				moved++
			case apierrors.IsInvalid(err) && strings.Contains(err.Error(), "is inside block"), apierrors.IsConflict(err):
			default:
				errs <- fmt.Errorf("gateway move: %w", err)
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n, err := networks.Get(ctx, "race", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if blocks := blkCheck(t, c, etcd, ns, n); blocks == 0 || moved == 0 {
		t.Errorf("%d blocks claimed, %d gateway moves: the race did not happen", blocks, moved)
	}
}

// TestBlockClaimsTwoReplicas: 200 claims for 8 nodes at once, spread over two replicas of the
// server on one etcd: every claim gets a block, and the blocks never overlap.
func TestBlockClaimsTwoReplicas(t *testing.T) {
	s1 := sharedServer(t)
	s2 := framework.StartForTest(t, append(s1.EtcdFlags(), "--overlap-scope=namespace")...)
	ns := testNamespace(t)
	ctx := testContext(t)
	c1, c2 := protobufClient(t, s1), jsonClient(t, s2)
	etcd := ovlEtcd(t, s1)
	defer etcd.Close()
	// A /16 holds 1024 /26 blocks: enough for every claim.
	n, err := c1.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("two", "10.49.0.0/16", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const claims, nodes = 200, 8
	var wg sync.WaitGroup
	errs := make(chan error, claims)
	for i := range claims {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := c1
			if i%2 == 1 {
				c = c2
			}
			if _, err := c.SamplecrdV1().Networks(ns).ClaimBlocks(ctx, "two", &v1.BlockClaim{NodeName: fmt.Sprintf("node-%d", i%nodes)}, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("claim: %v", err)
	}
	if got := blkCheck(t, c1, etcd, ns, n); got != claims {
		t.Errorf("%d blocks after %d claims", got, claims)
	}
}

// blkGatewayIntoBlockRefused moves n's gateway into the first block of b, as a dry run and for
// real: both are a 422 on spec.gateway naming the block and its node. It returns the block.
func blkGatewayIntoBlockRefused(ctx context.Context, t *testing.T, networks versionedv1.NetworkInterface, n *v1.Network, b *v1.BlockAllocation) netip.Prefix {
	t.Helper()
	block := netip.MustParsePrefix(b.Blocks[0].CIDR)
	inside := block.Addr().Next().Next().String()
	moved := n.DeepCopy()
	moved.Spec.Gateway = inside
	want := fmt.Sprintf("spec.gateway: Invalid value: %q: %s is inside block %s of node %s", inside, inside, block, b.NodeName)
	for _, dryRun := range [][]string{{metav1.DryRunAll}, nil} {
		_, err := networks.Update(ctx, moved, metav1.UpdateOptions{DryRun: dryRun})
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("gateway moved into a block (dry run %v): %v, want a 422 containing %q", dryRun, err, want)
		}
	}
	return block
}

// blkSetup is what a block test starts from on server s: a namespace of its own, a context, a JSON
// client and an etcd client, closed when the test ends.
func blkSetup(t *testing.T, s *framework.Server) (string, context.Context, versioned.Interface, *clientv3.Client) {
	t.Helper()
	etcd := ovlEtcd(t, s)
	t.Cleanup(func() { etcd.Close() })
	return testNamespace(t), testContext(t), jsonClient(t, s), etcd
}
