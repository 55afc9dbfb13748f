package main

import (
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
