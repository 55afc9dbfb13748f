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
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
)

// beforeSingleVNIKeys is the last release whose verifier reads only VNI key pairs
// (UPGRADE_VNI_OLD_COMMIT overrides it).
const beforeSingleVNIKeys = "5e84a22"

// TestUpgradeToSingleVNIKeys is the rolling upgrade of docs/allocation.md ("One VNI key per
// Network") with two builds on one etcd, under creates and deletes through every replica at
// once:
//  1. the release before the single layout beside this build with --vni-keys=pair (the
//     default): every Network has both keys whichever replica created it, no VNI is held twice,
//     and neither verifier reports, removes or reassigns anything;
//  2. the old replica gone, a replica with --vni-keys=single beside the one with pair: each
//     create writes its replica's layout, a delete through either replica removes the other's
//     keys, no VNI twice, and neither verifier — nor the first, full, verification of a single
//     replica started afterwards — reports or changes anything.
func TestUpgradeToSingleVNIKeys(t *testing.T) {
	commit := os.Getenv("UPGRADE_VNI_OLD_COMMIT")
	if commit == "" {
		commit = beforeSingleVNIKeys
	}
	old := binaryAt(t, commit, "before-single-vni")
	args, etcdClient := sharedEtcd(t)

	olds := startStandaloneFrom(t, standaloneFiles{binary: old}, args...)
	pair := startStandaloneFrom(t, standaloneFiles{}, append(args, "--vni-keys=pair")...)
	layouts := map[string]bool{} // Network name → created with a uid key
	churnVNIs(t, 1, layouts, map[string]versioned.Interface{"old": fastClient(t, olds), "pair": fastClient(t, pair)},
		map[string]bool{"old": true, "pair": true})
	keys := checkVNIKeys(t, etcdClient, fastClient(t, pair), layouts)
	waitVerified(t, map[string]versioned.Interface{"old": olds.clientset(t), "pair": pair.clientset(t)})
	if again := checkVNIKeys(t, etcdClient, fastClient(t, pair), layouts); again != keys {
		t.Fatalf("round 1: the verifiers changed the VNI keys:\n%s\nbefore:\n%s", again, keys)
	}

	olds.stop()
	single := startStandaloneFrom(t, standaloneFiles{}, append(args, "--vni-keys=single")...)
	churnVNIs(t, 2, layouts, map[string]versioned.Interface{"pair": fastClient(t, pair), "single": fastClient(t, single)},
		map[string]bool{"pair": true, "single": false})
	keys = checkVNIKeys(t, etcdClient, fastClient(t, pair), layouts)
	waitVerified(t, map[string]versioned.Interface{"pair": pair.clientset(t), "single": single.clientset(t)})
	single.stop()
	// A replica's first verification reads every key with its value.
	restarted := startStandaloneFrom(t, standaloneFiles{}, append(args, "--vni-keys=single")...)
	waitVerified(t, map[string]versioned.Interface{"pair": pair.clientset(t), "restarted": restarted.clientset(t)})
	if again := checkVNIKeys(t, etcdClient, fastClient(t, pair), layouts); again != keys {
		t.Fatalf("round 2: the verifiers changed the VNI keys:\n%s\nbefore:\n%s", again, keys)
	}
}

// churnVNIs creates 120 Networks from 12 workers, each through the replicas in turn, and deletes
// every third through another replica than the one that created it (the Networks of round 1
// among them in round 2). layouts records, for each Network left, whether its replica writes
// uid keys (pairs[replica]).
func churnVNIs(t *testing.T, round int, layouts map[string]bool, clients map[string]versioned.Interface, pairs map[string]bool) {
	t.Helper()
	var names []string
	for name := range clients {
		names = append(names, name)
	}
	var earlier []string
	for name := range layouts {
		earlier = append(earlier, name)
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	work := make(chan int)
	for w := range 12 {
		wg.Go(func() {
			for i := range work {
				by := names[(w+i)%len(names)]
				other := names[(w+i+1)%len(names)]
				name := fmt.Sprintf("v%d-%d", round, i)
				_, err := clients[by].SamplecrdV1().Networks("default").Create(context.Background(), &v1.Network{
					ObjectMeta: metav1.ObjectMeta{Name: name},
					Spec:       v1.NetworkSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", 100+round, i)}}, metav1.CreateOptions{})
				if err != nil {
					t.Errorf("round %d: create %s through %s: %v", round, name, by, err)
					continue
				}
				mu.Lock()
				layouts[name] = pairs[by]
				mu.Unlock()
				var gone []string
				if i%3 == 0 {
					gone = append(gone, name)
				}
				if i < len(earlier) && i%2 == 0 {
					gone = append(gone, earlier[i])
				}
				for _, g := range gone {
					if err := clients[other].SamplecrdV1().Networks("default").Delete(context.Background(), g, metav1.DeleteOptions{}); err != nil {
						t.Errorf("round %d: delete %s through %s: %v", round, g, other, err)
						continue
					}
					mu.Lock()
					delete(layouts, g)
					mu.Unlock()
				}
			}
		})
	}
	for i := range 120 {
		work <- i
	}
	close(work)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// checkVNIKeys checks the VNI keys against the stored Networks: each Network's status.vni is a
// VNI no other has, whose key names its UID; it has a uid key naming that VNI exactly when its
// replica writes pairs (layouts); no other key is stored. It returns every key with its value
// and ModRevision, to compare before and after the verifiers ran.
func checkVNIKeys(t *testing.T, c *clientv3.Client, client versioned.Interface, layouts map[string]bool) string {
	t.Helper()
	const root = "/registry/samplecrd.k8s.io/segments/"
	list, err := client.SamplecrdV1().Networks("default").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Get(context.Background(), root, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	stored := map[string]string{}
	var all []string
	for _, kv := range resp.Kvs {
		stored[string(kv.Key)] = string(kv.Value)
		all = append(all, fmt.Sprintf("%s=%s@%d", kv.Key, kv.Value, kv.ModRevision))
	}
	want := map[string]string{}
	for _, n := range list.Items {
		pair, known := layouts[n.Name]
		if !known {
			t.Errorf("%s is stored but was deleted, or never created", n.Name)
			continue
		}
		vniKey := fmt.Sprintf("%svni/%08d", root, n.Status.VNI)
		if other, dup := want[vniKey]; dup {
			t.Errorf("%s and uid %s both have VNI %d", n.Name, other, n.Status.VNI)
		}
		want[vniKey] = string(n.UID)
		if pair {
			want[root+"uid/"+string(n.UID)] = strconv.Itoa(int(n.Status.VNI))
		}
	}
	if len(list.Items) != len(layouts) {
		t.Errorf("%d Networks stored, %d expected", len(list.Items), len(layouts))
	}
	for k, v := range want {
		if got, ok := stored[k]; !ok || got != v {
			t.Errorf("key %s = %q (present: %v), want %q", k, got, ok, v)
		}
	}
	for k, v := range stored {
		if _, ok := want[k]; !ok {
			t.Errorf("key %s = %q belongs to no stored Network's layout", k, v)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	return strings.Join(all, "\n")
}
