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

// Package linux is the node backend that realises Networks with the kernel: per Network a Linux
// bridge (named netbackend.BridgeName(key), alias AliasPrefix+key, carrying the gateway with the
// prefix's length, the MTU, up, a fixed MAC) made with netlink, and a CNI configuration list for
// the "bridge", "host-local" and "portmap" plugins written to the CNI configuration directory.
//
// What is ours is marked, never guessed: a bridge is ours when it is a bridge whose alias
// (IFLA_IFALIAS) is AliasPrefix+key, a configuration list when its file name is
// 90-samplecrd-<bridge>.conflist and it records the key in its top-level field KeyField. An
// interface or file of that name that is not ours is reported (netbackend.ReasonNotOurs) and
// never changed or deleted.
//
// The kernel ignores an alias in a link creation request, so a bridge is created under a
// staging name ("nx" and the same hash), given its alias, then renamed: an interface with the
// bridge's name carries its mark from its first moment. A staging-named bridge (with the key's
// alias or none) is what an interrupted creation left; Ensure and Remove delete it.
//
// A bridge with key's name, no alias and exactly the gateway with the prefix's length is what
// the CNI bridge plugin creates when a pod is attached before the controller ran (after a
// reboot): Ensure adopts it (marks it) instead of reporting it. Each bridge's MAC is set
// explicitly, so it does not follow the ports: netbackend.BridgeMAC for a new bridge, the MAC it
// has for an adopted one; the configuration list records it (MACField) and repairs restore it.
// The backend remembers each bridge's ports (the pods' veths) and attaches them again after
// the bridge was recreated. While pods are attached, a new gateway waits
// (netbackend.ReasonGatewayChangeBlocked): they have the configured one as their default route.
//
// A Network with a segment (netbackend.Desired.Segment) also gets a VXLAN device on its bridge
// (vxlan.go), its own IPv6 link-local address on the bridge (linklocal.go) and rules that keep
// the gateway's ARP and ND off the segment (bridgefilter.go); the VXLAN device is never one of
// the bridge's ports as the backend reports them.
//
// The gateway on another interface of the namespace is netbackend.ReasonAddressInUse. The
// kernel accepts one address on several interfaces, so this is checked before the address is
// added (EADDRINUSE or EEXIST from the kernel are reported the same way); an overlap of prefixes
// with other interfaces is allowed. EPERM and EACCES, from netlink or the configuration
// directory, are netbackend.ReasonPermissionDenied.
package linux

import (
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/samplecrd/network-apiserver/pkg/netbackend"
)

// AliasPrefix starts the alias of each of our bridges; the Network key follows it.
const AliasPrefix = "samplecrd.k8s.io/network="

// maxAliasLen is the longest alias the kernel keeps (IFALIASZ - 1).
const maxAliasLen = 255

// Config configures a Backend.
type Config struct {
	// NetNSPath is the network namespace to manage, for example /var/run/netns/NAME or
	// /proc/PID/ns/net. Empty means the namespace the process is in. Every netlink request and
	// the Watch subscriptions go to this namespace; no thread of the process is moved into it.
	NetNSPath string
	// CNIConfDir is the directory of the CNI configuration lists, for example /etc/cni/net.d.
	CNIConfDir string
	// IPAMDataDir, when set, is host-local's dataDir in the configuration lists; empty leaves
	// host-local's default (/var/lib/cni/networks). Remove deletes the network's leftover
	// reservations there.
	IPAMDataDir string
	// BridgeOnAttach leaves the bridge of a Network no pod has used on the node to the first
	// ADD: the list starts with our plugin (AttachPluginType, attach.go), which makes the
	// bridge then. Without it, Ensure makes every Network's bridge.
	BridgeOnAttach bool
}

// Backend is the Linux netbackend.Backend. Its methods are safe for concurrent use.
type Backend struct {
	cfg Config
	ns  netns.NsHandle // netns.None() for the process's namespace
	h   *netlink.Handle
	// dumpSock carries the filtered link dumps (dump.go), in the same namespace as h.
	dumpSock *nl.SocketHandle
	// delH marks bridges for deletion (Remove) without b.mu, in the same namespace as h;
	// groupSock carries the group deletes (groupdelete.go).
	delH      *netlink.Handle
	groupSock *nl.SocketHandle
	deleter   *bridgeDeleter

	// mu is held for reading by every operation and for writing by Close. Operations on one
	// Network are serialised by its key's lock (keys); those on different Networks run at
	// once: the netlink handles and sockets serialise their own requests, and every file,
	// link and nftables table an operation changes is its Network's own (the server keeps
	// Networks from overlapping, so no two hold one gateway). The kernel's rtnl lock still
	// serialises the changes themselves, but not the file writes, reads and dumps around them.
	mu   sync.RWMutex
	keys keyLocks

	// known maps what Ensure, Observe, List and Watch saw of ours, so that Watch can tell
	// whose a deleted or renamed link or an address event was.
	knownMu sync.Mutex
	names   map[string]string // bridge name -> key
	indexes map[int]string    // link index -> key
	// ports remembers the ports each of our bridges had (key -> port index -> port name), so
	// that a bridge recreated after it was deleted gets its pods' veths back; portKeys maps a
	// port's index to its key for Watch.
	ports    map[string]map[int]string
	portKeys map[int]string
	// ensuring and settled tell Ensure's own changes from others' in Watch (echo.go).
	ensuring map[string]*ensureRecord
	settled  map[string]bridgeState

	// watching is set while Watch's subscriptions are open (Ensure sets markers only then);
	// settleKeys (under settleMu) are the keys endEnsure hands to its pump, signalled on
	// settleSignal.
	watching     atomic.Bool
	settleMu     sync.Mutex
	settleKeys   []string
	settleSignal chan struct{}

	// subscribe opens the link and address subscriptions; tests replace it.
	subscribe func(linkCh chan netlink.LinkUpdate, addrCh chan netlink.AddrUpdate, done <-chan struct{}, onError func(error)) error
	// beforeGroupDelete, when set, is called before each group delete (tests).
	beforeGroupDelete func()
	// subscribed, when set, is called after each successful subscription (tests).
	subscribed func()
}

var (
	_ netbackend.Backend       = (*Backend)(nil)
	_ netbackend.ConfigRemover = (*Backend)(nil)
)

// New opens a Backend. Close releases it.
func New(cfg Config) (*Backend, error) {
	if cfg.CNIConfDir == "" {
		return nil, errors.New("linux backend: the CNI configuration directory is not set")
	}
	RegisterMetrics()
	ns := netns.None()
	if cfg.NetNSPath != "" {
		var err error
		if ns, err = netns.GetFromPath(cfg.NetNSPath); err != nil {
			return nil, fmt.Errorf("linux backend: opening network namespace %s: %w", cfg.NetNSPath, err)
		}
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		if ns.IsOpen() {
			_ = ns.Close()
		}
		return nil, fmt.Errorf("linux backend: opening a netlink socket in %s: %w", nsDescription(cfg.NetNSPath), err)
	}
	dumpSock, err := openDumpSocket(ns)
	if err != nil {
		h.Close()
		if ns.IsOpen() {
			_ = ns.Close()
		}
		return nil, fmt.Errorf("linux backend: opening a netlink socket in %s: %w", nsDescription(cfg.NetNSPath), err)
	}
	delH, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		dumpSock.Close()
		if ns.IsOpen() {
			_ = ns.Close()
		}
		return nil, fmt.Errorf("linux backend: opening a netlink socket in %s: %w", nsDescription(cfg.NetNSPath), err)
	}
	groupSock, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		h.Close()
		dumpSock.Close()
		delH.Close()
		if ns.IsOpen() {
			_ = ns.Close()
		}
		return nil, fmt.Errorf("linux backend: opening a netlink socket in %s: %w", nsDescription(cfg.NetNSPath), err)
	}
	b := &Backend{
		cfg:       cfg,
		ns:        ns,
		h:         h,
		delH:      delH,
		groupSock: &nl.SocketHandle{Socket: groupSock},
		deleter:   newBridgeDeleter(),
		dumpSock:  dumpSock,
		names:     map[string]string{},
		indexes:   map[int]string{},
		ports:     map[string]map[int]string{},
		portKeys:  map[int]string{},
		ensuring:  map[string]*ensureRecord{},
		settled:   map[string]bridgeState{},

		settleSignal: make(chan struct{}, 1),
	}
	b.subscribe = b.netlinkSubscribe
	return b, nil
}

func nsDescription(path string) string {
	if path == "" {
		return "the current network namespace"
	}
	return "network namespace " + path
}

// Close releases the netlink socket and the namespace handle. Call it after Watch returned.
func (b *Backend) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.h.Close()
	b.delH.Close()
	b.deleter.deleting.Lock() // not under a group delete
	b.groupSock.Close()
	b.deleter.deleting.Unlock()
	b.dumpSock.Close()
	if b.ns.IsOpen() {
		return b.ns.Close()
	}
	return nil
}

// Alias is the alias of key's bridge.
func Alias(key string) string { return AliasPrefix + key }

// KeyOfAlias returns the key an alias records, and whether it is one of ours.
func KeyOfAlias(alias string) (string, bool) {
	key, ok := strings.CutPrefix(alias, AliasPrefix)
	if !ok || key == "" {
		return "", false
	}
	return key, true
}

// isOurs tells whether link is key's bridge.
func isOurs(link netlink.Link, key string) bool {
	return link.Type() == "bridge" && link.Attrs().Alias == Alias(key) && link.Attrs().Name == netbackend.BridgeName(key)
}

func (b *Backend) notOurs(link netlink.Link, key string) error {
	a := link.Attrs()
	what := fmt.Sprintf("a %s interface", link.Type())
	if link.Type() == "bridge" {
		what = "a bridge"
	}
	alias := "no alias"
	if a.Alias != "" {
		alias = fmt.Sprintf("alias %q", a.Alias)
	}
	return netbackend.Errorf(netbackend.ReasonNotOurs,
		"interface %s (%s, %s) in %s is not the bridge of network %s (which has alias %q); leaving it alone: delete or rename it to let the network be created",
		a.Name, what, alias, nsDescription(b.cfg.NetNSPath), key, Alias(key))
}

// fail wraps err with a reason derived from its errno.
func fail(err error, format string, args ...any) error {
	reason := netbackend.ReasonBackendError
	if errors.Is(err, fs.ErrPermission) { // EPERM and EACCES
		reason = netbackend.ReasonPermissionDenied
	}
	return &netbackend.Error{Reason: reason, Err: fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), err)}
}

// dump retries a netlink dump that the kernel reports as interrupted by a concurrent change.
func dump[T any](f func() (T, error)) (T, error) {
	for attempt := 0; ; attempt++ {
		v, err := f()
		if errors.Is(err, netlink.ErrDumpInterrupted) && attempt < 10 {
			continue
		}
		return v, err
	}
}

// linkByName returns the link called name, nil when there is none.
func (b *Backend) linkByName(name string) (netlink.Link, error) {
	link, err := b.nl().LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, nil
	}
	return link, err
}

// validate adds the linux backend's own limit to what every backend requires.
func validate(d netbackend.Desired) error {
	if len(Alias(d.Key)) > maxAliasLen {
		return netbackend.Errorf(netbackend.ReasonBackendError, "network key %q is too long to record in an interface alias", d.Key)
	}
	return d.Validate()
}

// keyLocks is a lock per Network key, held by one operation on the Network at a time.
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	mu    sync.Mutex
	users int // holders and waiters; the entry goes with the last
}

// lock locks key and returns its unlock.
func (k *keyLocks) lock(key string) func() {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		k.mu.Lock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
}
