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

package storage

import (
	"context"
	"path"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/value"
	"k8s.io/apiserver/pkg/storage/value/encrypt/identity"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// EtcdCodec addresses, encodes and decodes Networks exactly as the etcd3 store does, so that the
// allocating store, the etcd3 store beneath it and the repair read and write the same keys and
// values.
type EtcdCodec struct {
	pathPrefix     string
	resourcePrefix string
	codec          runtime.Codec
	transformer    value.Transformer
	decoder        etcd3.Decoder
	versioner      storage.Versioner
}

func newEtcdCodec(config *storagebackend.ConfigForResource, resourcePrefix string) *EtcdCodec {
	pathPrefix := path.Join("/", config.Prefix)
	if !strings.HasSuffix(pathPrefix, "/") {
		pathPrefix += "/"
	}
	transformer := config.Transformer
	if transformer == nil {
		transformer = identity.NewEncryptCheckTransformer()
	}
	versioner := storage.APIObjectVersioner{}
	return &EtcdCodec{
		pathPrefix:     pathPrefix,
		resourcePrefix: resourcePrefix,
		codec:          config.Codec,
		transformer:    transformer,
		decoder:        etcd3.NewDefaultDecoder(config.Codec, versioner),
		versioner:      versioner,
	}
}

// KeyPrefix is where the etcd keys of all Networks start.
func (c *EtcdCodec) KeyPrefix() string {
	return c.pathPrefix + strings.Trim(c.resourcePrefix, "/") + "/"
}

// key is the etcd key of a storage key.
func (c *EtcdCodec) key(key string) (string, error) {
	key, err := storage.PrepareKey(c.resourcePrefix, key, false)
	if err != nil {
		return "", err
	}
	return c.pathPrefix + strings.TrimPrefix(key, "/"), nil
}

// encode returns obj as the codec writes it, and as it is stored at etcdKey.
func (c *EtcdCodec) encode(ctx context.Context, etcdKey string, obj runtime.Object) ([]byte, string, error) {
	if err := c.versioner.PrepareObjectForStorage(obj); err != nil {
		return nil, "", err
	}
	data, err := runtime.Encode(c.codec, obj)
	if err != nil {
		return nil, "", err
	}
	stored, err := c.transformer.TransformToStorage(ctx, data, value.DefaultContext(etcdKey))
	if err != nil {
		return nil, "", storage.NewInternalError(err)
	}
	return data, string(stored), nil
}

// read returns what the codec wrote of the object stored in kv.
func (c *EtcdCodec) read(ctx context.Context, kv *mvccpb.KeyValue) ([]byte, error) {
	data, _, err := c.transformer.TransformFromStorage(ctx, kv.Value, value.DefaultContext(kv.Key))
	if err != nil {
		return nil, storage.NewInternalError(err)
	}
	return data, nil
}

// Decode reads the Network stored in kv.
func (c *EtcdCodec) Decode(ctx context.Context, kv *mvccpb.KeyValue) (*samplecrd.Network, error) {
	data, err := c.read(ctx, kv)
	if err != nil {
		return nil, err
	}
	n := &samplecrd.Network{}
	if err := c.decoder.Decode(data, n, kv.ModRevision); err != nil {
		return nil, err
	}
	return n, nil
}

// decodeListItem reads the object stored in kv as an item of a list (newItem makes the item's
// type), as the etcd3 store's lists do.
func (c *EtcdCodec) decodeListItem(ctx context.Context, kv *mvccpb.KeyValue, newItem func() runtime.Object) (runtime.Object, error) {
	data, err := c.read(ctx, kv)
	if err != nil {
		return nil, err
	}
	return c.decoder.DecodeListItem(ctx, data, uint64(kv.ModRevision), newItem)
}

// NewEtcdCodec returns the codec of a resource stored with config under resourcePrefix (what a
// storage decorator receives), for stores that write the resource's objects in their own
// transactions (the BlockAllocations a claim writes).
func NewEtcdCodec(config *storagebackend.ConfigForResource, resourcePrefix string) *EtcdCodec {
	return newEtcdCodec(config, resourcePrefix)
}

// EtcdKey is the etcd key of the object at a storage key ("/<namespace>/<name>" under the resource).
func (c *EtcdCodec) EtcdKey(key string) (string, error) { return c.key(key) }

// Encode returns obj as the codec writes it, and as it is stored at etcdKey.
func (c *EtcdCodec) Encode(ctx context.Context, etcdKey string, obj runtime.Object) ([]byte, string, error) {
	return c.encode(ctx, etcdKey, obj)
}

// DecodeInto reads the object stored in kv into out, with its resourceVersion.
func (c *EtcdCodec) DecodeInto(ctx context.Context, kv *mvccpb.KeyValue, out runtime.Object) error {
	data, err := c.read(ctx, kv)
	if err != nil {
		return err
	}
	return c.decoder.Decode(data, out, kv.ModRevision)
}

// DecodeData decodes what Encode returned, with the resourceVersion rev.
func (c *EtcdCodec) DecodeData(data []byte, out runtime.Object, rev int64) error {
	return c.decoder.Decode(data, out, rev)
}
