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

package apiserver

import (
	"context"
	"errors"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1beta1"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/storage"
)

// v1beta1Networks is the networks storage as v1beta1 serves it: the same storage, whose errors
// name the v1beta1 spec fields (spec.subnet, spec.gatewayIP) instead of the super version's
// (spec.cidr, spec.gateway), which validation and the create path use. Writes go through Create
// and Update only (patches and server-side apply included), so those are all it changes.
type v1beta1Networks struct {
	*networkstorage.REST
}

// Create creates a Network, with errors in v1beta1's field names.
func (s *v1beta1Networks) Create(ctx context.Context, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	out, err := s.REST.Create(ctx, obj, createValidation, options)
	return out, errorInV1beta1(err)
}

// Update updates (or, for server-side apply, creates) a Network, with errors in v1beta1's field names.
func (s *v1beta1Networks) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc,
	updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	out, created, err := s.REST.Update(ctx, name, objInfo, createValidation, updateValidation, forceAllowCreate, options)
	return out, created, errorInV1beta1(err)
}

// errorInV1beta1 returns an API error with its message and causes in v1beta1's field names.
func errorInV1beta1(err error) error {
	var apiStatus apierrors.APIStatus
	if err == nil || !errors.As(err, &apiStatus) {
		return err
	}
	status := apiStatus.Status()
	status.Message = v1beta1.FieldPathsToV1beta1(status.Message)
	if status.Details != nil {
		details := *status.Details
		details.Causes = slices.Clone(details.Causes)
		for i := range details.Causes {
			details.Causes[i].Field = v1beta1.FieldPathsToV1beta1(details.Causes[i].Field)
			details.Causes[i].Message = v1beta1.FieldPathsToV1beta1(details.Causes[i].Message)
		}
		status.Details = &details
	}
	return &apierrors.StatusError{ErrStatus: status}
}
