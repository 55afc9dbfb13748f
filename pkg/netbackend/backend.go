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

// Package netbackend is the node side of a Network: what the controller asks a backend to make
// true on the node (a bridge carrying the gateway address, and a CNI configuration for it), and
// what the backend finds there. Implementations: linux (netlink and CNI files) and fake (unit tests).
package netbackend

import (
	"context"
	"crypto/sha256"
	"encoding/base32"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
)

// Desired is what one Network asks of the node.
type Desired struct {
	// Key is the Network's "namespace/name".
	Key string
	// Prefix is spec.cidr; Gateway is spec.gateway, put on the bridge with Prefix's length.
	Prefix  netip.Prefix
	Gateway netip.Addr
	// MTU of the bridge; 0 means DefaultMTU.
	MTU int
	// IPMasq asks the CNI bridge plugin to masquerade the pods' traffic leaving the prefix.
	IPMasq bool
	// Blocks are the parts of Prefix this node hands out to its pods. nil means the whole
	// prefix, with a default route via the gateway (the configuration from before blocks; the
	// controller does not fill Blocks yet). Non-nil, the CNI configuration has one host-local
	// range per block, the whole prefix on-link, and a default route only with DefaultRoute.
	// Empty but non-nil means the node holds no block: no CNI configuration is written and an
	// existing one of ours is removed, so that no runtime hands out an address the node does
	// not own (the bridge and its gateway stay for the pods already attached).
	Blocks []netip.Prefix
	// DefaultRoute gives the pods a default route via the gateway; it matters only with
	// Blocks set (without blocks, pods always get one, as before).
	DefaultRoute bool
	// Segment, when set, joins the Network's bridge on this node to the same Network's bridges
	// on the peers with a VXLAN device: one L2 segment across the nodes. nil: the bridge is
	// local to the node (and a segment device of ours is removed).
	Segment *Segment
}

// Segment is the cross-node part of a Network on one node.
type Segment struct {
	// VNI is the Network's VXLAN network identifier, unique in the cluster (1 to 2^24-1).
	VNI uint32
	// UnderlayAddress is this node's address on the underlay: the VXLAN packets' source, and
	// what the peers send to.
	UnderlayAddress netip.Addr
	// UnderlayLink, when set, is the interface the VXLAN packets leave through.
	UnderlayLink string
	// Peers are the other nodes' underlay addresses (of UnderlayAddress's family): each gets a
	// copy of broadcast, multicast and not yet learnt unicast frames.
	Peers []netip.Addr
	// MTU of the bridge, the VXLAN device and the pods' interfaces; 0 means DefaultMTU minus
	// the encapsulation (SegmentOverhead).
	MTU int
}

// SegmentOverhead is what VXLAN encapsulation takes of the underlay's MTU: outer IP, UDP,
// VXLAN and inner Ethernet headers.
func SegmentOverhead(underlay netip.Addr) int {
	if underlay.Is6() {
		return 70
	}
	return 50
}

// VXLANPort is the UDP port of the segment's VXLAN traffic (IANA's).
const VXLANPort = 4789

// MaxVNI is the highest VXLAN network identifier.
const MaxVNI = 1<<24 - 1

// SegmentState is what a backend found of a Network's segment device on the node.
type SegmentState struct {
	// Device is the VXLAN device's name.
	Device string
	// Enslaved: the device is a port of the Network's bridge.
	Enslaved bool
	Up       bool
	VNI      uint32
	// Local is the device's source address on the underlay.
	Local netip.Addr
	MTU   int
	// Peers are the destinations of the device's flood entries, sorted.
	Peers []netip.Addr
	// GatewayFilter: the rules that keep the gateway's ARP and ND off the segment are in place.
	GatewayFilter bool
	// SourceFilter: the rule that drops the VNI's VXLAN packets from any source but Sources is
	// in place.
	SourceFilter bool
	// Sources are the underlay addresses the node accepts the segment's packets from, sorted
	// (the peers, once in sync).
	Sources []netip.Addr
}

// DefaultMTU is the bridge MTU when a Network does not ask for another.
const DefaultMTU = 1500

// EffectiveMTU is the MTU of the bridge, its VXLAN device and the pods' interfaces: with a
// Segment, the segment's MTU (DefaultMTU minus the encapsulation when it sets none), so that a
// pod attached before any peer joined has the MTU the segment carries; else d.MTU, or
// DefaultMTU when d does not set one.
func (d Desired) EffectiveMTU() int {
	if d.Segment != nil {
		if d.Segment.MTU != 0 {
			return d.Segment.MTU
		}
		return DefaultMTU - SegmentOverhead(d.Segment.UnderlayAddress)
	}
	if d.MTU == 0 {
		return DefaultMTU
	}
	return d.MTU
}

// Validate checks what every backend requires of a Desired.
func (d Desired) Validate() error {
	switch {
	case d.Key == "":
		return Errorf(ReasonBackendError, "network key is empty")
	case !d.Prefix.IsValid():
		return Errorf(ReasonBackendError, "network %s: invalid prefix", d.Key)
	case !d.Gateway.IsValid() || d.Gateway.Zone() != "":
		return Errorf(ReasonBackendError, "network %s: invalid gateway %v", d.Key, d.Gateway)
	case !d.Prefix.Contains(d.Gateway):
		return Errorf(ReasonBackendError, "network %s: gateway %s is not in %s", d.Key, d.Gateway, d.Prefix)
	case d.MTU != 0 && (d.MTU < 68 || d.MTU > 65535):
		return Errorf(ReasonBackendError, "network %s: MTU %d out of range", d.Key, d.MTU)
	}
	if err := d.Segment.validate(d.Key); err != nil {
		return err
	}
	for i, b := range d.Blocks {
		switch {
		case !b.IsValid() || b != b.Masked():
			return Errorf(ReasonBackendError, "network %s: block %v is not a valid prefix with no host bits", d.Key, b)
		case b.Addr().Is4() != d.Prefix.Addr().Is4() || b.Bits() < d.Prefix.Bits() || !d.Prefix.Contains(b.Addr()):
			return Errorf(ReasonBackendError, "network %s: block %s is not within %s", d.Key, b, d.Prefix.Masked())
		}
		for _, o := range d.Blocks[:i] {
			if o.Overlaps(b) {
				return Errorf(ReasonBackendError, "network %s: blocks %s and %s overlap", d.Key, o, b)
			}
		}
	}
	return nil
}

func (s *Segment) validate(key string) error {
	if s == nil {
		return nil
	}
	switch {
	case s.VNI == 0 || s.VNI > MaxVNI:
		return Errorf(ReasonBackendError, "network %s: VNI %d out of range 1-%d", key, s.VNI, MaxVNI)
	case !s.UnderlayAddress.IsValid() || s.UnderlayAddress.Zone() != "" || s.UnderlayAddress.IsUnspecified() ||
		s.UnderlayAddress.IsMulticast() || s.UnderlayAddress.Is4In6():
		return Errorf(ReasonBackendError, "network %s: invalid underlay address %v", key, s.UnderlayAddress)
	case s.MTU != 0 && (s.MTU < 68 || s.MTU > 65535):
		return Errorf(ReasonBackendError, "network %s: segment MTU %d out of range", key, s.MTU)
	case len(s.UnderlayLink) > 15 || strings.ContainsAny(s.UnderlayLink, "/ \t\n"):
		return Errorf(ReasonBackendError, "network %s: invalid underlay interface name %q", key, s.UnderlayLink)
	}
	for _, p := range s.Peers {
		if !p.IsValid() || p.Zone() != "" || p.IsUnspecified() || p.IsMulticast() || p.Is4() != s.UnderlayAddress.Is4() || p.Is4In6() {
			return Errorf(ReasonBackendError, "network %s: invalid peer %v for underlay address %s", key, p, s.UnderlayAddress)
		}
		if p == s.UnderlayAddress {
			return Errorf(ReasonBackendError, "network %s: peer %s is this node's own underlay address", key, p)
		}
	}
	return nil
}

// Actual is what a backend found on the node for one Network.
type Actual struct {
	Key    string
	Bridge string
	// Addresses are the addresses on the bridge, with their prefix lengths.
	Addresses []netip.Prefix
	Up        bool
	MTU       int
	// CNIConfig is the content of the Network's CNI configuration file, nil when absent.
	CNIConfig []byte
	// Ports are the interfaces attached to the bridge (the pods' host-side veths): the
	// Network's attachments on this node.
	Ports []string
	// Leases are the addresses the IPAM plugin (host-local) still holds for the Network on
	// this node. A runtime's DEL removes the pod's veth before it releases the address, so a
	// lease without a port is a DEL under way (or one that never finished).
	Leases []string
	// Segment is the Network's VXLAN device, nil when there is none. It is never one of Ports.
	Segment *SegmentState
}

// Outcome is what Ensure found beside the changes it made.
type Outcome struct {
	// Created: none of the Network's bridge or configuration (marked as ours) was on the node
	// before Ensure.
	Created bool
	// Ports are the interfaces attached to the bridge once Ensure succeeded (the pods' veths);
	// on an error they are not known.
	Ports []string
	// AwaitsAttach: Ensure wrote the configuration list alone, and the first pod's ADD makes the
	// bridge (a backend that makes bridges on attach; no pod has used the Network on the node).
	AwaitsAttach bool
}

// Backend realises Networks on one node.
type Backend interface {
	// Observe returns what is on the node for key (its bridge, configuration or IPAM state), or
	// nil when nothing of ours is there.
	Observe(ctx context.Context, key string) (*Actual, error)
	// Ensure makes the node match d and returns a short description of each change it made
	// (none when the node already matched, so a resync of an unchanged Network writes nothing)
	// and what it found doing so: a sync needs no other look at the node.
	Ensure(ctx context.Context, d Desired) (changes []string, outcome Outcome, err error)
	// Remove deletes the bridge and the CNI configuration of key, if they are ours.
	Remove(ctx context.Context, key string) error
	// List returns the keys of every Network whose bridge or configuration (marked as ours), or
	// whose IPAM state, is on the node.
	List(ctx context.Context) ([]string, error)
	// Watch calls notify with a Network's key whenever something changes on a bridge of ours or
	// on a link with a name one of our Networks uses, until ctx is done.
	Watch(ctx context.Context, notify func(key string)) error
}

// BridgeName is the stable bridge name for a Network key: "nw" and 13 characters of a hash,
// within Linux's 15-character limit. The bridge's alias records the key, so a collision or a
// foreign interface of that name is detected rather than taken over.
func BridgeName(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "nw" + strings.ToLower(base32.StdEncoding.EncodeToString(sum[:])[:13])
}

// SegmentDeviceName is the name of key's VXLAN device: "vx" and the bridge name's hash.
func SegmentDeviceName(key string) string { return "vx" + BridgeName(key)[2:] }

// BridgeMAC is the fixed MAC address of key's bridge: locally administered, unicast, derived
// from the key, so the same across repairs, restarts and nodes. A bridge without a MAC set
// takes the lowest MAC of its ports and changes it as pods come and go, which breaks the pods'
// neighbour entries for the gateway (and CNI CHECK, which compares the bridge's MAC).
func BridgeMAC(key string) net.HardwareAddr {
	sum := sha256.Sum256([]byte("bridge-mac:" + key))
	mac := net.HardwareAddr(sum[:6])
	mac[0] = mac[0]&^0x01 | 0x02 // unicast, locally administered
	return mac
}

// AdoptedPrefix starts the change a backend reports when it adopted an unmarked bridge that
// carried exactly the Network's name and gateway (what the CNI bridge plugin creates when a pod
// is attached before the controller ran).
const AdoptedPrefix = "adopted bridge "

// Reasons a Network cannot be realised; the controller reports them in the node's status entry.
const (
	ReasonNotOurs          = "InterfaceNotOurs"
	ReasonAddressInUse     = "AddressInUse"
	ReasonPermissionDenied = "PermissionDenied"
	ReasonBackendError     = "BackendError"
	// ReasonPortsDetached: ports of the Network's bridge (pods' veths) lost their bridge and
	// could not be attached again; those pods are cut off.
	ReasonPortsDetached = "PortsDetached"
	// ReasonSegmentDown: the Network's segment to the other nodes could not be realised (its
	// underlay interface or address is missing, or the VXLAN device could not be made).
	ReasonSegmentDown = "SegmentDown"
	// ReasonGatewayChangeBlocked: spec.gateway changed while pods are attached on the node; they
	// have the old gateway as their default route, so the node keeps it until they are gone.
	ReasonGatewayChangeBlocked = "GatewayChangeBlocked"
)

// Error is a failure with a reason for the Network's status.
type Error struct {
	Reason string
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Errorf returns an *Error with reason.
func Errorf(reason, format string, args ...any) error {
	return &Error{Reason: reason, Err: fmt.Errorf(format, args...)}
}

// ReasonOf returns the reason of err, ReasonBackendError when it has none.
func ReasonOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ReasonBackendError
}

// LeaseReader is a backend that can read a Network's leases alone (Observe's Leases), without
// looking at its links: what the controller needs after a successful Ensure, which already
// reported the ports. On the Linux backend it is a read of host-local's directory, where
// Observe also dumps the bridge's ports, which the kernel finds by walking every link.
type LeaseReader interface {
	// Leases returns the addresses the IPAM plugin holds for key on this node (nil if none).
	Leases(ctx context.Context, key string) ([]string, error)
}

// ConfigRemover is a backend that can remove a Network's CNI configuration alone, ahead of the
// bridge (the Linux backend). The controller removes a deleted Network's configuration at once
// with it, from a queue of its own: a runtime can no longer ADD to the Network, while the
// bridges, which the kernel unregisters at tens of milliseconds each, go at the kernel's pace
// through Remove.
type ConfigRemover interface {
	// RemoveConfig removes key's configuration if it is ours, and says whether it did.
	RemoveConfig(ctx context.Context, key string) (bool, error)
}
