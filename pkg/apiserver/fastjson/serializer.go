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
	"io"

	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// NegotiatedSerializer returns ns with JSON responses of v1 Networks and NetworkLists written by
// this package; every other object, every other media type, pretty output and all decoding stay
// ns's.
func NegotiatedSerializer(ns runtime.NegotiatedSerializer) runtime.NegotiatedSerializer {
	return responses{ns}
}

type responses struct {
	runtime.NegotiatedSerializer
}

func (s responses) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := append([]runtime.SerializerInfo(nil), s.NegotiatedSerializer.SupportedMediaTypes()...)
	for i := range infos {
		if infos[i].MediaType == runtime.ContentTypeJSON && infos[i].Serializer != nil {
			infos[i].Serializer = serializer{infos[i].Serializer}
		}
	}
	return infos
}

// serializer encodes v1 Networks and NetworkLists itself and delegates the rest.
type serializer struct {
	runtime.Serializer
}

func (s serializer) Identifier() runtime.Identifier {
	return runtime.Identifier("samplecrd-fastjson:" + string(s.Serializer.Identifier()))
}

func (s serializer) Encode(obj runtime.Object, w io.Writer) error {
	if co, ok := obj.(runtime.CacheableObject); ok {
		return co.CacheEncode(s.Identifier(), s.encode, w)
	}
	return s.encode(obj, w)
}

func (s serializer) encode(obj runtime.Object, w io.Writer) error {
	switch o := obj.(type) {
	case *v1.NetworkList:
		return WriteNetworkList(w, o)
	case *v1.Network:
		return WriteNetwork(w, o)
	}
	return s.Serializer.Encode(obj, w)
}
