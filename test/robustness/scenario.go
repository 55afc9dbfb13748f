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

package robustness

import "time"

// scenario is one topology with its traffic and faults.
type scenario struct {
	Name         string
	Embedded     bool
	EtcdMembers  int
	Replicas     int
	OverlapScope string
	Clients      int
	Duration     time.Duration
	Faults       []string
	FaultGap     time.Duration // mean pause between two faults
	MaxDown      time.Duration // how long a process stays down or frozen, at most (plus 0.5s)
	// Guards is the servers' --allocation-guards ("" in runs kept before it: the default).
	Guards string `json:"guards,omitempty"`
	// VNIKeys is the servers' --vni-keys ("" in runs kept before it: the default, pair).
	VNIKeys string `json:"vniKeys,omitempty"`
	// GatewayKeys is the servers' --gateway-keys ("" in runs kept before it: the default, write).
	GatewayKeys string `json:"gatewayKeys,omitempty"`
}

func scenarios(full bool) []scenario {
	// Two replicas trusting the length records (fewer guards, the record's races between
	// replicas), writing one VNI key per Network and no gateway keys (claims guarded by the
	// allocation key); the embedded server guarding every length and writing VNI key pairs and
	// gateway keys, as by default.
	ha := scenario{Name: "ha", EtcdMembers: 3, Replicas: 2, OverlapScope: "cluster", Guards: "recorded", VNIKeys: "single", GatewayKeys: "none", Clients: 16,
		Duration: 45 * time.Second, FaultGap: 5 * time.Second, MaxDown: 2 * time.Second,
		Faults: []string{faultKillServer, faultRestart, faultStopMember, faultKillMember, faultStopEtcd, faultKillEtcd, faultCompact, faultPartition}}
	emb := scenario{Name: "embedded", Embedded: true, Replicas: 1, OverlapScope: "namespace", Guards: "all", VNIKeys: "pair", GatewayKeys: "write", Clients: 16,
		Duration: 35 * time.Second, FaultGap: 5 * time.Second, MaxDown: 2 * time.Second,
		Faults: []string{faultKillServer, faultRestart, faultStopEtcd, faultCompact}}
	if full {
		ha.Duration, ha.FaultGap, ha.MaxDown = 5*time.Minute, 10*time.Second, 4*time.Second
		emb.Duration, emb.FaultGap, emb.MaxDown = 3*time.Minute, 10*time.Second, 4*time.Second
	}
	return []scenario{ha, emb}
}
