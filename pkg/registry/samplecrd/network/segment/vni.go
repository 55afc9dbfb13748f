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

// Package segment keeps the VNI of every Network: unique cluster-wide, from a range, owned by
// the server. The truth is the vni key <root>/vni/<vni> (value: the Network's UID), written in
// the Network's create transaction with status.vni and removed in its delete. In the pair layout
// (every build before LayoutSingle, and this one by default) the create also writes the uid key
// <root>/uid/<uid> (value: the VNI); in the single layout the create writes the vni key alone
// and status.vni, written in the same transaction, is the way back from a Network to its key. A
// VNI assigned after the create (to a Network stored without one) always gets both keys: the uid
// key is what keeps two assignments to one Network apart. Readers accept both forms.
package segment

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
)

// MaxVNI is the largest VNI VXLAN carries (24 bits).
const MaxVNI = 1<<24 - 1

// DefaultRange is --vni-range's default: clear of flannel's VNI 1 and Calico's 4096.
var DefaultRange = Range{First: 1 << 20, Last: MaxVNI}

// Range is an inclusive range of VNIs.
type Range struct {
	First, Last int32
}

// Size is the number of VNIs in r.
func (r Range) Size() int64 { return int64(r.Last) - int64(r.First) + 1 }

// Contains says whether v is in r.
func (r Range) Contains(v int32) bool { return v >= r.First && v <= r.Last }

func (r Range) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// ParseRange parses "first-last" (1 ≤ first ≤ last ≤ 16777215).
func ParseRange(s string) (Range, error) {
	a, b, ok := strings.Cut(s, "-")
	first, err1 := strconv.ParseInt(strings.TrimSpace(a), 10, 32)
	last, err2 := strconv.ParseInt(strings.TrimSpace(b), 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return Range{}, fmt.Errorf("%q is not a VNI range such as %s", s, DefaultRange)
	}
	if first < 1 || last > MaxVNI || first > last {
		return Range{}, fmt.Errorf("VNI range %q must satisfy 1 <= first <= last <= %d", s, MaxVNI)
	}
	return Range{First: int32(first), Last: int32(last)}, nil
}

// ExhaustedError says that every VNI of the range is held by a Network.
type ExhaustedError struct {
	Range Range
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("no free VNI: all %d VNIs of --vni-range %s are held by networks; delete a network or widen the range",
		e.Range.Size(), e.Range)
}

// ErrTaken says that the VNI picked, or the Network's UID, got a key first (a concurrent
// assignment): pick again, or read the Network's VNI.
var ErrTaken = errors.New("the VNI or the network's VNI key was taken meanwhile")

// Layout is which keys a Network's create writes for its VNI.
type Layout string

const (
	// LayoutPair: the vni key and the uid key, as every build before LayoutSingle writes them.
	LayoutPair Layout = "pair"
	// LayoutSingle: the vni key alone (status.vni, in the same transaction, names it). Only once
	// every replica runs a build that reads it: a build before it takes a vni key without its
	// uid key for a leftover, removes it and assigns the Network another VNI.
	LayoutSingle Layout = "single"
)

// VNIs are the VNI keys under one root.
type VNIs struct {
	client  *clientv3.Client
	scanner *etcdscan.Scanner
	root    string
	Range   Range
	// Layout is what Guard writes for a create (LayoutPair when empty).
	Layout Layout
}

// New returns the VNI keys under root (<etcd prefix>/segments), handed out from r.
func New(client *clientv3.Client, root string, r Range) *VNIs {
	return &VNIs{client: client, scanner: etcdscan.New(client), root: strings.TrimSuffix(root, "/"), Range: r}
}

// VNIKey is the key of VNI v: eight decimal digits, so that the keys sort as the VNIs do and a
// range of VNIs is a range of keys.
func (s *VNIs) VNIKey(v int32) string { return fmt.Sprintf("%s/vni/%08d", s.root, v) }

// UIDKey is the key of the Network with UID uid.
func (s *VNIs) UIDKey(uid string) string { return s.root + "/uid/" + uid }

// Candidate is the first VNI tried for uid: hash(uid) mod the range.
func (s *VNIs) Candidate(uid string) int32 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(uid))
	return s.Range.First + int32(h.Sum64()%uint64(s.Range.Size()))
}

// Pick returns the VNI to try for uid: its candidate on the first attempt; after a conflict, the
// first VNI from the candidate on (wrapping around) that no key holds now, read a window of keys
// at a time (a range read: the keys sort as the VNIs do). The range is counted (every VNI key
// visited) only when a whole window is taken, to tell an exhausted range from a crowded stretch:
// counting on every conflict made creates O(n) each once many Networks were stored.
func (s *VNIs) Pick(ctx context.Context, uid string, attempt int) (int32, error) {
	c := s.Candidate(uid)
	if attempt == 0 {
		return c, nil
	}
	counted := false
	from := c
	for scanned := int64(0); scanned < s.Range.Size(); {
		to := min(int64(from)+pickWindow, int64(s.Range.Last)+1) // exclusive
		resp, err := s.client.Get(ctx, s.VNIKey(from), clientv3.WithRange(s.VNIKey(int32(to))), clientv3.WithKeysOnly())
		if err != nil {
			return 0, err
		}
		next := from
		for _, kv := range resp.Kvs {
			v, err := strconv.ParseInt(strings.TrimPrefix(string(kv.Key), s.root+"/vni/"), 10, 32)
			if err != nil || int32(v) < next {
				continue
			}
			if int32(v) > next {
				return next, nil
			}
			next++
		}
		if int64(next) < to {
			return next, nil
		}
		if !counted {
			counted = true
			resp, err := s.client.Get(ctx, s.VNIKey(s.Range.First), clientv3.WithRange(s.VNIKey(s.Range.Last+1)), clientv3.WithCountOnly())
			if err != nil {
				return 0, err
			}
			if resp.Count >= s.Range.Size() {
				return 0, &ExhaustedError{Range: s.Range}
			}
		}
		scanned += to - int64(from)
		from = int32(to)
		if int64(from) > int64(s.Range.Last) {
			from = s.Range.First
		}
	}
	return 0, &ExhaustedError{Range: s.Range}
}

// pickWindow is how many VNIs one read of Pick covers.
const pickWindow = 1024

// Guard is what a Network's create transaction adds to give it v: the compares (its keys
// absent), the probes that tell a failed compare apart, the check over the probes' answers
// (ErrTaken when a key exists), and the puts — the vni key, and the uid key unless s.Layout is
// LayoutSingle. The create's own compare (the Network's key absent) is what keeps a second VNI
// from a Network in the single layout: its UID is new, and nothing but a create gives a Network
// that has status.vni a VNI.
func (s *VNIs) Guard(uid string, v int32) (cmps []clientv3.Cmp, probes []clientv3.Op, check func([]*etcdserverpb.ResponseOp) error, puts []clientv3.Op) {
	if s.Layout == LayoutSingle {
		return s.guard(uid, v, false)
	}
	return s.guard(uid, v, true)
}

// guard is Guard, with the uid key or without it.
func (s *VNIs) guard(uid string, v int32, pair bool) (cmps []clientv3.Cmp, probes []clientv3.Op, check func([]*etcdserverpb.ResponseOp) error, puts []clientv3.Op) {
	vk := s.VNIKey(v)
	cmps = []clientv3.Cmp{clientv3.Compare(clientv3.Version(vk), "=", 0)}
	probes = []clientv3.Op{clientv3.OpGet(vk, clientv3.WithCountOnly())}
	puts = []clientv3.Op{clientv3.OpPut(vk, uid)}
	if pair {
		uk := s.UIDKey(uid)
		cmps = append(cmps, clientv3.Compare(clientv3.Version(uk), "=", 0))
		probes = append(probes, clientv3.OpGet(uk, clientv3.WithCountOnly()))
		puts = append(puts, clientv3.OpPut(uk, strconv.FormatInt(int64(v), 10)))
	}
	check = func(rs []*etcdserverpb.ResponseOp) error {
		for _, r := range rs {
			if r.GetResponseRange().Count > 0 {
				return ErrTaken
			}
		}
		return nil
	}
	return cmps, probes, check, puts
}

// Of reads the VNI the keys give uid (0: none) and the ModRevision of the key that says so:
// the uid key when there is one (the pair layout), else the vni key of hint (the Network's
// status.vni) when it names uid (the single layout). Both are read at one revision.
func (s *VNIs) Of(ctx context.Context, uid string, hint int32) (int32, int64, error) {
	ops := []clientv3.Op{clientv3.OpGet(s.UIDKey(uid))}
	if hint != 0 {
		ops = append(ops, clientv3.OpGet(s.VNIKey(hint)))
	}
	resp, err := s.client.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return 0, 0, err
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		v, err := strconv.ParseInt(string(kvs[0].Value), 10, 32)
		if err != nil {
			return 0, kvs[0].ModRevision, nil
		}
		return int32(v), kvs[0].ModRevision, nil
	}
	if hint != 0 {
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 && string(kvs[0].Value) == uid {
			return hint, kvs[0].ModRevision, nil
		}
	}
	return 0, 0, nil
}

// DeleteOps are the ops of a Network's delete transaction that remove its keys, given the VNI Of
// read for it (0: none): the uid key, and the VNI key only if it still names uid.
func (s *VNIs) DeleteOps(uid string, v int32) []clientv3.Op {
	ops := []clientv3.Op{clientv3.OpDelete(s.UIDKey(uid))}
	if v != 0 {
		vk := s.VNIKey(v)
		ops = append(ops, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(vk), "=", uid)},
			[]clientv3.Op{clientv3.OpDelete(vk)}, nil))
	}
	return ops
}

// Assign gives uid a VNI outside any Network transaction (the repair, for a Network stored
// without one), guarded by cmps (the Network unchanged); it probes on conflict. It writes both
// keys in either layout: the uid key absent is what keeps two replicas from giving one Network
// two VNIs at once. It returns the VNI, ErrTaken when uid got one meanwhile, changed (from check
// over probes) when the guard of cmps failed, or an *ExhaustedError.
func (s *VNIs) Assign(ctx context.Context, uid string, cmps []clientv3.Cmp, probes []clientv3.Op,
	check func([]*etcdserverpb.ResponseOp) error) (int32, error) {
	for attempt := 0; attempt < 16; attempt++ {
		v, err := s.Pick(ctx, uid, attempt)
		if err != nil {
			return 0, err
		}
		gc, gp, _, puts := s.guard(uid, v, true)
		resp, err := s.client.Txn(ctx).If(append(append([]clientv3.Cmp(nil), cmps...), gc...)...).Then(puts...).
			Else(append(append([]clientv3.Op(nil), probes...), gp...)...).Commit()
		if err != nil {
			return 0, err
		}
		if resp.Succeeded {
			return v, nil
		}
		if err := check(resp.Responses[:len(probes)]); err != nil {
			return 0, err
		}
		if resp.Responses[len(probes)+1].GetResponseRange().Count > 0 {
			return 0, ErrTaken // uid has a VNI now
		}
	}
	return 0, fmt.Errorf("assigning a VNI: gave up after 16 attempts lost to concurrent assignments")
}

// Key is one VNI key pair side as read.
type Key struct {
	Key         string
	Value       string
	ModRevision int64
}

// Stored is every VNI key and uid key at one revision.
type Stored struct {
	// ByVNI: VNI → the vni key; ByUID: uid → the uid key.
	ByVNI map[int32]Key
	ByUID map[string]Key
	// Corrupt are keys whose name or value cannot be read.
	Corrupt []Key
}

// List reads the keys at rev (0: now), streamed (see etcdscan).
func (s *VNIs) List(ctx context.Context, rev int64) (Stored, error) {
	out := Stored{ByVNI: map[int32]Key{}, ByUID: map[string]Key{}}
	err := s.Each(ctx, rev, func(e Entry) error {
		switch e.Kind {
		case KindUID:
			out.ByUID[e.UID] = e.Key
		case KindVNI:
			out.ByVNI[e.VNI] = e.Key
		default:
			out.Corrupt = append(out.Corrupt, e.Key)
		}
		return nil
	})
	return out, err
}

// Entry is one key as Each reads it.
type Entry struct {
	Key
	Kind Kind
	UID  string // of a uid key, whose Value is the VNI
	VNI  int32  // of a vni key, whose Value is the UID
	// Trusted: EachTrusting read the key without its value (Value is empty).
	Trusted bool
}

// Kind is the form of a key under the root.
type Kind int

const (
	// KindCorrupt: neither form (or a vni key whose VNI cannot be read).
	KindCorrupt Kind = iota
	// KindUID: <root>/uid/<uid>.
	KindUID
	// KindVNI: <root>/vni/<vni>.
	KindVNI
)

// Each calls fn for every key at rev (0: now), in key order — every uid key before every vni
// key, and the vni keys in VNI order — streamed (see etcdscan): List without holding them all.
func (s *VNIs) Each(ctx context.Context, rev int64, fn func(Entry) error) error {
	_, err := s.scanner.Scan(ctx, s.root+"/", rev, func(kv *mvccpb.KeyValue) error { return fn(s.entry(kv)) })
	return err
}

// EachTrusting is Each reading keys only (etcdscan's ScanTrusting): trust gets each entry without
// its value, and fn gets the entries trust accepted with Trusted set and no value, the others
// with their values read at rev. rev must be a revision (not 0).
func (s *VNIs) EachTrusting(ctx context.Context, rev int64, trust func(Entry) bool, fn func(Entry) error) error {
	// A key trust accepts while no value is pending goes to fn at once: its entry is not built
	// twice.
	var last *mvccpb.KeyValue
	var lastEntry Entry
	_, err := s.scanner.ScanTrusting(ctx, s.root+"/", rev,
		func(kv *mvccpb.KeyValue) bool {
			last, lastEntry = kv, s.entry(kv)
			return trust(lastEntry)
		},
		func(kv *mvccpb.KeyValue, trusted bool) error {
			e := lastEntry
			if kv != last {
				e = s.entry(kv)
			}
			e.Trusted = trusted
			return fn(e)
		})
	return err
}

// entry reads the form of kv's key.
func (s *VNIs) entry(kv *mvccpb.KeyValue) Entry {
	e := Entry{Key: keyOf(kv)}
	rest := strings.TrimPrefix(e.Key.Key, s.root+"/")
	switch {
	case strings.HasPrefix(rest, "vni/"):
		if v, err := strconv.ParseInt(strings.TrimPrefix(rest, "vni/"), 10, 32); err == nil {
			e.Kind, e.VNI = KindVNI, int32(v)
		}
	case strings.HasPrefix(rest, "uid/"):
		e.Kind, e.UID = KindUID, strings.TrimPrefix(rest, "uid/")
	}
	return e
}

func keyOf(kv *mvccpb.KeyValue) Key {
	return Key{Key: string(kv.Key), Value: string(kv.Value), ModRevision: kv.ModRevision}
}

// Remove deletes key if its ModRevision is still modRevision.
func (s *VNIs) Remove(ctx context.Context, key string, modRevision int64) (bool, error) {
	resp, err := s.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRevision)).Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}
