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

package segment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"

	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
	"github.com/samplecrd/network-apiserver/test/etcdtest"
)

func TestParseRange(t *testing.T) {
	for in, want := range map[string]Range{"1048576-16777215": DefaultRange, "5-5": {5, 5}, " 7 - 9 ": {7, 9}} {
		got, err := ParseRange(in)
		if err != nil || got != want {
			t.Errorf("ParseRange(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "5", "0-5", "9-7", "1-16777216", "a-b", "-1-5"} {
		if r, err := ParseRange(bad); err == nil {
			t.Errorf("ParseRange(%q) = %v, want an error", bad, r)
		}
	}
}

func TestCandidateInRange(t *testing.T) {
	s := New(nil, "/s", Range{First: 10, Last: 12})
	seen := map[int32]bool{}
	for i := range 100 {
		v := s.Candidate(fmt.Sprintf("uid-%d", i))
		if !s.Range.Contains(v) {
			t.Fatalf("candidate %d outside %s", v, s.Range)
		}
		seen[v] = true
	}
	if len(seen) != 3 {
		t.Errorf("100 UIDs hit %d of the 3 VNIs", len(seen))
	}
}

func startEtcd(t *testing.T) *clientv3.Client { return etcdtest.StartClient(t) }

// TestAssignRacesFillTheRangeExactly: 12 UIDs assigned at once in a range of 10 get 10 distinct
// VNIs (each key pair consistent) and 2 exhaustion errors; a second assignment of a UID is
// ErrTaken; DeleteOps free the pair.
func TestAssignRacesFillTheRangeExactly(t *testing.T) {
	c := startEtcd(t)
	ctx := context.Background()
	s := New(c, "/seg", Range{First: 100, Last: 109})
	noGuard := func([]*etcdserverpb.ResponseOp) error { return nil }
	var mu sync.Mutex
	got := map[int32]string{}
	exhausted := 0
	var wg sync.WaitGroup
	for i := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			uid := fmt.Sprintf("uid-%d", i)
			v, err := s.Assign(ctx, uid, nil, nil, noGuard)
			mu.Lock()
			defer mu.Unlock()
			var ex *ExhaustedError
			switch {
			case errors.As(err, &ex):
				exhausted++
			case err != nil:
				t.Errorf("%s: %v", uid, err)
			default:
				if other, dup := got[v]; dup {
					t.Errorf("%s and %s both got %d", uid, other, v)
				}
				got[v] = uid
			}
		}()
	}
	wg.Wait()
	if len(got) != 10 || exhausted != 2 {
		t.Fatalf("%d assigned, %d exhausted; want 10 and 2", len(got), exhausted)
	}
	stored, err := s.List(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	for v, uid := range got {
		if !s.Range.Contains(v) || stored.ByVNI[v].Value != uid || stored.ByUID[uid].Value != fmt.Sprint(v) {
			t.Errorf("VNI %d of %s: keys %+v / %+v", v, uid, stored.ByVNI[v], stored.ByUID[uid])
		}
	}
	var uid string
	var v int32
	for v, uid = range got {
		break
	}
	if _, err := s.Assign(ctx, uid, nil, nil, noGuard); !errors.Is(err, ErrTaken) {
		t.Errorf("a second assignment of %s: %v, want ErrTaken", uid, err)
	}
	if of, _, err := s.Of(ctx, uid, 0); err != nil || of != v {
		t.Errorf("Of(%s) = %d, %v; want %d", uid, of, err, v)
	}
	if _, err := c.Txn(ctx).Then(s.DeleteOps(uid, v)...).Commit(); err != nil {
		t.Fatal(err)
	}
	if stored, err = s.List(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if _, ok := stored.ByVNI[v]; ok || len(stored.ByVNI) != 9 || len(stored.ByUID) != 9 {
		t.Errorf("after the delete of %s: %d VNI keys, %d uid keys, VNI %d still held: %v", uid, len(stored.ByVNI), len(stored.ByUID), v, ok)
	}
	// DeleteOps never removes a VNI key that names another UID.
	other := got[(v-100+1)%10+100]
	if _, err := c.Txn(ctx).Then(s.DeleteOps(uid, (v-100+1)%10+100)...).Commit(); err != nil {
		t.Fatal(err)
	}
	if stored, _ = s.List(ctx, 0); stored.ByVNI[(v-100+1)%10+100].Value != other {
		t.Errorf("a delete naming another UID's VNI removed its key")
	}
}

// TestGuardLayouts: a create's guard in the pair layout writes both keys and loses to either
// key present; in the single layout it writes the vni key alone and loses to it. Of finds a
// single-layout VNI from the hint only when the vni key of the hint names the UID, and prefers
// the uid key; Assign writes both keys in either layout.
func TestGuardLayouts(t *testing.T) {
	c := startEtcd(t)
	ctx := context.Background()
	s := New(c, "/seg", Range{First: 100, Last: 199})
	create := func(uid string, v int32) error {
		cmps, probes, check, puts := s.Guard(uid, v)
		resp, err := c.Txn(ctx).If(cmps...).Then(puts...).Else(probes...).Commit()
		if err != nil {
			return err
		}
		if !resp.Succeeded {
			return check(resp.Responses)
		}
		return nil
	}
	keys := func() Stored {
		t.Helper()
		st, err := s.List(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	of := func(uid string, hint int32) int32 {
		t.Helper()
		v, _, err := s.Of(ctx, uid, hint)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}

	if err := create("pair", 100); err != nil {
		t.Fatal(err)
	}
	if st := keys(); st.ByVNI[100].Value != "pair" || st.ByUID["pair"].Value != "100" {
		t.Fatalf("pair layout wrote %+v", st)
	}
	if err := create("pair", 101); !errors.Is(err, ErrTaken) {
		t.Errorf("pair layout, a second VNI for a UID with a uid key: %v, want ErrTaken", err)
	}

	s.Layout = LayoutSingle
	if err := create("single", 110); err != nil {
		t.Fatal(err)
	}
	st := keys()
	if _, ok := st.ByUID["single"]; ok || st.ByVNI[110].Value != "single" || len(st.ByVNI) != 1+1 {
		t.Fatalf("single layout wrote %+v", st)
	}
	if err := create("other", 110); !errors.Is(err, ErrTaken) {
		t.Errorf("single layout, a taken VNI: %v, want ErrTaken", err)
	}
	for _, c := range []struct {
		uid  string
		hint int32
		want int32
	}{
		{"single", 110, 110}, // the hint's key names it
		{"single", 0, 0},     // no hint, no uid key
		{"single", 111, 0},   // the hint's key is absent
		{"other", 110, 0},    // the hint's key names another UID
		{"pair", 0, 100},     // the uid key
		{"pair", 110, 100},   // the uid key wins over the hint
	} {
		if got := of(c.uid, c.hint); got != c.want {
			t.Errorf("Of(%s, %d) = %d, want %d", c.uid, c.hint, got, c.want)
		}
	}

	noGuard := func([]*etcdserverpb.ResponseOp) error { return nil }
	v, err := s.Assign(ctx, "assigned", nil, nil, noGuard)
	if err != nil {
		t.Fatal(err)
	}
	if st := keys(); st.ByVNI[v].Value != "assigned" || st.ByUID["assigned"].Value != fmt.Sprint(v) {
		t.Errorf("Assign in the single layout wrote %+v for VNI %d", st, v)
	}
	if _, err := c.Txn(ctx).Then(s.DeleteOps("single", 110)...).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, ok := keys().ByVNI[110]; ok {
		t.Errorf("DeleteOps left the single layout's vni key")
	}
}

// TestPickProbesAcrossWindowsAndWraps: after a conflict, Pick takes the first free VNI from the
// candidate on, across more than one read window and around the end of the range.
func TestPickProbesAcrossWindowsAndWraps(t *testing.T) {
	c := startEtcd(t)
	ctx := context.Background()
	s := New(c, "/seg", Range{First: 10, Last: 10 + 3*pickWindow - 1})
	uid := "uid-x"
	cand := s.Candidate(uid)
	// Hold every VNI from the candidate to the end of the range and the first 5 of it.
	var ops []clientv3.Op
	hold := func(v int32) {
		ops = append(ops, clientv3.OpPut(s.VNIKey(v), "other"))
		if len(ops) == 100 {
			if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = nil
		}
	}
	for v := cand; v <= s.Range.Last; v++ {
		hold(v)
	}
	for v := s.Range.First; v < s.Range.First+5; v++ {
		hold(v)
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	want := s.Range.First + 5
	if cand <= want || s.Range.Last-cand < pickWindow {
		t.Fatalf("candidate %d of %s: pick another uid for this test", cand, s.Range)
	}
	got, err := s.Pick(ctx, uid, 1)
	if err != nil || got != want {
		t.Errorf("Pick = %d, %v; want %d (candidate %d)", got, err, want, cand)
	}
}

// TestPickCountsOnlyWhenAWindowIsFull: a conflict at the candidate reads one window of keys; the
// whole range is counted (a visit of every VNI key, O(Networks)) only once a window is full.
func TestPickCountsOnlyWhenAWindowIsFull(t *testing.T) {
	c := startEtcd(t)
	var counts atomic.Int32
	counting, err := clientv3.New(clientv3.Config{Endpoints: c.Endpoints(), DialOptions: []grpc.DialOption{
		grpc.WithUnaryInterceptor(func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
			if r, ok := req.(*etcdserverpb.RangeRequest); ok && r.CountOnly {
				counts.Add(1)
			}
			return invoker(ctx, method, req, reply, cc, opts...)
		})}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { counting.Close() })
	ctx := context.Background()
	s := New(counting, "/seg", Range{First: 10, Last: 10 + 3*pickWindow - 1})
	uid := "uid-y"
	cand := s.Candidate(uid)
	if s.Range.Last-cand < 2*pickWindow {
		t.Fatalf("candidate %d of %s: pick another uid for this test", cand, s.Range)
	}
	if _, err := c.Put(ctx, s.VNIKey(cand), "other"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Pick(ctx, uid, 1); err != nil || got != cand+1 || counts.Load() != 0 {
		t.Fatalf("Pick = %d, %v with %d counts; want %d with none", got, err, counts.Load(), cand+1)
	}
	// A full window from the candidate on: the range is counted once, then the next window read.
	var ops []clientv3.Op
	for v := cand; v < cand+pickWindow; v++ {
		ops = append(ops, clientv3.OpPut(s.VNIKey(v), "other"))
		if len(ops) == 100 {
			if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
				t.Fatal(err)
			}
			ops = nil
		}
	}
	if _, err := c.Txn(ctx).Then(ops...).Commit(); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Pick(ctx, uid, 1); err != nil || got != cand+pickWindow || counts.Load() != 1 {
		t.Fatalf("Pick = %d, %v with %d counts; want %d with one", got, err, counts.Load(), cand+pickWindow)
	}
}

// TestEachTrustingReadsOnlyUntrustedValues: EachTrusting hands out every key in Each's order,
// parsed as Each parses it; the keys trust accepts without their values, the others with their
// values at the revision asked for, not the current one.
func TestEachTrustingReadsOnlyUntrustedValues(t *testing.T) {
	c := startEtcd(t)
	ctx := context.Background()
	s := New(c, "/seg", Range{First: 100, Last: 400})
	noGuard := func([]*etcdserverpb.ResponseOp) error { return nil }
	const n = 150 // more untrusted keys than one transaction reads
	for i := range n {
		if _, err := s.Assign(ctx, fmt.Sprintf("uid-%03d", i), nil, nil, noGuard); err != nil {
			t.Fatal(err)
		}
	}
	put, err := c.Put(ctx, "/seg/odd", "x")
	if err != nil {
		t.Fatal(err)
	}
	rev := put.Header.Revision
	var want []Entry
	if err := s.Each(ctx, rev, func(e Entry) error {
		want = append(want, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Written over after rev: EachTrusting must still read the value at rev.
	if _, err := c.Put(ctx, s.UIDKey("uid-001"), "later"); err != nil {
		t.Fatal(err)
	}
	// Trusted: the uid keys of even UIDs and the vni keys of even VNIs.
	trust := func(e Entry) bool {
		if e.Value != "" {
			t.Fatalf("trust got %s with its value %q", e.Key.Key, e.Value)
		}
		switch e.Kind {
		case KindUID:
			var i int
			_, _ = fmt.Sscanf(e.UID, "uid-%d", &i)
			return i%2 == 0
		case KindVNI:
			return e.VNI%2 == 0
		}
		return false
	}
	var got []Entry
	if err := s.EachTrusting(ctx, rev, trust, func(e Entry) error {
		got = append(got, e)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d entries, want %d", len(got), len(want))
	}
	read := 0
	for i, e := range got {
		w := want[i]
		if trust(Entry{Key: Key{Key: w.Key.Key, ModRevision: w.ModRevision}, Kind: w.Kind, UID: w.UID, VNI: w.VNI}) {
			w.Value, w.Trusted = "", true
		} else {
			read++
		}
		if e != w {
			t.Errorf("entry %d: %+v, want %+v", i, e, w)
		}
	}
	if read <= etcdscan.TrustBatch {
		t.Errorf("%d values read: the test needs more than one transaction's worth", read)
	}
	if err := s.EachTrusting(ctx, 0, trust, func(Entry) error { return nil }); err == nil {
		t.Error("EachTrusting at revision 0: no error")
	}
}
