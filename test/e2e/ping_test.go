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

package e2e

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/samplecrd/network-apiserver/pkg/netbackend/netnstest"
)

// pinger sends ICMP echo requests from a pod's network namespace to one address at a fixed
// interval and records which were answered: a continuous ping, measured in Go (a raw socket
// opened in the pod's namespace stays there, so no thread of the test has to stay in it).
type pinger struct {
	what     string
	conn     *icmp.PacketConn
	dst      *net.IPAddr
	v6       bool
	id       int
	interval time.Duration

	mu    sync.Mutex
	sent  []time.Time
	reply map[int]bool

	stopc   chan struct{}
	stopped time.Time
	done    sync.WaitGroup
}

var pingID = os.Getpid() & 0x7fff

// startPing pings dst from the namespace at nsPath every interval until stop.
func startPing(t *testing.T, what, nsPath string, dst netip.Addr, interval time.Duration) *pinger {
	t.Helper()
	pingID++
	p := &pinger{what: what, dst: &net.IPAddr{IP: dst.AsSlice()}, v6: dst.Is6(), id: pingID & 0xffff,
		interval: interval, reply: map[int]bool{}, stopc: make(chan struct{})}
	err := netnstest.InNS(nsPath, func() (err error) {
		if p.v6 {
			p.conn, err = icmp.ListenPacket("ip6:ipv6-icmp", "::")
		} else {
			p.conn, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		}
		return err
	})
	if err != nil {
		t.Fatalf("%s: opening an ICMP socket in %s: %v", what, nsPath, err)
	}
	p.done.Add(2)
	go p.receive()
	go p.send()
	t.Cleanup(func() { p.stop() })
	return p
}

func (p *pinger) send() {
	defer p.done.Done()
	tick := time.NewTicker(p.interval)
	defer tick.Stop()
	for seq := 0; ; seq++ {
		var typ icmp.Type = ipv4.ICMPTypeEcho
		if p.v6 {
			typ = ipv6.ICMPTypeEchoRequest
		}
		msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: p.id, Seq: seq & 0xffff, Data: []byte("network-apiserver e2e")}}
		b, err := msg.Marshal(nil) // the kernel fills in the ICMPv6 checksum
		if err != nil {
			panic(err)
		}
		p.mu.Lock()
		p.sent = append(p.sent, time.Now())
		p.mu.Unlock()
		_, _ = p.conn.WriteTo(b, p.dst) // a send error (no route meanwhile) is a lost ping
		select {
		case <-p.stopc:
			return
		case <-tick.C:
		}
	}
}

func (p *pinger) receive() {
	defer p.done.Done()
	proto := 1
	if p.v6 {
		proto = 58
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := p.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || (m.Type != ipv4.ICMPTypeEchoReply && m.Type != ipv6.ICMPTypeEchoReply) {
			continue
		}
		echo, ok := m.Body.(*icmp.Echo)
		if !ok || echo.ID != p.id || from.String() != p.dst.String() {
			continue
		}
		p.mu.Lock()
		// Seq wraps at 65536; at most a few thousand are sent per pinger.
		p.reply[echo.Seq] = true
		p.mu.Unlock()
	}
}

// pingStats is what a continuous ping measured.
type pingStats struct {
	Sent, Lost int
	// Outage is the longest stretch of consecutive lost pings, in time.
	Outage time.Duration
	// LastOK tells whether the last pings (the final second) were all answered.
	LastOK bool
}

func (s pingStats) String() string {
	return fmt.Sprintf("%d sent, %d lost, longest outage %v", s.Sent, s.Lost, s.Outage)
}

// halt stops sending. It is idempotent.
func (p *pinger) halt() {
	select {
	case <-p.stopc:
	default:
		p.stopped = time.Now()
		close(p.stopc)
	}
}

// close stops sending and receiving at once, without stop's wait for the last answer (for a
// caller that has seen the answers it needed). stop after it returns at once.
func (p *pinger) close() {
	p.halt()
	_ = p.conn.Close()
	p.done.Wait()
}

// stop stops sending, gives the last request a second to be answered (a ping's timeout, not
// synchronisation) and returns what was measured. It is idempotent.
func (p *pinger) stop() pingStats {
	p.halt()
	time.Sleep(time.Until(p.stopped.Add(time.Second)))
	_ = p.conn.Close()
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	s := pingStats{Sent: len(p.sent), LastOK: true}
	var runStart time.Time
	for seq, at := range p.sent {
		if p.reply[seq&0xffff] {
			if !runStart.IsZero() {
				s.Outage = max(s.Outage, at.Sub(runStart))
				runStart = time.Time{}
			}
			continue
		}
		s.Lost++
		if runStart.IsZero() {
			runStart = at
		}
		if at.After(p.sent[len(p.sent)-1].Add(-time.Second)) {
			s.LastOK = false
		}
	}
	if !runStart.IsZero() {
		s.Outage = max(s.Outage, p.sent[len(p.sent)-1].Sub(runStart)+p.interval)
	}
	return s
}
