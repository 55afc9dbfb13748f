package apiserver

import (
	"io"

	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/apiserver/fastjson"
)

// fastJSONResponses is the group's negotiated serializer with JSON responses of v1 Networks and
// NetworkLists written by package fastjson (the same bytes as encoding/json, without its
// reflection); every other object, every other media type, pretty output and all decoding are
// the generic serializer's.
type fastJSONResponses struct {
	runtime.NegotiatedSerializer
}

func (s fastJSONResponses) SupportedMediaTypes() []runtime.SerializerInfo {
	infos := append([]runtime.SerializerInfo(nil), s.NegotiatedSerializer.SupportedMediaTypes()...)
	for i := range infos {
		if infos[i].MediaType == runtime.ContentTypeJSON && infos[i].Serializer != nil {
			infos[i].Serializer = fastJSONSerializer{infos[i].Serializer}
		}
	}
	return infos
}

// fastJSONSerializer encodes v1 Networks and NetworkLists itself and delegates the rest.
type fastJSONSerializer struct {
	runtime.Serializer
}

func (s fastJSONSerializer) Identifier() runtime.Identifier {
	return runtime.Identifier("samplecrd-fastjson:" + string(s.Serializer.Identifier()))
}

func (s fastJSONSerializer) Encode(obj runtime.Object, w io.Writer) error {
	if co, ok := obj.(runtime.CacheableObject); ok {
		return co.CacheEncode(s.Identifier(), s.encode, w)
	}
	return s.encode(obj, w)
}

func (s fastJSONSerializer) encode(obj runtime.Object, w io.Writer) error {
	switch o := obj.(type) {
	case *v1.NetworkList:
		return fastjson.WriteNetworkList(w, o)
	case *v1.Network:
		return fastjson.WriteNetwork(w, o)
	}
	return s.Serializer.Encode(obj, w)
}
