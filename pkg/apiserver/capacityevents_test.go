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
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

func TestCapacityEvents(t *testing.T) {
	withUsed := func(used, available string) *samplecrd.Network {
		return &samplecrd.Network{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "n", UID: "u"},
			Status: samplecrd.NetworkStatus{Capacity: &samplecrd.NetworkCapacity{Total: "13", Used: used, Available: available}}}
	}
	recorder := record.NewFakeRecorder(10)
	observe := capacityEvents(recorder)
	// 10 of 13 is 76%, 11 is 84%: the threshold is crossed once up, once down.
	steps := [][2]*samplecrd.Network{
		{withUsed("5", "8"), withUsed("10", "3")},
		{withUsed("10", "3"), withUsed("11", "2")},
		{withUsed("11", "2"), withUsed("13", "0")},
		{withUsed("13", "0"), withUsed("", "")},
		{withUsed("", ""), withUsed("2", "11")},
		{withUsed("12", "1"), withUsed("2", "11")},
	}
	for _, s := range steps {
		observe(context.Background(), s[0], s[1])
	}
	close(recorder.Events)
	var got []string
	for e := range recorder.Events {
		got = append(got, e)
	}
	want := []string{
		"Warning AddressesNearlyExhausted 11 of 13 usable addresses used (84%), at or above 80%; 2 available",
		"Normal AddressesBelowThreshold 2 of 13 usable addresses used (15%), below 80% again; 11 available",
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("events %q, want %q", got, want)
	}
}
