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
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/nftables"
	"k8s.io/klog/v2"
)

// watchNFT sends to out the key of each of our nftables tables (gateway and source filters) that
// another process changed: a table, chain, rule or set of it added or deleted (`nft flush
// ruleset` by a firewall service, a rule deleted by hand), so that Ensure rewrites it at once
// instead of at the next resync. A transaction made by this process is skipped: the kernel
// names the thread that made each transaction (by its ID in the initial PID namespace, so in a
// container with a PID namespace of its own our writes are not recognised and each costs one
// more Ensure, which finds the node in sync, as our own link changes do). Changes of a
// set's elements alone are not attributed to a table by the monitor and wait for the resync.
// When the monitor fails it is opened again with backoff, and every known key is sent. It
// returns when ctx is done or the kernel has no nftables. It closes opened after its first
// attempt to open the monitor.
func (b *Backend) watchNFT(ctx context.Context, logger klog.Logger, out chan<- string, opened chan<- struct{}) {
	first := true
	tried := func() {
		if first {
			first = false
			close(opened)
		}
	}
	defer tried()
	send := func(key string) {
		select {
		case out <- key:
		case <-ctx.Done():
		}
	}
	backoff := resubscribeMin
	for attempt := 0; ctx.Err() == nil; attempt++ {
		var events chan *nftables.MonitorEvents
		mon := nftables.NewMonitor(nftables.WithMonitorEventBuffer(64))
		c, err := b.nft()
		if err == nil {
			events, err = c.AddGenerationalMonitor(mon)
		}
		tried()
		if err != nil {
			if nftUnsupported(err) {
				return
			}
			logger.Error(err, "Monitoring nftables failed; retrying", "after", backoff)
			t := time.NewTimer(backoff)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(2*backoff, resubscribeMax)
			continue
		}
		backoff = resubscribeMin
		if attempt > 0 {
			for _, key := range b.knownKeys() {
				send(key)
			}
		}
		stop := make(chan struct{})
		go func() {
			select {
			case <-ctx.Done():
			case <-stop:
			}
			_ = mon.Close()
		}()
		for gen := range events {
			for _, key := range b.keysOfNFTChange(gen, ownThread) {
				send(key)
			}
		}
		close(stop)
		if ctx.Err() == nil {
			logger.Info("nftables monitor ended; monitoring again")
		}
	}
}

// ownThread tells whether tid is a thread of this process.
func ownThread(tid uint32) bool {
	_, err := os.Stat("/proc/self/task/" + strconv.FormatUint(uint64(tid), 10))
	return err == nil
}

// keysOfNFTChange returns the keys of our tables that one transaction touched, unless own says
// that the thread that made it is ours.
func (b *Backend) keysOfNFTChange(gen *nftables.MonitorEvents, own func(uint32) bool) []string {
	if g, ok := gen.GeneratedBy.Data.(*nftables.GenMsg); ok && own(g.ProcPID) {
		return nil
	}
	var keys []string
	for _, ev := range gen.Changes {
		var table *nftables.Table
		switch d := ev.Data.(type) {
		case *nftables.Table:
			table = d
		case *nftables.Chain:
			table = d.Table
		case *nftables.Rule:
			table = d.Table
		case *nftables.Set:
			table = d.Table
		}
		if table == nil {
			continue
		}
		bridge, ok := strings.CutPrefix(table.Name, filterTablePrefix)
		if !ok {
			continue
		}
		b.knownMu.Lock()
		key, known := b.names[bridge]
		b.knownMu.Unlock()
		if known && !slices.Contains(keys, key) {
			keys = append(keys, key)
		}
	}
	return keys
}
