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
	"strings"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// applySchemaErrorPrefix starts the error the generic field manager returns when a server-side
// apply patch does not fit the schema (a field it does not declare, such as spec.bogus, or a
// value of the wrong type). It is a plain error, which the handlers would answer with a 500.
const applySchemaErrorPrefix = "failed to create typed patch object"

// applySchemaError makes a server-side apply patch that does not fit the schema a 400 whose
// message names the field (".spec.bogus: field not declared in schema"), as strict decoding does
// for other writes. Any other error is returned as it is.
func applySchemaError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok || !strings.HasPrefix(err.Error(), applySchemaErrorPrefix) {
		return err
	}
	// The message goes on "(namespace/name; group/version, Kind=Network): <schema errors>".
	msg := err.Error()
	if _, detail, found := strings.Cut(msg, "): "); found {
		msg = detail
	}
	return apierrors.NewBadRequest("the applied configuration does not match the Network schema: " + msg)
}

// storageError gives etcd's unavailability the API's status for it (503, or 504 when a deadline
// passed), rather than the 500 a raw etcd client error becomes. The generic storage's errors
// that the registry interprets (not found, conflicts, ...) are storage.StorageErrors and pass
// through unchanged.
// StorageError gives etcd's unavailability the API's status for it (see storageError).
func StorageError(err error) error { return storageError(err) }

func storageError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := err.(apierrors.APIStatus); ok {
		return err
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return apierrors.NewTimeoutError("etcd did not answer in time", 1)
	case errors.Is(err, context.Canceled):
		return err
	}
	// clientv3 turns gRPC errors into rpctypes.EtcdError ("etcdserver: request timed out",
	// "leader changed", ...), which carries the code but is no gRPC status.
	var etcdErr rpctypes.EtcdError
	if errors.As(err, &etcdErr) {
		if unavailable(etcdErr.Code()) {
			return apierrors.NewServiceUnavailable("etcd is unavailable: " + etcdErr.Error())
		}
		return err
	}
	if st, ok := status.FromError(err); ok && unavailable(st.Code()) {
		return apierrors.NewServiceUnavailable("etcd is unavailable: " + st.Message())
	}
	return err
}

func unavailable(code codes.Code) bool {
	return code == codes.Unavailable || code == codes.DeadlineExceeded || code == codes.ResourceExhausted
}
