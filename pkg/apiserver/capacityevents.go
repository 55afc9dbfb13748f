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
	"fmt"
	"math/big"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network"
	networkstorage "github.com/samplecrd/network-apiserver/pkg/registry/samplecrd/network/storage"
)

// Reasons of the Events a Network's used addresses crossing network.UsedThresholdPercent emit.
const (
	// EventAddressesNearlyExhausted (Warning): a status write took used to 80% of total or more.
	EventAddressesNearlyExhausted = "AddressesNearlyExhausted"
	// EventAddressesBelowThreshold (Normal): a status write took used back below 80% of total.
	EventAddressesBelowThreshold = "AddressesBelowThreshold"
)

// capacityEvents returns the observer of status writes that records an Event on the Network when
// the write moved its used addresses across the threshold. It runs in the request that made the
// write, so that one crossing is one Event however many replicas serve the etcd.
func capacityEvents(recorder record.EventRecorder) networkstorage.ObserveFunc {
	return func(_ context.Context, before, after *samplecrd.Network) {
		crossing := network.UsedCrossing(before, after)
		if crossing == network.NoCrossing {
			return
		}
		ref := &corev1.ObjectReference{APIVersion: v1.SchemeGroupVersion.String(), Kind: "Network",
			Namespace: after.Namespace, Name: after.Name, UID: after.UID, ResourceVersion: after.ResourceVersion}
		c := after.Status.Capacity
		share := percent(c.Used, c.Total)
		if crossing == network.CrossedUp {
			recorder.Eventf(ref, corev1.EventTypeWarning, EventAddressesNearlyExhausted,
				"%s of %s usable addresses used (%s), at or above %d%%; %s available", c.Used, c.Total, share, network.UsedThresholdPercent, c.Available)
			return
		}
		recorder.Eventf(ref, corev1.EventTypeNormal, EventAddressesBelowThreshold,
			"%s of %s usable addresses used (%s), below %d%% again; %s available", c.Used, c.Total, share, network.UsedThresholdPercent, c.Available)
	}
}

// percent prints used/total as a percentage rounded down, "?" when either does not parse.
func percent(used, total string) string {
	u, ok1 := new(big.Int).SetString(used, 10)
	t, ok2 := new(big.Int).SetString(total, 10)
	if !ok1 || !ok2 || t.Sign() <= 0 {
		return "?"
	}
	return fmt.Sprintf("%s%%", u.Mul(u, big.NewInt(100)).Quo(u, t).String())
}
