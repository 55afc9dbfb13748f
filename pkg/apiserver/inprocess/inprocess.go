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

// Package inprocess serves the server's own handler to the clients that run in the same process
// (the in-process controller, the node lifecycle loop) over unix socket pairs with unencrypted
// HTTP/2, instead of TLS over a TCP connection to the secure port. The requests go through the
// same handler chain, with the same loopback token, as on the secure port; only the transport
// is cheaper: a profile of 1000 Networks created at once had TLS at 6.6% of the server's CPU,
// all of it between the server and itself. A socket pair has no address: nothing outside the
// process can connect to it.
package inprocess

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/rest"
)

// Host is the host of the in-process client configurations' URLs; it names no network address.
const Host = "http://network-apiserver.in-process"

// Server serves one handler to in-process clients.
type Server struct {
	srv      *http.Server
	l        *listener
	served   chan struct{}
	handlers handlers
	closeErr error
	once     sync.Once
}

// handlersGrace bounds how long Close waits for the handlers of the requests it ended.
var handlersGrace = 30 * time.Second

// Serve starts serving h. Close stops it.
func Serve(h http.Handler) *Server {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	s := &Server{
		l:      newListener(),
		served: make(chan struct{}),
	}
	s.srv = &http.Server{
		// Counted, so that Close can wait for them: http.Server.Close closes the connections
		// but returns before their handlers have seen their requests end.
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if !s.handlers.start() {
				http.Error(w, errClosed.Error(), http.StatusServiceUnavailable)
				return
			}
			defer s.handlers.done()
			h.ServeHTTP(w, r)
		}),
		Protocols:         &protocols,
		ReadHeaderTimeout: 32 * time.Second,
		MaxHeaderBytes:    1 << 20,
	}
	go func() {
		defer close(s.served)
		_ = s.srv.Serve(s.l)
	}()
	return s
}

// ClientConfig returns a copy of loopback (the server's loopback client configuration, which
// carries its token) that reaches the server through s.
func (s *Server) ClientConfig(loopback *rest.Config) *rest.Config {
	c := rest.CopyConfig(loopback)
	c.Host = Host
	c.TLSClientConfig = rest.TLSClientConfig{}
	c.Dial = nil
	c.Proxy = nil
	c.Transport = s.Transport()
	return c
}

// Transport returns an HTTP/2 transport whose every connection is a new socket pair to s.
func (s *Server) Transport() *http.Transport {
	var protocols http.Protocols
	protocols.SetUnencryptedHTTP2(true)
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return s.l.dial(ctx) },
		Protocols:   &protocols,
		// Pings find a connection whose other end stopped reading, as client-go's own transport
		// does for HTTP/2.
		HTTP2: &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 15 * time.Second},
		// The server's one handler takes every request; more connections only when the
		// streams of one are used up.
		MaxIdleConnsPerHost: 2,
		IdleConnTimeout:     90 * time.Second,
	}
}

// Close stops accepting connections and closes those open, which ends their requests and
// watches. It waits for the serving goroutine and for the handlers of the ended requests to
// return (for at most handlersGrace: a handler that ignores its request's end is reported, not
// waited for forever).
func (s *Server) Close() error {
	s.once.Do(func() {
		s.closeErr = s.srv.Close()
		<-s.served
		select {
		case <-s.handlers.close():
		case <-time.After(handlersGrace):
			s.closeErr = errors.Join(s.closeErr, fmt.Errorf("in-process handlers still running %v after Close", handlersGrace))
		}
	})
	return s.closeErr
}

// handlers counts the running handlers; once closed, it starts none.
type handlers struct {
	mu       sync.Mutex
	running  int
	closed   bool
	returned chan struct{} // closed when closed and none is running
}

func (c *handlers) start() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.running++
	return true
}

func (c *handlers) done() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running--
	if c.closed && c.running == 0 {
		close(c.returned)
	}
}

// close starts no more handlers and returns a channel closed when none is running.
func (c *handlers) close() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.returned = make(chan struct{})
	if c.running == 0 {
		close(c.returned)
	}
	return c.returned
}

// errClosed is returned by dials and Accept after Close.
var errClosed = errors.New("in-process server closed")

// listener hands the server ends of the socket pairs that dial makes to http.Server.
type listener struct {
	conns     chan net.Conn
	done      chan struct{}
	closeOnce sync.Once
}

func newListener() *listener {
	return &listener{conns: make(chan net.Conn), done: make(chan struct{})}
}

func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, errClosed
	}
}

func (l *listener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return nil
}

func (l *listener) Addr() net.Addr { return addr{} }

// dial makes a connected socket pair and hands one end to Accept.
func (l *listener) dial(ctx context.Context) (net.Conn, error) {
	select {
	case <-l.done:
		return nil, errClosed
	default:
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	client, err := fileConn(fds[0], "in-process-client")
	if err != nil {
		_ = unix.Close(fds[1])
		return nil, err
	}
	server, err := fileConn(fds[1], "in-process-server")
	if err != nil {
		_ = client.Close()
		return nil, err
	}
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		err = errClosed
	case <-ctx.Done():
		err = ctx.Err()
	}
	_ = server.Close()
	_ = client.Close()
	return nil, err
}

// fileConn turns fd into a net.Conn (which holds a duplicate) and closes fd.
func fileConn(fd int, name string) (net.Conn, error) {
	f := os.NewFile(uintptr(fd), name)
	defer func() { _ = f.Close() }()
	return net.FileConn(f)
}

type addr struct{}

func (addr) Network() string { return "unix" }
func (addr) String() string  { return "in-process" }
