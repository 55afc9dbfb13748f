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
	"math/rand/v2"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/samplecrd/network-apiserver/test/localcluster"
)

// Fault kinds. Each is bounded in time: the process is back (or thawed) within seconds.
const (
	faultKillServer = "kill-server"      // SIGKILL a network-apiserver replica, start it again
	faultRestart    = "graceful-restart" // SIGTERM a replica, wait for its exit, start it again
	faultStopMember = "stop-member"      // SIGSTOP one etcd member, SIGCONT it
	faultKillMember = "kill-member"      // SIGKILL one etcd member, start it again
	faultStopEtcd   = "stop-etcd"        // SIGSTOP every member (or the embedded server), SIGCONT
	faultKillEtcd   = "kill-etcd"        // SIGKILL every member, start them again
	faultCompact    = "compact"          // compact etcd at the newest revision while watches run
	faultPartition  = "partition"        // cut one replica off every etcd member (its proxies), then heal
)

// A partition lasts partitionMin plus up to partitionSpread: 2.5–7.5 s.
const partitionMin, partitionSpread = 2500 * time.Millisecond, 5 * time.Second

// fault is one injected fault, as it happened.
type fault struct {
	Kind   string `json:"kind"`
	Target string `json:"target"`
	// EtcdOutage: while it lasts, 503 and 504 answers are expected.
	EtcdOutage bool  `json:"etcdOutage"`
	Replica    int   `json:"replica"` // the replica it takes down, or -1
	Start      int64 `json:"start"`   // injected (Unix ns)
	Restored   int64 `json:"restored"`
	// Ready: every replica answered /readyz again (Unix ns).
	Ready int64  `json:"ready"`
	Note  string `json:"note,omitempty"`
	Err   string `json:"err,omitempty"`
}

type injector struct {
	c   *cluster
	rec *recorder
	cli *clientv3.Client
	rng *rand.Rand
	sc  scenario
}

// run injects faults one after the other, with seeded pauses between them, until ctx ends;
// the kinds are taken in seeded rounds so that each kind comes up equally often.
func (in *injector) run(ctx context.Context) []fault {
	var out []fault
	var round []string
	for {
		pause(ctx, in.sc.FaultGap/2+time.Duration(in.rng.Int64N(int64(in.sc.FaultGap))))
		if ctx.Err() != nil {
			return out
		}
		if len(round) == 0 {
			round = append([]string(nil), in.sc.Faults...)
			in.rng.Shuffle(len(round), func(i, j int) { round[i], round[j] = round[j], round[i] })
		}
		kind := round[0]
		round = round[1:]
		f := in.inject(context.WithoutCancel(ctx), kind)
		out = append(out, f)
		if f.Err != "" {
			return out // the cluster may be broken: stop injecting, the validation reports it
		}
	}
}

func (in *injector) down() time.Duration {
	return 500*time.Millisecond + time.Duration(in.rng.Int64N(int64(in.sc.MaxDown)))
}

func (in *injector) inject(ctx context.Context, kind string) fault {
	f := fault{Kind: kind, Replica: -1}
	f.Start = time.Now().UnixNano()
	var err error
	switch kind {
	case faultKillServer, faultRestart:
		r := in.c.replicas[in.rng.IntN(len(in.c.replicas))]
		f.Target, f.Replica, f.EtcdOutage = r.proc.Name, r.index, in.c.embedded
		sig, grace := syscall.SIGKILL, 10*time.Second
		if kind == faultRestart {
			sig, grace = syscall.SIGTERM, 90*time.Second
		}
		if err = r.proc.Stop(sig, grace); err == nil {
			if kind == faultKillServer {
				pause(ctx, in.down())
			}
			f.Restored = time.Now().UnixNano()
			err = r.proc.Start()
		}
	case faultStopMember, faultKillMember:
		m := in.c.members[in.rng.IntN(len(in.c.members))]
		f.Target, f.EtcdOutage = m.Name, true
		err = in.pauseOrKill([]*localcluster.Process{m}, kind == faultKillMember)
		f.Restored = time.Now().UnixNano()
	case faultStopEtcd, faultKillEtcd:
		f.Target, f.EtcdOutage = "all etcd members", true
		procs := in.c.members
		if in.c.embedded {
			// The embedded etcd lives in the server: freezing it freezes both; killing it is
			// faultKillServer.
			procs, f.Target, f.Replica = []*localcluster.Process{in.c.replicas[0].proc}, in.c.replicas[0].proc.Name, 0
		}
		err = in.pauseOrKill(procs, kind == faultKillEtcd)
		f.Restored = time.Now().UnixNano()
	case faultPartition:
		r := in.c.replicas[in.rng.IntN(len(in.c.replicas))]
		f.Target, f.Replica = r.proc.Name+" from etcd", r.index
		if len(r.proxies) == 0 {
			err = fmt.Errorf("%s reaches etcd without a proxy", r.proc.Name)
			break
		}
		for _, px := range r.proxies {
			px.Partition(true)
		}
		time.Sleep(partitionMin + time.Duration(in.rng.Int64N(int64(partitionSpread))))
		for _, px := range r.proxies {
			px.Partition(false)
		}
		f.Restored = time.Now().UnixNano()
	case faultCompact:
		f.Target = "etcd"
		var rev int64
		rev, err = in.compact(ctx)
		f.Note = fmt.Sprintf("compacted at revision %d", rev)
		f.Restored = time.Now().UnixNano()
	default:
		err = fmt.Errorf("unknown fault %q", kind)
	}
	if err == nil && !in.c.embedded && kind != faultKillServer && kind != faultRestart && kind != faultCompact {
		err = in.c.etcd.WaitHealthy(ctx, 2*time.Minute)
	}
	if err == nil {
		for _, r := range in.c.replicas {
			if err = r.waitReady(ctx, 2*time.Minute); err != nil {
				break
			}
		}
	}
	f.Ready = time.Now().UnixNano()
	if err != nil {
		f.Err = err.Error()
	}
	return f
}

// pauseOrKill freezes (SIGSTOP) or kills the processes, waits a seeded while, then thaws or
// starts them again.
func (in *injector) pauseOrKill(procs []*localcluster.Process, kill bool) error {
	for _, p := range procs {
		var err error
		if kill {
			err = p.Stop(syscall.SIGKILL, 10*time.Second)
		} else {
			err = p.Signal(syscall.SIGSTOP)
		}
		if err != nil {
			return err
		}
	}
	time.Sleep(in.down())
	for _, p := range procs {
		var err error
		if kill {
			err = p.Start()
		} else {
			err = p.Signal(syscall.SIGCONT)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// compact compacts etcd at the newest revision the history recorder already has, so that
// watchers of the servers that are behind get "too old" while no history is lost.
func (in *injector) compact(ctx context.Context) (int64, error) {
	rev, err := in.rec.Progress()
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = in.cli.Compact(cctx, rev, clientv3.WithCompactPhysical())
	return rev, err
}
