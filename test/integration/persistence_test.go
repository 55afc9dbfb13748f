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
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	clientscheme "github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/scheme"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// storedNetwork reads the etcd value of the Network ns/name straight from the server's etcd.
func storedNetwork(ctx context.Context, t *testing.T, s *framework.Server, ns, name string) (string, []byte) {
	t.Helper()
	if !strings.HasPrefix(s.EtcdEndpoint, "https://127.0.0.1:") {
		t.Fatalf("embedded etcd endpoint %q, want a loopback https URL", s.EtcdEndpoint)
	}
	c, err := s.EtcdClient()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	resp, err := c.Get(ctx, "/registry/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	suffix := "/networks/" + ns + "/" + name
	var key string
	var value []byte
	for _, kv := range resp.Kvs {
		if strings.HasSuffix(string(kv.Key), suffix) {
			if key != "" {
				t.Fatalf("two etcd keys end in %s: %s and %s", suffix, key, kv.Key)
			}
			key, value = string(kv.Key), kv.Value
		}
	}
	if key == "" {
		var keys []string
		for _, kv := range resp.Kvs {
			keys = append(keys, string(kv.Key))
		}
		t.Fatalf("no etcd key ends in %s; keys: %v", suffix, keys)
	}
	return key, value
}

// decodeStored checks that an etcd value is a protobuf-encoded samplecrd.k8s.io/v1 Network.
func decodeStored(t *testing.T, value []byte) *v1.Network {
	t.Helper()
	if !bytes.HasPrefix(value, protobufMagic) {
		t.Fatalf("etcd value starts with %q, want the protobuf magic %q", value[:min(8, len(value))], protobufMagic)
	}
	obj, gvk, err := protobuf.NewSerializer(clientscheme.Scheme, clientscheme.Scheme).Decode(value, nil, nil)
	if err != nil {
		t.Fatalf("decoding the etcd value: %v", err)
	}
	n, ok := obj.(*v1.Network)
	if !ok || gvk.Group != "samplecrd.k8s.io" || gvk.Version != "v1" || gvk.Kind != "Network" {
		t.Fatalf("etcd value decodes to %s %T, want samplecrd.k8s.io/v1 Network", gvk, obj)
	}
	return n
}

func TestPersistenceAcrossRestartAndProtobufStorage(t *testing.T) {
	dir := t.TempDir()
	ns := testNamespace(t)
	ctx := testContext(t)

	first, err := framework.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			first.Stop()
		}
	}()
	networks := jsonClient(t, first).SamplecrdV1().Networks(ns)
	n := newNetwork("persist", "10.11.0.0/16", "10.11.0.254")
	n.Labels = map[string]string{"survives": "restart"}
	n.Annotations = map[string]string{"note": "kept in etcd"}
	if _, err := networks.Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Created through v1beta1 too: storage is v1 whatever the request's version.
	beta := dynamicClient(t, first).Resource(v1beta1GVR).Namespace(ns)
	if _, err := beta.Create(ctx, betaNetwork("persist-beta", "10.12.0.0/16", "10.12.0.1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	before, err := networks.Get(ctx, "persist", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	key, value := storedNetwork(ctx, t, first, ns, "persist")
	if !strings.HasPrefix(key, "/registry/samplecrd.k8s.io/") {
		t.Fatalf("etcd key %s, want it under the storage prefix /registry/samplecrd.k8s.io/", key)
	}
	stored := decodeStored(t, value)
	if stored.UID != before.UID || stored.Spec != before.Spec || stored.Labels["survives"] != "restart" || stored.Generation != 1 {
		t.Fatalf("stored network %+v, want the created one %+v", stored, before)
	}
	if bytes.Contains(value, []byte(`"cidr"`)) {
		t.Fatalf("etcd value looks like JSON: %q", value)
	}
	_, betaValue := storedNetwork(ctx, t, first, ns, "persist-beta")
	if storedBeta := decodeStored(t, betaValue); storedBeta.Spec.CIDR != "10.12.0.0/16" || storedBeta.Spec.Gateway != "10.12.0.1" {
		t.Fatalf("the v1beta1-created network is stored as %+v", storedBeta.Spec)
	}

	if err := first.Stop(); err != nil {
		t.Fatalf("stopping the first server: %v", err)
	}
	stopped = true

	second, err := framework.Start(dir)
	if err != nil {
		t.Fatalf("restarting on the same data dir: %v", err)
	}
	defer func() {
		if err := second.Stop(); err != nil {
			t.Errorf("stopping the second server: %v", err)
		}
	}()
	networks = jsonClient(t, second).SamplecrdV1().Networks(ns)
	after, err := networks.Get(ctx, "persist", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the network did not survive the restart: %v", err)
	}
	if !apiequality.Semantic.DeepEqual(after, before) {
		t.Fatalf("network changed across the restart:\nbefore %+v\nafter  %+v", before, after)
	}
	list, err := networks.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if names := networkNames(list.Items); len(names) != 2 || names[0] != "persist" || names[1] != "persist-beta" {
		t.Fatalf("networks after the restart: %v", names)
	}
	_, value = storedNetwork(ctx, t, second, ns, "persist")
	if decodeStored(t, value).ResourceVersion != "" {
		t.Fatalf("the stored value carries a resourceVersion")
	}

	// The no-overlap claims survived as well.
	_, err = networks.Create(ctx, newNetwork("overlap", "10.11.5.0/24", ""), metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "overlaps") {
		t.Fatalf("creating a network inside a restored one: %v, want Invalid naming the overlap", err)
	}

	// The restarted server keeps writing: an update is stored and read back.
	after.Spec.Gateway = "10.11.0.1"
	if _, err := networks.Update(ctx, after, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, value = storedNetwork(ctx, t, second, ns, "persist")
	if got := decodeStored(t, value); got.Spec.Gateway != "10.11.0.1" || got.Generation != 2 {
		t.Fatalf("stored after the update: %+v generation %d", got.Spec, got.Generation)
	}
}

// A server restarting on a data dir with many Networks must come up: the allocation repair that
// runs as a post-start hook used to list through the watch cache before the cache had finished
// its initial list, failed with "storage is (re)initializing", and a failed post-start hook ends
// the process (so a regression shows as the test binary exiting).
func TestRestartWithManyNetworks(t *testing.T) {
	const count = 600
	dir := t.TempDir()
	ns := testNamespace(t)
	ctx := testContext(t)

	s, err := framework.Start(dir)
	if err != nil {
		t.Fatal(err)
	}
	networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
	const workers = 8
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := w; i < count; i += workers {
				n := newNetwork(fmt.Sprintf("many-%d", i), fmt.Sprintf("10.%d.%d.0/24", 100+i/256, i%256), "")
				if _, err := networks.Create(ctx, n, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range workers {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if t.Failed() {
		t.FailNow()
	}

	for restart := 1; restart <= 3; restart++ {
		s, err := framework.Start(dir)
		if err != nil {
			t.Fatalf("restart %d: %v", restart, err)
		}
		networks := jsonClient(t, s).SamplecrdV1().Networks(ns)
		list, err := networks.List(ctx, metav1.ListOptions{})
		if err == nil && len(list.Items) != count {
			err = fmt.Errorf("%d networks, want %d", len(list.Items), count)
		}
		if err == nil {
			// The repaired allocations still refuse an overlap.
			_, err = networks.Create(ctx, newNetwork("overlap", "10.100.7.128/25", ""), metav1.CreateOptions{})
			if apierrors.IsInvalid(err) && strings.Contains(err.Error(), "overlaps") {
				err = nil
			} else {
				err = fmt.Errorf("creating a network inside many-7: %v, want Invalid naming the overlap", err)
			}
		}
		if stopErr := s.Stop(); stopErr != nil && err == nil {
			err = stopErr
		}
		if err != nil {
			t.Fatalf("restart %d: %v", restart, err)
		}
	}
}
