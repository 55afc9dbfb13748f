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
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/test/integration/framework"
)

// TestGatewayKeysNone: with --gateway-keys=none a create writes no gateway key and no claim
// adds one; claims still never give out the gateway, and a gateway move into a block is still
// a 422.
func TestGatewayKeysNone(t *testing.T) {
	s := framework.StartForTest(t, "--gateway-keys=none")
	ns, ctx, c, etcd := blkSetup(t, s)
	networks := c.SamplecrdV1().Networks(ns)
	n, err := networks.Create(ctx, newNetwork("nokey", "10.52.0.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if keys := blkKeys(t, etcd, string(n.UID)); len(keys) != 0 {
		t.Fatalf("block keys after the create: %+v, want none", keys)
	}
	// A /24 gets /28 blocks: 15 do not hold the gateway, then the /29 beside it, and so on.
	claimed := 0
	for ; claimed < 64; claimed++ {
		_, err := networks.ClaimBlocks(ctx, "nokey", &v1.BlockClaim{NodeName: fmt.Sprintf("n%d", claimed%3)}, metav1.CreateOptions{})
		if apierrors.ReasonForError(err) == "AddressesExhausted" {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Every address but the gateway, in the fewest blocks: 15 /28s, a /29, a /30, a /31, a /32.
	if blocks := blkCheckGatewayKeys(t, c, etcd, ns, n, 0); blocks != 19 || claimed != 19 {
		t.Errorf("%d blocks from %d claims until exhausted, want 19", blocks, claimed)
	}

	m, err := networks.Create(ctx, newNetwork("nokey2", "10.52.1.0/24", ""), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := networks.ClaimBlocks(ctx, "nokey2", &v1.BlockClaim{NodeName: "n1"}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	blkGatewayIntoBlockRefused(ctx, t, networks, m, b)
	if m, err = networks.Get(ctx, "nokey2", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	m.Spec.Gateway = "10.52.1.254"
	if m, err = networks.Update(ctx, m, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	blkCheckGatewayKeys(t, c, etcd, ns, m, 0)
}

// TestGatewayKeysNoneClaimsRaceGatewayMoves moves gateways while nodes claim blocks, through a
// --gateway-keys=none replica and a write replica on one etcd: no block ever ends up holding its
// Network's gateway, whichever replica claimed it and whichever moved the gateway.
func TestGatewayKeysNoneClaimsRaceGatewayMoves(t *testing.T) {
	none := framework.StartForTest(t, "--gateway-keys=none")
	write := framework.StartForTest(t, append(none.EtcdFlags(), "--gateway-keys=write")...)
	ns, ctx, cNone, etcd := blkSetup(t, none)
	cWrite := jsonClient(t, write)
	for i, tc := range []struct {
		name           string
		claims, movers versioned.Interface
		gatewayKeys    int
	}{
		{"none", cNone, cNone, 0},
		{"claims-write", cWrite, cNone, -1},
		{"moves-write", cNone, cWrite, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A round is over in a fraction of a second: several make the race likely.
			for round := range 8 {
				gwRace(ctx, t, ns, fmt.Sprintf("race-%s-%d", tc.name, round), fmt.Sprintf("10.53.%d.0/22", 4*(8*i+round)),
					tc.claims, tc.movers, cNone, etcd, tc.gatewayKeys)
			}
		})
	}
}

// gwRace creates Network name with cidr (a /22, which gets /26 blocks) and claims blocks for 6
// nodes through claims (12 each, one after another per node, from the first move on) while two
// movers move its gateway through movers, to random addresses of the low quarter where the
// claims' blocks go first, 40 times each or until the claims are done; then checks the blocks.
func gwRace(ctx context.Context, t *testing.T, ns, name, cidr string, claims, movers, reader versioned.Interface, etcd *clientv3.Client, gatewayKeys int) {
	if _, err := movers.SamplecrdV1().Networks(ns).Create(ctx, newNetwork(name, cidr, ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := netip.MustParsePrefix(cidr).Addr().As4()
	errs := make(chan error, 256)
	var claiming, moving sync.WaitGroup
	done, firstMove := make(chan struct{}), make(chan struct{})
	var moved atomic.Int32
	for node := range 6 {
		claiming.Add(1)
		go func() {
			defer claiming.Done()
			<-firstMove
			for range 12 {
				_, err := claims.SamplecrdV1().Networks(ns).ClaimBlocks(ctx, name, &v1.BlockClaim{NodeName: fmt.Sprintf("n%d", node)}, metav1.CreateOptions{})
				// A claim that loses every attempt to the moves (no move is this frequent
				// outside a test) is a 409; the guarantee, not its liveness, is under test.
				if err != nil && apierrors.ReasonForError(err) != "AddressesExhausted" && !apierrors.IsConflict(err) {
					errs <- fmt.Errorf("claim: %w", err)
				}
			}
		}()
	}
	for range 2 {
		moving.Add(1)
		go func() {
			defer moving.Done()
			for range 40 {
				select {
				case <-done:
					return
				default:
				}
				n, err := movers.SamplecrdV1().Networks(ns).Get(ctx, name, metav1.GetOptions{})
				if err != nil {
					errs <- err
					return
				}
				off := 1 + rand.IntN(254)
				n.Spec.Gateway = netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(off)}).String()
				switch _, err := movers.SamplecrdV1().Networks(ns).Update(ctx, n, metav1.UpdateOptions{}); {
				case err == nil:
					if moved.Add(1) == 1 {
						close(firstMove)
					}
				case apierrors.IsInvalid(err) && strings.Contains(err.Error(), "is inside block"), apierrors.IsConflict(err):
				default:
					errs <- fmt.Errorf("gateway move: %w", err)
				}
			}
		}()
	}
	claiming.Wait()
	close(done)
	moving.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	n, err := reader.SamplecrdV1().Networks(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if blocks := blkCheckGatewayKeys(t, reader, etcd, ns, n, gatewayKeys); blocks == 0 || moved.Load() == 0 {
		t.Errorf("%d blocks claimed, %d gateway moves: the race did not happen", blocks, moved.Load())
	}
}
