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

// Command forward makes a local cluster's control plane, which runs in a network namespace of its
// own (hack/local-up-nodes.sh), reachable on this host's loopback without touching the host's
// interfaces or routes: it listens on the host's side and dials, for every connection, the same
// address inside the namespace.
//
//	forward -netns /proc/1234/ns/net 127.0.0.1:16443 127.0.0.1:32379
package main

import (
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"runtime"
	"sync"

	"golang.org/x/sys/unix"
)

func main() {
	netns := flag.String("netns", "", "the network namespace to dial into, e.g. /proc/PID/ns/net")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: %s -netns PATH HOST:PORT...\n", os.Args[0])
		flag.PrintDefaults()
	}
	flag.Parse()
	if *netns == "" || flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	// Held open, so that the namespace is the same one for the forwarder's whole life.
	ns, err := os.Open(*netns)
	if err != nil {
		log.Fatal(err)
	}
	var lns []net.Listener
	for _, addr := range flag.Args() {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			log.Fatal(err)
		}
		lns = append(lns, ln)
	}
	var wg sync.WaitGroup
	for _, ln := range lns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(ln, int(ns.Fd()))
		}()
	}
	log.Printf("forwarding %v into %s", flag.Args(), *netns)
	wg.Wait()
}

func serve(ln net.Listener, ns int) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go func() {
			defer c.Close()
			d, err := dialIn(ns, ln.Addr().String())
			if err != nil {
				log.Printf("%s: %v", ln.Addr(), err)
				return
			}
			defer d.Close()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(d, c)
				_ = d.(*net.TCPConn).CloseWrite()
				close(done)
			}()
			_, _ = io.Copy(c, d)
			_ = c.(*net.TCPConn).CloseWrite()
			<-done
		}()
	}
}

// dialIn connects to addr from inside the namespace ns. The socket is made on a thread that has
// entered ns, and keeps that namespace for its whole life; the thread is never given back to
// other goroutines (it ends with this one, still locked).
func dialIn(ns int, addr string) (net.Conn, error) {
	type result struct {
		c   net.Conn
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
			ch <- result{nil, fmt.Errorf("setns: %w", err)}
			return
		}
		c, err := net.Dial("tcp", addr)
		ch <- result{c, err}
	}()
	r := <-ch
	return r.c, r.err
}
