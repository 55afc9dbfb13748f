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

package linux

import (
	"errors"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// Bridges are deleted in batches. The kernel holds each deletion for RCU grace periods: one
// bridge deleted alone costs about 40 ms on the 2-core VM of docs/performance.md, of which
// about half (synchronize_rcu_expedited under the rtnl lock, rcu_barrier in netdev_run_todo
// after it) is paid once per RTM_DELLINK however many links it deletes, and the other half
// (the bridge driver's rcu_barrier in br_multicast_dev_del) once per bridge. So a bridge being
// removed is first moved into the link group DeleteGroup (RTM_SETLINK with IFLA_GROUP, as `ip
// link set dev BRIDGE group N` does), and then one RTM_DELLINK with IFLA_GROUP and no index or
// name (`ip link del group N`) deletes every link in the group at once. vishvananda/netlink's
// LinkDel always sends an index, so that request is built here.
//
// Group commit: a Remove that marked its bridge joins the pending batch and waits for it. One
// goroutine, started when a batch is pending and none runs, takes the pending batch, sends the
// group delete, wakes the batch's members and takes the next batch, which the Removes marking
// meanwhile have joined, until none is pending. A member marked its bridge before joining and
// its batch's delete is sent after it joined, so when Remove returns its bridge is gone; a
// member whose bridge an earlier delete took finds the group empty (ENODEV), also done.
//
// At most maxDeleteBatch Removes hold a mark at once (a semaphore taken before marking), so a
// group delete takes at most that many of our bridges: each costs about 20 ms with the rtnl
// lock held, which stops every netlink request on the node, our creations included.
//
// Only a bridge of ours (isOurs) is ever moved into the group. One left there by a crash or a
// failed delete is still ours by its alias: List reports it, a later Remove or the garbage
// collection deletes it with the next batch, and Ensure of its key takes it back out of the
// group (with no group delete in flight) before using it, so a Network that exists again never
// loses its bridge to a batch of others.

// DeleteGroup is the link group (IFLA_GROUP) the linux backend moves a bridge into right before
// it deletes every link of the group with one request. Nothing else of the backend uses link
// groups; another program must not put its links into this group in a namespace the backend
// manages (they would be deleted with our bridges). The value reads "scrd" in ASCII.
const DeleteGroup = 0x73637264

// maxDeleteBatch is the most bridges one group delete takes (about 20 ms each under the rtnl
// lock, so at most about 0.7 s in which the node's other netlink requests wait).
const maxDeleteBatch = 32

// bridgeDeleter batches the deletion of bridges (see above).
type bridgeDeleter struct {
	// slots holds one token per Remove between marking its bridge and its batch's end.
	slots chan struct{}
	// deleting is held while a group delete is sent; Ensure holds it to take a bridge back out
	// of the group.
	deleting sync.Mutex

	mu      sync.Mutex
	pending *deleteBatch // the batch Removes join, nil when none waits
	running bool         // whether the goroutine that sends the group deletes runs
}

// deleteBatch is the Removes that one group delete serves.
type deleteBatch struct {
	members int
	done    chan struct{} // closed after the group delete returned; err is set then
	err     error
}

func newBridgeDeleter() *bridgeDeleter {
	return &bridgeDeleter{slots: make(chan struct{}, maxDeleteBatch)}
}

// deleteBridge deletes link, a bridge of ours, and returns when it is gone. The caller does not
// hold b.mu: the request waits for the kernel's rtnl lock, and the batch for others.
func (b *Backend) deleteBridge(link netlink.Link) error {
	d := b.deleter
	d.slots <- struct{}{}
	defer func() { <-d.slots }()
	netlinkRequests.Inc()
	if err := b.delH.LinkSetGroup(link, DeleteGroup); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return nil // gone already
		}
		return err
	}
	batch := b.joinDeleteBatch()
	<-batch.done
	if batch.err == nil {
		return nil
	}
	// The group delete failed: the kernel refuses a group delete with a link it cannot delete
	// that way, which only someone else's link in our group can be. This bridge alone then, as
	// before batching.
	netlinkRequests.Inc()
	if err := b.delH.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
		return errors.Join(batch.err, err)
	}
	return nil
}

// joinDeleteBatch adds a member to the pending batch, starting the goroutine that sends the
// group deletes if it is not running, and returns the batch.
func (b *Backend) joinDeleteBatch() *deleteBatch {
	d := b.deleter
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pending == nil {
		d.pending = &deleteBatch{done: make(chan struct{})}
	}
	batch := d.pending
	batch.members++
	if !d.running {
		d.running = true
		go b.runDeleteBatches()
	}
	return batch
}

// runDeleteBatches sends one group delete per pending batch until none is pending.
func (b *Backend) runDeleteBatches() {
	d := b.deleter
	for {
		d.mu.Lock()
		batch := d.pending
		d.pending = nil
		if batch == nil {
			d.running = false
			d.mu.Unlock()
			return
		}
		d.mu.Unlock()
		if b.beforeGroupDelete != nil {
			b.beforeGroupDelete()
		}
		d.deleting.Lock()
		batch.err = b.deleteGroup()
		d.deleting.Unlock()
		deleteBatchSizes.Observe(float64(batch.members))
		close(batch.done)
	}
}

// deleteGroup deletes every link in DeleteGroup with one request; an empty group is no error.
func (b *Backend) deleteGroup() error {
	netlinkRequests.Inc()
	req := nl.NewNetlinkRequest(unix.RTM_DELLINK, unix.NLM_F_ACK)
	req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: b.groupSock}
	req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC)) // index 0: the kernel then looks at IFLA_GROUP
	req.AddData(nl.NewRtAttr(unix.IFLA_GROUP, nl.Uint32Attr(DeleteGroup)))
	_, err := req.Execute(unix.NETLINK_ROUTE, 0)
	if errors.Is(err, unix.ENODEV) {
		return nil // no link in the group: earlier batches took them all
	}
	return err
}

// reclaimFromDeleteGroup takes link, key's bridge of ours found in DeleteGroup (left there by
// a crash or a failed delete), back out of the group, with no group delete in flight. It
// returns nil when a group delete took the bridge first. Callers hold b.mu.
func (b *Backend) reclaimFromDeleteGroup(link netlink.Link) (netlink.Link, error) {
	d := b.deleter
	d.deleting.Lock()
	defer d.deleting.Unlock()
	if err := b.nl().LinkSetGroup(link, 0); err != nil {
		if errors.Is(err, unix.ENODEV) {
			return nil, nil
		}
		return nil, err
	}
	link.Attrs().Group = 0
	return link, nil
}
