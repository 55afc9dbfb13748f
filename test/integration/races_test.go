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
	"errors"
	"fmt"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// Regression tests for the two same-name races that once stored overlapping Networks: when an
// allocation's owner was namespace/name, a create took another incarnation's claim for its own,
// and a losing create's cleanup released the winner's claim.

// raceReplicas returns clients of one server, or of two replicas sharing its etcd.
func raceReplicas(t *testing.T, replicas int) ([]*versioned.Clientset, *framework.Server) {
	s1 := framework.StartForTest(t)
	clients := []*versioned.Clientset{ovlClient(t, s1)}
	if replicas == 2 {
		s2 := framework.StartForTest(t, s1.EtcdFlags()...)
		clients = append(clients, ovlClient(t, s2))
	}
	return clients, s1
}

// Four clients create twin-N at once (one wins, the others get 409), then intruder-N with the
// same prefix must be refused.
func testSameNameCreates(t *testing.T, replicas int) {
	clients, owner := raceReplicas(t, replicas)
	const rounds = 40
	var wg sync.WaitGroup
	for round := range rounds {
		wg.Go(func() {
			cidr := fmt.Sprintf("172.20.%d.0/24", round)
			errs := make([]error, 4)
			var twins sync.WaitGroup
			for i := range errs {
				twins.Go(func() {
					_, errs[i] = ovlCreate(clients[i%len(clients)], "races", ovlNetwork(fmt.Sprint("twin-", round), cidr), false)
				})
			}
			twins.Wait()
			won := 0
			for _, err := range errs {
				switch {
				case err == nil:
					won++
				case !apierrors.IsAlreadyExists(err):
					t.Errorf("round %d: a twin create answered %v, want 201 or 409 AlreadyExists", round, err)
				}
			}
			if won != 1 {
				t.Errorf("round %d: %d twin creates succeeded, want 1", round, won)
			}
			_, err := ovlCreate(clients[round%len(clients)], "races", ovlNetwork(fmt.Sprint("intruder-", round), cidr), false)
			if bad := ovlCheckInvalid(err, "spec.cidr", fmt.Sprintf("overlaps network races/twin-%d", round)); bad != nil {
				t.Errorf("round %d: intruder with the twin's prefix %s: %v", round, cidr, bad)
			}
		})
	}
	wg.Wait()
	etcd := ovlEtcd(t, owner)
	defer etcd.Close()
	ovlAssertInvariant(t, clients[0], etcd)
}

func TestRaceSameNameCreatesOneServer(t *testing.T)   { testSameNameCreates(t, 1) }
func TestRaceSameNameCreatesTwoReplicas(t *testing.T) { testSameNameCreates(t, 2) }

// dra-N is deleted while it is created again until that succeeds (what kubectl replace --force
// and retrying clients do); then drb-N with the same prefix must be refused.
func testDeleteRacingRecreate(t *testing.T, replicas int) {
	clients, owner := raceReplicas(t, replicas)
	const rounds = 40
	ctx := context.Background()
	var wg sync.WaitGroup
	for round := range rounds {
		wg.Go(func() {
			cidr := fmt.Sprintf("172.21.%d.0/24", round)
			name := fmt.Sprint("dra-", round)
			first, second := clients[round%len(clients)], clients[(round+1)%len(clients)]
			if _, err := ovlCreate(first, "races", ovlNetwork(name, cidr), false); err != nil {
				t.Errorf("round %d: %v", round, err)
				return
			}
			var both sync.WaitGroup
			both.Go(func() {
				if err := first.SamplecrdV1().Networks("races").Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
					t.Errorf("round %d: delete: %v", round, err)
				}
			})
			both.Go(func() {
				for attempt := 0; ; attempt++ {
					_, err := ovlCreate(second, "races", ovlNetwork(name, cidr), false)
					if err == nil {
						return
					}
					// Until the delete commits, the name (409) or the prefix (422) is taken.
					var status apierrors.APIStatus
					if attempt == 1000 || !errors.As(err, &status) || (!apierrors.IsAlreadyExists(err) && !apierrors.IsInvalid(err)) {
						t.Errorf("round %d: re-create attempt %d: %v", round, attempt, err)
						return
					}
				}
			})
			both.Wait()
			_, err := ovlCreate(first, "races", ovlNetwork(fmt.Sprint("drb-", round), cidr), false)
			if bad := ovlCheckInvalid(err, "spec.cidr", "overlaps network races/"+name); bad != nil {
				t.Errorf("round %d: drb with dra's prefix %s: %v", round, cidr, bad)
			}
		})
	}
	wg.Wait()
	etcd := ovlEtcd(t, owner)
	defer etcd.Close()
	ovlAssertInvariant(t, clients[0], etcd)
}

func TestRaceDeleteRecreateOneServer(t *testing.T)   { testDeleteRacingRecreate(t, 1) }
func TestRaceDeleteRecreateTwoReplicas(t *testing.T) { testDeleteRacingRecreate(t, 2) }
