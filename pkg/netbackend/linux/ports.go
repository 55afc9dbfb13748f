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
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

func (b *Backend) remember(key, name string, index int) {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	b.names[name] = key
	if index > 0 {
		b.indexes[index] = key
	}
}

// rememberSegment records name as key's VXLAN device, so that Watch notices it deleted or
// taken.
func (b *Backend) rememberSegment(key, name string) {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	b.names[name] = key
}

func (b *Backend) forget(key string) {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	delete(b.names, netbackend.BridgeName(key))
	delete(b.names, netbackend.SegmentDeviceName(key))
	for i, k := range b.indexes {
		if k == key {
			delete(b.indexes, i)
		}
	}
	b.setPortsLocked(key, nil)
	delete(b.settled, key)
	delete(b.ensuring, key)
}

// setPortsLocked replaces what is remembered of key's ports. knownMu must be held.
func (b *Backend) setPortsLocked(key string, ports map[int]string) {
	for i := range b.ports[key] {
		if b.portKeys[i] == key {
			delete(b.portKeys, i)
		}
	}
	if len(ports) == 0 {
		delete(b.ports, key)
		return
	}
	b.ports[key] = ports
	for i := range ports {
		b.portKeys[i] = key
	}
}

// rememberPorts records ports as key's, in addition to what is remembered.
func (b *Backend) rememberPorts(key string, ports map[int]string) {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	merged := map[int]string{}
	for i, n := range b.ports[key] {
		merged[i] = n
	}
	for i, n := range ports {
		merged[i] = n
	}
	b.setPortsLocked(key, merged)
}

// rememberedPorts returns a copy of what is remembered of key's ports.
func (b *Backend) rememberedPorts(key string) map[int]string {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	out := map[int]string{}
	for i, n := range b.ports[key] {
		out[i] = n
	}
	return out
}

// portsOf returns the ports of the bridge with index bridge (index -> name), from links: the
// pods' veths. Our own VXLAN device is a port but not a pod, and is left out.
func portsOf(links []netlink.Link, bridge int) map[int]string {
	ports := map[int]string{}
	for _, l := range links {
		if _, segment := isSegmentLink(l); segment {
			continue
		}
		if a := l.Attrs(); a.MasterIndex == bridge && a.Index != bridge {
			ports[a.Index] = a.Name
		}
	}
	return ports
}

// sortedNames returns the names of ports, sorted.
func sortedNames(ports map[int]string) []string {
	names := make([]string, 0, len(ports))
	for _, n := range ports {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// attachedPorts returns the names of the ports of link (nil: none yet) and of the remembered
// ports of key that exist without a master (to be attached again): the pods on the bridge.
func (b *Backend) attachedPorts(link netlink.Link, key string) ([]string, error) {
	ports := map[int]string{}
	if link != nil {
		links, err := b.portLinks(link.Attrs().Index)
		if err != nil {
			return nil, err
		}
		ports = portsOf(links, link.Attrs().Index)
	}
	for i, n := range b.rememberedPorts(key) {
		if _, ok := ports[i]; ok {
			continue
		}
		l, err := b.linkByIndex(i)
		if err != nil {
			return nil, err
		}
		if l != nil && l.Attrs().Name == n && l.Attrs().MasterIndex == 0 {
			ports[i] = n
		}
	}
	return sortedNames(ports), nil
}

// ensurePorts attaches again the ports key's bridge had and lost (the bridge was deleted and
// recreated, or a port was detached by hand): each remembered port that still exists with its
// name and has no master is made a port again, with hairpin mode as the configuration asks.
// A remembered port now enslaved elsewhere is ReasonPortsDetached: its pod is cut off. It
// returns the changes and the names of the bridge's ports afterwards.
//
// A bridge this Ensure created (fresh) has no ports yet, so the kernel is not asked for them:
// the dump walks every link of the namespace, a cost per new Network that grows with the
// Networks on the node. A port a runtime attaches meanwhile is told by its link notification.
func (b *Backend) ensurePorts(link netlink.Link, key string, fresh bool) ([]string, []string, error) {
	name, index := link.Attrs().Name, link.Attrs().Index
	var links []netlink.Link
	if !fresh {
		var err error
		if links, err = b.portLinks(index); err != nil {
			return nil, nil, fail(err, "listing the ports of bridge %s", name)
		}
	}
	current := portsOf(links, index)
	attached := maps.Clone(current)
	var changes, detached []string
	var failure error
	for i, portName := range b.rememberedPorts(key) {
		if _, ok := current[i]; ok {
			continue
		}
		port, err := b.linkByIndex(i)
		if err != nil {
			failure = fail(err, "looking up port %s of bridge %s", portName, name)
			current[i] = portName
			continue
		}
		if port == nil || port.Attrs().Name != portName {
			continue // gone (the pod was deleted): forgotten below
		}
		if port.Attrs().MasterIndex != 0 {
			detached = append(detached, portName)
			current[i] = portName // still remembered: it may come back
			continue
		}
		if err := b.nl().LinkSetMaster(port, link); err != nil {
			if errors.Is(err, unix.ENODEV) {
				continue
			}
			failure = fail(err, "attaching port %s to bridge %s again", portName, name)
			current[i] = portName
			continue
		}
		if err := b.nl().LinkSetHairpin(port, true); err != nil && !errors.Is(err, unix.ENODEV) {
			failure = fail(err, "setting hairpin mode on port %s of bridge %s", portName, name)
		}
		current[i], attached[i] = portName, portName
		changes = append(changes, fmt.Sprintf("attached port %s to %s again", portName, name))
	}
	b.knownMu.Lock()
	b.setPortsLocked(key, current)
	b.knownMu.Unlock()
	slices.Sort(changes)
	if failure != nil {
		return changes, sortedNames(attached), failure
	}
	if len(detached) > 0 {
		slices.Sort(detached)
		return changes, sortedNames(attached), netbackend.Errorf(netbackend.ReasonPortsDetached,
			"ports %s of bridge %s (network %s) are attached to another master; their pods are cut off from the network",
			strings.Join(detached, ", "), name, key)
	}
	return changes, sortedNames(attached), nil
}
