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

package apiserver

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/endpoints/handlers"
	"k8s.io/apiserver/pkg/endpoints/handlers/negotiation"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// countingObject stands in for the watch cache's cachingObject: it keeps one serialization per
// encoder identifier and counts how often an encoder really ran.
type countingObject struct {
	object runtime.Object

	mu      sync.Mutex
	encoded map[runtime.Identifier][]byte
	calls   map[runtime.Identifier]int
}

var _ runtime.CacheableObject = &countingObject{}

func newCountingObject(obj runtime.Object) *countingObject {
	return &countingObject{object: obj, encoded: map[runtime.Identifier][]byte{}, calls: map[runtime.Identifier]int{}}
}

func (o *countingObject) CacheEncode(id runtime.Identifier, encode func(runtime.Object, io.Writer) error, w io.Writer) error {
	o.mu.Lock()
	raw, ok := o.encoded[id]
	if !ok {
		var buf bytes.Buffer
		if err := encode(o.GetObject(), &buf); err != nil {
			o.mu.Unlock()
			return err
		}
		raw = buf.Bytes()
		o.encoded[id] = raw
		o.calls[id]++
	}
	o.mu.Unlock()
	_, err := w.Write(raw)
	return err
}

func (o *countingObject) GetObject() runtime.Object             { return o.object.DeepCopyObject() }
func (o *countingObject) GetObjectKind() schema.ObjectKind      { return o.object.GetObjectKind() }
func (o *countingObject) DeepCopyObject() runtime.Object        { return newCountingObject(o.GetObject()) }
func (o *countingObject) encodings() map[runtime.Identifier]int { return o.calls }

type noTimeout struct{}

func (noTimeout) TimeoutCh() (<-chan time.Time, func() bool) {
	return nil, func() bool { return false }
}

// serveWatch serves one watch of v1 Networks delivering events, with the encoders built the way
// k8s.io/apiserver's serveWatchHandler builds them for every watch request (one set per request),
// and returns the response body.
func serveWatch(t *testing.T, ns runtime.NegotiatedSerializer, accept string, events ...watch.Event) []byte {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, "/apis/samplecrd.k8s.io/v1/networks?watch=1", nil)
	req.Header.Set("Accept", accept)
	info, err := negotiation.NegotiateOutputMediaTypeStream(req, ns, negotiation.DefaultEndpointRestrictions)
	if err != nil {
		t.Fatalf("negotiating %s: %v", accept, err)
	}
	gv := v1.SchemeGroupVersion
	w := watch.NewFakeWithChanSize(len(events), false)
	for _, e := range events {
		w.Action(e.Type, e.Object)
	}
	w.Stop()
	server := &handlers.WatchServer{
		Watching:        w,
		Scope:           &handlers.RequestScope{Serializer: ns, Resource: gv.WithResource("networks"), Kind: gv.WithKind("Network")},
		MediaType:       info.MediaType,
		Framer:          info.StreamSerializer.Framer,
		Encoder:         ns.EncoderForVersion(info.StreamSerializer.Serializer, gv),
		EmbeddedEncoder: ns.EncoderForVersion(info.Serializer, gv),
		TimeoutFactory:  noTimeout{},
	}
	rec := httptest.NewRecorder()
	server.HandleHTTP(rec, req)
	if rec.Code != http.StatusOK {
		t.Fatalf("watch %s: status %d: %s", accept, rec.Code, rec.Body.String())
	}
	return rec.Body.Bytes()
}

// TestWatchEncodesEachEventOncePerFormat: the watch cache hands every watcher the same caching
// object, which keeps one serialization per encoder identifier. Through the group's serializer
// (fastjson for JSON, null-body refusal) the identifiers must be the same for every watch
// request, or each watcher would encode each event itself. Three watchers per format, each with
// encoders of its own, must cause exactly one encoding of the event per format, and receive
// the same bytes as a watcher of the plain codec factory.
func TestWatchEncodesEachEventOncePerFormat(t *testing.T) {
	ns := groupSerializer(Codecs)
	for _, accept := range []string{runtime.ContentTypeJSON, runtime.ContentTypeProtobuf} {
		t.Run(accept, func(t *testing.T) {
			obj := newCountingObject(sampleNetwork("agents"))
			event := watch.Event{Type: watch.Modified, Object: obj}
			var first []byte
			for i := range 3 {
				got := serveWatch(t, ns, accept, event)
				if i == 0 {
					first = got
				} else if !bytes.Equal(got, first) {
					t.Fatalf("watcher %d got other bytes than the first:\n%q\n%q", i, got, first)
				}
			}
			calls := obj.encodings()
			if len(calls) != 1 {
				t.Fatalf("the event was cached under %d identifiers for 3 watchers, want 1 (the identifier changes per request): %v", len(calls), calls)
			}
			for id, n := range calls {
				if n != 1 {
					t.Fatalf("identifier %s: encoded %d times, want 1", id, n)
				}
			}
			// The same bytes as the generic serializer writes for an object it does not cache.
			want := serveWatch(t, Codecs, accept, watch.Event{Type: watch.Modified, Object: sampleNetwork("agents")})
			if !bytes.Equal(first, want) {
				t.Fatalf("watch bytes differ from the generic serializer's:\n got %q\nwant %q", first, want)
			}
		})
	}
}
