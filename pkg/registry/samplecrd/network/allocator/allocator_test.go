package allocator

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startEtcd runs a real one-member etcd on a free loopback port for the test.
func startEtcd(t *testing.T) *clientv3.Client {
	t.Helper()
	cfg := embed.NewConfig()
	cfg.Dir = t.TempDir()
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	u := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{u}, []url.URL{u}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{u}, []url.URL{u}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	select {
	case <-e.Server.ReadyNotify():
	case <-time.After(time.Minute):
		t.Fatal("etcd not ready")
	}
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{e.Clients[0].Addr().String()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func owner(name string) Owner { return Owner{Namespace: "ns", Name: name} }

func TestClaimRejectsOverlapsBothWays(t *testing.T) {
	a := New(startEtcd(t), "/alloc")
	ctx := context.Background()
	mustClaim := func(cidr, name string) {
		t.Helper()
		if claimed, err := a.Claim(ctx, ClusterScope, netip.MustParsePrefix(cidr), owner(name)); err != nil || !claimed {
			t.Fatalf("claim %s: claimed=%v err=%v", cidr, claimed, err)
		}
	}
	mustClaim("10.1.0.0/16", "middle")
	mustClaim("10.0.0.0/16", "below")
	mustClaim("10.2.0.0/16", "above")
	mustClaim("fd00::/64", "v6")

	for cidr, other := range map[string]string{
		"10.1.2.0/24":   "middle", // inside an existing prefix
		"10.0.0.0/8":    "below",  // contains existing ones; the first is named
		"10.1.255.0/24": "middle", // the last block of an existing prefix
		"fd00::/48":     "v6",
	} {
		_, err := a.Claim(ctx, ClusterScope, netip.MustParsePrefix(cidr), owner("new"))
		var overlap *OverlapError
		if !errors.As(err, &overlap) || overlap.Other.Owner.Name != other {
			t.Errorf("claim %s: got %v, want an overlap with %s", cidr, err, other)
		}
	}
	// A shorter prefix's start address may hold a small allocation beside the claim.
	mustClaim("10.4.0.0/24", "beside")
	mustClaim("10.4.2.0/24", "next")
	if _, err := a.Claim(ctx, ClusterScope, netip.MustParsePrefix("10.4.0.0/22"), owner("new")); !errors.As(err, new(*OverlapError)) {
		t.Errorf("claim 10.4.0.0/22 over two /24s: %v, want an overlap", err)
	}
	// The longest IPv6 prefix with every bit set has 126 shorter prefixes with distinct starts:
	// they and the guard fit in one transaction.
	mustClaim("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffc/126", "many-bits")
	mustClaim("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fff8/126", "many-bits-2")
	// The same owner claiming its own prefix again is not a conflict and writes nothing.
	if claimed, err := a.Claim(ctx, ClusterScope, netip.MustParsePrefix("10.1.0.0/16"), owner("middle")); err != nil || claimed {
		t.Errorf("re-claim by owner: claimed=%v err=%v, want false, nil", claimed, err)
	}
	// Other scopes are independent.
	mustClaimIn := func(scope string) {
		if _, err := a.Claim(ctx, scope, netip.MustParsePrefix("10.1.0.0/16"), owner("x")); err != nil {
			t.Errorf("scope %s: %v", scope, err)
		}
	}
	mustClaimIn("team-a")
	// Release frees the range for the next claim, and only the owner can release.
	if err := a.Release(ctx, ClusterScope, netip.MustParsePrefix("10.1.0.0/16"), owner("intruder")); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Claim(ctx, ClusterScope, netip.MustParsePrefix("10.1.0.0/24"), owner("new")); err == nil {
		t.Fatal("a release by another owner freed the range")
	}
	if err := a.Release(ctx, ClusterScope, netip.MustParsePrefix("10.1.0.0/16"), owner("middle")); err != nil {
		t.Fatal(err)
	}
	mustClaim("10.1.0.0/24", "new")
}

func TestRacingClaimsStayDisjoint(t *testing.T) {
	a := New(startEtcd(t), "/alloc")
	// 20 workers race 200 claims of /16, /20 and /24 prefixes over 10.0.0.0/12, many overlapping.
	var prefixes []netip.Prefix
	for i := range 200 {
		bits := []int{16, 20, 24}[i%3]
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i % 16), byte(i * 37 % 256), 0}), bits).Masked()
		prefixes = append(prefixes, p)
	}
	var mu sync.Mutex
	var won []netip.Prefix
	var wg sync.WaitGroup
	work := make(chan int)
	for range 20 {
		wg.Go(func() {
			for i := range work {
				_, err := a.Claim(context.Background(), ClusterScope, prefixes[i], owner(fmt.Sprint("n", i)))
				var overlap *OverlapError
				switch {
				case err == nil:
					mu.Lock()
					won = append(won, prefixes[i])
					mu.Unlock()
				case !errors.As(err, &overlap):
					t.Errorf("claim %s: %v", prefixes[i], err)
				}
			}
		})
	}
	for i := range prefixes {
		work <- i
	}
	close(work)
	wg.Wait()
	for i := range won {
		for j := i + 1; j < len(won); j++ {
			if won[i].Overlaps(won[j]) {
				t.Fatalf("both %s and %s were claimed", won[i], won[j])
			}
		}
	}
	stored, err := a.client.Get(context.Background(), "/alloc/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || int(stored.Count) != len(won) {
		t.Fatalf("%d allocations stored, %d claims won (err %v)", stored.Count, len(won), err)
	}
	if len(won) < 16 {
		t.Fatalf("only %d claims won; the 16 disjoint /16s alone allow more", len(won))
	}
}

func TestAllocateExhaustsPoolExactly(t *testing.T) {
	a := New(startEtcd(t), "/alloc")
	pool := netip.MustParsePrefix("10.20.0.0/16")
	var mu sync.Mutex
	got := map[netip.Prefix]bool{}
	exhausted := 0
	var wg sync.WaitGroup
	for i := range 300 {
		wg.Go(func() {
			p, err := a.Allocate(context.Background(), ClusterScope, pool, 24, owner(fmt.Sprint("n", i)))
			mu.Lock()
			defer mu.Unlock()
			var ex *ExhaustedError
			switch {
			case err == nil:
				if got[p] || !pool.Contains(p.Addr()) || p.Bits() != 24 {
					t.Errorf("bad or duplicate allocation %s", p)
				}
				got[p] = true
			case errors.As(err, &ex):
				exhausted++
				if ex.Error() != "pool 10.20.0.0/16 has no free /24 left" {
					t.Errorf("message %q", ex.Error())
				}
			default:
				t.Errorf("allocate: %v", err)
			}
		})
	}
	wg.Wait()
	if len(got) != 256 || exhausted != 44 {
		t.Fatalf("%d allocated and %d exhausted, want 256 and 44", len(got), exhausted)
	}
}

func TestAllocateSkipsUsedRangesAndIPv6(t *testing.T) {
	a := New(startEtcd(t), "/alloc")
	ctx := context.Background()
	if _, err := a.Claim(ctx, ClusterScope, netip.MustParsePrefix("10.30.0.0/23"), owner("used")); err != nil {
		t.Fatal(err)
	}
	p, err := a.freeBlocks(ctx, ClusterScope, netip.MustParsePrefix("10.30.0.0/22"), 24, 10)
	if err != nil || len(p) != 2 || p[0].String() != "10.30.2.0/24" || p[1].String() != "10.30.3.0/24" {
		t.Fatalf("free blocks %v (err %v), want 10.30.2.0/24 and 10.30.3.0/24", p, err)
	}
	v6, err := a.Allocate(ctx, ClusterScope, netip.MustParsePrefix("fd00:1::/48"), 64, owner("v6"))
	if err != nil || v6.Bits() != 64 || !netip.MustParsePrefix("fd00:1::/48").Contains(v6.Addr()) {
		t.Fatalf("IPv6 allocation %s, %v", v6, err)
	}
}

// freeBlocks skips what is used and sees allocations that contain the pool, whether they start
// with it or below it.
func TestFreeBlocksSkipsUsedAndContainingAllocations(t *testing.T) {
	a := New(startEtcd(t), "/alloc")
	ctx := context.Background()
	pool := netip.MustParsePrefix("10.50.0.0/15") // 512 /24s
	for i := 0; i < 300; i++ {
		p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(50 + i/256), byte(i % 256), 0}), 24)
		if _, err := a.Claim(ctx, ClusterScope, p, owner(fmt.Sprint("n", i))); err != nil {
			t.Fatal(err)
		}
	}
	free, err := a.freeBlocks(ctx, ClusterScope, pool, 24, 3)
	if err != nil || fmt.Sprint(free) != "[10.51.44.0/24 10.51.45.0/24 10.51.46.0/24]" {
		t.Fatalf("free blocks %v (err %v), want the three lowest after the 300 used", free, err)
	}
	if _, err := a.Claim(ctx, ClusterScope, netip.MustParsePrefix("10.60.0.0/16"), owner("big")); err != nil {
		t.Fatal(err)
	}
	for _, inner := range []string{"10.60.0.0/22", "10.60.4.0/22"} {
		free, err := a.freeBlocks(ctx, ClusterScope, netip.MustParsePrefix(inner), 24, 3)
		if err != nil || len(free) != 0 {
			t.Errorf("free blocks of %s inside an allocated /16: %v (err %v)", inner, free, err)
		}
	}
	if _, err := a.Allocate(ctx, ClusterScope, netip.MustParsePrefix("10.60.8.0/22"), 24, owner("x")); !errors.As(err, new(*ExhaustedError)) {
		t.Errorf("allocating inside an allocated /16: %v, want an ExhaustedError", err)
	}
}

func TestRepairRestoresAndRemoves(t *testing.T) {
	c := startEtcd(t)
	a := New(c, "/alloc")
	ctx := context.Background()
	keep, gone := netip.MustParsePrefix("10.40.0.0/24"), netip.MustParsePrefix("10.41.0.0/24")
	a.now = func() time.Time { return time.Now().Add(-time.Hour) } // old claims
	for p, name := range map[netip.Prefix]string{keep: "keep", gone: "gone"} {
		if _, err := a.Claim(ctx, ClusterScope, p, owner(name)); err != nil {
			t.Fatal(err)
		}
	}
	a.now = time.Now
	young := netip.MustParsePrefix("10.42.0.0/24")
	if _, err := a.Claim(ctx, ClusterScope, young, owner("in-flight")); err != nil {
		t.Fatal(err)
	}
	// The record of "keep" is deleted by hand; "gone" no longer has a Network; "lost" has none.
	if _, err := c.Delete(ctx, a.key(ClusterScope, keep)); err != nil {
		t.Fatal(err)
	}
	desired := []Desired{
		{Scope: ClusterScope, Prefix: keep, Owner: owner("keep")},
		{Scope: ClusterScope, Prefix: netip.MustParsePrefix("10.43.0.0/24"), Owner: owner("lost")},
	}
	res, err := a.Repair(ctx, desired, time.Minute)
	if err != nil || res.Restored != 2 || res.Removed != 1 || len(res.Overlaps) != 0 {
		t.Fatalf("repair: %+v, %v; want 2 restored, 1 removed", res, err)
	}
	for p, want := range map[netip.Prefix]bool{keep: true, gone: false, young: true} {
		resp, err := c.Get(ctx, a.key(ClusterScope, p))
		if err != nil || (len(resp.Kvs) == 1) != want {
			t.Errorf("%s present=%v, want %v", p, len(resp.Kvs) == 1, want)
		}
	}
	// A second repair changes nothing.
	if res, err := a.Repair(ctx, desired, time.Minute); err != nil || res.Restored+res.Removed != 0 {
		t.Errorf("second repair: %+v, %v", res, err)
	}
}
