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
	"bytes"
	"context"
	"strconv"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/types"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
)

// protobufPrefix starts every object the protobuf serializer writes (runtime.Unknown follows).
var protobufPrefix = []byte{0x6b, 0x38, 0x73, 0x00}

// storedAPIVersion is the apiVersion a protobuf Network is stored as.
var storedAPIVersion = v1.SchemeGroupVersion.String()

// DecodeForVerify reads into n (which it clears first) what the allocation verifier needs of
// the Network in kv: namespace, name, UID, resourceVersion, spec.cidr, spec.gateway and
// status.vni, and nothing else. For a Network stored as protobuf in v1 it walks the encoding's
// fields instead of decoding the whole object (its managed fields, conditions and node list are
// most of it); anything else (JSON, an older version, a value it cannot walk) is decoded fully,
// so that errors read as Decode's. The verifier passes the same n for every Network it reads:
// at a million Networks, a new one each time was a fifth of what a verification allocated.
func (c *EtcdCodec) DecodeForVerify(ctx context.Context, kv *mvccpb.KeyValue, n *samplecrd.Network) error {
	*n = samplecrd.Network{}
	data, err := c.read(ctx, kv)
	if err != nil {
		return err
	}
	if walkNetwork(data, n) {
		n.ResourceVersion = strconv.FormatInt(kv.ModRevision, 10)
		return nil
	}
	*n = samplecrd.Network{}
	return c.decoder.Decode(data, n, kv.ModRevision)
}

// walkNetwork reads the verifier's fields of a v1 Network in its protobuf storage encoding into
// n; false when it cannot (n may then hold some of them).
func walkNetwork(data []byte, n *samplecrd.Network) bool {
	rest, ok := bytes.CutPrefix(data, protobufPrefix)
	if !ok {
		return false
	}
	// runtime.Unknown: typeMeta = 1 (apiVersion = 1, kind = 2), raw = 2, contentEncoding = 3,
	// contentType = 4.
	// The type is compared where it lies, not copied into strings.
	var apiVersion, kind, raw []byte
	ok = fields(rest, func(num protowire.Number, v []byte) bool {
		switch num {
		case 1:
			return fields(v, func(num protowire.Number, v []byte) bool {
				switch num {
				case 1:
					apiVersion = v
				case 2:
					kind = v
				}
				return true
			}, nil)
		case 2:
			raw = v
		case 3, 4:
			return len(v) == 0 // an encoded or differently typed raw: decode it fully
		}
		return true
	}, nil)
	if !ok || string(apiVersion) != storedAPIVersion || string(kind) != "Network" {
		return false
	}
	// v1.Network: metadata = 1 (name = 1, namespace = 3, uid = 5), spec = 2 (cidr = 1,
	// gateway = 2), status = 3 (vni = 4, a varint).
	ok = fields(raw, func(num protowire.Number, v []byte) bool {
		switch num {
		case 1:
			return fields(v, func(num protowire.Number, v []byte) bool {
				switch num {
				case 1:
					n.Name = string(v)
				case 3:
					n.Namespace = string(v)
				case 5:
					n.UID = types.UID(v)
				}
				return true
			}, nil)
		case 2:
			return fields(v, func(num protowire.Number, v []byte) bool {
				switch num {
				case 1:
					n.Spec.CIDR = string(v)
				case 2:
					n.Spec.Gateway = string(v)
				}
				return true
			}, nil)
		case 3:
			return fields(v, nil, func(num protowire.Number, x uint64) bool {
				if num == 4 {
					n.Status.VNI = int32(x)
				}
				return true
			})
		}
		return true
	}, nil)
	return ok
}

// fields calls bytesFn for each length-delimited field of the message in b and varintFn for
// each varint (either may be nil), skipping fields of other types; false when b is not a
// well-formed message or a callback says so.
func fields(b []byte, bytesFn func(protowire.Number, []byte) bool, varintFn func(protowire.Number, uint64) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		switch typ {
		case protowire.BytesType:
			v, n := protowire.ConsumeBytes(b)
			if n < 0 {
				return false
			}
			if bytesFn != nil && !bytesFn(num, v) {
				return false
			}
			b = b[n:]
		case protowire.VarintType:
			x, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return false
			}
			if varintFn != nil && !varintFn(num, x) {
				return false
			}
			b = b[n:]
		default:
			n := protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return false
			}
			b = b[n:]
		}
	}
	return true
}
