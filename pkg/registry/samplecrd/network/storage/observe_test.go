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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// TestBaseRecorderKeepsTheLastAttempt: after the generic store's retries, the base an observer
// compares with is the stored object the last attempt (the one written) started from, and a copy.
func TestBaseRecorderKeepsTheLastAttempt(t *testing.T) {
	update := &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	r := &baseRecorder{UpdatedObjectInfo: rest.DefaultUpdatedObjectInfo(update)}
	stored := func(rv, used string) runtime.Object {
		return &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Name: "n", ResourceVersion: rv},
			Status: samplecrd.NetworkStatus{Capacity: &samplecrd.NetworkCapacity{Total: "13", Used: used}}}
	}
	if _, err := r.UpdatedObject(context.Background(), stored("5", "10")); err != nil {
		t.Fatal(err)
	}
	second := stored("6", "11")
	if _, err := r.UpdatedObject(context.Background(), second); err != nil {
		t.Fatal(err)
	}
	if r.base == nil || r.base.ResourceVersion != "6" || r.base.Status.Capacity.Used != "11" {
		t.Fatalf("base %+v, want the second attempt's (rv 6, used 11)", r.base)
	}
	second.(*samplecrd.Network).Status.Capacity.Used = "0"
	if r.base.Status.Capacity.Used != "11" {
		t.Errorf("the base shares the stored object's capacity")
	}
}
