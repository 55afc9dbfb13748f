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
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/conversion"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/features"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/etcd3/metrics"
	utilfeature "k8s.io/apiserver/pkg/util/feature"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
	"github.com/samplecrd/network-apiserver/pkg/etcdscan"
)

// maxPageRead bounds how many keys one read of a continue page asks for when a selector dropped
// most of what the last read returned.
const maxPageRead = 10000

// pagingStore is the Network storage beneath the watch cache: the etcd3 store, except that it
// reads the continue pages of paged lists itself. Every continue page that reaches etcd passes
// through it: those of clients' paged lists, which the watch cache hands on while
// ListFromCacheSnapshot is off (our default); the watch cache's own list when it starts or
// re-lists (pages of 10,000); and those of k8s.io/apiserver's cache consistency checker
// (DetectCacheInconsistency), which every 5 to 7.5 minutes lists the whole collection from the
// storage beneath the cache, in pages of 10,000. The etcd3 store reads a continue page with a
// unary Range and a limit, and etcd counts every key left in the range to answer it: a walk of n
// Networks in pages costs etcd O(n²) key visits (at a million, over six minutes in pages of 500,
// long enough for compaction to expire the walk's revision; some 10 s of etcd's CPU for each
// of the checker's walks). The page read here counts nothing (etcdscan.ReadPage).
type pagingStore struct {
	storage.Interface
	etcd  *EtcdCodec
	pages *etcdscan.Scanner

	// Stats' state (sizes.go): the watch cache's keys once it enables the size estimation, and
	// the estimated average stored size.
	sizeMu   sync.Mutex
	keys     storage.KeysFunc
	meanSize int64
}

// GetList reads continue pages itself (servesContinue), every other list through the etcd3
// store.
func (s *pagingStore) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	if s.servesContinue(opts) {
		return s.continueList(ctx, key, opts, listObj)
	}
	return s.Interface.GetList(ctx, key, opts, listObj)
}

// servesContinue says whether GetList reads this list itself: a continue page of a list of the
// whole collection or a namespace (a sharded list is left to the etcd3 store).
func (s *pagingStore) servesContinue(opts storage.ListOptions) bool {
	return opts.Recursive && opts.Predicate.Continue != "" && opts.Predicate.Limit > 0 &&
		opts.ResourceVersionMatch == "" &&
		!utilfeature.DefaultFeatureGate.Enabled(features.ShardedListAndWatch)
}

// continueList serves a continue page as the etcd3 store would: the same items, continue token
// and resourceVersion, the same errors (400 for a bad token, 410 Gone with a token at the current
// revision once the page's revision is compacted). It leaves remainingItemCount unset: that is
// the count the page avoids (the API documents the field as optional, an estimate when set).
func (s *pagingStore) continueList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) (err error) {
	etcdKey, err := s.etcd.key(key)
	if err != nil {
		return err
	}
	keyPrefix := etcdKey
	if !strings.HasSuffix(keyPrefix, "/") {
		keyPrefix += "/"
	}
	listPtr, err := meta.GetItemsPtr(listObj)
	if err != nil {
		return err
	}
	items, err := conversion.EnforcePtr(listPtr)
	if err != nil || items.Kind() != reflect.Slice {
		return fmt.Errorf("need a pointer to a slice: %v", err)
	}
	rev, continueKey, err := storage.ValidateListOptions(keyPrefix, s.etcd.versioner, opts)
	if err != nil {
		return err
	}
	elem := items.Type().Elem()
	newItem := func() runtime.Object { return reflect.New(elem).Interface().(runtime.Object) }

	limit := opts.Predicate.Limit
	read := limit
	start, end := continueKey, clientv3.GetPrefixRangeEnd(keyPrefix)
	var lastKey string
	var fetched, evaluated int
	began := time.Now()
	defer func() {
		metrics.RecordEtcdRequest("list", samplecrd.Resource("networks"), err, began)
		metrics.RecordStorageListMetrics(samplecrd.Resource("networks"), "", fetched, evaluated, items.Len())
	}()
	more := false
	for {
		page, err := s.pages.ReadPage(ctx, start, end, rev, read)
		if err != nil {
			return pageError(err, continueKey, keyPrefix, rev)
		}
		rev = page.Revision
		fetched += len(page.Kvs)
		full := false
		for i, kv := range page.Kvs {
			if int64(items.Len()) >= limit {
				full = true
				break
			}
			lastKey = string(kv.Key)
			obj, err := s.etcd.decodeListItem(ctx, kv, newItem)
			if err != nil {
				return err
			}
			evaluated++
			if matched, err := opts.Predicate.Matches(obj); err == nil && matched {
				items.Set(reflect.Append(items, reflect.ValueOf(obj).Elem()))
			}
			page.Kvs[i] = nil
		}
		more = full || page.More
		if full || !page.More || int64(items.Len()) >= limit {
			break
		}
		// A selector dropped some of the page: read more at once, as the etcd3 store does.
		start = lastKey + "\x00"
		read = min(2*read, maxPageRead)
	}
	if items.IsNil() {
		items.Set(reflect.MakeSlice(items.Type(), 0, 0))
	}
	next := ""
	if more {
		if next, err = storage.EncodeContinue(lastKey+"\x00", keyPrefix, rev); err != nil {
			return err
		}
	}
	return s.etcd.versioner.UpdateList(listObj, uint64(rev), next, nil)
}

// pageError answers a failed page read: a compacted revision is 410 Gone carrying a continue
// token that goes on from the same key at the current revision, a future one is the storage's
// "too large resource version" error.
func pageError(err error, continueKey, keyPrefix string, rev int64) error {
	switch {
	case errors.Is(err, rpctypes.ErrCompacted):
		gone := apierrors.NewResourceExpired("The continue token's resourceVersion was compacted: start the list again " +
			"without it, or go on with the continue token of this response, which lists the rest at the current " +
			"resourceVersion: an inconsistent list, whose later pages show changes made after its first.")
		token, terr := storage.EncodeContinue(continueKey, keyPrefix, -1)
		if terr != nil {
			return apierrors.NewResourceExpired("The continue token's resourceVersion was compacted: start the list again without it.")
		}
		gone.ErrStatus.ListMeta.Continue = token
		return gone
	case errors.Is(err, rpctypes.ErrFutureRev):
		return storage.NewTooLargeResourceVersionError(uint64(rev), 0, 0)
	}
	return err
}
