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
	"bytes"
	"context"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	clientscheme "github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

const vniSegmentsRoot = "/registry/samplecrd.k8s.io/segments/"

// vniKeys reads the VNI key pair of uid: the VNI its uid key holds (0: none), and which uid the
// key of that VNI names ("" : none).
func vniKeys(t *testing.T, c *clientv3.Client, uid types.UID) (int32, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := c.Get(ctx, vniSegmentsRoot+"uid/"+string(uid))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0, ""
	}
	v, err := strconv.ParseInt(string(resp.Kvs[0].Value), 10, 32)
	if err != nil {
		t.Fatalf("uid key of %s holds %q", uid, resp.Kvs[0].Value)
	}
	resp, err = c.Get(ctx, vniKey(int32(v)))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return int32(v), ""
	}
	return int32(v), string(resp.Kvs[0].Value)
}

// vniKey is the etcd key of VNI v (eight digits, so that keys sort as VNIs).
func vniKey(v int32) string { return fmt.Sprintf("%svni/%08d", vniSegmentsRoot, v) }

// vniWait polls cond until it holds or 30 s passed.
func vniWait(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not happen within 30s: %s", what, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestVNIConcurrentCreatesTwoReplicas creates Networks at once through two servers on one etcd:
// each has a VNI in status.vni in the create's answer, in the default range, held by its keys, no
// two alike; another replica reads the same; a delete removes both keys.
func TestVNIConcurrentCreatesTwoReplicas(t *testing.T) {
	s1 := sharedServer(t)
	s2 := framework.StartForTest(t, append(s1.EtcdFlags(), "--overlap-scope=namespace")...)
	ns := testNamespace(t)
	ctx := testContext(t)
	c1, c2 := protobufClient(t, s1), jsonClient(t, s2)
	etcd := ovlEtcd(t, s1)
	defer etcd.Close()
	const creates = 40
	var mu sync.Mutex
	created := map[string]*v1.Network{}
	var wg sync.WaitGroup
	for i := range creates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := c1
			if i%2 == 1 {
				c = c2
			}
			n, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork(fmt.Sprintf("v%d", i), fmt.Sprintf("10.53.%d.0/24", i), ""), metav1.CreateOptions{})
			if err != nil {
				t.Errorf("create v%d: %v", i, err)
				return
			}
			mu.Lock()
			created[n.Name] = n
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	byVNI := map[int32]string{}
	for name, n := range created {
		v := n.Status.VNI
		if v < 1<<20 || v > 1<<24-1 {
			t.Errorf("%s: status.vni %d in the create's answer is outside the default range 1048576-16777215", name, v)
		}
		if other, dup := byVNI[v]; dup {
			t.Errorf("%s and %s both have VNI %d", name, other, v)
		}
		byVNI[v] = name
		if key, back := vniKeys(t, etcd, n.UID); key != v || back != string(n.UID) {
			t.Errorf("%s (uid %s, status.vni %d): uid key holds %d, whose VNI key names %q", name, n.UID, v, key, back)
		}
		// The other replica reads the same.
		got, err := c2.SamplecrdV1().Networks(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got.Status.VNI != v {
			t.Errorf("%s: status.vni %d through the other replica, %d in the create's answer", name, got.Status.VNI, v)
		}
	}
	for name, n := range created {
		c := c1
		if len(name)%2 == 0 {
			c = c2
		}
		if err := c.SamplecrdV1().Networks(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		checkVNIKeysGone(t, etcd, n)
	}
}

// TestVNIClientCannotChange: status.vni stays what the server gave, whatever a client writes
// through status or the main resource, and a server-side apply create gets a VNI too.
func TestVNIClientCannotChange(t *testing.T) {
	s := sharedServer(t)
	ns := testNamespace(t)
	ctx := testContext(t)
	c := jsonClient(t, s)
	networks := c.SamplecrdV1().Networks(ns)
	n, err := networks.Create(ctx, newNetwork("fixed", "10.54.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vni := n.Status.VNI
	if vni == 0 {
		t.Fatal("the create's answer has no status.vni")
	}
	n.Status.VNI = vni + 1
	if n, err = networks.UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n.Status.VNI != vni {
		t.Errorf("a status update set status.vni to %d (was %d)", n.Status.VNI, vni)
	}
	patch := fmt.Sprintf(`{"status":{"vni":%d}}`, vni+2)
	if n, err = networks.Patch(ctx, "fixed", types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if n.Status.VNI != vni {
		t.Errorf("a status merge patch set status.vni to %d (was %d)", n.Status.VNI, vni)
	}
	n.Status.VNI = 0
	n.Labels = map[string]string{"touched": "yes"}
	if n, err = networks.Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n.Status.VNI != vni {
		t.Errorf("an update of the main resource set status.vni to %d (was %d)", n.Status.VNI, vni)
	}
	applied, err := networks.Patch(ctx, "applied", types.ApplyPatchType,
		[]byte(`{"apiVersion":"samplecrd.k8s.io/v1","kind":"Network","metadata":{"name":"applied"},"spec":{"cidr":"10.54.1.0/24"}}`),
		metav1.PatchOptions{FieldManager: "test"})
	if err != nil {
		t.Fatal(err)
	}
	if applied.Status.VNI == 0 || applied.Status.VNI == vni {
		t.Errorf("a server-side apply create got status.vni %d (the other Network has %d)", applied.Status.VNI, vni)
	}
}

// TestVNIRepair: the verifier gives a Network whose keys were removed by hand a VNI again,
// mirrors keys moved by hand into status.vni, and removes keys of Networks that are gone.
func TestVNIRepair(t *testing.T) {
	s := framework.StartForTest(t, "--allocation-verify-interval=1s")
	ns := testNamespace(t)
	ctx := testContext(t)
	c := jsonClient(t, s)
	etcd := ovlEtcd(t, s)
	defer etcd.Close()
	networks := c.SamplecrdV1().Networks(ns)
	n, err := networks.Create(ctx, newNetwork("rep", "10.55.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vni := n.Status.VNI
	// Two verifications done: the next ones read the VNI keys without their values where the
	// create wrote them, and must see that these no longer are.
	ovlWaitForVerifications(t, s, 2)
	gone := vniKey(vni + 1)
	for _, op := range []clientv3.Op{
		clientv3.OpDelete(vniSegmentsRoot + "uid/" + string(n.UID)),
		clientv3.OpDelete(vniKey(vni)),
		clientv3.OpPut(gone, "no-such-uid"),
	} {
		if _, err := etcd.Do(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	vniWait(t, "the verifier assigning a VNI again and removing the gone Network's key", func() (bool, string) {
		key, back := vniKeys(t, etcd, n.UID)
		resp, err := etcd.Get(ctx, gone)
		if err != nil {
			t.Fatal(err)
		}
		got, err := networks.Get(ctx, "rep", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return key != 0 && back == string(n.UID) && len(resp.Kvs) == 0 && got.Status.VNI == key,
			fmt.Sprintf("uid key %d names back %q, status.vni %d, gone key left: %d", key, back, got.Status.VNI, len(resp.Kvs))
	})
	// Keys moved by hand to another VNI: status.vni follows them; the old VNI key is removed.
	key, _ := vniKeys(t, etcd, n.UID)
	moved := key + 7
	if _, err := etcd.Txn(ctx).Then(
		clientv3.OpPut(vniSegmentsRoot+"uid/"+string(n.UID), strconv.Itoa(int(moved))),
		clientv3.OpPut(vniKey(moved), string(n.UID)),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	vniWait(t, "status.vni mirroring keys moved by hand", func() (bool, string) {
		got, err := networks.Get(ctx, "rep", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		resp, err := etcd.Get(ctx, vniKey(key))
		if err != nil {
			t.Fatal(err)
		}
		return got.Status.VNI == moved && len(resp.Kvs) == 0,
			fmt.Sprintf("status.vni %d (want %d), old VNI key left: %d", got.Status.VNI, moved, len(resp.Kvs))
	})
}

// TestVNIRangeExhausted: with --vni-range holding two VNIs, the third create is refused with a
// 403 naming the range, and a delete frees a VNI for the next.
func TestVNIRangeExhausted(t *testing.T) {
	s := framework.StartForTest(t, "--vni-range=5000-5001")
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	seen := map[int32]bool{}
	for i := range 2 {
		n, err := networks.Create(ctx, newNetwork(fmt.Sprintf("x%d", i), fmt.Sprintf("10.56.%d.0/24", i), ""), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n.Status.VNI != 5000 && n.Status.VNI != 5001 || seen[n.Status.VNI] {
			t.Errorf("x%d got VNI %d (seen: %v)", i, n.Status.VNI, seen)
		}
		seen[n.Status.VNI] = true
	}
	_, err := networks.Create(ctx, newNetwork("x2", "10.56.2.0/24", ""), metav1.CreateOptions{})
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "no free VNI") || !strings.Contains(err.Error(), "5000-5001") {
		t.Fatalf("a create with the VNI range full: %v; want 403 naming the range", err)
	}
	if _, err := networks.Get(ctx, "x2", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the refused create left a Network: %v", err)
	}
	if err := networks.Delete(ctx, "x0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	n, err := networks.Create(ctx, newNetwork("x2", "10.56.2.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a create after a delete freed a VNI: %v", err)
	}
	if n.Status.VNI != 5000 && n.Status.VNI != 5001 {
		t.Errorf("x2 got VNI %d", n.Status.VNI)
	}
}

// TestVNILoopGivesOldReplicaWritesAVNI: a Network as an older replica leaves it (no VNI keys, a
// write that dropped status.vni; written here straight to etcd) gets a VNI from the server's
// loop right away, long before the next verification (an hour away).
func TestVNILoopGivesOldReplicaWritesAVNI(t *testing.T) {
	s := framework.StartForTest(t, "--allocation-verify-interval=1h")
	ns := testNamespace(t)
	ctx := testContext(t)
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	etcd := ovlEtcd(t, s)
	defer etcd.Close()
	n, err := networks.Create(ctx, newNetwork("old", "10.57.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key, value := storedNetwork(ctx, t, s, ns, "old")
	stored := decodeStored(t, value)
	stored.Status.VNI = 0
	stored.APIVersion, stored.Kind = "samplecrd.k8s.io/v1", "Network"
	var buf bytes.Buffer
	if err := protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme).Encode(stored, &buf); err != nil {
		t.Fatal(err)
	}
	if _, err := etcd.Txn(ctx).Then(
		clientv3.OpPut(key, buf.String()),
		clientv3.OpDelete(vniSegmentsRoot+"uid/"+string(n.UID)),
		clientv3.OpDelete(vniKey(n.Status.VNI)),
	).Commit(); err != nil {
		t.Fatal(err)
	}
	vniWait(t, "the loop giving the Network a VNI", func() (bool, string) {
		got, err := networks.Get(ctx, "old", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		key, back := vniKeys(t, etcd, n.UID)
		return key != 0 && back == string(n.UID) && got.Status.VNI == key,
			fmt.Sprintf("status.vni %d, uid key %d naming back %q", got.Status.VNI, key, back)
	})
}

// TestVNISingleKeysBesidePairs: a replica with --vni-keys=single beside one writing pairs (the
// default), on one etcd, creating at once: the single replica's creates write the VNI key alone
// (status.vni names it), the other's both keys; no VNI is given twice; both verifiers, every
// second, and a third replica's first verification (reading every value) find nothing to report
// or repair in either form, and leave every key and status.vni as the creates wrote them; each
// replica deletes the other's Networks with their keys.
func TestVNISingleKeysBesidePairs(t *testing.T) {
	pair := framework.StartForTest(t, "--allocation-verify-interval=1s")
	single := framework.StartForTest(t, append(pair.EtcdFlags(), "--vni-keys=single", "--allocation-verify-interval=1s")...)
	ns := testNamespace(t)
	ctx := testContext(t)
	clients := map[*framework.Server]versioned.Interface{pair: jsonClient(t, pair), single: protobufClient(t, single)}
	etcd := ovlEtcd(t, pair)
	defer etcd.Close()
	// The metrics are the test process's: earlier tests' repairs count too.
	repairsBefore := repairsTotal(t, pair)
	const creates = 40
	var mu sync.Mutex
	created := map[string]*v1.Network{}
	singles := map[string]bool{}
	var wg sync.WaitGroup
	for i := range creates {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := pair
			if i%2 == 1 {
				s = single
			}
			name := fmt.Sprintf("s%d", i)
			n, err := clients[s].SamplecrdV1().Networks(ns).Create(ctx, newNetwork(name, fmt.Sprintf("10.56.%d.0/24", i), ""), metav1.CreateOptions{})
			if err != nil {
				t.Errorf("create %s: %v", name, err)
				return
			}
			mu.Lock()
			created[name], singles[name] = n, s == single
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	check := func(when string) {
		t.Helper()
		byVNI := map[int32]string{}
		for name, n := range created {
			got, err := clients[pair].SamplecrdV1().Networks(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			v := got.Status.VNI
			if v == 0 || v != n.Status.VNI {
				t.Errorf("%s: %s: status.vni %d, %d in the create's answer", when, name, v, n.Status.VNI)
			}
			if other, dup := byVNI[v]; dup {
				t.Errorf("%s: %s and %s both have VNI %d", when, name, other, v)
			}
			byVNI[v] = name
			resp, err := etcd.Get(ctx, vniKey(v))
			if err != nil {
				t.Fatal(err)
			}
			if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != string(n.UID) {
				t.Errorf("%s: %s: the key of its VNI %d: %v", when, name, v, resp.Kvs)
			}
			key, _ := vniKeys(t, etcd, n.UID)
			switch {
			case singles[name] && key != 0:
				t.Errorf("%s: %s, created by the single replica, has a uid key (VNI %d)", when, name, key)
			case !singles[name] && key != v:
				t.Errorf("%s: %s, created by the pair replica, has uid key VNI %d, want %d", when, name, key, v)
			}
		}
	}
	check("after the creates")
	// Two verifications of each replica begun after the creates (reading keys only, as the
	// creates wrote them), and the first of a replica started now (reading every value).
	fresh := framework.StartForTest(t, append(pair.EtcdFlags(), "--allocation-verify-interval=1s")...)
	for _, s := range []*framework.Server{pair, single, fresh} {
		ovlWaitForVerifications(t, s, verificationsDone(t, s)+2)
		ovlWaitForMetrics(t, s, "network_allocation_violations",
			map[string]float64{"vni-missing": 0, "vni-duplicate": 0, "vni-network-gone": 0, "vni-status": 0})
	}
	if after := repairsTotal(t, pair); !maps.Equal(after, repairsBefore) {
		t.Errorf("the verifiers repaired something: network_allocation_repairs_total %v, before the creates %v", after, repairsBefore)
	}
	check("after the verifications")
	for name, n := range created {
		s := pair // each replica deletes the other's
		if !singles[name] {
			s = single
		}
		if err := clients[s].SamplecrdV1().Networks(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		checkVNIKeysGone(t, etcd, n)
	}
}

// checkVNIKeysGone checks that the deleted Network n left no VNI key: neither its uid key nor
// the key of its status.vni.
func checkVNIKeysGone(t *testing.T, etcd *clientv3.Client, n *v1.Network) {
	t.Helper()
	if key, _ := vniKeys(t, etcd, n.UID); key != 0 {
		t.Errorf("%s deleted: its uid key still holds VNI %d", n.Name, key)
	}
	resp, err := etcd.Get(context.Background(), vniKey(n.Status.VNI))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != 0 {
		t.Errorf("%s deleted: the key of its VNI %d still names %s", n.Name, n.Status.VNI, resp.Kvs[0].Value)
	}
}

// repairsTotal is network_allocation_repairs_total by action.
func repairsTotal(t *testing.T, s *framework.Server) map[string]float64 {
	t.Helper()
	got := map[string]float64{}
	if err := ovlPollMetrics(t, s, func(body string) bool {
		for _, line := range strings.Split(body, "\n") {
			var action string
			var v float64
			if _, err := fmt.Sscanf(line, "network_allocation_repairs_total{action=%q} %g", &action, &v); err == nil {
				got[action] = v
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// verificationsDone is how many verifications s has ended.
func verificationsDone(t *testing.T, s *framework.Server) float64 {
	t.Helper()
	var total float64
	if err := ovlPollMetrics(t, s, func(body string) bool {
		total = verificationsIn(body)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return total
}

// verificationsIn sums network_allocation_verifications_total (every result) in a /metrics body.
func verificationsIn(body string) float64 {
	var total float64
	for _, line := range strings.Split(body, "\n") {
		if rest, ok := strings.CutPrefix(line, "network_allocation_verifications_total{"); ok {
			var v float64
			if _, err := fmt.Sscan(rest[strings.Index(rest, "}")+1:], &v); err == nil {
				total += v
			}
		}
	}
	return total
}
