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

package main

import (
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/samplecrd/network-apiserver/pkg/apis/samplecrd/v1"
	"github.com/samplecrd/network-apiserver/pkg/generated/clientset/versioned/scheme"
)

func TestObjectCIDRs(t *testing.T) {
	for i, want := range map[int][2]string{
		0: {"10.0.0.0/28", "10.0.0.1"}, 1: {"10.0.0.16/28", "10.0.0.17"}, 16: {"10.0.1.0/28", "10.0.1.1"},
		maxObjects - 1: {"10.255.255.240/28", "10.255.255.241"},
	} {
		if cidr, gw := objectCIDR(i); cidr != want[0] || gw != want[1] {
			t.Errorf("objectCIDR(%d) = %s %s, want %s %s", i, cidr, gw, want[0], want[1])
		}
	}
}

func TestParseHeapAlloc(t *testing.T) {
	got, err := parseHeapAlloc([]byte("heap profile: 1: 2 [3: 4] @ heap/1048576\n\n# runtime.MemStats\n# Alloc = 123\n# HeapAlloc = 4567\n# Sys = 9\n"))
	if err != nil || got != 4567 {
		t.Errorf("parseHeapAlloc = %d, %v", got, err)
	}
}

func TestRequireLoopback(t *testing.T) {
	for _, u := range []string{"https://127.0.0.1:6443", "https://[::1]:443/x", "https://localhost:1"} {
		if err := requireLoopback(u); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"https://10.0.0.1:6443", "https://192.0.2.1", "http://:80"} {
		if err := requireLoopback(u); err == nil {
			t.Errorf("%s accepted", u)
		}
	}
}

func TestContinueToken(t *testing.T) {
	list := &v1.NetworkList{ListMeta: metav1.ListMeta{ResourceVersion: "7", Continue: "next-page"},
		Items: []v1.Network{{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1.NetworkSpec{CIDR: "10.0.0.0/28"}}}}
	for _, accept := range []string{acceptJSON, acceptProtobuf} {
		info, ok := runtime.SerializerInfoForMediaType(scheme.Codecs.SupportedMediaTypes(), accept)
		if !ok {
			t.Fatalf("no serializer for %s", accept)
		}
		body, err := runtime.Encode(scheme.Codecs.EncoderForVersion(info.Serializer, v1.SchemeGroupVersion), list)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := continueToken(body, accept); err != nil || got != "next-page" {
			t.Errorf("%s: continueToken = %q, %v", accept, got, err)
		}
		if n, err := countItems(body, accept); err != nil || n != 1 {
			t.Errorf("%s: countItems = %d, %v", accept, n, err)
		}
	}
}

func TestParseCPUTime(t *testing.T) {
	// A command name with spaces and a parenthesis; utime 250 and stime 50 ticks.
	stat := "4242 (kube apiserver) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 12 0 100 1000 200 18446744073709551615"
	got, err := parseCPUTime(stat)
	if err != nil || got != 3*time.Second {
		t.Errorf("parseCPUTime = %v, %v; want 3s", got, err)
	}
	if _, err := parseCPUTime("garbage"); err == nil {
		t.Error("parseCPUTime accepted a line without a command name")
	}
	before := cpuSample{"etcd": time.Second, "kube-apiserver": 2 * time.Second}
	after := cpuSample{"etcd": 3 * time.Second, "kube-apiserver": 2 * time.Second, "network-apiserver": time.Second}
	per := perOp(before, after, 1000)
	if per["etcd"] != 2 || per["kube-apiserver"] != 0 || len(per) != 2 {
		t.Errorf("perOp = %v, want etcd 2 ms and kube-apiserver 0 per op, network-apiserver (no baseline) left out", per)
	}
	if sum := cpuSum(per, "etcd", "kube-apiserver"); sum == nil || *sum != 2 {
		t.Errorf("cpuSum = %v", sum)
	}
	if sum := cpuSum(per, "network-apiserver"); sum != nil {
		t.Errorf("cpuSum of a missing process = %v, want nil", *sum)
	}
}

func TestParseAgentEvent(t *testing.T) {
	for _, tc := range []struct {
		line    string
		seq     int
		isError bool
	}{
		{`{"type":"MODIFIED","object":{"metadata":{"annotations":{"bench.samplecrd.k8s.io/agent-seq":"42","x":"y"}}}}` + "\n", 42, false},
		{`{"type":"MODIFIED","object":{"metadata":{"annotations":{"bench.samplecrd.k8s.io/seq":"42"}}}}` + "\n", -1, false},
		{`{"type":"ADDED","object":{"metadata":{"annotations":{"bench.samplecrd.k8s.io/agent-seq":"7"}}}}` + "\n", -1, false},
		{`{"type":"MODIFIED","object":{"metadata":{"annotations":{"bench.samplecrd.k8s.io/agent-seq":""}}}}` + "\n", -1, false},
		{`{"type":"ERROR","object":{"kind":"Status","code":410}}` + "\n", -1, true},
	} {
		seq, isError := parseAgentEvent([]byte(tc.line))
		if seq != tc.seq || isError != tc.isError {
			t.Errorf("parseAgentEvent(%s) = %d, %v; want %d, %v", tc.line, seq, isError, tc.seq, tc.isError)
		}
	}
}

func TestCountEstablished(t *testing.T) {
	// Two of ours to port 6443 (0x192B), one in TIME_WAIT (06), one of another process (inode 9),
	// one to another port, and the server's side of a connection (local port 6443).
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:9C40 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 101 1 0 20 4 30 10 -1
   1: 0100007F:9C41 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 102 1 0 20 4 30 10 -1
   2: 0100007F:9C42 0100007F:192B 06 00000000:00000000 00:00000000 00000000     0        0 103 1 0 20 4 30 10 -1
   3: 0100007F:9C43 0100007F:192B 01 00000000:00000000 00:00000000 00000000     0        0 9 1 0 20 4 30 10 -1
   4: 0100007F:9C44 0100007F:0050 01 00000000:00000000 00:00000000 00000000     0        0 104 1 0 20 4 30 10 -1
   5: 0100007F:192B 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 105 1 0 20 4 30 10 -1
`
	ports := map[int]bool{0x9C40: true, 0x9C41: true, 0x9C42: true, 0x9C43: true, 0x9C44: true}
	inodes := map[string]bool{"101": true, "102": true, "103": true, "104": true, "105": true}
	if n := countEstablished(table, ports, 6443, inodes); n != 2 {
		t.Errorf("countEstablished = %d, want 2", n)
	}
}

func TestTenthRates(t *testing.T) {
	var steps []*createResult
	for i := range 20 {
		steps = append(steps, &createResult{Created: 100, Seconds: float64(i + 1)})
	}
	first, last := tenthRates(steps)
	// The first two steps: 200 in 3 s; the last two: 200 in 39 s.
	if first != 200.0/3 || last != 200.0/39 {
		t.Errorf("tenthRates = %v, %v", first, last)
	}
	if first, last := tenthRates(steps[:3]); first != 100 || last != 100.0/3 {
		t.Errorf("tenthRates of 3 steps = %v, %v; want the first and the last step", first, last)
	}
}

func TestParseMetric(t *testing.T) {
	text := []byte("# HELP go_memstats_heap_alloc_bytes x\n# TYPE go_memstats_heap_alloc_bytes gauge\ngo_memstats_heap_alloc_bytes_total 1\ngo_memstats_heap_alloc_bytes 1.2345678e+08\n")
	if v, err := parseMetric(text, "go_memstats_heap_alloc_bytes"); err != nil || v != 123456780 {
		t.Errorf("parseMetric = %d, %v", v, err)
	}
	if _, err := parseMetric(text, "missing"); err == nil {
		t.Error("parseMetric found a metric that is not there")
	}
}

func TestParseFlagsAgentsAndScale(t *testing.T) {
	c, err := parseFlags([]string{"-quick"})
	if err != nil || c.Agents != 50 || c.AgentObjects != 1000 || c.AgentUpdates != 100 || c.scaleMode() {
		t.Errorf("-quick: %+v, %v", c, err)
	}
	if cp := c.checkpoints(); !slices.Contains(cp, c.AgentObjects) {
		t.Errorf("checkpoints %v lack the node agents' size %d", cp, c.AgentObjects)
	}
	if _, err := parseFlags([]string{"-only", "lists"}); err == nil {
		t.Error("-only accepted an unknown workload")
	}
	c, err = parseFlags([]string{"-scale", "20000"})
	if err != nil || !c.scaleMode() || c.ScaleCRD != 20000 || c.ScaleBudgetGiB != 12 {
		t.Errorf("-scale 20000: %+v, %v", c, err)
	}
	if _, err := parseFlags([]string{"-scale", "2000000"}); err == nil {
		t.Error("-scale accepted more objects than 10.0.0.0/8 has /28s")
	}
}

func TestMemoryAfterAgentsBeforeRestart(t *testing.T) {
	for _, tc := range []struct {
		memory          []int
		agents, restart int
		want            bool
	}{
		{[]int{20000, 100000}, 10000, 50000, true}, // the default: memory at 20000 before the restart at 50000
		{[]int{500, 1000}, 1000, 1000, false},      // -quick: memory at 1000 is measured before the agents
		{[]int{20000, 100000}, 50000, 50000, false},
		{[]int{20000, 100000}, 60000, 50000, true}, // memory at 100000, no restart after the agents
		{[]int{20000}, 10000, 20000, true},         // memory at 20000 is measured before that restart
	} {
		c := config{MemorySizes: tc.memory, AgentObjects: tc.agents, RestartObjects: tc.restart}
		if got := c.memoryAfterAgentsBeforeRestart(); got != tc.want {
			t.Errorf("%+v: %v, want %v", tc, got, tc.want)
		}
	}
}
