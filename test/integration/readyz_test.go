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
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// readyzBody returns /readyz?verbose's status code and body.
func readyzBody(t *testing.T, s *framework.Server) (int, string) {
	t.Helper()
	resp, err := httpClient(t, s).Get(s.URL + "/readyz?verbose")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(body)
}

// /readyz covers the etcd client of the allocations (every create and delete uses it), not only
// the generic storage's, and no longer waits for a repair of the allocations.
func TestReadyzCoversTheAllocatorsEtcdClient(t *testing.T) {
	owner, err := framework.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ownerRunning := true
	t.Cleanup(func() {
		if ownerRunning {
			_ = owner.Stop()
		}
	})
	// A replica using the first server's embedded etcd, which goes away with that server.
	replica, err := framework.Start(t.TempDir(), owner.EtcdFlags()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = replica.Stop() })
	code, body := readyzBody(t, replica)
	if code != http.StatusOK || !strings.Contains(body, "[+]etcd-allocator ok") {
		t.Fatalf("/readyz = %d:\n%s\nwant 200 with an etcd-allocator check", code, body)
	}
	if strings.Contains(body, "repair") {
		t.Errorf("/readyz still waits for an allocation repair:\n%s", body)
	}
	ownerRunning = false
	if err := owner.Stop(); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		code, body = readyzBody(t, replica)
		return code != http.StatusOK && strings.Contains(body, "[-]etcd-allocator failed"), nil
	})
	if err != nil {
		t.Fatalf("with its etcd gone, the replica's /readyz = %d:\n%s\nwant a failure naming etcd-allocator", code, body)
	}
}
