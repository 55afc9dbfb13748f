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

// Package fastjson writes samplecrd.k8s.io/v1 Networks and NetworkLists as JSON without
// reflection, byte for byte what encoding/json writes for them (HTML-safe escaping, sorted map
// keys, the omitempty/omitzero rules of the types' tags, metav1.Time and FieldsV1 as their
// MarshalJSON methods write them, compacted as encoding/json compacts a Marshaler's output).
//
// encoding/json spends most of a Network's encoding on reflection and on re-validating the
// output of FieldsV1's and Time's MarshalJSON; for a LIST of thousands of Networks that is the
// largest share of the server's CPU. The equivalence with encoding/json is what the tests check,
// on fuzzed objects: anything this package does not know how to write exactly the same is
// handed to encoding/json.
package fastjson

import (
	"encoding/json"
	"io"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// chunk is how much of a list WriteNetworkList collects before it writes to w.
const chunk = 64 << 10

// WriteNetworkList writes l's JSON and a newline to w (what encoding/json's Encoder writes), in
// chunks, so that a large list is never held whole in memory.
func WriteNetworkList(w io.Writer, l *v1.NetworkList) error {
	b := make([]byte, 0, chunk+4096)
	if err := encodeList(l, &b, w); err != nil {
		return err
	}
	_, err := w.Write(append(b, '\n'))
	return err
}

// WriteNetwork writes n's JSON and a newline to w.
func WriteNetwork(w io.Writer, n *v1.Network) error {
	b, err := AppendNetwork(make([]byte, 0, 2048), n)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// encodeList appends l to *b; with w set, it writes *b out (and empties it) whenever it holds
// more than a chunk.
func encodeList(l *v1.NetworkList, b *[]byte, w io.Writer) error {
	out := append(*b, '{')
	out = appendTypeMeta(out, &l.TypeMeta)
	meta, err := json.Marshal(&l.ListMeta) // once per list; it has fields this package does not write
	if err != nil {
		return err
	}
	out = append(out, `"metadata":`...)
	out = append(out, meta...)
	out = append(out, `,"items":`...)
	if l.Items == nil {
		out = append(out, "null"...)
	} else {
		out = append(out, '[')
		for i := range l.Items {
			if i > 0 {
				out = append(out, ',')
			}
			if out, err = AppendNetwork(out, &l.Items[i]); err != nil {
				return err
			}
			if w != nil && len(out) > chunk {
				if _, err := w.Write(out); err != nil {
					return err
				}
				out = out[:0]
			}
		}
		out = append(out, ']')
	}
	*b = append(out, '}')
	return nil
}

// AppendNetwork appends n's JSON (without a trailing newline) to b.
func AppendNetwork(b []byte, n *v1.Network) ([]byte, error) {
	b = append(b, '{')
	b = appendTypeMeta(b, &n.TypeMeta)
	b = append(b, `"metadata":`...)
	b, err := appendObjectMeta(b, &n.ObjectMeta)
	if err != nil {
		return nil, err
	}
	b = append(b, `,"spec":{`...)
	f := fields{b: b}
	if n.Spec.CIDR != "" {
		f.key("cidr")
		f.b = appendString(f.b, n.Spec.CIDR)
	}
	if n.Spec.Gateway != "" {
		f.key("gateway")
		f.b = appendString(f.b, n.Spec.Gateway)
	}
	if n.Spec.PrefixLength != 0 {
		f.key("prefixLength")
		f.b = strconv.AppendInt(f.b, int64(n.Spec.PrefixLength), 10)
	}
	if n.Spec.NodeSelector != nil {
		// Rare and nested: encoding/json writes it.
		sel, err := json.Marshal(n.Spec.NodeSelector)
		if err != nil {
			return nil, err
		}
		f.key("nodeSelector")
		f.b = append(f.b, sel...)
	}
	if n.Spec.DefaultRoute != nil {
		f.key("defaultRoute")
		f.b = strconv.AppendBool(f.b, *n.Spec.DefaultRoute)
	}
	b = append(f.b, `},"status":`...)
	b = appendStatus(b, &n.Status)
	return append(b, '}'), nil
}

// fields writes the members of one JSON object, with the commas between them.
type fields struct {
	b    []byte
	some bool
}

func (f *fields) key(k string) {
	if f.some {
		f.b = append(f.b, ',')
	}
	f.some = true
	f.b = append(f.b, '"')
	f.b = append(f.b, k...) // keys are constants that need no escaping
	f.b = append(f.b, '"', ':')
}

// str writes key k with the string v, unless v is empty (omitempty).
func (f *fields) str(k, v string) {
	if v != "" {
		f.key(k)
		f.b = appendString(f.b, v)
	}
}

// list writes key and items as a JSON array, each item by item.
func list[T any](f *fields, key string, items []T, item func([]byte, *T) []byte) {
	f.key(key)
	f.b = append(f.b, '[')
	for i := range items {
		if i > 0 {
			f.b = append(f.b, ',')
		}
		f.b = item(f.b, &items[i])
	}
	f.b = append(f.b, ']')
}

func appendStringItem(b []byte, s *string) []byte { return appendString(b, *s) }

func appendTypeMeta(b []byte, t *metav1.TypeMeta) []byte {
	if t.Kind != "" {
		b = append(b, `"kind":`...)
		b = appendString(b, t.Kind)
		b = append(b, ',')
	}
	if t.APIVersion != "" {
		b = append(b, `"apiVersion":`...)
		b = appendString(b, t.APIVersion)
		b = append(b, ',')
	}
	return b
}

func appendObjectMeta(b []byte, m *metav1.ObjectMeta) ([]byte, error) {
	f := fields{b: append(b, '{')}
	f.str("name", m.Name)
	f.str("generateName", m.GenerateName)
	f.str("namespace", m.Namespace)
	f.str("selfLink", m.SelfLink)
	f.str("uid", string(m.UID))
	f.str("resourceVersion", m.ResourceVersion)
	if m.Generation != 0 {
		f.key("generation")
		f.b = strconv.AppendInt(f.b, m.Generation, 10)
	}
	if !m.CreationTimestamp.IsZero() { // omitzero
		f.key("creationTimestamp")
		f.b = appendTime(f.b, m.CreationTimestamp)
	}
	if m.DeletionTimestamp != nil {
		f.key("deletionTimestamp")
		f.b = appendTime(f.b, *m.DeletionTimestamp)
	}
	if m.DeletionGracePeriodSeconds != nil {
		f.key("deletionGracePeriodSeconds")
		f.b = strconv.AppendInt(f.b, *m.DeletionGracePeriodSeconds, 10)
	}
	if len(m.Labels) > 0 {
		f.key("labels")
		f.b = appendStringMap(f.b, m.Labels)
	}
	if len(m.Annotations) > 0 {
		f.key("annotations")
		f.b = appendStringMap(f.b, m.Annotations)
	}
	if len(m.OwnerReferences) > 0 {
		list(&f, "ownerReferences", m.OwnerReferences, appendOwnerReference)
	}
	if len(m.Finalizers) > 0 {
		list(&f, "finalizers", m.Finalizers, appendStringItem)
	}
	if len(m.ManagedFields) > 0 {
		f.key("managedFields")
		f.b = append(f.b, '[')
		for i := range m.ManagedFields {
			if i > 0 {
				f.b = append(f.b, ',')
			}
			var err error
			if f.b, err = appendManagedFields(f.b, &m.ManagedFields[i]); err != nil {
				return nil, err
			}
		}
		f.b = append(f.b, ']')
	}
	return append(f.b, '}'), nil
}

func appendOwnerReference(b []byte, r *metav1.OwnerReference) []byte {
	b = append(b, `{"apiVersion":`...)
	b = appendString(b, r.APIVersion)
	b = append(b, `,"kind":`...)
	b = appendString(b, r.Kind)
	b = append(b, `,"name":`...)
	b = appendString(b, r.Name)
	b = append(b, `,"uid":`...)
	b = appendString(b, string(r.UID))
	if r.Controller != nil {
		b = append(b, `,"controller":`...)
		b = strconv.AppendBool(b, *r.Controller)
	}
	if r.BlockOwnerDeletion != nil {
		b = append(b, `,"blockOwnerDeletion":`...)
		b = strconv.AppendBool(b, *r.BlockOwnerDeletion)
	}
	return append(b, '}')
}

func appendManagedFields(b []byte, e *metav1.ManagedFieldsEntry) ([]byte, error) {
	f := fields{b: append(b, '{')}
	f.str("manager", e.Manager)
	f.str("operation", string(e.Operation))
	f.str("apiVersion", e.APIVersion)
	if e.Time != nil {
		f.key("time")
		f.b = appendTime(f.b, *e.Time)
	}
	f.str("fieldsType", e.FieldsType)
	if e.FieldsV1 != nil {
		f.key("fieldsV1")
		raw := e.FieldsV1.GetRawBytes()
		if compactObject(raw) {
			f.b = append(f.b, raw...)
		} else {
			// Empty, CBOR, or anything that might need compacting or escaping: what
			// encoding/json does with FieldsV1's MarshalJSON.
			j, err := json.Marshal(e.FieldsV1)
			if err != nil {
				return nil, err
			}
			f.b = append(f.b, j...)
		}
	}
	f.str("subresource", e.Subresource)
	return append(f.b, '}'), nil
}

// compactObject tells whether raw can be written as it is: it looks like a JSON object and has
// nothing encoding/json's compaction would change (whitespace, the HTML characters <, > and &,
// the line separators U+2028 and U+2029, invalid UTF-8 is left to it too). The field manager
// writes FieldsV1 exactly so.
func compactObject(raw []byte) bool {
	if len(raw) < 2 || raw[0] != '{' || raw[len(raw)-1] != '}' {
		return false
	}
	for i := 0; i < len(raw); i++ {
		switch c := raw[i]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '<' || c == '>' || c == '&':
			return false
		case c >= utf8.RuneSelf:
			return false
		}
	}
	return true
}

func appendStatus(b []byte, s *v1.NetworkStatus) []byte {
	f := fields{b: append(b, '{')}
	if s.ObservedGeneration != 0 {
		f.key("observedGeneration")
		f.b = strconv.AppendInt(f.b, s.ObservedGeneration, 10)
	}
	if len(s.Conditions) > 0 {
		list(&f, "conditions", s.Conditions, appendCondition)
	}
	if len(s.Nodes) > 0 {
		list(&f, "nodes", s.Nodes, appendNode)
	}
	if s.VNI != 0 {
		f.key("vni")
		f.b = strconv.AppendInt(f.b, int64(s.VNI), 10)
	}
	if c := s.Capacity; c != nil {
		f.key("capacity")
		g := fields{b: append(f.b, '{')}
		g.str("total", c.Total)
		g.str("allocated", c.Allocated)
		g.str("used", c.Used)
		g.str("available", c.Available)
		if c.NodesWithoutLeases != 0 {
			g.key("nodesWithoutLeases")
			g.b = strconv.AppendInt(g.b, int64(c.NodesWithoutLeases), 10)
		}
		f.b = append(g.b, '}')
	}
	return append(f.b, '}')
}

func appendCondition(b []byte, c *metav1.Condition) []byte {
	b = append(b, `{"type":`...)
	b = appendString(b, c.Type)
	b = append(b, `,"status":`...)
	b = appendString(b, string(c.Status))
	if c.ObservedGeneration != 0 {
		b = append(b, `,"observedGeneration":`...)
		b = strconv.AppendInt(b, c.ObservedGeneration, 10)
	}
	b = append(b, `,"lastTransitionTime":`...)
	b = appendTime(b, c.LastTransitionTime)
	b = append(b, `,"reason":`...)
	b = appendString(b, c.Reason)
	b = append(b, `,"message":`...)
	b = appendString(b, c.Message)
	return append(b, '}')
}

func appendNode(b []byte, n *v1.NetworkNodeStatus) []byte {
	b = append(b, `{"nodeName":`...)
	b = appendString(b, n.NodeName)
	if n.Bridge != "" {
		b = append(b, `,"bridge":`...)
		b = appendString(b, n.Bridge)
	}
	b = append(b, `,"ready":`...)
	b = strconv.AppendBool(b, n.Ready)
	if n.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendString(b, n.Reason)
	}
	if n.Message != "" {
		b = append(b, `,"message":`...)
		b = appendString(b, n.Message)
	}
	if n.ObservedGeneration != 0 {
		b = append(b, `,"observedGeneration":`...)
		b = strconv.AppendInt(b, n.ObservedGeneration, 10)
	}
	if n.Attachments != 0 {
		b = append(b, `,"attachments":`...)
		b = strconv.AppendInt(b, int64(n.Attachments), 10)
	}
	f := fields{b: b, some: true}
	f.str("underlayAddress", n.UnderlayAddress)
	f.str("vxlan", n.VXLAN)
	if len(n.Blocks) > 0 {
		list(&f, "blocks", n.Blocks, appendStringItem)
	}
	if n.MTU != 0 {
		f.key("mtu")
		f.b = strconv.AppendInt(f.b, int64(n.MTU), 10)
	}
	f.str("ipamMode", n.IPAMMode)
	if n.Leases != nil {
		f.key("leases")
		f.b = strconv.AppendInt(f.b, int64(*n.Leases), 10)
	}
	if c := n.Capacity; c != nil {
		f.key("capacity")
		g := fields{b: append(f.b, '{')}
		g.str("allocated", c.Allocated)
		g.str("used", c.Used)
		f.b = append(g.b, '}')
	}
	f.str("leaseReclaim", n.LeaseReclaim)
	return append(f.b, '}')
}

// appendTime writes t as metav1.Time's MarshalJSON does: null when zero, else RFC 3339 in UTC.
func appendTime(b []byte, t metav1.Time) []byte {
	if t.IsZero() {
		return append(b, "null"...)
	}
	b = append(b, '"')
	b = t.UTC().AppendFormat(b, time.RFC3339)
	return append(b, '"')
}

// appendStringMap writes m with its keys sorted, as encoding/json does.
func appendStringMap(b []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	b = append(b, '{')
	for i, k := range keys {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendString(b, k)
		b = append(b, ':')
		b = appendString(b, m[k])
	}
	return append(b, '}')
}

const hex = "0123456789abcdef"

// appendString writes s as a JSON string the way encoding/json does with HTML escaping on: the
// quote, backslash and control characters escaped (\b, \f, \n, \r, \t by name), <, > and & as
// \u003c, \u003e and \u0026, invalid UTF-8 as \ufffd, U+2028 and U+2029 escaped.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
