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

package agent

import (
	"context"
	"slices"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"

	"github.com/samplecrd/network-apiserver/pkg/controller/nodestatus"
)

// LeaseOptions configure the agent's coordination.k8s.io Lease, which tells the server's node
// lifecycle loop that the agent of a node still runs: a Node deleted under a running agent keeps
// its status entries, and so its address blocks, while the agent renews it.
type LeaseOptions struct {
	// Namespace holds the Leases; empty holds none.
	Namespace string
	// Duration is the Lease's leaseDurationSeconds; Renew how often the agent renews it.
	Duration, Renew time.Duration
}

// DefaultLeaseOptions: renewed every 10 s, expired 40 s after the last renewal (a node's kubelet
// Lease has the same ratio), in the agent DaemonSet's namespace.
var DefaultLeaseOptions = LeaseOptions{Namespace: nodestatus.DefaultLeaseNamespace, Duration: 40 * time.Second, Renew: 10 * time.Second}

func (l *LeaseOptions) addFlags(fs *pflag.FlagSet) {
	fs.StringVar(&l.Namespace, "agent-lease-namespace", l.Namespace,
		"Namespace of the agents' coordination.k8s.io Leases (network-agent-<node>), attached mode only. The agent renews its own; the server's node lifecycle loop "+
			"keeps a deleted Node's status entries (and so its address blocks) while that Lease is held. Empty: no Leases, a deleted Node's entries go at once.")
}

// leaseHolder renews the agent's Lease and knows whether it holds it.
type leaseHolder struct {
	options LeaseOptions
	clock   clock.PassiveClock
	// renewed is the time of the last successful renewal, in Unix nanoseconds (0: never).
	renewed atomic.Int64
}

// held says whether the last successful renewal is less than the Lease's duration ago, as the
// server's node lifecycle loop judges the Lease.
func (h *leaseHolder) held() bool {
	last := h.renewed.Load()
	return last != 0 && h.now().Before(time.Unix(0, last).Add(h.options.Duration))
}

func (h *leaseHolder) now() time.Time {
	if h.clock == nil {
		return time.Now()
	}
	return h.clock.Now()
}

// hold renews node's Lease every Renew until ctx is done, when the endpoint serves Leases.
// Failures are logged and retried at the next renewal: the Lease only matters once the Node is
// deleted.
func (h *leaseHolder) hold(ctx context.Context, client kubernetes.Interface, node string) {
	l := h.options
	if l.Namespace == "" || client == nil || !servesLeases(client) {
		return
	}
	logger := klog.FromContext(ctx)
	logger.Info("Holding this agent's Lease", "namespace", l.Namespace, "name", nodestatus.LeaseName(node), "duration", l.Duration, "renew", l.Renew)
	failing := false
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		now := h.now()
		err := renewLease(ctx, client.CoordinationV1().Leases(l.Namespace), node, l.Duration, now)
		switch {
		case err == nil:
			h.renewed.Store(now.UnixNano())
		case !failing:
			logger.Error(err, "Renewing this agent's Lease failed; retrying", "namespace", l.Namespace, "name", nodestatus.LeaseName(node))
		}
		if err == nil && failing {
			logger.Info("Renewed this agent's Lease again", "namespace", l.Namespace, "name", nodestatus.LeaseName(node))
		}
		failing = err != nil
	}, l.Renew)
}

// leaseClient is what renewLease uses of the Leases of a namespace.
type leaseClient interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// renewLease creates node's Lease or renews it: holder the node, renewed at at.
func renewLease(ctx context.Context, leases leaseClient, node string, duration time.Duration, at time.Time) error {
	name := nodestatus.LeaseName(node)
	now := metav1.NewMicroTime(at)
	seconds := int32(duration / time.Second)
	lease, err := leases.Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(node), LeaseDurationSeconds: &seconds,
				AcquireTime: &now, RenewTime: &now},
		}, metav1.CreateOptions{})
		return err
	}
	if err != nil {
		return err
	}
	lease = lease.DeepCopy()
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != node {
		lease.Spec.HolderIdentity, lease.Spec.AcquireTime = ptr.To(node), &now
	}
	lease.Spec.LeaseDurationSeconds, lease.Spec.RenewTime = &seconds, &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{})
	return err
}

// servesLeases says whether client's endpoint serves coordination.k8s.io/v1 Leases (a standalone
// network-apiserver does not). Other errors count as serving: the renewals retry.
func servesLeases(client kubernetes.Interface) bool {
	resources, err := client.Discovery().ServerResourcesForGroupVersion(coordinationv1.SchemeGroupVersion.String())
	if err == nil && !slices.ContainsFunc(resources.APIResources, func(r metav1.APIResource) bool { return r.Name == "leases" }) ||
		apierrors.IsNotFound(err) {
		klog.InfoS("The endpoint serves no Leases: this agent holds none (--agent-lease-namespace)")
		return false
	}
	return true
}
