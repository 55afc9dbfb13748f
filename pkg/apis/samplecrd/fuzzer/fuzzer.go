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

// Package fuzzer holds the randfill functions that produce samplecrd.k8s.io objects for the
// round-trip tests (k8s.io/apimachinery/pkg/api/apitesting/roundtrip).
//
// A plain randfill would already fill every field of the internal types, but only with random
// strings. These functions mix in the values a real server holds (canonical IPv4 and IPv6
// prefixes, defaulted or explicit gateways, prefix lengths, named node entries, a Ready
// condition) so that the round trip also covers realistic objects, while still producing
// arbitrary values: conversion must not depend on validity.
package fuzzer

import (
	"fmt"
	"net/netip"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"github.com/samplecrd/network-apiserver/pkg/apis/samplecrd"
)

// Funcs returns the fuzzer functions for the internal samplecrd.k8s.io types, in the form
// k8s.io/apimachinery/pkg/api/apitesting/fuzzer.FuzzerFuncs expects.
func Funcs(_ runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		fillNetworkSpec,
		fillNetworkStatus,
	}
}

func fillNetworkSpec(s *samplecrd.NetworkSpec, c randfill.Continue) {
	var prefix netip.Prefix
	switch c.Intn(5) {
	case 0:
		// Arbitrary values, valid or not.
		c.FillNoCustom(s)
		return
	case 1:
		prefix = randomPrefix(c, false)
	case 2:
		prefix = randomPrefix(c, true)
	case 3:
		// A request for an allocated prefix: no cidr yet, only a length; and a node selector.
		*s = samplecrd.NetworkSpec{PrefixLength: int32(1 + c.Intn(126))}
		c.Fill(&s.NodeSelector)
		c.Fill(&s.DefaultRoute)
		return
	default:
		*s = samplecrd.NetworkSpec{}
		return
	}
	s.CIDR = prefix.String()
	s.PrefixLength = 0
	if c.Intn(2) == 0 {
		s.PrefixLength = int32(prefix.Bits())
	}
	c.Fill(&s.DefaultRoute)
	if c.Intn(2) == 0 {
		s.NodeSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/os": "linux"}}
	}
	switch c.Intn(3) {
	case 0:
		s.Gateway = ""
	case 1:
		s.Gateway = samplecrd.DefaultGateway(s.CIDR)
	default:
		s.Gateway = c.String(0)
	}
}

// randomPrefix returns a random canonical prefix that leaves room for a gateway.
func randomPrefix(c randfill.Continue, ipv6 bool) netip.Prefix {
	var addr netip.Addr
	var maxBits int
	if ipv6 {
		var b [16]byte
		for i := range b {
			b[i] = byte(c.Intn(256))
		}
		addr, maxBits = netip.AddrFrom16(b), 126
	} else {
		var b [4]byte
		for i := range b {
			b[i] = byte(c.Intn(256))
		}
		addr, maxBits = netip.AddrFrom4(b), 30
	}
	return netip.PrefixFrom(addr, c.Intn(maxBits+1)).Masked()
}

func fillNetworkStatus(s *samplecrd.NetworkStatus, c randfill.Continue) {
	c.FillNoCustom(s)
	// A node entry per node, as the node controllers write them.
	for i := range s.Nodes {
		if c.Intn(2) == 0 {
			node := &s.Nodes[i]
			node.NodeName = fmt.Sprintf("node-%d", i)
			// The segment's fields as an agent reports them: blocks, underlay, a known or
			// unknown (nil) lease count, zero included.
			node.UnderlayAddress = fmt.Sprintf("192.168.77.%d", 1+i%250)
			node.Blocks = []string{fmt.Sprintf("10.66.%d.0/26", i%256), fmt.Sprintf("10.66.%d.64/27", i%256)}
			node.MTU = 1450
			node.IPAMMode = samplecrd.IPAMModeBlocks
			node.LeaseReclaim = []string{"", samplecrd.LeaseReclaimContainerRuntime, "Off: no container runtime endpoint"}[c.Intn(3)]
			node.Leases = nil
			if c.Intn(2) == 0 {
				leases := int32(c.Intn(3))
				node.Leases = &leases
			}
		}
	}
	if c.Intn(2) == 0 {
		return
	}
	statuses := []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}
	ready := metav1.Condition{
		Type:               samplecrd.ConditionReady,
		Status:             statuses[c.Intn(len(statuses))],
		ObservedGeneration: s.ObservedGeneration,
		Reason:             "Realised",
		Message:            c.String(0),
	}
	c.Fill(&ready.LastTransitionTime)
	s.Conditions = append(s.Conditions, ready)
}
