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
	"slices"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

const lengthsPrefix = "/registry/samplecrd.k8s.io/allocation-lengths/"

// recordedLengths lists the length keys, without their common prefix.
func recordedLengths(t *testing.T, etcd *clientv3.Client) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := etcd.Get(ctx, lengthsPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, strings.TrimPrefix(string(kv.Key), lengthsPrefix))
	}
	return out
}

// Through the real server with --allocation-guards=recorded: each create records its length
// in its own transaction, a create inside a recorded length is refused, and a length key removed
// around the API is reported by the next verification (unrecordedLength) and written back, after
// which the guard of that length holds again. Lengths missing at a process's first verification
// (data of an older build) are recorded without a report.
func TestOvlLengthRecordKeptAndRepaired(t *testing.T) {
	s := framework.StartForTest(t, "--allocation-guards=recorded", "--allocation-verify-interval=2s")
	c := ovlClient(t, s)
	for name, cidr := range map[string]string{"wide": "10.50.0.0/16", "small": "10.60.0.0/24", "v6": "fd50::/64"} {
		if _, err := ovlCreate(c, "lengths", ovlNetwork(name, cidr), false); err != nil {
			t.Fatalf("create %s: %v", cidr, err)
		}
	}
	etcd := ovlEtcd(t, s)
	defer etcd.Close()
	if got, want := recordedLengths(t, etcd), []string{"_cluster/4/16", "_cluster/4/24", "_cluster/6/64"}; !slices.Equal(got, want) {
		t.Fatalf("length keys %v, want %v", got, want)
	}
	_, err := ovlCreate(c, "lengths", ovlNetwork("inside", "10.50.3.0/24"), false)
	ovlExpectInvalid(t, err, "spec.cidr", "overlaps network lengths/wide (10.50.0.0/16)")

	// Around the API: the /16's length key deleted.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if del, err := etcd.Delete(ctx, lengthsPrefix+"_cluster/4/16"); err != nil || del.Deleted != 1 {
		t.Fatalf("deleting the length key: %v (deleted %v)", err, del)
	}
	ovlWaitForMetrics(t, s, "network_allocation_violations", map[string]float64{"unrecordedLength": 1, "overlap": 0})
	if got := recordedLengths(t, etcd); !slices.Contains(got, "_cluster/4/16") {
		t.Fatalf("length keys after the verification %v, want 16 written back", got)
	}
	_, err = ovlCreate(c, "lengths", ovlNetwork("inside", "10.50.3.0/24"), false)
	ovlExpectInvalid(t, err, "spec.cidr", "overlaps network lengths/wide (10.50.0.0/16)")
}
