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
	"errors"
	"io"
	"net"
	"sync"
)

// tcpProxy forwards every TCP connection made to its listener to one etcd member, so that the
// suite can cut a replica off etcd. While it is partitioned, no byte passes in either direction
// and no connection is closed: what the two ends send waits (in the proxy's one buffer per
// direction and then in the kernel's socket buffers, so the senders stall), as a network that
// drops packets makes TCP retransmit them; when it heals, the streams go on where they stopped.
// A proxy that discarded the bytes instead would break every TLS stream at the heal (a record
// would go missing), which a real partition shorter than TCP's retransmission timeout does not.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu          sync.Mutex
	healed      *sync.Cond
	partitioned bool
	closed      bool
	conns       map[net.Conn]struct{}
	wg          sync.WaitGroup
}

// newTCPProxy listens on a free loopback port and forwards to target (host:port).
func newTCPProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.healed = sync.NewCond(&p.mu)
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the proxy's host:port.
func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

// Partition stops (true) or resumes (false) every byte through the proxy.
func (p *tcpProxy) Partition(on bool) {
	p.mu.Lock()
	p.partitioned = on
	p.healed.Broadcast()
	p.mu.Unlock()
}

// Close stops listening and closes every connection.
func (p *tcpProxy) Close() {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.healed.Broadcast()
	p.mu.Unlock()
	_ = p.ln.Close()
	p.wg.Wait()
}

func (p *tcpProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *tcpProxy) forget(cs ...net.Conn) {
	p.mu.Lock()
	for _, c := range cs {
		_ = c.Close()
		delete(p.conns, c)
	}
	p.mu.Unlock()
}

func (p *tcpProxy) serve() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if !p.track(client) {
			return
		}
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			// The dial itself is not held: a partitioned member's TLS handshake is.
			server, err := net.Dial("tcp", p.target)
			if err != nil || !p.track(server) {
				p.forget(client)
				return
			}
			done := make(chan struct{}, 2)
			go func() { p.pump(server, client); done <- struct{}{} }()
			go func() { p.pump(client, server); done <- struct{}{} }()
			<-done // one side ended: end both
			p.forget(client, server)
			<-done
		}()
	}
}

// pump copies src to dst, holding every chunk, and the end of the stream, while the proxy is
// partitioned.
func (p *tcpProxy) pump(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if !p.waitHealed() {
			return
		}
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// waitHealed waits while the proxy is partitioned; false when it was closed.
func (p *tcpProxy) waitHealed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.partitioned && !p.closed {
		p.healed.Wait()
	}
	return !p.closed
}
