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

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// op is one request of the traffic, as the client saw it.
type op struct {
	ID      string `json:"id"`
	Client  int    `json:"client"`
	Replica int    `json:"replica"`
	// Kind: create (v1 POST), create-v1beta1, apply (server-side apply, create or update),
	// create-auto (spec.prefixLength), delete, label (merge patch of a label), status
	// (merge patch of status.nodes), unreport (merge patch removing every node entry), claim
	// (POST networks/{name}/blockclaims for Node), gateway (merge patch of spec.gateway and a
	// label).
	Kind      string `json:"kind"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	CIDR      string `json:"cidr,omitempty"`
	Node      string `json:"node,omitempty"`    // claim: the node claiming
	Gateway   string `json:"gateway,omitempty"` // gateway: the address asked for`
	Start     int64  `json:"start"`             // Unix nanoseconds
	End       int64  `json:"end"`
	Code      int    `json:"code,omitempty"` // HTTP status; 0 when no response came
	Reason    string `json:"reason,omitempty"`
	Message   string `json:"message,omitempty"`
	Err       string `json:"err,omitempty"` // transport error
	UID       string `json:"uid,omitempty"`
	RV        int64  `json:"rv,omitempty"`
	GotCIDR   string `json:"gotCidr,omitempty"`
	// Blocks: a claim's answer, the node's blocks after it (UID is then the Network's).
	Blocks []string `json:"blocks,omitempty"`
}

func (o op) String() string {
	s := fmt.Sprintf("op %s (client %d, replica %d) %s %s/%s", o.ID, o.Client, o.Replica, o.Kind, o.Namespace, o.Name)
	if o.CIDR != "" {
		s += " " + o.CIDR
	}
	if o.Node != "" {
		s += " node " + o.Node
	}
	if o.Gateway != "" {
		s += " gateway " + o.Gateway
	}
	s += fmt.Sprintf(" [%s .. %s]", time.Unix(0, o.Start).UTC().Format("15:04:05.000"), time.Unix(0, o.End).UTC().Format("15:04:05.000"))
	if o.Err != "" {
		return s + " -> error " + o.Err
	}
	s += fmt.Sprintf(" -> %d", o.Code)
	if o.Reason != "" {
		s += " " + o.Reason
	}
	if o.UID != "" {
		s += fmt.Sprintf(" uid %s rv %d", o.UID, o.RV)
	}
	if len(o.Blocks) > 0 {
		s += fmt.Sprintf(" blocks %v", o.Blocks)
	}
	return s
}

func (o op) write() bool { return true }

// ok says whether the server acknowledged the write.
func (o op) ok() bool { return o.Code == http.StatusOK || o.Code == http.StatusCreated }

// servedAt says whether the answer's resourceVersion is the revision the request was served at:
// an acknowledged write, except an entry removal, which answers an object with no entries to
// remove unchanged, with the revision of its last change.
func (o op) servedAt() bool {
	return o.Err == "" && o.ok() && o.RV > 0 && o.Kind != "unreport"
}

// trafficConfig is what the clients choose from.
type trafficConfig struct {
	Namespaces []string
	Names      []string
	CIDRs      []string // explicit prefixes: IPv4 and IPv6, containing and contained
	Nodes      []string // the nodes claiming blocks
}

var defaultTraffic = trafficConfig{
	Namespaces: []string{"rb-a", "rb-b"},
	Names:      []string{"n0", "n1", "n2", "n3", "n4", "n5"},
	CIDRs: []string{
		"10.1.0.0/16", "10.1.0.0/24", "10.1.1.0/24", "10.1.255.0/24", "10.1.4.0/22",
		"10.2.0.0/24", "10.2.0.0/23", "10.2.1.0/24",
		// Lengths of their own, each new to the length record when its first create races the
		// others: a /18 over the /22, a /26 inside it, a /20 over 10.2.0.0/23.
		"10.1.0.0/18", "10.1.4.0/26", "10.2.0.0/20",
		"fd01::/48", "fd01::/64", "fd01:0:0:1::/64", "fd02::/64", "fd01::/56",
	},
	Nodes: []string{"n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"},
}

// opLog collects every client's operations.
type opLog struct {
	mu  sync.Mutex
	ops []op
}

func (l *opLog) add(o op) {
	l.mu.Lock()
	l.ops = append(l.ops, o)
	l.mu.Unlock()
}

func (l *opLog) all() []op {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]op(nil), l.ops...)
}

// blockMemory is the last blocks a claim was answered for each Network name, shared by the
// clients of a run, so that gateway moves aim at held blocks half of the time.
type blockMemory struct {
	mu     sync.Mutex
	blocks map[string][]string // namespace/name -> blocks
}

func (m *blockMemory) remember(key string, blocks []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.blocks == nil {
		m.blocks = map[string][]string{}
	}
	m.blocks[key] = blocks
}

func (m *blockMemory) recall(key string) []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.blocks[key]
}

// client sends a seeded sequence of operations to one replica until ctx ends.
type client struct {
	id      int
	replica *replica
	rng     *rand.Rand
	cfg     trafficConfig
	log     *opLog
	seq     int
	http    *http.Client
	httpFor *rest.Config
	seen    *blockMemory
}

func newClient(id int, seed int64, r *replica, cfg trafficConfig, log *opLog, seen *blockMemory) *client {
	return &client{id: id, replica: r, cfg: cfg, log: log, seen: seen,
		rng: rand.New(rand.NewPCG(uint64(seed), uint64(id)+1))}
}

// home is the prefix a name usually asks for, so that creates of one name race for one prefix
// and the other names' creates of it must be refused.
func (c *client) home(ns, name string) string {
	h := 0
	for _, b := range []byte(ns + "/" + name) {
		h = h*31 + int(b)
	}
	return c.cfg.CIDRs[(h&0x7fffffff)%len(c.cfg.CIDRs)]
}

func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.step(ctx)
		// A short, seeded pause so the clients do not move in lock step.
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(c.rng.IntN(20)) * time.Millisecond):
		}
	}
}

func (c *client) step(ctx context.Context) {
	c.seq++
	o := op{ID: fmt.Sprintf("c%d-%d", c.id, c.seq), Client: c.id, Replica: c.replica.index,
		Namespace: c.cfg.Namespaces[c.rng.IntN(len(c.cfg.Namespaces))], Name: c.cfg.Names[c.rng.IntN(len(c.cfg.Names))]}
	o.CIDR = c.home(o.Namespace, o.Name)
	if c.rng.IntN(10) < 3 {
		o.CIDR = c.cfg.CIDRs[c.rng.IntN(len(c.cfg.CIDRs))]
	}
	base := "/apis/samplecrd.k8s.io/v1/namespaces/" + o.Namespace + "/networks"
	item := base + "/" + o.Name
	meta := map[string]any{"name": o.Name, "annotations": map[string]string{opAnnotation: o.ID}}
	var method, path, ctype string
	var body any
	switch n := c.rng.IntN(100); {
	case n < 28:
		o.Kind, method, path = "create", http.MethodPost, base
		body = map[string]any{"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network", "metadata": meta, "spec": map[string]any{"cidr": o.CIDR}}
	case n < 34:
		o.Kind, method, path = "create-v1beta1", http.MethodPost, "/apis/samplecrd.k8s.io/v1beta1/namespaces/"+o.Namespace+"/networks"
		body = map[string]any{"apiVersion": "samplecrd.k8s.io/v1beta1", "kind": "Network", "metadata": meta, "spec": map[string]any{"subnet": o.CIDR}}
	case n < 40:
		o.Kind, method, path, ctype = "apply", http.MethodPatch, item+"?fieldManager=robustness&force=true", "application/apply-patch+yaml"
		body = map[string]any{"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network", "metadata": meta, "spec": map[string]any{"cidr": o.CIDR}}
	case n < 45:
		o.Kind, method, path = "create-auto", http.MethodPost, base
		bits := 24
		if c.rng.IntN(2) == 0 {
			bits = 64
		}
		o.CIDR = fmt.Sprintf("/%d", bits)
		body = map[string]any{"apiVersion": "samplecrd.k8s.io/v1", "kind": "Network", "metadata": meta, "spec": map[string]any{"prefixLength": bits}}
	case n < 70:
		o.Kind, method, path, o.CIDR = "delete", http.MethodDelete, item, ""
	case n < 76:
		o.Kind, method, path, ctype, o.CIDR = "label", http.MethodPatch, item, "application/merge-patch+json", ""
		body = map[string]any{"metadata": map[string]any{"labels": map[string]string{opLabel: o.ID}}}
	case n < 83:
		o.Kind, method, path, ctype, o.CIDR = "status", http.MethodPatch, item+"/status", "application/merge-patch+json", ""
		body = map[string]any{"status": map[string]any{"nodes": []any{map[string]any{"nodeName": fmt.Sprintf("robustness-%d", c.id), "ready": false, "message": o.ID}}}}
	case n < 86:
		// Every node entry removed (a merge patch replaces the list): nothing in the stored
		// object can carry the op id, so the check is that the answer's revision has none.
		o.Kind, method, path, ctype, o.CIDR = "unreport", http.MethodPatch, item+"/status", "application/merge-patch+json", ""
		body = map[string]any{"status": map[string]any{"nodes": []any{}}}
	case n < 96:
		// What the clientset's Networks(ns).ClaimBlocks sends.
		o.Kind, method, path, o.CIDR = "claim", http.MethodPost, item+"/blockclaims", ""
		o.Node = c.cfg.Nodes[c.rng.IntN(len(c.cfg.Nodes))]
		body = map[string]any{"apiVersion": "samplecrd.k8s.io/v1", "kind": "BlockClaim", "nodeName": o.Node}
	default:
		// A gateway among the first addresses of the prefix, where the blocks are picked
		// first (the lowest free ones), or half of the time inside a block a claim was last
		// answered for the name: such moves must be refused with 422 while the block is held.
		o.Kind, method, path, ctype = "gateway", http.MethodPatch, item, "application/merge-patch+json"
		target, skipFirst := netip.MustParsePrefix(o.CIDR), true
		aim := c.rng.IntN(2) == 0
		if blocks := c.seen.recall(o.Namespace + "/" + o.Name); aim && len(blocks) > 0 {
			if p, err := netip.ParsePrefix(blocks[c.rng.IntN(len(blocks))]); err == nil {
				target, skipFirst = p, false
			}
		}
		o.Gateway, o.CIDR = gatewayCandidate(target, skipFirst, c.rng), ""
		body = map[string]any{"metadata": map[string]any{"labels": map[string]string{opLabel: o.ID}}, "spec": map[string]any{"gateway": o.Gateway}}
	}
	c.do(ctx, &o, method, path, ctype, body)
	if o.Kind == "claim" && o.ok() {
		c.seen.remember(o.Namespace+"/"+o.Name, o.Blocks)
	}
	c.log.add(o)
	if o.Err != "" {
		// The replica is down: try again soon, not in a tight loop.
		pause(ctx, time.Duration(200+c.rng.IntN(300))*time.Millisecond)
	}
}

// gatewayCandidate is an address among the first 1024 of p: never p's first address when
// skipFirst (a Network's network address), any of a block's.
func gatewayCandidate(p netip.Prefix, skipFirst bool, rng *rand.Rand) string {
	size := uint64(1024)
	if free := p.Addr().BitLen() - p.Bits(); free < 10 {
		size = 1 << free
	}
	first := uint64(0)
	if skipFirst && size > 1 {
		first, size = 1, size-1
	}
	a := p.Masked().Addr()
	for range first + rng.Uint64N(size) {
		a = a.Next()
	}
	return a.String()
}

// requestTimeout bounds one request: longer than the server's own 60s timeout is pointless, and
// every injected outage is shorter.
const requestTimeout = 30 * time.Second

func (c *client) do(ctx context.Context, o *op, method, path, ctype string, body any) {
	if cfg := c.replica.restConfig(); c.http == nil || cfg.BearerToken != c.httpFor.BearerToken || !bytes.Equal(cfg.CAData, c.httpFor.CAData) {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			o.Err = err.Error()
			return
		}
		c.http, c.httpFor = hc, cfg
	}
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), requestTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(rctx, method, c.httpFor.Host+path, rd)
	if ctype == "" {
		ctype = "application/json"
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Accept", "application/json")
	o.Start = time.Now().UnixNano()
	resp, err := c.http.Do(req)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		o.End = time.Now().UnixNano()
		if err == nil {
			o.Code = resp.StatusCode
			parseResponse(o, b)
			return
		}
	}
	o.End = time.Now().UnixNano()
	if errors.Is(err, context.DeadlineExceeded) {
		o.Err = "timeout: " + err.Error()
	} else {
		o.Err = err.Error()
	}
}

func parseResponse(o *op, b []byte) {
	var r struct {
		Kind     string `json:"kind"`
		Metadata struct {
			UID             string `json:"uid"`
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Spec struct {
			CIDR   string `json:"cidr"`
			Subnet string `json:"subnet"`
		} `json:"spec"`
		NetworkUID string `json:"networkUID"` // a BlockAllocation
		Blocks     []struct {
			CIDR string `json:"cidr"`
		} `json:"blocks"`
		Reason  string `json:"reason"`
		Message string `json:"message"`
		Details struct {
			UID string `json:"uid"`
		} `json:"details"`
	}
	if err := json.Unmarshal(b, &r); err != nil {
		o.Message = fmt.Sprintf("undecodable body (%v): %.200s", err, b)
		return
	}
	if r.Kind == "Status" {
		// A DELETE answers with a Status naming the deleted object's uid.
		o.Reason, o.Message, o.UID = r.Reason, r.Message, r.Details.UID
		return
	}
	o.UID = r.Metadata.UID
	fmt.Sscan(r.Metadata.ResourceVersion, &o.RV)
	o.GotCIDR = r.Spec.CIDR + r.Spec.Subnet
	if r.Kind == "BlockAllocation" {
		// A claim: the uid that matters is the Network's.
		o.UID = r.NetworkUID
		for _, b := range r.Blocks {
			o.Blocks = append(o.Blocks, b.CIDR)
		}
	}
}
