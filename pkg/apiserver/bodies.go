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
	"errors"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/yaml"

	"github.com/samplecrd/network-apiserver/pkg/apiserver/fastjson"
)

// groupSerializer is what the group's handlers negotiate with: ns, with JSON responses of v1
// Networks written by fastjson and null request bodies refused. Both wrappers keep the encoders'
// identifiers stable, so that the watch cache's caching objects serialize each event once per
// format for all watchers (watch_encoding_test.go).
func groupSerializer(ns runtime.NegotiatedSerializer) runtime.NegotiatedSerializer {
	return objectBodies{fastjson.NegotiatedSerializer(ns)}
}

// errNullBody is why a request body that is null is malformed.
var errNullBody = errors.New("the request body is null, not an object")

// objectBodies is the group's negotiated serializer with one more rule for request bodies: a body
// that is null (JSON null, or a YAML document that is null) is malformed. The generic decoders
// read it as an empty object, so that a create with it would be answered with a 422 about
// metadata.name; the handlers answer a decoding error with a 400 instead.
type objectBodies struct {
	runtime.NegotiatedSerializer
}

// DecoderToVersion returns the generic decoder, refusing null bodies first.
func (s objectBodies) DecoderToVersion(decoder runtime.Decoder, gv runtime.GroupVersioner) runtime.Decoder {
	return s.NegotiatedSerializer.DecoderToVersion(nonNullDecoder{decoder}, gv)
}

type nonNullDecoder struct {
	runtime.Decoder
}

func (d nonNullDecoder) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	if isNull(data) {
		return nil, nil, errNullBody
	}
	return d.Decoder.Decode(data, defaults, into)
}

// isNull says whether data is a JSON or YAML null. An empty body is left to the decoders, which
// already refuse it; so is a long one, which is not worth converting from YAML to find out.
func isNull(data []byte) bool {
	data = bytes.TrimSpace(data)
	if len(data) == 0 || len(data) > 64 {
		return false
	}
	if bytes.Equal(data, []byte("null")) {
		return true
	}
	j, err := yaml.YAMLToJSON(data)
	return err == nil && bytes.Equal(j, []byte("null"))
}
