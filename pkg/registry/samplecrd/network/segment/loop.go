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

package segment

import (
	"context"
	"errors"
	"time"

	"go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// GuardFunc returns the compares that hold while the Network namespace/name is still the one
// with uid (its CreateRevision as read), the probes and the check that tell a failed compare
// apart, and whether that Network exists at all.
type GuardFunc func(ctx context.Context, namespace, name string, uid types.UID) ([]clientv3.Cmp, []clientv3.Op,
	func([]*etcdserverpb.ResponseOp) error, bool, error)

// MirrorFunc writes the VNI the keys give the Network namespace/name (uid) into its status.vni,
// as the server; a Network that is gone, or is another one now, answers NotFound.
type MirrorFunc func(ctx context.Context, namespace, name string, uid types.UID) error

// Loop gives every Network seen without status.vni its VNI: a Network stored before VNIs or by an
// older replica (which never writes the keys), or whose status.vni an older replica's write
// dropped. It watches the Networks (from the watch cache), assigns a VNI when the Network has no
// keys (guarded by the Network's incarnation), and mirrors the keys into status.vni. Every replica
// runs it; two doing the same work race harmlessly (the keys' guard lets one win, the mirror
// writes the same value).
type Loop struct {
	VNIs *VNIs
	// Watch watches every Network from resourceVersion; "" asks for the initial events (every
	// Network stored, as Added) followed by a bookmark at the revision they were read at.
	Watch  func(ctx context.Context, resourceVersion string) (watch.Interface, error)
	Guard  GuardFunc
	Mirror MirrorFunc

	retry time.Duration // how soon a watch that failed or ended is opened again (0: a second)
}

type loopItem struct {
	namespace, name string
	uid             types.UID
}

// Run runs the loop until ctx is done.
func (l *Loop) Run(ctx context.Context) {
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		workqueue.NewTypedItemExponentialFailureRateLimiter[loopItem](200*time.Millisecond, time.Minute),
		workqueue.TypedRateLimitingQueueConfig[loopItem]{Name: "network_segment_vni"})
	defer queue.ShutDown()
	go func() {
		for {
			it, quit := queue.Get()
			if quit {
				return
			}
			if err := l.sync(ctx, it); err != nil {
				klog.ErrorS(err, "Giving a network its VNI", "network", it.namespace+"/"+it.name, "uid", it.uid)
				queue.AddRateLimited(it)
			} else {
				queue.Forget(it)
			}
			queue.Done(it)
		}
	}()
	// rv is where a closed watch resumes: "" (every Network again) until the bookmark that ends
	// the initial events, then the revision of the last event. Starting over on every close made
	// each closed watch replay the whole collection, and at a million Networks under creates the
	// replay took long enough for the watch cache to close the watch again.
	rv := ""
	// initializing: the watch cache refused the last watch while it loads the Networks (429,
	// for some 30 s at a million after a start): said once, not an error every second.
	initializing := false
	retry := l.retry
	if retry == 0 {
		retry = time.Second
	}
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		w, err := l.Watch(ctx, rv)
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				rv = ""
			}
			if apierrors.IsTooManyRequests(err) {
				if !initializing {
					klog.InfoS("Waiting for the watch cache of networks to load before giving networks their VNIs", "reason", err.Error())
				}
				initializing = true
				return
			}
			klog.ErrorS(err, "Watching networks for their VNIs", "resourceVersion", rv)
			return
		}
		initializing = false
		defer w.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-w.ResultChan():
				if !ok {
					return
				}
				obj := ev.Object
				if cached, ok := obj.(interface{ GetObject() runtime.Object }); ok {
					obj = cached.GetObject() // the watch cache's wrapper
				}
				switch ev.Type {
				case watch.Error:
					if err := apierrors.FromObject(obj); apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
						rv = "" // too old to resume: every Network again
					}
					klog.ErrorS(apierrors.FromObject(obj), "Watching networks for their VNIs", "resourceVersion", rv)
					return
				case watch.Bookmark:
					if m, err := meta.Accessor(obj); err == nil && m.GetResourceVersion() != "" {
						rv = m.GetResourceVersion()
					}
					continue
				}
				n, isNetwork := obj.(*samplecrd.Network)
				if !isNetwork {
					continue
				}
				if rv != "" {
					rv = n.ResourceVersion
				}
				if (ev.Type == watch.Added || ev.Type == watch.Modified) && n.Status.VNI == 0 && n.UID != "" {
					queue.Add(loopItem{namespace: n.Namespace, name: n.Name, uid: n.UID})
				}
			}
		}
	}, retry)
}

// sync gives the Network of it a VNI if its keys hold none, and mirrors the keys into status.vni.
func (l *Loop) sync(ctx context.Context, it loopItem) error {
	// Queued only while status.vni is 0: a VNI, if any, came from Assign, with its uid key.
	v, _, err := l.VNIs.Of(ctx, string(it.uid), 0)
	if err != nil {
		return err
	}
	if v == 0 {
		cmps, probes, check, found, err := l.Guard(ctx, it.namespace, it.name, it.uid)
		if err != nil || !found {
			return err
		}
		_, err = l.VNIs.Assign(ctx, string(it.uid), cmps, probes, check)
		var exhausted *ExhaustedError
		switch {
		case errors.Is(err, ErrTaken):
			// Another replica gave it one meanwhile: mirror that.
		case errors.As(err, &exhausted):
			// Reported by the verifier (vni-missing) until a VNI is free; a create of a new
			// Network would be refused with the same message.
			klog.ErrorS(err, "A network has no VNI", "network", it.namespace+"/"+it.name, "uid", it.uid)
			return nil
		case errors.Is(err, ErrNetworkChanged):
			return nil // deleted or replaced meanwhile
		case err != nil:
			return err
		}
	}
	if err := l.Mirror(ctx, it.namespace, it.name, it.uid); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// ErrNetworkChanged is what a GuardFunc's check answers when the Network is not the one read.
var ErrNetworkChanged = errors.New("the network was deleted or replaced meanwhile")
