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
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
)

// beforeGatewayKeys is the last release whose claims rely on the Networks' gateway keys
// (UPGRADE_GATEWAY_OLD_COMMIT overrides it).
const beforeGatewayKeys = "c2ba97e"

// TestUpgradeToNoGatewayKeys is the rolling upgrade of docs/allocation.md ("Networks without a
// gateway key") with two builds on one etcd, under claims and gateway moves through every
// replica at once:
//  1. the release before --gateway-keys beside this build with --gateway-keys=write (the
//     default): no block ever holds its Network's gateway, every Network has exactly its
//     gateway key, and neither verifier reports or changes anything;
//  2. the old replica gone, a replica with --gateway-keys=none beside the one with write, on
//     the Networks of round 1 and new ones: no block holds a gateway, a gateway key that is
//     left is its gateway's, and neither verifier — nor the first verification of a none
//     replica started afterwards — reports or changes anything.
func TestUpgradeToNoGatewayKeys(t *testing.T) {
	commit := os.Getenv("UPGRADE_GATEWAY_OLD_COMMIT")
	if commit == "" {
		commit = beforeGatewayKeys
	}
	old := binaryAt(t, commit, "before-gateway-keys")
	args, etcdClient := sharedEtcd(t)

	olds := startStandaloneFrom(t, standaloneFiles{binary: old}, args...)
	write := startStandaloneFrom(t, standaloneFiles{}, append(args, "--gateway-keys=write")...)
	clients := map[string]versioned.Interface{"old": fastClient(t, olds), "write": fastClient(t, write)}
	churnGateways(t, 1, clients)
	keys := checkGatewayKeys(t, etcdClient, fastClient(t, write), true)
	waitVerified(t, map[string]versioned.Interface{"old": olds.clientset(t), "write": write.clientset(t)})
	if again := checkGatewayKeys(t, etcdClient, fastClient(t, write), true); again != keys {
		t.Fatalf("round 1: the verifiers changed the block keys:\n%s\nbefore:\n%s", again, keys)
	}

	olds.stop()
	none := startStandaloneFrom(t, standaloneFiles{}, append(args, "--gateway-keys=none")...)
	churnGateways(t, 2, map[string]versioned.Interface{"write": fastClient(t, write), "none": fastClient(t, none)})
	keys = checkGatewayKeys(t, etcdClient, fastClient(t, write), false)
	waitVerified(t, map[string]versioned.Interface{"write": write.clientset(t), "none": none.clientset(t)})
	none.stop()
	// A replica's first verification reads every key with its value.
	restarted := startStandaloneFrom(t, standaloneFiles{}, append(args, "--gateway-keys=none")...)
	waitVerified(t, map[string]versioned.Interface{"write": write.clientset(t), "restarted": restarted.clientset(t)})
	if again := checkGatewayKeys(t, etcdClient, fastClient(t, write), false); again != keys {
		t.Fatalf("round 2: the verifiers changed the block keys:\n%s\nbefore:\n%s", again, keys)
	}
}

// churnGateways creates 6 Networks (/22s: /26 blocks) through the replicas in turn and then, on
// them and on every Network of the rounds before, at once: 3 nodes claim 8 blocks each and 2
// movers move the gateway 16 times each to random addresses of its low quarter, where the
// blocks go first, every request through the next replica in turn.
func churnGateways(t *testing.T, round int, clients map[string]versioned.Interface) {
	t.Helper()
	var names []string
	for name := range clients {
		names = append(names, name)
	}
	sort.Strings(names)
	via := func(i int) versioned.Interface { return clients[names[i%len(names)]] }
	ctx := context.Background()
	for i := range 6 {
		_, err := via(i).SamplecrdV1().Networks("default").Create(ctx, &v1.Network{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("g%d-%d", round, i)},
			Spec:       v1.NetworkSpec{CIDR: fmt.Sprintf("10.%d.%d.0/22", 110+round, 4*i)}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("round %d: create g%d-%d: %v", round, round, i, err)
		}
	}
	list, err := via(0).SamplecrdV1().Networks("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for _, n := range list.Items {
		base := netip.MustParsePrefix(n.Spec.CIDR).Addr().As4()
		for node := range 3 {
			wg.Go(func() {
				for i := range 8 {
					_, err := via(node+i).SamplecrdV1().Networks("default").ClaimBlocks(ctx, n.Name,
						&v1.BlockClaim{NodeName: fmt.Sprintf("node-%d", node)}, metav1.CreateOptions{})
					// Exhausted, or lost to the moves every time (no gateway moves this often
					// outside a test): the guarantee is under test, not liveness.
					if err != nil && apierrors.ReasonForError(err) != "AddressesExhausted" && !apierrors.IsConflict(err) {
						t.Errorf("round %d: claim for %s: %v", round, n.Name, err)
					}
				}
			})
		}
		for m := range 2 {
			wg.Go(func() {
				for i := range 16 {
					c := via(m + i).SamplecrdV1().Networks("default")
					cur, err := c.Get(ctx, n.Name, metav1.GetOptions{})
					if err != nil {
						t.Errorf("round %d: get %s: %v", round, n.Name, err)
						return
					}
					cur.Spec.Gateway = netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(1 + rand.IntN(254))}).String()
					_, err = c.Update(ctx, cur, metav1.UpdateOptions{})
					if err != nil && !apierrors.IsConflict(err) && !(apierrors.IsInvalid(err) && strings.Contains(err.Error(), "is inside block")) {
						t.Errorf("round %d: gateway move of %s: %v", round, n.Name, err)
					}
				}
			})
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// checkGatewayKeys checks every stored Network's blocks: none holds its gateway, its block keys
// are the blocks its BlockAllocations list, and its gateway key, where it has one, is its
// gateway's; with every set each has exactly one. It returns every block key with its value and
// ModRevision, to compare before and after the verifiers ran.
func checkGatewayKeys(t *testing.T, c *clientv3.Client, client versioned.Interface, every bool) string {
	t.Helper()
	ctx := context.Background()
	const root = "/registry/samplecrd.k8s.io/blocks/"
	list, err := client.SamplecrdV1().Networks("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	objects, err := client.SamplecrdV1().BlockAllocations("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(ctx, root, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	type record struct{ CIDR, Node, Role string }
	keys := map[string][]record{} // Network UID → its keys
	var all []string
	for _, kv := range resp.Kvs {
		var r record
		if err := json.Unmarshal(kv.Value, &r); err != nil {
			t.Errorf("key %s: %v", kv.Key, err)
			continue
		}
		uid, _, _ := strings.Cut(strings.TrimPrefix(string(kv.Key), root), "/")
		keys[uid] = append(keys[uid], r)
		all = append(all, fmt.Sprintf("%s=%s@%d", kv.Key, kv.Value, kv.ModRevision))
	}
	blocks := 0
	for _, n := range list.Items {
		gw := netip.MustParseAddr(n.Spec.Gateway)
		listed := map[string]string{}
		for _, o := range objects.Items {
			if o.NetworkUID != string(n.UID) {
				continue
			}
			for _, b := range o.Blocks {
				if netip.MustParsePrefix(b.CIDR).Contains(gw) {
					t.Errorf("block %s of %s of network %s holds its gateway %s", b.CIDR, o.NodeName, n.Name, gw)
				}
				listed[b.CIDR] = o.NodeName
				blocks++
			}
		}
		fromKeys, gateways := map[string]string{}, 0
		for _, r := range keys[string(n.UID)] {
			switch r.Role {
			case "gateway":
				gateways++
				if r.CIDR != gw.String()+"/32" {
					t.Errorf("network %s has gateway key %s, but its gateway is %s", n.Name, r.CIDR, gw)
				}
			default:
				fromKeys[r.CIDR] = r.Node
			}
		}
		if gateways > 1 || every && gateways != 1 {
			t.Errorf("network %s has %d gateway keys", n.Name, gateways)
		}
		if fmt.Sprint(fromKeys) != fmt.Sprint(listed) {
			t.Errorf("network %s: block keys %v, its BlockAllocations list %v", n.Name, fromKeys, listed)
		}
	}
	if blocks == 0 {
		t.Error("no block was claimed")
	}
	if t.Failed() {
		t.FailNow()
	}
	return strings.Join(all, "\n")
}
