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
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// relGrace is the release grace of the servers of this test.
const relGrace = 2 * time.Second

// TestBlockRelease: two standalone replicas on one etcd, both releasing. A node without a status
// entry loses its blocks (object and keys, at once) no sooner than the grace after it was first
// seen without one; nodes with entries keep theirs, whether the entry reports leases or not.
// Each release happens once, however many replicas try.
func TestBlockRelease(t *testing.T) {
	s1 := framework.StartForTest(t, "--block-release-grace="+relGrace.String())
	s2 := framework.StartForTest(t, append(s1.EtcdFlags(), "--block-release-grace="+relGrace.String())...)
	ns, ctx, c, etcd := blkSetup(t, s1)
	c2 := jsonClient(t, s2)
	releasedBefore := relMetric(t, s1)

	n, err := c.SamplecrdV1().Networks(ns).Create(ctx, newNetwork("rel", "10.52.0.0/22", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	for i, node := range []string{"node-a", "node-b", "node-c", "node-d"} {
		client := c
		if i%2 == 1 {
			client = c2
		}
		if _, err := client.SamplecrdV1().Networks(ns).ClaimBlocks(ctx, "rel", &v1.BlockClaim{NodeName: node}, metav1.CreateOptions{}); err != nil {
			t.Fatalf("claim for %s: %v", node, err)
		}
	}
	// node-a reports leases, node-b none (standalone: its entry keeps its blocks), node-d
	// reports without a count; node-c never reports.
	for _, e := range []v1.NetworkNodeStatus{
		{NodeName: "node-a", Bridge: "nwrel", Ready: true, Leases: ptr.To[int32](3)},
		{NodeName: "node-b", Bridge: "nwrel", Ready: true, Leases: ptr.To[int32](0)},
		{NodeName: "node-d", Bridge: "nwrel", Ready: true},
	} {
		if n, err = nodestatus.ApplyNodeEntry(ctx, c, n, e, ""); err != nil {
			t.Fatalf("applying %s's entry: %v", e.NodeName, err)
		}
	}
	if got := blkCheck(t, c, etcd, ns, n); got != 4 {
		t.Fatalf("%d blocks after 4 claims", got)
	}

	relWaitGone(t, c, ns, "rel.node-c")
	if waited := time.Since(claimed); waited < relGrace {
		t.Errorf("node-c's blocks released %v after its claim, before the grace %v", waited, relGrace)
	}
	t.Logf("node-c's blocks released %v after its claim (grace %v)", time.Since(claimed).Round(time.Millisecond), relGrace)
	if got := blkCheck(t, c, etcd, ns, n); got != 3 {
		t.Errorf("%d blocks after node-c's release, want 3", got)
	}

	// node-d's entry is removed by hand: its blocks go a grace later.
	if n, err = c.SamplecrdV1().Networks(ns).Get(ctx, "rel", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err = nodestatus.WithdrawNodeEntry(ctx, c, n, "node-d", ""); err != nil || nodestatus.FindEntry(n, "node-d") != nil {
		t.Fatalf("removing node-d's entry: %v", err)
	}
	removed := time.Now()
	relWaitGone(t, c, ns, "rel.node-d")
	if waited := time.Since(removed); waited < relGrace {
		t.Errorf("node-d's blocks released %v after its entry went, before the grace %v", waited, relGrace)
	}
	t.Logf("node-d's blocks released %v after its entry was removed (grace %v)", time.Since(removed).Round(time.Millisecond), relGrace)

	// node-a and node-b, reporting all along (and seen by many passes by now), keep theirs.
	for _, name := range []string{"rel.node-a", "rel.node-b"} {
		if _, err := c.SamplecrdV1().BlockAllocations(ns).Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if got := blkCheck(t, c, etcd, ns, n); got != 2 {
		t.Errorf("%d blocks after node-d's release, want 2", got)
	}
	// Both replicas tried; each release committed once.
	if got := relMetric(t, s1) - releasedBefore; got != 2 {
		t.Errorf("network_block_releases_total rose by %g, want 2", got)
	}
}

// relWaitGone waits until the BlockAllocation name is gone.
func relWaitGone(t *testing.T, c versioned.Interface, ns, name string) {
	t.Helper()
	var last error
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 10*relGrace+30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, last = c.SamplecrdV1().BlockAllocations(ns).Get(ctx, name, metav1.GetOptions{})
		return apierrors.IsNotFound(last), nil
	})
	if err != nil {
		t.Fatalf("%s not released: %v (last: %v)", name, err, last)
	}
}

// relMetric reads network_block_releases_total from the server's /metrics (the registry is the
// process's, shared by every server of the test binary).
func relMetric(t *testing.T, s *framework.Server) float64 {
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
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(body), "\n") {
		var v float64
		if _, err := fmt.Sscanf(line, "network_block_releases_total %g", &v); err == nil {
			return v
		}
	}
	return 0 // not yet incremented: an ALPHA counter is listed only once used
}
