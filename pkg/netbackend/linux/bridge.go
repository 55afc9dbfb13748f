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
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// adoptable tells whether link, a bridge with key's bridge name that is not marked as ours, is
// what the CNI bridge plugin leaves when it attached a pod before the controller ran (after a
// reboot, say): a bridge with no alias carrying exactly the gateway with the prefix's length.
// Such a bridge is taken over (marked) rather than reported: deleting it would cut the pods.
func (b *Backend) adoptable(link netlink.Link, d netbackend.Desired) (bool, error) {
	if link.Type() != "bridge" || link.Attrs().Alias != "" {
		return false, nil
	}
	addrs, err := b.bridgeAddrs(link)
	if err != nil {
		return false, err
	}
	return len(addrs) == 1 && addrs[0] == netip.PrefixFrom(d.Gateway, d.Prefix.Bits()), nil
}

// stagingName is the name key's bridge is created under before it is marked as ours and
// renamed: "nx" and the same hash as netbackend.BridgeName.
func stagingName(key string) string { return "nx" + netbackend.BridgeName(key)[2:] }

// isStaged tells whether link is what an interrupted createBridge of key left: a bridge with
// key's staging name and key's alias or none yet.
func isStaged(link netlink.Link, key string) bool {
	a := link.Attrs()
	return link.Type() == "bridge" && a.Name == stagingName(key) && (a.Alias == "" || a.Alias == Alias(key))
}

// createBridge creates key's bridge, down, with its alias and MTU, and returns it as the kernel
// has it. The kernel ignores an alias in the creation request, so the bridge is created under
// its staging name, given its alias, and only then renamed: an interface with the bridge's name
// always carries its mark, and what an interrupted creation leaves is recognisable by its
// staging name and removed here (and by Remove). A bridge of the final name created meanwhile
// is taken only if it is ours.
func (b *Backend) createBridge(name, key string, mtu int, mac net.HardwareAddr) (netlink.Link, []string, error) {
	staging := stagingName(key)
	var changes []string
	leftover, err := b.linkByName(staging)
	if err != nil {
		return nil, nil, fail(err, "looking up %s", staging)
	}
	if leftover != nil {
		if !isStaged(leftover, key) {
			return nil, nil, netbackend.Errorf(netbackend.ReasonNotOurs,
				"interface %s (a %s interface, alias %q) in %s has the name network %s creates its bridge under; leaving it alone",
				staging, leftover.Type(), leftover.Attrs().Alias, nsDescription(b.cfg.NetNSPath), key)
		}
		if err := b.nl().LinkDel(leftover); err != nil && !errors.Is(err, unix.ENODEV) {
			return nil, nil, fail(err, "deleting %s, left by an interrupted creation", staging)
		}
		changes = append(changes, fmt.Sprintf("deleted %s, left by an interrupted creation", staging))
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = staging
	attrs.MTU = mtu
	attrs.HardwareAddr = mac
	if err := b.nl().LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
		return nil, changes, fail(err, "creating bridge %s for network %s", staging, key)
	}
	link, err := b.linkByName(staging)
	if err == nil && link == nil {
		err = errors.New("it vanished")
	}
	if err != nil {
		return nil, changes, fail(err, "looking up new bridge %s", staging)
	}
	undo := func() { _ = b.nl().LinkDel(link) }
	if err := b.nl().LinkSetAlias(link, Alias(key)); err != nil {
		undo()
		return nil, changes, fail(err, "setting the alias of new bridge %s", staging)
	}
	if err := b.nl().LinkSetName(link, name); err != nil {
		undo()
		if !errors.Is(err, unix.EEXIST) {
			return nil, changes, fail(err, "renaming new bridge %s to %s", staging, name)
		}
		// Someone created the final name meanwhile.
		existing, lookupErr := b.linkByName(name)
		if lookupErr != nil || existing == nil {
			return nil, changes, fail(err, "renaming new bridge %s to %s", staging, name)
		}
		if !isOurs(existing, key) {
			return nil, changes, b.notOurs(existing, key)
		}
		return existing, changes, nil
	}
	if link, err = b.linkByName(name); err == nil && link == nil {
		err = errors.New("it vanished")
	}
	if err != nil {
		return nil, changes, fail(err, "looking up new bridge %s", name)
	}
	return link, append(changes, fmt.Sprintf("created bridge %s", name)), nil
}
