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

package network

import (
	"fmt"
	"math/big"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// ReasonAddressesAvailable is the reason of a False AddressesExhausted condition: node entries
// exist and none of them reports that it needs a block the Network no longer has.
const ReasonAddressesAvailable = "AddressesAvailable"

// keepExhaustion replaces whatever AddressesExhausted condition a status write carries with the
// stored one (or none): the condition is the server's, a client can neither set nor remove it.
// Keeping the stored one lets deriveExhaustion keep its lastTransitionTime while it holds.
func keepExhaustion(n, old *samplecrd.Network) {
	meta.RemoveStatusCondition(&n.Status.Conditions, samplecrd.ConditionAddressesExhausted)
	if c := meta.FindStatusCondition(old.Status.Conditions, samplecrd.ConditionAddressesExhausted); c != nil {
		n.Status.Conditions = append(n.Status.Conditions, *c)
	}
}

// deriveExhaustion sets the AddressesExhausted condition from the node entries: True, naming the
// nodes, when some entry's reason is AddressesExhausted; False (AddressesAvailable) when entries
// exist and none says so; no condition without entries.
func deriveExhaustion(n *samplecrd.Network) {
	if len(n.Status.Nodes) == 0 {
		meta.RemoveStatusCondition(&n.Status.Conditions, samplecrd.ConditionAddressesExhausted)
		return
	}
	var exhausted []string
	for _, node := range n.Status.Nodes {
		if node.Reason == samplecrd.ReasonAddressesExhausted {
			exhausted = append(exhausted, node.NodeName)
		}
	}
	slices.Sort(exhausted)
	cond := metav1.Condition{Type: samplecrd.ConditionAddressesExhausted, ObservedGeneration: n.Generation}
	if len(exhausted) == 0 {
		cond.Status, cond.Reason = metav1.ConditionFalse, ReasonAddressesAvailable
		cond.Message = fmt.Sprintf("none of the %d node(s) reporting lacks an address block", len(n.Status.Nodes))
	} else {
		cond.Status, cond.Reason = metav1.ConditionTrue, samplecrd.ReasonAddressesExhausted
		cond.Message = fmt.Sprintf("no address block is left for %d node(s) that need one: %s", len(exhausted), strings.Join(exhausted, ", "))
	}
	meta.SetStatusCondition(&n.Status.Conditions, cond)
}

// UsedThresholdPercent is the share of a Network's usable addresses in use at which the server
// emits an Event (and again, another, when it falls back below).
const UsedThresholdPercent = 80

// Crossing is how a write moved a Network's used addresses across UsedThresholdPercent of total.
type Crossing int

const (
	// NoCrossing: the write left the Network on the same side, or one side is unknown.
	NoCrossing Crossing = iota
	// CrossedUp: used was below the threshold before the write and is at or above it after.
	CrossedUp
	// CrossedDown: used was at or above the threshold before the write and is below it after.
	CrossedDown
)

// UsedCrossing compares the capacity of a Network before and after a write. A side whose used
// count is unknown (an entry without leases), or whose total is 0, crosses nothing; a Network
// replaced by another of the same name (another UID) neither.
func UsedCrossing(before, after *samplecrd.Network) Crossing {
	if before == nil || after == nil || before.UID != after.UID {
		return NoCrossing
	}
	was, okBefore := aboveThreshold(before.Status.Capacity)
	is, okAfter := aboveThreshold(after.Status.Capacity)
	switch {
	case !okBefore || !okAfter || was == is:
		return NoCrossing
	case is:
		return CrossedUp
	default:
		return CrossedDown
	}
}

// aboveThreshold says whether used ≥ UsedThresholdPercent % of total, exactly (integers), and
// whether that is known.
func aboveThreshold(c *samplecrd.NetworkCapacity) (above, known bool) {
	if c == nil || c.Used == "" {
		return false, false
	}
	used, ok1 := new(big.Int).SetString(c.Used, 10)
	total, ok2 := new(big.Int).SetString(c.Total, 10)
	if !ok1 || !ok2 || total.Sign() <= 0 {
		return false, false
	}
	// used/total ≥ p/100  ⇔  100·used ≥ p·total
	lhs := used.Mul(used, big.NewInt(100))
	rhs := total.Mul(total, big.NewInt(UsedThresholdPercent))
	return lhs.Cmp(rhs) >= 0, true
}
