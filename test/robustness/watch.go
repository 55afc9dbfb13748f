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

package robustness

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned"
	"github.com/samplecrd/network-apiserver/pkg/generated/informers/externalversions"
)

// listItem is one Network of a LIST.
type listItem struct {
	Key string `json:"key"` // namespace/name
	UID string `json:"uid"`
	RV  int64  `json:"rv"`
}

// watchRecord is one thing a watcher saw: a LIST that starts a segment (after the first, only
// when the server said the resourceVersion was too old), an event, or a resumption of the
// watch from the last resourceVersion seen.
type watchRecord struct {
	Watcher string     `json:"watcher"`
	Seg     int        `json:"seg"`
	What    string     `json:"what"` // list, event, resume
	Type    string     `json:"type,omitempty"`
	Key     string     `json:"key,omitempty"`
	UID     string     `json:"uid,omitempty"`
	RV      int64      `json:"rv"`
	Items   []listItem `json:"items,omitempty"`
	Time    int64      `json:"time"`
	Err     string     `json:"err,omitempty"`
}

// watcher lists and watches every Network of one replica, resuming after every break from
// the last resourceVersion it saw and listing again only when the server answers 410.
type watcher struct {
	name    string
	replica *replica

	mu      sync.Mutex
	records []watchRecord
	lastRV  int64
}

func (w *watcher) add(r watchRecord) {
	r.Watcher, r.Time = w.name, time.Now().UnixNano()
	w.mu.Lock()
	w.records = append(w.records, r)
	if r.What != "resume" && r.RV > w.lastRV {
		w.lastRV = r.RV
	}
	w.mu.Unlock()
}

func (w *watcher) LastRV() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastRV
}

func (w *watcher) Records() []watchRecord {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]watchRecord(nil), w.records...)
}

func rvOf(s string) int64 {
	v, _ := strconv.ParseInt(s, 10, 64)
	return v
}

func (w *watcher) run(ctx context.Context) {
	seg, rv, listed := 0, int64(0), false
	for ctx.Err() == nil {
		cs, err := versioned.NewForConfig(w.replica.restConfig())
		if err != nil {
			return
		}
		nets := cs.SamplecrdV1().Networks(metav1.NamespaceAll)
		if rv == 0 {
			lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			list, err := nets.List(lctx, metav1.ListOptions{})
			cancel()
			if err != nil {
				pause(ctx, 200*time.Millisecond)
				continue
			}
			seg++
			rv, listed = rvOf(list.ResourceVersion), true
			rec := watchRecord{Seg: seg, What: "list", RV: rv}
			for _, n := range list.Items {
				rec.Items = append(rec.Items, listItem{Key: n.Namespace + "/" + n.Name, UID: string(n.UID), RV: rvOf(n.ResourceVersion)})
			}
			w.add(rec)
		}
		wi, err := nets.Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatInt(rv, 10), AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = 0
			}
			pause(ctx, 200*time.Millisecond)
			continue
		}
		if !listed {
			// A watch again from the last resourceVersion seen, not from a new list.
			w.add(watchRecord{Seg: seg, What: "resume", RV: rv})
		}
		listed = false
		for ev := range wi.ResultChan() {
			switch ev.Type {
			case watch.Bookmark:
				if n, ok := ev.Object.(*v1.Network); ok && rvOf(n.ResourceVersion) > rv {
					rv = rvOf(n.ResourceVersion)
				}
				continue
			case watch.Error:
				if st := apierrors.FromObject(ev.Object); apierrors.IsResourceExpired(st) || apierrors.IsGone(st) {
					rv = 0
				}
				continue
			}
			n, ok := ev.Object.(*v1.Network)
			if !ok {
				continue
			}
			rv = rvOf(n.ResourceVersion)
			w.add(watchRecord{Seg: seg, What: "event", Type: string(ev.Type), Key: n.Namespace + "/" + n.Name, UID: string(n.UID), RV: rv})
		}
		wi.Stop()
		pause(ctx, 100*time.Millisecond)
	}
}

func pause(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// informer is a client-go informer on one replica.
type informer struct {
	name    string
	replica *replica
	store   cache.Store
	stop    chan struct{}

	// errs are the ends of its watches and failed lists, with their times, for a report.
	mu   sync.Mutex
	errs []string
}

func startInformer(name string, r *replica) (*informer, error) {
	cs, err := versioned.NewForConfig(r.restConfig())
	if err != nil {
		return nil, err
	}
	f := externalversions.NewSharedInformerFactory(cs, 0)
	inf := f.Samplecrd().V1().Networks().Informer()
	i := &informer{name: name, replica: r, store: inf.GetStore(), stop: make(chan struct{})}
	if err := inf.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		i.mu.Lock()
		defer i.mu.Unlock()
		i.errs = append(i.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
	}); err != nil {
		return nil, err
	}
	f.Start(i.stop)
	return i, nil
}

// lastErrors returns the informer's last n watch and list errors, oldest first.
func (i *informer) lastErrors(n int) []string {
	i.mu.Lock()
	defer i.mu.Unlock()
	return slices.Clone(i.errs[max(0, len(i.errs)-n):])
}

// cacheContent is the informer's cache as sorted "namespace/name uid rv" lines.
func (i *informer) cacheContent() []string {
	var out []string
	for _, obj := range i.store.List() {
		n := obj.(*v1.Network)
		out = append(out, fmt.Sprintf("%s/%s %s %s", n.Namespace, n.Name, n.UID, n.ResourceVersion))
	}
	sort.Strings(out)
	return out
}

// freshList lists every Network from replica r, as sorted lines like cacheContent, and its RV.
func freshList(ctx context.Context, r *replica) ([]string, []listItem, int64, error) {
	cs, err := versioned.NewForConfig(r.restConfig())
	if err != nil {
		return nil, nil, 0, err
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := cs.SamplecrdV1().Networks(metav1.NamespaceAll).List(lctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, 0, err
	}
	var out []string
	var items []listItem
	for _, n := range list.Items {
		out = append(out, fmt.Sprintf("%s/%s %s %s", n.Namespace, n.Name, n.UID, n.ResourceVersion))
		items = append(items, listItem{Key: n.Namespace + "/" + n.Name, UID: string(n.UID), RV: rvOf(n.ResourceVersion)})
	}
	sort.Strings(out)
	return out, items, rvOf(list.ResourceVersion), nil
}
