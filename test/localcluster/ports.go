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

package localcluster

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Ports are picked below the kernel's ephemeral range (net.ipv4.ip_local_port_range), from which
// it chooses the local port of every outgoing connection. A port from inside that range, checked
// free and handed to a process that binds it a moment later, can meanwhile become the local end of
// some client's connection (a kube-apiserver dialling its etcd, a test's client): the process then
// fails with "address already in use". Below the range only an explicit bind takes a port.
const (
	portLow  = 20000
	portHigh = 32000 // below local-up-cluster's default ETCD_PORT 32379
)

var (
	portsMu   sync.Mutex
	handedOut = map[int]bool{} // never handed out twice by this process
)

// FreePorts returns n distinct free loopback ports, not necessarily consecutive.
func FreePorts(n int) ([]int, error) {
	ports := make([]int, n)
	for i := range ports {
		p, err := FreeRange(1)
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	return ports, nil
}

// FreeRange returns the first of n consecutive free loopback ports, for scripts that number their
// ports from a base (replica i on NETWORK_APISERVER_PORT+i).
func FreeRange(n int) (int, error) {
	low, high, err := portWindow()
	if err != nil {
		return 0, err
	}
	if n < 1 || n > high-low {
		return 0, fmt.Errorf("%d consecutive ports: the window %d-%d holds %d", n, low, high-1, high-low)
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 200 {
		base := low + rand.IntN(high-low-n+1)
		if rangeFree(base, n) {
			for p := base; p < base+n; p++ {
				handedOut[p] = true
			}
			return base, nil
		}
	}
	return 0, fmt.Errorf("no %d consecutive free loopback ports in %d-%d after 200 tries", n, low, high-1)
}

// rangeFree binds every port of base..base+n-1 on 127.0.0.1 (and closes them again), so that a
// port some other process already listens on is not picked.
func rangeFree(base, n int) bool {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for p := base; p < base+n; p++ {
		if handedOut[p] {
			return false
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
		if err != nil {
			return false
		}
		ls = append(ls, l)
	}
	return true
}

// portWindow is [portLow, portHigh) cut below the ephemeral range's start.
func portWindow() (int, int, error) {
	low, high := portLow, portHigh
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return low, high, nil // not Linux: keep the window
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, fmt.Errorf("ip_local_port_range %q: want two ports", b)
	}
	ephemeral, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, 0, fmt.Errorf("ip_local_port_range %q: %v", b, err)
	}
	high = min(high, ephemeral)
	if high-low < 1000 {
		return 0, 0, fmt.Errorf("the ephemeral range starts at %d: fewer than 1000 ports left below it from %d for tests", ephemeral, low)
	}
	return low, high, nil
}
