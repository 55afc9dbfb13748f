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

package storage

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/storage"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// An etcd outage is a 503 (or a 504 for a deadline), never the 500 a raw client error becomes;
// what the registry interprets itself passes through.
func TestStorageErrorCodes(t *testing.T) {
	notFound := storage.NewKeyNotFoundError("/networks/a/b", 0)
	conflict := apierrors.NewConflict(samplecrd.Resource("networks"), "b", errors.New("changed"))
	for name, tc := range map[string]struct {
		err  error
		code int32
		same bool
	}{
		"etcd request timed out":        {err: rpctypes.ErrTimeout, code: http.StatusServiceUnavailable},
		"etcd leader failure (wrapped)": {err: fmt.Errorf("txn: %w", rpctypes.ErrTimeoutDueToLeaderFail), code: http.StatusServiceUnavailable},
		"etcd no leader":                {err: rpctypes.ErrNoLeader, code: http.StatusServiceUnavailable},
		"gRPC unavailable":              {err: status.Error(codes.Unavailable, "error reading from server: EOF"), code: http.StatusServiceUnavailable},
		"context deadline":              {err: context.DeadlineExceeded, code: http.StatusGatewayTimeout},
		"etcd key not found":            {err: notFound, same: true},
		"an API status":                 {err: conflict, same: true},
		"etcd compacted":                {err: rpctypes.ErrCompacted, same: true},
	} {
		got := storageError(tc.err)
		if tc.same {
			if got != tc.err {
				t.Errorf("%s: storageError = %v, want it unchanged", name, got)
			}
			continue
		}
		var st apierrors.APIStatus
		if !errors.As(got, &st) || st.Status().Code != tc.code {
			t.Errorf("%s: storageError = %#v, want a %d status", name, got, tc.code)
		}
	}
}
