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
	"sync"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// sharingCodec decodes Networks as its codec does, then points the parts that repeat from one
// Network to the next at one shared copy: the namespace, finalizers and label values, each
// managed fields entry's manager, operation, API version, time and field set, the conditions'
// words, the node entries' names, reasons and counts, and status.capacity. The watch cache holds
// every Network decoded, and a decoder allocates each of these anew for every object: a Network
// created by one client, in one namespace, carries some 330 bytes that are the same in every
// other.
//
// Sharing is safe because a decoded object's strings are immutable and its managed fields' time
// and field set are values nothing changes in place (k8s.io/apiserver's field manager builds new
// entries; DeepCopy copies them): the watch cache already hands one object to every reader.
type sharingCodec struct {
	runtime.Codec
}

func (c sharingCodec) Decode(data []byte, defaults *schema.GroupVersionKind, into runtime.Object) (runtime.Object, *schema.GroupVersionKind, error) {
	obj, gvk, err := c.Codec.Decode(data, defaults, into)
	if n, ok := obj.(*samplecrd.Network); ok && err == nil {
		shareRepeated(n)
	}
	return obj, gvk, err
}

// shareRepeated replaces n's repeating parts by shared copies; n's content does not change.
func shareRepeated(n *samplecrd.Network) {
	share(&n.Namespace)
	for i := range n.Finalizers {
		share(&n.Finalizers[i])
	}
	for k, v := range n.Labels {
		n.Labels[k] = unique.Make(v).Value()
	}
	for i := range n.ManagedFields {
		e := &n.ManagedFields[i]
		share(&e.Manager)
		share(&e.Operation)
		share(&e.APIVersion)
		share(&e.FieldsType)
		share(&e.Subresource)
		e.Time = sharedTimes.share(e.Time)
		e.FieldsV1 = sharedFieldSets.share(e.FieldsV1)
	}
	for i := range n.Status.Conditions {
		c := &n.Status.Conditions[i]
		share(&c.Type)
		share(&c.Status)
		share(&c.Reason)
		share(&c.Message)
	}
	for i := range n.Status.Nodes {
		e := &n.Status.Nodes[i]
		share(&e.NodeName)
		share(&e.Reason)
		share(&e.Message)
		share(&e.UnderlayAddress)
		share(&e.IPAMMode)
		share(&e.LeaseReclaim)
		if c := e.Capacity; c != nil {
			share(&c.Allocated)
			share(&c.Used)
		}
	}
	if c := n.Status.Capacity; c != nil {
		n.Status.Capacity = sharedCapacities.share(c)
	}
}

// share points *s at the canonical copy of its content (Go's unique). The bytes live as long as
// anything points at them; the canonical entry only while a handle does, so after a collection
// the next Network may start a new copy: a few copies per value, never one per Network.
func share[S ~string](s *S) {
	if *s != "" {
		*s = S(unique.Make(string(*s)).Value())
	}
}

// maxShared bounds the distinct values a sharedValues remembers: beyond it the table starts
// again, so values that never repeat cost a table of bounded size, not a leak.
const maxShared = 4096

// maxSharedFieldSetBytes is the largest field set shared: larger ones (status written by many
// managers) rarely repeat.
const maxSharedFieldSetBytes = 1024

// sharedValues remembers one copy of each value it has seen, up to maxShared.
type sharedValues[K comparable, V any] struct {
	mu     sync.Mutex
	copies map[K]*V
}

func (s *sharedValues[K, V]) lookup(key K, v *V) *V {
	s.mu.Lock()
	defer s.mu.Unlock()
	if got, ok := s.copies[key]; ok {
		return got
	}
	return s.remember(key, v)
}

// remember keeps v as the copy of key; the caller holds mu.
func (s *sharedValues[K, V]) remember(key K, v *V) *V {
	if s.copies == nil || len(s.copies) >= maxShared {
		s.copies = make(map[K]*V)
	}
	s.copies[key] = v
	return v
}

type timeCopies struct {
	sharedValues[time.Time, metav1.Time]
}

// share returns the remembered copy of *t, or t.
func (s *timeCopies) share(t *metav1.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	return s.lookup(t.Time, t)
}

type fieldSetCopies struct {
	sharedValues[string, metav1.FieldsV1]
}

// share returns the remembered copy of *f, or f. The lookup converts the bytes without copying
// them; only a set remembered for the first time is copied into the table's key.
func (s *fieldSetCopies) share(f *metav1.FieldsV1) *metav1.FieldsV1 {
	if f == nil || len(f.Raw) > maxSharedFieldSetBytes {
		return f
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if got, ok := s.copies[string(f.Raw)]; ok {
		return got
	}
	return s.remember(string(f.Raw), f)
}

type capacityCopies struct {
	sharedValues[samplecrd.NetworkCapacity, samplecrd.NetworkCapacity]
}

// share returns the remembered status.capacity equal to *c, or c with its words shared. Most
// Networks of one size hold the same counts (nothing used), so the whole struct is shared, not
// only its strings: nothing changes a decoded capacity in place (the strategies derive a new one).
func (s *capacityCopies) share(c *samplecrd.NetworkCapacity) *samplecrd.NetworkCapacity {
	share(&c.Total)
	share(&c.Allocated)
	share(&c.Used)
	share(&c.Available)
	return s.lookup(*c, c)
}

var (
	sharedTimes      timeCopies
	sharedFieldSets  fieldSetCopies
	sharedCapacities capacityCopies
)
