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
