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

// Package allocator keeps the CIDRs of all Networks in etcd so that no two overlap, whatever the
// number of clients or server replicas racing to create them. Each allocation is one key named
// by its start address, written in the same etcd transaction as its Network and guarded by
// everything that could overlap it; it is deleted in the same transaction as its Network. So at
// every etcd revision the allocations are exactly the stored Networks, and two overlapping
// creates can never both commit, while creates of disjoint ranges touch different keys and do
// not contend.
package allocator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
)

// maxAttempts bounds the retries of a write whose guard lost a race to a write beside it.
const maxAttempts = 64

// ErrObjectExists says that a create found its object's key taken.
var ErrObjectExists = errors.New("the object already exists")

// ErrObjectChanged says that a repair found the Network it was repairing deleted or replaced.
var ErrObjectChanged = errors.New("the network was deleted or replaced meanwhile")

// Owner identifies the Network incarnation an allocation belongs to: a Network deleted and
// created again under the same name has another UID, and so is another owner.
type Owner struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	UID       string `json:"uid"`
}

func (o Owner) String() string { return o.Namespace + "/" + o.Name }

// record is the value stored for an allocation. Its encoding is deterministic, so that a delete
// can compare the stored value with the one its Network implies.
type record struct {
	CIDR string `json:"cidr"`
	Owner
	// Node and Role are set on the keys of a Network's blocks (role "block", the node holding it)
	// and on its gateway key (role "gateway"); never on a Network's own allocation, whose value
	// stays what older versions wrote (and older decoders ignore both).
	Node string `json:"node,omitempty"`
	Role string `json:"role,omitempty"`
}

// Roles of the keys in a Network's block scope.
const (
	RoleBlock   = "block"
	RoleGateway = "gateway"
)

// Allocation is one Network's prefix in its scope.
type Allocation struct {
	Scope  string
	Prefix netip.Prefix
	Owner  Owner
	// Node and Role are set for blocks and gateway keys (see record).
	Node, Role string
	// Within, when valid, is a prefix that contains Prefix and that nothing in Scope extends
	// beyond (a block's Network prefix): the guards then stop at it, so that a /128 block in a /64
	// is guarded by 64 container keys rather than 127 (etcd's --max-txn-ops is 128).
	Within netip.Prefix
}

// Stored is an allocation as read from etcd.
type Stored struct {
	Allocation
	Key         string
	ModRevision int64
	// Corrupt is set when the value cannot be decoded; Allocation then holds only the scope.
	Corrupt error
	// Trusted is set when the key was read without its value and trusted (EachTrusting);
	// Allocation then holds only the scope.
	Trusted bool
}

// OverlapError says that an allocation overlaps an existing one.
type OverlapError struct {
	// Allocation is the one that could not be written, its prefix masked.
	Allocation Allocation
	Other      Allocation
}

func (e *OverlapError) Error() string {
	return fmt.Sprintf("%s overlaps network %s (%s)", e.Allocation.Prefix, e.Other.Owner, e.Other.Prefix)
}

// ExhaustedError says that a pool has no free prefix of the requested length.
type ExhaustedError struct {
	Pool netip.Prefix
	Bits int
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("pool %s has no free /%d left", e.Pool, e.Bits)
}

// Allocator writes and removes allocations in etcd under root, together with their Networks.
type Allocator struct {
	client *clientv3.Client
	root   string
	// rootSlash is root and "/" (Root), built once: the verifier asks for it per key.
	rootSlash string
	// seen remembers the ModRevision this allocator last saw at allocation keys (0: absent), as
	// the first guess of the next guard that covers them. It is only a guess: the guard compares
	// it with etcd, and a wrong guess costs one more round trip, never correctness. Without it,
	// densely packed prefixes (a /28 next to another at a shorter prefix's start) would pay a
	// failed transaction on every create.
	seen revisions
	// writing are the allocation keys this allocator is writing now: a guard that would guess
	// one of them waits for its write instead (see guardedWrite).
	writing inflight
	// scanner reads whole ranges (List, Scan).
	scanner *etcdscan.Scanner
	// lengths, when set, are the length records this allocator keeps (KeepLengths).
	lengths *lengthRecords
	// Gateways says, for the block keyspace, whether Networks' gateways have keys in it
	// (GatewayKeysWrite when empty).
	Gateways GatewayKeys
}

// GatewayKeys says whether the Networks' gateways have keys in the block keyspace.
type GatewayKeys string

const (
	// GatewayKeysWrite: every Network's gateway has a key in its block scope (role gateway), which
	// every block's guard sees: a create writes it, a gateway change moves it and a claim writes
	// it where it is missing, as every build before GatewayKeysNone does.
	GatewayKeysWrite GatewayKeys = "write"
	// GatewayKeysNone: no gateway key. A claim picks its block around the gateway of the Network
	// as read together with the Network's allocation key, and is guarded by that key's
	// ModRevision; a gateway change writes the allocation key again (so every claim that read the
	// old gateway fails) and guards the new gateway against the blocks without storing it. Only
	// once every replica runs a build that guards claims so (this one or later, in either mode):
	// an older build's claim sees no gateway.
	GatewayKeysNone GatewayKeys = "none"
)

// WritesGatewayKeys says whether Networks' gateways have keys in this (block) allocator.
func (a *Allocator) WritesGatewayKeys() bool { return a.Gateways != GatewayKeysNone }

// New returns an allocator storing its keys under root (for example "/registry/samplecrd.k8s.io/allocations").
func New(client *clientv3.Client, root string) *Allocator {
	registerMetrics()
	root = strings.TrimSuffix(root, "/")
	return &Allocator{client: client, root: root, rootSlash: root + "/", scanner: etcdscan.New(client)}
}

// Scanner reads whole ranges and pages of this allocator's etcd.
func (a *Allocator) Scanner() *etcdscan.Scanner { return a.scanner }

// Root is the key prefix of every allocation, ending in "/".
func (a *Allocator) Root() string { return a.rootSlash }

func (a *Allocator) familyPrefix(scope string, p netip.Prefix) string {
	return a.root + "/" + scope + "/" + familyOf(p.Addr()) + "/"
}

// Key is where an allocation of p in scope is stored.
func (a *Allocator) Key(scope string, p netip.Prefix) string {
	return a.familyPrefix(scope, p) + addrHex(p.Masked().Addr())
}

// Value is what is stored for an allocation.
func Value(al Allocation) string {
	b, err := json.Marshal(record{CIDR: al.Prefix.Masked().String(), Owner: al.Owner, Node: al.Node, Role: al.Role})
	if err != nil {
		panic(err) // strings only
	}
	return string(b)
}

func decode(value []byte) (record, netip.Prefix, error) {
	r, ok := decodeCanonical(value)
	if !ok {
		var err error
		if r, err = decodeJSON(value); err != nil {
			return r, netip.Prefix{}, err
		}
	}
	p, err := netip.ParsePrefix(r.CIDR)
	return r, p, err
}

// decodeJSON is decode's general path, a function of its own so that the record it hands
// encoding/json is moved to the heap only when that path is taken.
func decodeJSON(value []byte) (record, error) {
	var r record
	err := json.Unmarshal(value, &r)
	return r, err
}

// decodeCanonical reads a record written by Value without encoding/json: the verifier reads one
// per allocation, gateway and block key, and the generic decoder was a tenth of its CPU at a
// million Networks. It accepts only what json.Marshal of a record writes when no string needs
// an escape (printable ASCII without quote or backslash, which every Kubernetes name, namespace
// and UID is): the fields in Marshal's order, node and role only when set. For anything else it
// says false, and decode reads the value with encoding/json. Whatever it accepts, encoding/json
// reads the same (FuzzDecodeCanonical).
func decodeCanonical(b []byte) (record, bool) {
	var r record
	var ok bool
	// Each string is returned, not written through a pointer into r: a pointer would move r to
	// the heap on every call.
	if r.CIDR, b, ok = canonicalString(b, `{"cidr":"`); !ok {
		return r, false
	}
	if r.Namespace, b, ok = canonicalString(b, `","namespace":"`); !ok {
		return r, false
	}
	if r.Name, b, ok = canonicalString(b, `","name":"`); !ok {
		return r, false
	}
	if r.UID, b, ok = canonicalString(b, `","uid":"`); !ok {
		return r, false
	}
	if node, rest, ok := canonicalString(b, `","node":"`); ok {
		r.Node, b = node, rest
	}
	if role, rest, ok := canonicalString(b, `","role":"`); ok {
		r.Role, b = role, rest
	}
	return r, string(b) == `"}`
}

// canonicalString reads lead and the characters of a string value that needs no escape, up to
// its closing quote (left in the rest it returns).
func canonicalString(b []byte, lead string) (string, []byte, bool) {
	if len(b) < len(lead) || string(b[:len(lead)]) != lead {
		return "", b, false
	}
	b = b[len(lead):]
	n := 0
	for n < len(b) && b[n] >= 0x20 && b[n] < 0x7f && b[n] != '"' && b[n] != '\\' {
		n++
	}
	if n == len(b) || b[n] != '"' {
		return "", b, false
	}
	return string(b[:n]), b[n:], true
}

// Create stores objValue at objKey and al's allocation in one transaction, if objKey is free and
// nothing overlaps al; also are more writes of the same transaction (the Network's gateway key).
// It returns the revision of the write, ErrObjectExists, or an *OverlapError.
func (a *Allocator) Create(ctx context.Context, objKey, objValue string, al Allocation, also ...clientv3.Op) (int64, error) {
	return a.guardedWrite(ctx, al,
		[]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(objKey), "=", 0)},
		[]clientv3.Op{clientv3.OpGet(objKey, clientv3.WithCountOnly())},
		func(rs []*etcdserverpb.ResponseOp) error {
			if rs[0].GetResponseRange().Count > 0 {
				return ErrObjectExists
			}
			return nil
		},
		append([]clientv3.Op{clientv3.OpPut(objKey, objValue)}, also...)...)
}

// CreateGuarded is Create with more guards: cmps must hold too (probes read what they compare
// when the transaction fails, and check turns their answers into the error to return, nil when
// they held), and also are written with it (the Network's VNI keys beside its gateway key).
func (a *Allocator) CreateGuarded(ctx context.Context, objKey, objValue string, al Allocation, cmps []clientv3.Cmp, probes []clientv3.Op,
	check func([]*etcdserverpb.ResponseOp) error, also ...clientv3.Op) (int64, error) {
	n := len(probes)
	return a.guardedWrite(ctx, al,
		append([]clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(objKey), "=", 0)}, cmps...),
		append([]clientv3.Op{clientv3.OpGet(objKey, clientv3.WithCountOnly())}, probes...),
		func(rs []*etcdserverpb.ResponseOp) error {
			if rs[0].GetResponseRange().Count > 0 {
				return ErrObjectExists
			}
			return check(rs[1 : 1+n])
		},
		append([]clientv3.Op{clientv3.OpPut(objKey, objValue)}, also...)...)
}

// Check reports, without writing, whether al could be created now (for dry runs): nil or an
// *OverlapError.
func (a *Allocator) Check(ctx context.Context, al Allocation) error {
	s := a.spanOf(al.Scope, al.Prefix)
	resp, err := a.client.Txn(ctx).Then(s.reads()...).Commit()
	if err != nil {
		return err
	}
	_, _, err = a.conflict(al, s, resp.Responses)
	return err
}

// Delete removes the object at objKey if its ModRevision is still modRevision, and in the same
// transaction al's allocation if it is stored as al (nil: the object has no valid prefix), and
// does the deletes of also (the Network's blocks). It returns whether the object was deleted,
// and the revision of the transaction.
func (a *Allocator) Delete(ctx context.Context, objKey string, modRevision int64, al *Allocation, also ...clientv3.Op) (bool, int64, error) {
	ops := append([]clientv3.Op{clientv3.OpDelete(objKey)}, also...)
	if al != nil {
		key := a.Key(al.Scope, al.Prefix)
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.Value(key), "=", Value(*al))},
			[]clientv3.Op{clientv3.OpDelete(key)}, nil))
	}
	resp, err := a.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(objKey), "=", modRevision)).Then(ops...).Commit()
	if err != nil {
		return false, 0, err
	}
	if resp.Succeeded && al != nil {
		a.seen.set(a.Key(al.Scope, al.Prefix), 0, netip.Prefix{})
	}
	return resp.Succeeded, resp.Header.Revision, nil
}

// Write commits ops together with al's allocation in one transaction that holds only if nothing
// overlapping al is stored and cmps hold. When it fails, check receives the results of probes
// (read at the revision of the failure) and returns the caller's error; a failure that check
// does not explain is an overlap (an *OverlapError) or a write beside al, which Write retries.
func (a *Allocator) Write(ctx context.Context, al Allocation, cmps []clientv3.Cmp, probes []clientv3.Op,
	check func([]*etcdserverpb.ResponseOp) error, ops ...clientv3.Op) (int64, error) {
	if check == nil {
		check = func([]*etcdserverpb.ResponseOp) error { return nil }
	}
	return a.guardedWrite(ctx, al, cmps, probes, check, ops...)
}

// Guard commits ops in one transaction that holds only if nothing overlapping al is stored and
// cmps hold, as Write does, but stores no key for al: the guard of an address that must stay
// outside every block (a gateway moved with --gateway-keys=none).
func (a *Allocator) Guard(ctx context.Context, al Allocation, cmps []clientv3.Cmp, probes []clientv3.Op,
	check func([]*etcdserverpb.ResponseOp) error, ops ...clientv3.Op) (int64, error) {
	if check == nil {
		check = func([]*etcdserverpb.ResponseOp) error { return nil }
	}
	return a.guardedWriteStoring(ctx, al, false, cmps, probes, check, ops...)
}

// Restore writes the missing allocation al of the Network stored at objKey, if that Network is
// still the incarnation created at objCreateRevision and nothing overlaps al. It returns
// ErrObjectChanged or an *OverlapError otherwise.
func (a *Allocator) Restore(ctx context.Context, objKey string, objCreateRevision int64, al Allocation) error {
	_, err := a.guardedWrite(ctx, al,
		[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(objKey), "=", objCreateRevision)},
		[]clientv3.Op{clientv3.OpGet(objKey, clientv3.WithKeysOnly())},
		func(rs []*etcdserverpb.ResponseOp) error {
			if kvs := rs[0].GetResponseRange().Kvs; len(kvs) == 0 || kvs[0].CreateRevision != objCreateRevision {
				return ErrObjectChanged
			}
			return nil
		})
	return err
}

// Rewrite replaces the allocation at key (if still at keyModRevision) by al, the allocation of the
// Network stored at objKey (if still the incarnation created at objCreateRevision).
func (a *Allocator) Rewrite(ctx context.Context, key string, keyModRevision int64, objKey string, objCreateRevision int64, al Allocation) (bool, error) {
	if want := a.Key(al.Scope, al.Prefix); want != key {
		return false, fmt.Errorf("allocation of %s belongs at %s, not %s", al.Prefix, want, key)
	}
	cmps := []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(key), "=", keyModRevision),
		clientv3.Compare(clientv3.CreateRevision(objKey), "=", objCreateRevision),
	}
	ops := []clientv3.Op{clientv3.OpPut(key, Value(al))}
	// The rewritten prefix's length must be recorded like a create's (lengths.go).
	if a.lengths != nil && !al.Within.IsValid() {
		record := a.lengths.prefix(al.Scope, al.Prefix)
		if !a.lengths.get(record).set.has(al.Prefix.Bits()) {
			ops = append(ops, clientv3.OpPut(lengthKey(record, al.Prefix.Bits()), ""))
		}
	}
	resp, err := a.client.Txn(ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// Remove deletes the allocation at key if it is still at modRevision.
func (a *Allocator) Remove(ctx context.Context, key string, modRevision int64) (bool, error) {
	resp, err := a.client.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", modRevision)).
		Then(clientv3.OpDelete(key)).Commit()
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// GetRevision is Get, and the revision it read at.
func (a *Allocator) GetRevision(ctx context.Context, key string) (*mvccpb.KeyValue, int64, error) {
	resp, err := a.client.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	if len(resp.Kvs) == 0 {
		return nil, resp.Header.Revision, nil
	}
	return resp.Kvs[0], resp.Header.Revision, nil
}

// Get reads one key (a Network's, for a delete) through the client the transactions use: nil
// when it is absent.
func (a *Allocator) Get(ctx context.Context, key string) (*mvccpb.KeyValue, error) {
	resp, err := a.client.Get(ctx, key)
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	return resp.Kvs[0], nil
}

// Ping reads through the allocator's client with a linearizable read, so that it fails while
// the client cannot reach an etcd quorum (for /readyz).
func (a *Allocator) Ping(ctx context.Context) error {
	_, err := a.client.Get(ctx, a.root, clientv3.WithCountOnly())
	return err
}
