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

package fastjson

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/randfill"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// tricky are strings on which a hand-written JSON encoder goes wrong first.
var tricky = []string{
	"", "plain", `quo"te`, `back\slash`, "<script>&amp;</script>", "tab\there", "new\nline\r",
	"\b\f\x00\x01\x1f\x7f", "ünïcödé ✓ 🚀", "\u2028line\u2029sep", "bad \xff\xfe utf8 \xc3",
	"10.0.0.0/24", "fd00::/64", "samplecrd.k8s.io/network-protection",
}

var fieldsV1 = []string{
	`{"f:spec":{".":{},"f:cidr":{},"f:gateway":{}}}`,
	`{"f:status":{"f:nodes":{"k:{\"nodeName\":\"node-a\"}":{".":{},"f:ready":{}}}}}`,
	`{ "f:spec" : {"f:cidr": {}} }`,            // needs compacting
	`{"f:metadata":{"f:labels":{"f:a<b":{}}}}`, // needs HTML escaping
	"{\"f:metadata\":{\"f:annotations\":{\"f:\u2028\":{}}}}",
	`{}`, "",
}

func fuzzer(seed int64) *randfill.Filler {
	pick := func(r randfill.Continue) string {
		if r.Intn(3) == 0 {
			return r.String(0)
		}
		return tricky[r.Intn(len(tricky))]
	}
	return randfill.NewWithSeed(seed).NilChance(0.3).NumElements(0, 3).Funcs(
		func(s *string, c randfill.Continue) { *s = pick(c) },
		func(u *types.UID, c randfill.Continue) { *u = types.UID(pick(c)) },
		func(t *metav1.Time, c randfill.Continue) {
			switch c.Intn(4) {
			case 0:
				*t = metav1.Time{}
			case 1:
				*t = metav1.NewTime(time.Unix(c.Int63n(4e9), c.Int63n(1e9)).In(time.FixedZone("x", 3600)))
			default:
				*t = metav1.NewTime(time.Unix(c.Int63n(4e9), 0))
			}
		},
		func(f *metav1.FieldsV1, c randfill.Continue) {
			f.Raw = []byte(fieldsV1[c.Intn(len(fieldsV1))])
		},
	)
}

// TestMatchesEncodingJSON: for fuzzed Networks and lists, the output is byte for byte what
// encoding/json writes.
func TestMatchesEncodingJSON(t *testing.T) {
	for seed := range int64(3000) {
		f := fuzzer(seed)
		var n v1.Network
		f.Fill(&n)
		want, wantErr := json.Marshal(&n)
		got, err := AppendNetwork(nil, &n)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("seed %d: Network\n got %s (%v)\nwant %s (%v)", seed, got, err, want, wantErr)
		}
		var l v1.NetworkList
		f.Fill(&l)
		want, wantErr = json.Marshal(&l)
		got, err = appendNetworkList(nil, &l)
		if (err != nil) != (wantErr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("seed %d: NetworkList\n got %s (%v)\nwant %s (%v)", seed, got, err, want, wantErr)
		}
	}
}

// TestEmptyAndNil covers the shapes fuzzing reaches rarely: the zero values, an empty list
// and a nil one.
func TestEmptyAndNil(t *testing.T) {
	for _, obj := range []any{
		&v1.Network{}, &v1.NetworkList{}, &v1.NetworkList{Items: []v1.Network{}},
		&v1.Network{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{}, ManagedFields: []metav1.ManagedFieldsEntry{{FieldsV1: &metav1.FieldsV1{}}}}},
	} {
		want, _ := json.Marshal(obj)
		var got []byte
		var err error
		switch o := obj.(type) {
		case *v1.Network:
			got, err = AppendNetwork(nil, o)
		case *v1.NetworkList:
			got, err = appendNetworkList(nil, o)
		}
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%T\n got %s (%v)\nwant %s", obj, got, err, want)
		}
	}
}

// realisticList is a list of n Networks as the server stores them: one managedFields entry,
// the finalizer, a Ready condition and a node entry.
func realisticList(n int) *v1.NetworkList {
	l := &v1.NetworkList{TypeMeta: metav1.TypeMeta{Kind: "NetworkList", APIVersion: "samplecrd.k8s.io/v1"},
		ListMeta: metav1.ListMeta{ResourceVersion: "123456"}}
	now := metav1.NewTime(time.Unix(1795474443, 0))
	r := rand.New(rand.NewSource(1))
	for i := range n {
		l.Items = append(l.Items, v1.Network{
			TypeMeta: metav1.TypeMeta{Kind: "Network", APIVersion: "samplecrd.k8s.io/v1"},
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("net-%d", i), Namespace: "default",
				UID: types.UID(fmt.Sprintf("%08x-1111-2222-3333-444455556666", r.Uint32())), ResourceVersion: fmt.Sprint(1000 + i),
				Generation: 1, CreationTimestamp: now, Finalizers: []string{"samplecrd.k8s.io/network-protection"},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "bench", Operation: metav1.ManagedFieldsOperationUpdate,
					APIVersion: "samplecrd.k8s.io/v1", Time: &now, FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(fieldsV1[0])}}}},
			Spec: v1.NetworkSpec{CIDR: fmt.Sprintf("10.%d.%d.0/24", i/256, i%256), Gateway: fmt.Sprintf("10.%d.%d.1", i/256, i%256)},
			Status: v1.NetworkStatus{ObservedGeneration: 1,
				Conditions: []metav1.Condition{{Type: "Ready", Status: metav1.ConditionTrue, ObservedGeneration: 1,
					LastTransitionTime: now, Reason: "Realized", Message: "realised on 1 node(s)"}},
				Nodes: []v1.NetworkNodeStatus{{NodeName: "node-a", Bridge: "nwabcdefghijklm", Ready: true, ObservedGeneration: 1,
					Message: "bridge and CNI configuration match the spec"}}},
		})
	}
	return l
}

func TestRealisticList(t *testing.T) {
	l := realisticList(50)
	want, _ := json.Marshal(l)
	got, err := appendNetworkList(nil, l)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("got %s (%v)\nwant %s", got, err, want)
	}
}

// BenchmarkList compares encoding a list of 5000 realistic Networks with encoding/json.
func BenchmarkList(b *testing.B) {
	l := realisticList(5000)
	b.Run("encoding/json", func(b *testing.B) {
		var buf bytes.Buffer
		for b.Loop() {
			buf.Reset()
			if err := json.NewEncoder(&buf).Encode(l); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fastjson", func(b *testing.B) {
		var out []byte
		for b.Loop() {
			var err error
			if out, err = appendNetworkList(out[:0], l); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestWriteMatchesEncoder: the streaming writers write what encoding/json's Encoder writes (the
// value and a newline), also for a list longer than one chunk.
func TestWriteMatchesEncoder(t *testing.T) {
	l := realisticList(1000)
	var want, got bytes.Buffer
	if err := json.NewEncoder(&want).Encode(l); err != nil {
		t.Fatal(err)
	}
	w := &countingWriter{w: &got}
	if err := WriteNetworkList(w, l); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("WriteNetworkList differs from encoding/json (%d against %d bytes)", got.Len(), want.Len())
	}
	if w.writes < 2 || want.Len() <= chunk {
		t.Fatalf("%d bytes in %d writes: the test wants a list longer than a chunk written in several", want.Len(), w.writes)
	}
	want.Reset()
	got.Reset()
	_ = json.NewEncoder(&want).Encode(&l.Items[3])
	if err := WriteNetwork(&got, &l.Items[3]); err != nil || !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("WriteNetwork: %s (%v), want %s", got.Bytes(), err, want.Bytes())
	}
}

type countingWriter struct {
	w      *bytes.Buffer
	writes int
}

func (c *countingWriter) Write(p []byte) (int, error) {
	c.writes++
	return c.w.Write(p)
}

// appendNetworkList appends l's JSON (without a trailing newline) to b, all in memory.
func appendNetworkList(b []byte, l *v1.NetworkList) ([]byte, error) {
	err := encodeList(l, &b, nil)
	return b, err
}
