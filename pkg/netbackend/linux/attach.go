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
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"os"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// A bridge made on a pod's first attach (Config.BridgeOnAttach): the configuration list starts
// with our own plugin, AttachPluginType, ahead of "bridge". Its entry carries everything the
// bridge needs (attachConf); in a pod's ADD the plugin makes the bridge exactly as Ensure would
// (EnsureForAttach) when the node has none yet, so the reference bridge plugin then finds it
// complete: the recorded MAC, the alias, the MTU, the gateway and, for a segment, the VXLAN
// device with its filters and flood entries. A Network no pod uses has no interface on the
// node, and its removal is its file's.

// AttachPluginType is the type of our plugin's entry in a configuration list, and the name of
// its binary (cmd/samplecrd-bridge), installed beside the reference plugins.
const AttachPluginType = "samplecrd-bridge"

// attachConf is our plugin's entry. The field names are the plugin's configuration format.
type attachConf struct {
	Type string `json:"type"`
	// Network is the Network's key; Prefix, Gateway, MTU and MAC are the bridge's.
	Network string `json:"network"`
	Prefix  string `json:"prefix"`
	Gateway string `json:"gateway"`
	MTU     int    `json:"mtu"`
	MAC     string `json:"mac"`
	// IPAMDataDir is host-local's data directory (the gateway is not added while it is leased).
	IPAMDataDir string `json:"ipamDataDir,omitempty"`
	// LockDir is the directory whose lock the plugin and the agent hold while they make or
	// finish a bridge: the CNI configuration directory, which both see.
	LockDir string       `json:"lockDir"`
	Segment *segmentConf `json:"segment,omitempty"`
}

type segmentConf struct {
	VNI             uint32   `json:"vni"`
	UnderlayAddress string   `json:"underlayAddress"`
	UnderlayLink    string   `json:"underlayLink,omitempty"`
	Peers           []string `json:"peers,omitempty"`
	MTU             int      `json:"mtu,omitempty"`
}

// newAttachConf is d's entry for our plugin.
func newAttachConf(d netbackend.Desired, ipamDataDir, lockDir string, mac net.HardwareAddr) attachConf {
	c := attachConf{
		Type: AttachPluginType, Network: d.Key, Prefix: d.Prefix.String(), Gateway: d.Gateway.String(),
		MTU: d.EffectiveMTU(), MAC: mac.String(), IPAMDataDir: ipamDataDir, LockDir: lockDir,
	}
	if s := d.Segment; s != nil {
		c.Segment = &segmentConf{VNI: s.VNI, UnderlayAddress: s.UnderlayAddress.String(), UnderlayLink: s.UnderlayLink, MTU: s.MTU}
		for _, p := range s.Peers {
			c.Segment.Peers = append(c.Segment.Peers, p.String())
		}
	}
	return c
}

// AttachRequest is what our plugin's entry asks for: the Network's bridge as Ensure makes it.
type AttachRequest struct {
	Desired     netbackend.Desired
	MAC         net.HardwareAddr
	IPAMDataDir string
	LockDir     string
}

// ParseAttachConf reads our plugin's entry (the plugin's stdin: its entry with the list's name
// and cniVersion added by the runtime).
func ParseAttachConf(stdin []byte) (AttachRequest, error) {
	var r AttachRequest
	var c attachConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return r, err
	}
	if c.Type != AttachPluginType {
		return r, fmt.Errorf("the configuration is of type %q, not %q", c.Type, AttachPluginType)
	}
	if c.Network == "" {
		return r, errors.New(`"network" is not set`)
	}
	prefix, err := netip.ParsePrefix(c.Prefix)
	if err != nil {
		return r, fmt.Errorf(`"prefix": %w`, err)
	}
	gateway, err := netip.ParseAddr(c.Gateway)
	if err != nil {
		return r, fmt.Errorf(`"gateway": %w`, err)
	}
	mac, err := net.ParseMAC(c.MAC)
	if err != nil || len(mac) != 6 || mac[0]&0x01 != 0 {
		return r, fmt.Errorf(`"mac" %q is not a unicast Ethernet address`, c.MAC)
	}
	if c.LockDir == "" {
		return r, errors.New(`"lockDir" is not set`)
	}
	d := netbackend.Desired{Key: c.Network, Prefix: prefix, Gateway: gateway, MTU: c.MTU}
	if s := c.Segment; s != nil {
		underlay, err := netip.ParseAddr(s.UnderlayAddress)
		if err != nil {
			return r, fmt.Errorf(`"segment.underlayAddress": %w`, err)
		}
		d.Segment = &netbackend.Segment{VNI: s.VNI, UnderlayAddress: underlay, UnderlayLink: s.UnderlayLink, MTU: s.MTU}
		for i, p := range s.Peers {
			peer, err := netip.ParseAddr(p)
			if err != nil {
				return r, fmt.Errorf(`"segment.peers[%d]": %w`, i, err)
			}
			d.Segment.Peers = append(d.Segment.Peers, peer)
		}
	}
	if err := validate(d); err != nil {
		return r, err
	}
	return AttachRequest{Desired: d, MAC: mac, IPAMDataDir: c.IPAMDataDir, LockDir: c.LockDir}, nil
}

// lockDir takes the exclusive lock of dir (flock, so it goes with the process; dir may also be
// a file) and returns its release.
func lockDir(dir string) (func(), error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("locking %s: %w", dir, err)
	}
	return func() { _ = f.Close() }, nil // closing the last descriptor releases the lock
}

// EnsureForAttach makes r's bridge when the node has none that is up: in a pod's first ADD, by
// our plugin. A bridge of ours that is up is the agent's to keep and is left alone (what the
// list carries may be older than what the agent knows); one of ours that is down is what a
// creation stopped part way left (or one in the making, whose lock this waits for) and is
// finished. A bridge with the name that is not ours is refused, as Ensure refuses it. The
// bridge goes up last: an up bridge of ours is a complete one.
func (b *Backend) EnsureForAttach(_ context.Context, r AttachRequest) ([]string, error) {
	d := r.Desired
	if err := validate(d); err != nil {
		return nil, err
	}
	name := netbackend.BridgeName(d.Key)
	if link, err := b.linkByName(name); err != nil {
		return nil, fail(err, "looking up bridge %s of network %s", name, d.Key)
	} else if complete(link, d.Key) {
		return nil, nil
	}
	unlock, err := lockDir(r.LockDir)
	if errors.Is(err, fs.ErrNotExist) {
		// The agent's view of the directory is not the runtime's (it is mounted elsewhere):
		// the plugins on this node still keep out of each other's way by locking their own
		// binary; an ADD that races the agent finishing a bridge may then fail once, and the
		// runtime tries again.
		var self string
		if self, err = os.Executable(); err == nil {
			unlock, err = lockDir(self)
		}
	}
	if err != nil {
		return nil, fail(err, "taking the lock of %s", r.LockDir)
	}
	defer unlock()
	b.mu.RLock()
	defer b.mu.RUnlock()
	defer b.keys.lock(d.Key)()
	link, err := b.linkByName(name)
	if err != nil {
		return nil, fail(err, "looking up bridge %s of network %s", name, d.Key)
	}
	if complete(link, d.Key) {
		return nil, nil
	}
	if link != nil && !isOurs(link, d.Key) {
		return nil, b.notOurs(link, d.Key)
	}
	return b.makeBridge(link, d, r.MAC)
}

// complete tells whether link is key's bridge, up.
func complete(link netlink.Link, key string) bool {
	return link != nil && isOurs(link, key) && link.Attrs().Flags&net.FlagUp != 0
}

// makeBridge creates d's bridge (link nil) or finishes link, one of ours that is down, as
// Ensure makes it, but with the VXLAN device attached before the bridge goes up.
func (b *Backend) makeBridge(link netlink.Link, d netbackend.Desired, mac net.HardwareAddr) ([]string, error) {
	mtu := d.EffectiveMTU()
	var changes []string
	if link == nil {
		var err error
		if link, changes, err = b.createBridge(netbackend.BridgeName(d.Key), d.Key, mtu, mac); err != nil {
			return changes, err
		}
	}
	b.remember(d.Key, link.Attrs().Name, link.Attrs().Index)
	configured, err := b.configureBridge(link, d, mtu, mac, false)
	changes = append(changes, configured...)
	if err != nil {
		return changes, err
	}
	segment, err := b.ensureSegment(link, d, mtu, mac)
	changes = append(changes, segment...)
	if err != nil {
		return changes, err
	}
	up, err := b.bridgeUp(link, d)
	return append(changes, up...), err
}

// CheckForAttach tells whether r's bridge is there, ours and up (our plugin's CHECK).
func (b *Backend) CheckForAttach(r AttachRequest) error {
	name := netbackend.BridgeName(r.Desired.Key)
	link, err := b.linkByName(name)
	switch {
	case err != nil:
		return fail(err, "looking up bridge %s of network %s", name, r.Desired.Key)
	case link == nil:
		return netbackend.Errorf(netbackend.ReasonBackendError, "bridge %s of network %s is missing", name, r.Desired.Key)
	case !isOurs(link, r.Desired.Key):
		return b.notOurs(link, r.Desired.Key)
	case link.Attrs().Flags&net.FlagUp == 0:
		return netbackend.Errorf(netbackend.ReasonBackendError, "bridge %s of network %s is down", name, r.Desired.Key)
	}
	return nil
}
