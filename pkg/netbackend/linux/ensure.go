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
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// Observe implements netbackend.Backend. An interface or file with our name that is not ours
// is not reported (Ensure reports it).
func (b *Backend) Observe(_ context.Context, key string) (*netbackend.Actual, error) {
	if key == "" {
		return nil, netbackend.Errorf(netbackend.ReasonBackendError, "network key is empty")
	}
	b.mu.RLock()
	defer b.mu.RUnlock()
	defer b.keys.lock(key)()
	name := netbackend.BridgeName(key)
	var actual *netbackend.Actual
	link, err := b.linkByName(name)
	if err != nil {
		return nil, fail(err, "looking up bridge %s of network %s", name, key)
	}
	if link != nil && isOurs(link, key) {
		addrs, err := b.bridgeAddrs(link)
		if err != nil {
			return nil, fail(err, "listing the addresses of bridge %s", name)
		}
		a := link.Attrs()
		links, err := b.portLinks(a.Index)
		if err != nil {
			return nil, fail(err, "listing the ports of bridge %s", name)
		}
		ports := portsOf(links, a.Index)
		actual = &netbackend.Actual{Key: key, Bridge: name, Addresses: addrs, Up: a.Flags&net.FlagUp != 0, MTU: a.MTU,
			Ports: sortedNames(ports)}
		b.remember(key, name, a.Index)
		b.rememberPorts(key, ports)
	}
	bridgeIndex := 0
	if actual != nil {
		bridgeIndex = link.Attrs().Index
	}
	segment, err := b.segmentState(key, bridgeIndex)
	if err != nil {
		return nil, fail(err, "looking at the VXLAN device of network %s", key)
	}
	if segment != nil {
		if actual == nil {
			actual = &netbackend.Actual{Key: key}
		}
		actual.Segment = segment
	}
	content, state, err := readConfig(b.cfg.CNIConfDir, key)
	if err != nil {
		return nil, fail(err, "reading the CNI configuration of network %s", key)
	}
	if state == confOurs {
		if actual == nil {
			actual = &netbackend.Actual{Key: key}
		}
		actual.CNIConfig = content
	}
	leases, dir, err := b.leases(key)
	if err != nil {
		return nil, fail(err, "reading host-local's leases of network %s", key)
	}
	if dir && actual == nil {
		actual = &netbackend.Actual{Key: key} // only host-local's directory is left: Remove cleans it
	}
	if actual != nil {
		actual.Leases = leases
	}
	return actual, nil
}

// Ensure implements netbackend.Backend. It first checks that neither the bridge name nor the
// configuration file is taken by something not ours, then creates or repairs the bridge
// (stale addresses removed before the gateway is added, MTU, up) and rewrites the configuration
// when its content differs, and last attaches lost ports again, whose link list gives the
// bridge's ports in the Outcome. On an error it returns the changes made so far with it.
func (b *Backend) Ensure(_ context.Context, d netbackend.Desired) ([]string, netbackend.Outcome, error) {
	if err := validate(d); err != nil {
		return nil, netbackend.Outcome{}, err
	}
	mtu := d.EffectiveMTU()
	name := netbackend.BridgeName(d.Key)
	confPath := ConfPath(b.cfg.CNIConfDir, d.Key)

	b.mu.RLock()
	defer b.mu.RUnlock()
	defer b.keys.lock(d.Key)()
	if d.Segment == nil {
		b.beginEnsure(d.Key)
	}
	var listOnly bool
	changes, outcome, err := b.ensureLocked(d, mtu, name, confPath, &listOnly)
	b.endEnsure(d, err == nil, len(changes) > 0, listOnly)
	return changes, outcome, err
}

// ensureLocked is Ensure's work. It sets listOnly when it left the bridge to a pod's first ADD
// (Config.BridgeOnAttach). The caller holds b.mu and d.Key's lock.
func (b *Backend) ensureLocked(d netbackend.Desired, mtu int, name, confPath string, listOnly *bool) ([]string, netbackend.Outcome, error) {
	link, err := b.linkByName(name)
	if err != nil {
		return nil, netbackend.Outcome{}, fail(err, "looking up bridge %s of network %s", name, d.Key)
	}
	if b.cfg.BridgeOnAttach && link != nil && isOurs(link, d.Key) && link.Attrs().Flags&net.FlagUp == 0 {
		// A bridge of ours that is down may be one our plugin is making (attach.go): wait for
		// it, and keep it from starting another while this finishes or repairs the bridge.
		unlock, err := lockDir(b.cfg.CNIConfDir)
		if err != nil {
			return nil, netbackend.Outcome{}, fail(err, "taking the lock of %s", b.cfg.CNIConfDir)
		}
		defer unlock()
		if link, err = b.linkByName(name); err != nil {
			return nil, netbackend.Outcome{}, fail(err, "looking up bridge %s of network %s", name, d.Key)
		}
	}
	var reclaimed []string
	if link != nil && isOurs(link, d.Key) && link.Attrs().Group == DeleteGroup {
		// Marked for deletion by a Remove that did not finish (a crash, a failed delete): the
		// next batch of other Networks' Removes would take it.
		if link, err = b.reclaimFromDeleteGroup(link); err != nil {
			return nil, netbackend.Outcome{}, fail(err, "taking bridge %s of network %s out of link group %d, where an unfinished removal left it", name, d.Key, DeleteGroup)
		}
		if link != nil {
			reclaimed = append(reclaimed, fmt.Sprintf("took %s out of link group %d, where an unfinished removal left it", name, DeleteGroup))
		}
	}
	existing, state, err := readConfig(b.cfg.CNIConfDir, d.Key)
	if err != nil {
		return nil, netbackend.Outcome{}, fail(err, "reading the CNI configuration of network %s", d.Key)
	}
	if state == confForeign {
		return nil, netbackend.Outcome{}, netbackend.Errorf(netbackend.ReasonNotOurs,
			"CNI configuration %s exists and does not record network %s in %q; leaving it alone", confPath, d.Key, KeyField)
	}
	created := (link == nil || !isOurs(link, d.Key)) && state != confOurs
	// A new gateway waits while pods are attached: each has the configured one as its default
	// route (from its CNI ADD), and moving the address off the bridge would cut them off.
	var blocked error
	if old, ok := configuredGateway(existing); state == confOurs && ok && old != d.Gateway && d.Prefix.Contains(old) {
		attached, err := b.attachedPorts(link, d.Key)
		if err != nil {
			return nil, netbackend.Outcome{}, fail(err, "listing links")
		}
		if len(attached) > 0 {
			blocked = netbackend.Errorf(netbackend.ReasonGatewayChangeBlocked,
				"gateway of network %s moves from %s to %s, but %d pod(s) attached to bridge %s (%s) have %s as their default route; the node keeps %s until they are detached",
				d.Key, old, d.Gateway, len(attached), name, strings.Join(attached, ", "), old, old)
			d.Gateway = old
		}
	}
	adopt := false
	if link != nil && !isOurs(link, d.Key) {
		if adopt, err = b.adoptable(link, d); err != nil {
			return nil, netbackend.Outcome{}, fail(err, "listing the addresses of %s", name)
		} else if !adopt {
			return nil, netbackend.Outcome{}, b.notOurs(link, d.Key)
		}
	}

	// The bridge's MAC: the one the configuration records (what the pods' neighbour entries and
	// CNI results hold), restored after a repair or a change by hand. An adopted bridge keeps the
	// MAC the pods attached to it already know, as does a bridge of ours from before MACs were
	// recorded; a new bridge gets netbackend.BridgeMAC. Either is then recorded.
	mac, recorded := recordedMAC(existing)
	pin := false
	if link != nil && len(link.Attrs().HardwareAddr) == 6 &&
		(adopt || (!recorded && !bytes.Equal(link.Attrs().HardwareAddr, netbackend.BridgeMAC(d.Key)))) {
		mac, pin = slices.Clone(link.Attrs().HardwareAddr), true
	} else if !recorded {
		mac = netbackend.BridgeMAC(d.Key)
	}
	var attach *attachConf
	if b.cfg.BridgeOnAttach {
		c := newAttachConf(d, b.cfg.IPAMDataDir, b.cfg.CNIConfDir, mac)
		attach = &c
	}
	conf, err := renderConfig(d, b.cfg.IPAMDataDir, mac, attach)
	if err != nil {
		return nil, netbackend.Outcome{}, netbackend.Errorf(netbackend.ReasonBackendError, "%v", err)
	}

	changes := reclaimed
	if adopt {
		if err := b.nl().LinkSetAlias(link, Alias(d.Key)); err != nil {
			return nil, netbackend.Outcome{}, fail(err, "marking bridge %s as network %s's", name, d.Key)
		}
		changes = append(changes, fmt.Sprintf("%s%s: it had no alias and exactly the gateway %s, as the CNI bridge plugin creates it; marked it with alias %q",
			netbackend.AdoptedPrefix, name, netip.PrefixFrom(d.Gateway, d.Prefix.Bits()), Alias(d.Key)))
		if link, err = b.linkByName(name); err == nil && link == nil {
			err = errors.New("it vanished")
		}
		if err != nil {
			return changes, netbackend.Outcome{}, fail(err, "looking up adopted bridge %s", name)
		}
	}
	if b.cfg.BridgeOnAttach && link == nil && len(b.rememberedPorts(d.Key)) == 0 {
		// No pod has used the Network here: the list alone, our plugin makes the bridge in the
		// first ADD (attach.go).
		*listOnly = true
		written, err := b.writeConfig(confPath, existing, conf, state)
		return append(changes, written...), netbackend.Outcome{Created: created, AwaitsAttach: true}, errors.Join(err, blocked)
	}
	fresh := link == nil
	if fresh {
		var made []string
		link, made, err = b.createBridge(name, d.Key, mtu, mac)
		changes = append(changes, made...)
		if err != nil {
			return changes, netbackend.Outcome{}, err
		}
	}
	attrs := link.Attrs()
	b.remember(d.Key, name, attrs.Index)

	configured, err := b.configureBridge(link, d, mtu, mac, pin)
	changes = append(changes, configured...)
	if err != nil {
		return changes, netbackend.Outcome{}, err
	}
	up, err := b.bridgeUp(link, d)
	changes = append(changes, up...)
	if err != nil {
		return changes, netbackend.Outcome{}, err
	}
	written, err := b.writeConfig(confPath, existing, conf, state)
	changes = append(changes, written...)
	if err != nil {
		return changes, netbackend.Outcome{}, err
	}
	portChanges, ports, err := b.ensurePorts(link, d.Key, fresh)
	changes = append(changes, portChanges...)
	segmentChanges, segmentErr := b.ensureSegment(link, d, mtu, mac)
	changes = append(changes, segmentChanges...)
	if err == nil {
		err = segmentErr
	}
	if err == nil {
		err = blocked
	}
	return changes, netbackend.Outcome{Created: created, Ports: ports}, err
}

// configureBridge gives link, d's bridge, the MAC mac (pin: one it had, kept, which the changes
// say), the gateway, the MTU and, before it goes up, what a segment needs of it.
func (b *Backend) configureBridge(link netlink.Link, d netbackend.Desired, mtu int, mac net.HardwareAddr, pin bool) ([]string, error) {
	attrs := link.Attrs()
	name := attrs.Name
	var changes []string
	if pin || !bytes.Equal(attrs.HardwareAddr, mac) {
		// Set explicitly, a bridge's MAC no longer follows its ports.
		if err := b.nl().LinkSetHardwareAddr(link, mac); err != nil {
			return changes, fail(err, "setting the MAC of bridge %s to %s", name, mac)
		}
		if pin {
			changes = append(changes, fmt.Sprintf("fixed MAC of %s at %s, the one its pods know", name, mac))
		} else {
			changes = append(changes, fmt.Sprintf("set MAC of %s from %s to %s", name, attrs.HardwareAddr, mac))
		}
	}

	addrChanges, err := b.ensureAddress(link, d)
	changes = append(changes, addrChanges...)
	if err != nil {
		return changes, err
	}
	if attrs.MTU != mtu {
		if err := b.nl().LinkSetMTU(link, mtu); err != nil {
			return changes, fail(err, "setting the MTU of bridge %s to %d", name, mtu)
		}
		changes = append(changes, fmt.Sprintf("set MTU of %s from %d to %d", name, attrs.MTU, mtu))
	}
	prepared, err := b.prepareSegmentBridge(link, d, attrs.Flags&net.FlagUp != 0)
	return append(changes, prepared...), err
}

// bridgeUp sets link, d's bridge, up and then leaves on it the link-local address a segment
// gives it (a link that goes down loses its IPv6 addresses).
func (b *Backend) bridgeUp(link netlink.Link, d netbackend.Desired) ([]string, error) {
	name := link.Attrs().Name
	var changes []string
	if link.Attrs().Flags&net.FlagUp == 0 {
		if err := b.nl().LinkSetUp(link); err != nil {
			return changes, fail(err, "setting bridge %s up", name)
		}
		changes = append(changes, fmt.Sprintf("set %s up", name))
	}
	linkLocal, err := b.ensureSegmentLinkLocal(link, d)
	return append(changes, linkLocal...), err
}

// writeConfig writes conf, the configuration list Ensure rendered, at confPath over existing
// (in state), or removes ours when conf is nil.
func (b *Backend) writeConfig(confPath string, existing, conf []byte, state confState) ([]string, error) {
	var changes []string
	switch {
	case conf == nil && state == confOurs:
		// No block on this node: no runtime may hand out an address from the old ranges.
		if err := os.Remove(confPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return changes, fail(err, "removing CNI configuration %s", confPath)
		}
		if err := syncDir(b.cfg.CNIConfDir); err != nil {
			return changes, fail(err, "syncing %s", b.cfg.CNIConfDir)
		}
		changes = append(changes, fmt.Sprintf("removed CNI configuration %s: the node holds no block of the network", confPath))
	case conf != nil && !bytes.Equal(existing, conf):
		if err := writeFileAtomic(confPath, conf, state != confAbsent); err != nil {
			return changes, fail(err, "writing CNI configuration %s", confPath)
		}
		changes = append(changes, fmt.Sprintf("wrote CNI configuration %s", confPath))
	}
	return changes, nil
}
