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
// The gateway on another interface of the namespace is netbackend.ReasonAddressInUse. The
// kernel accepts one address on several interfaces, so this is checked before the address is
// added (EADDRINUSE or EEXIST from the kernel are reported the same way); an overlap of prefixes
// with other interfaces is allowed. EPERM and EACCES, from netlink or the configuration
// directory, are netbackend.ReasonPermissionDenied.
package linux

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/vishvananda/netlink"
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
}

// Backend is the Linux netbackend.Backend. Its methods are safe for concurrent use.
type Backend struct {
	cfg Config
	ns  netns.NsHandle // netns.None() for the process's namespace
	h   *netlink.Handle

	// mu serialises the requests on h and the writes of Ensure and Remove.
	mu sync.Mutex

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

	// subscribe opens the link and address subscriptions; tests replace it.
	subscribe func(linkCh chan netlink.LinkUpdate, addrCh chan netlink.AddrUpdate, done <-chan struct{}, onError func(error)) error
	// subscribed, when set, is called after each successful subscription (tests).
	subscribed func()
}

var _ netbackend.Backend = (*Backend)(nil)

// New opens a Backend. Close releases it.
func New(cfg Config) (*Backend, error) {
	if cfg.CNIConfDir == "" {
		return nil, errors.New("linux backend: the CNI configuration directory is not set")
	}
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
	b := &Backend{
		cfg:      cfg,
		ns:       ns,
		h:        h,
		names:    map[string]string{},
		indexes:  map[int]string{},
		ports:    map[string]map[int]string{},
		portKeys: map[int]string{},
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
	link, err := b.h.LinkByName(name)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) {
		return nil, nil
	}
	return link, err
}

// bridgeAddrs returns the addresses on link, without the IPv6 link-local ones, which the
// kernel manages.
func (b *Backend) bridgeAddrs(link netlink.Link) ([]netip.Prefix, error) {
	addrs, err := dump(func() ([]netlink.Addr, error) { return b.h.AddrList(link, netlink.FAMILY_ALL) })
	if err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, a := range addrs {
		ones, _ := a.Mask.Size()
		p, ok := prefixOf(a.IP, ones)
		if !ok || (p.Addr().Is6() && p.Addr().IsLinkLocalUnicast()) {
			continue
		}
		out = append(out, p)
	}
	return out, nil
}

func (b *Backend) remember(key, name string, index int) {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	b.names[name] = key
	if index > 0 {
		b.indexes[index] = key
	}
}

func (b *Backend) forget(key string) {
	b.knownMu.Lock()
	defer b.knownMu.Unlock()
	delete(b.names, netbackend.BridgeName(key))
	for i, k := range b.indexes {
		if k == key {
			delete(b.indexes, i)
		}
	}
	b.setPortsLocked(key, nil)
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

// portsOf returns the ports of the bridge with index bridge (index -> name), from links.
func portsOf(links []netlink.Link, bridge int) map[int]string {
	ports := map[int]string{}
	for _, l := range links {
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

// validate adds the linux backend's own limit to what every backend requires.
func validate(d netbackend.Desired) error {
	if len(Alias(d.Key)) > maxAliasLen {
		return netbackend.Errorf(netbackend.ReasonBackendError, "network key %q is too long to record in an interface alias", d.Key)
	}
	return d.Validate()
}

// Observe implements netbackend.Backend. An interface or file with our name that is not ours
// is not reported (Ensure reports it).
func (b *Backend) Observe(_ context.Context, key string) (*netbackend.Actual, error) {
	if key == "" {
		return nil, netbackend.Errorf(netbackend.ReasonBackendError, "network key is empty")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
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
		links, err := dump(b.h.LinkList)
		if err != nil {
			return nil, fail(err, "listing links")
		}
		ports := portsOf(links, a.Index)
		actual = &netbackend.Actual{Key: key, Bridge: name, Addresses: addrs, Up: a.Flags&net.FlagUp != 0, MTU: a.MTU,
			Ports: sortedNames(ports)}
		b.remember(key, name, a.Index)
		b.rememberPorts(key, ports)
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
// when its content differs. On an error it returns the changes made so far with it.
func (b *Backend) Ensure(_ context.Context, d netbackend.Desired) ([]string, netbackend.Outcome, error) {
	if err := validate(d); err != nil {
		return nil, netbackend.Outcome{}, err
	}
	mtu := d.EffectiveMTU()
	name := netbackend.BridgeName(d.Key)
	confPath := ConfPath(b.cfg.CNIConfDir, d.Key)

	b.mu.Lock()
	defer b.mu.Unlock()

	link, err := b.linkByName(name)
	if err != nil {
		return nil, netbackend.Outcome{}, fail(err, "looking up bridge %s of network %s", name, d.Key)
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
	conf, err := renderConfig(d, b.cfg.IPAMDataDir, mac)
	if err != nil {
		return nil, netbackend.Outcome{}, netbackend.Errorf(netbackend.ReasonBackendError, "%v", err)
	}

	var changes []string
	if adopt {
		if err := b.h.LinkSetAlias(link, Alias(d.Key)); err != nil {
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
	if link == nil {
		var made []string
		link, made, err = b.createBridge(name, d.Key, mtu, mac)
		changes = append(changes, made...)
		if err != nil {
			return changes, netbackend.Outcome{}, err
		}
	}
	attrs := link.Attrs()
	b.remember(d.Key, name, attrs.Index)

	if pin || !bytes.Equal(attrs.HardwareAddr, mac) {
		// Set explicitly, a bridge's MAC no longer follows its ports.
		if err := b.h.LinkSetHardwareAddr(link, mac); err != nil {
			return changes, netbackend.Outcome{}, fail(err, "setting the MAC of bridge %s to %s", name, mac)
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
		return changes, netbackend.Outcome{}, err
	}
	if attrs.MTU != mtu {
		if err := b.h.LinkSetMTU(link, mtu); err != nil {
			return changes, netbackend.Outcome{}, fail(err, "setting the MTU of bridge %s to %d", name, mtu)
		}
		changes = append(changes, fmt.Sprintf("set MTU of %s from %d to %d", name, attrs.MTU, mtu))
	}
	if attrs.Flags&net.FlagUp == 0 {
		if err := b.h.LinkSetUp(link); err != nil {
			return changes, netbackend.Outcome{}, fail(err, "setting bridge %s up", name)
		}
		changes = append(changes, fmt.Sprintf("set %s up", name))
	}
	if !bytes.Equal(existing, conf) {
		if err := writeFileAtomic(confPath, conf); err != nil {
			return changes, netbackend.Outcome{}, fail(err, "writing CNI configuration %s", confPath)
		}
		changes = append(changes, fmt.Sprintf("wrote CNI configuration %s", confPath))
	}
	portChanges, ports, err := b.ensurePorts(link, d.Key)
	changes = append(changes, portChanges...)
	if err == nil {
		err = blocked
	}
	return changes, netbackend.Outcome{Created: created, Ports: ports}, err
}

// attachedPorts returns the names of the ports of link (nil: none yet) and of the remembered
// ports of key that exist without a master (to be attached again): the pods on the bridge.
func (b *Backend) attachedPorts(link netlink.Link, key string) ([]string, error) {
	links, err := dump(b.h.LinkList)
	if err != nil {
		return nil, err
	}
	ports := map[int]string{}
	if link != nil {
		ports = portsOf(links, link.Attrs().Index)
	}
	remembered := b.rememberedPorts(key)
	for _, l := range links {
		a := l.Attrs()
		if n, ok := remembered[a.Index]; ok && n == a.Name && a.MasterIndex == 0 {
			ports[a.Index] = a.Name
		}
	}
	return sortedNames(ports), nil
}

// leaseHolder returns the container ID to which host-local leased ip in key's network, "" when
// none: host-local records a lease as a file named by the address in its network's directory.
func (b *Backend) leaseHolder(key string, ip netip.Addr) string {
	content, err := os.ReadFile(filepath.Join(b.leaseDir(key), ip.String()))
	if err != nil {
		return ""
	}
	if id, _, _ := strings.Cut(strings.TrimSpace(string(content)), "\n"); strings.TrimSpace(id) != "" {
		return strings.TrimSpace(id)
	}
	return "(unknown container)"
}

// ipamDataDir is host-local's data directory: one directory per network name.
func (b *Backend) ipamDataDir() string {
	if b.cfg.IPAMDataDir != "" {
		return b.cfg.IPAMDataDir
	}
	return DefaultIPAMDataDir
}

// leaseDir is the directory in which host-local records key's leases.
func (b *Backend) leaseDir(key string) string {
	return filepath.Join(b.ipamDataDir(), NetworkName(key))
}

// leases returns the addresses host-local holds for key (a file named by each address), sorted,
// and whether host-local has a directory for key at all (it keeps one, with its lock file,
// after the last lease went).
func (b *Backend) leases(key string) ([]string, bool, error) {
	entries, err := os.ReadDir(b.leaseDir(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	var out []string
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil && e.Type().IsRegular() {
			out = append(out, e.Name())
		}
	}
	return out, true, nil // ReadDir sorts by name
}

// leaseDirKeys returns the keys of the networks that have a directory of ours in host-local's
// data directory (named by NetworkName, so only names it can map back are recognised).
func (b *Backend) leaseDirKeys() ([]string, error) {
	entries, err := readDirIfExists(b.ipamDataDir())
	if err != nil {
		return nil, err
	}
	var keys []string
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "samplecrd_")
		namespace, name, found := strings.Cut(rest, "_")
		if !ok || !found || !e.IsDir() {
			continue
		}
		if key := namespace + "/" + name; NetworkName(key) == e.Name() {
			keys = append(keys, key)
		}
	}
	return keys, nil
}

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

// ensurePorts attaches again the ports key's bridge had and lost (the bridge was deleted and
// recreated, or a port was detached by hand): each remembered port that still exists with its
// name and has no master is made a port again, with hairpin mode as the configuration asks.
// A remembered port now enslaved elsewhere is ReasonPortsDetached: its pod is cut off. It
// returns the changes and the names of the bridge's ports afterwards.
func (b *Backend) ensurePorts(link netlink.Link, key string) ([]string, []string, error) {
	name, index := link.Attrs().Name, link.Attrs().Index
	links, err := dump(b.h.LinkList)
	if err != nil {
		return nil, nil, fail(err, "listing links")
	}
	current := portsOf(links, index)
	attached := maps.Clone(current)
	byIndex := map[int]netlink.Link{}
	for _, l := range links {
		byIndex[l.Attrs().Index] = l
	}
	var changes, detached []string
	var failure error
	for i, portName := range b.rememberedPorts(key) {
		if _, ok := current[i]; ok {
			continue
		}
		port, ok := byIndex[i]
		if !ok || port.Attrs().Name != portName {
			continue // gone (the pod was deleted): forgotten below
		}
		if port.Attrs().MasterIndex != 0 {
			detached = append(detached, portName)
			current[i] = portName // still remembered: it may come back
			continue
		}
		if err := b.h.LinkSetMaster(port, link); err != nil {
			if errors.Is(err, unix.ENODEV) {
				continue
			}
			failure = fail(err, "attaching port %s to bridge %s again", portName, name)
			current[i] = portName
			continue
		}
		if err := b.h.LinkSetHairpin(port, true); err != nil && !errors.Is(err, unix.ENODEV) {
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
		if err := b.h.LinkDel(leftover); err != nil && !errors.Is(err, unix.ENODEV) {
			return nil, nil, fail(err, "deleting %s, left by an interrupted creation", staging)
		}
		changes = append(changes, fmt.Sprintf("deleted %s, left by an interrupted creation", staging))
	}
	attrs := netlink.NewLinkAttrs()
	attrs.Name = staging
	attrs.MTU = mtu
	attrs.HardwareAddr = mac
	if err := b.h.LinkAdd(&netlink.Bridge{LinkAttrs: attrs}); err != nil {
		return nil, changes, fail(err, "creating bridge %s for network %s", staging, key)
	}
	link, err := b.linkByName(staging)
	if err == nil && link == nil {
		err = errors.New("it vanished")
	}
	if err != nil {
		return nil, changes, fail(err, "looking up new bridge %s", staging)
	}
	undo := func() { _ = b.h.LinkDel(link) }
	if err := b.h.LinkSetAlias(link, Alias(key)); err != nil {
		undo()
		return nil, changes, fail(err, "setting the alias of new bridge %s", staging)
	}
	if err := b.h.LinkSetName(link, name); err != nil {
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

// ensureAddress leaves exactly the gateway (with the prefix's length) on the bridge, apart from
// IPv6 link-local addresses. The gateway found on another interface of the namespace is
// ReasonAddressInUse: the kernel itself accepts one address on several interfaces, so this is
// checked before adding; EADDRINUSE or EEXIST from the kernel are reported the same way.
func (b *Backend) ensureAddress(link netlink.Link, d netbackend.Desired) ([]string, error) {
	name := link.Attrs().Name
	want := netip.PrefixFrom(d.Gateway, d.Prefix.Bits())
	addrs, err := b.bridgeAddrs(link)
	if err != nil {
		return nil, fail(err, "listing the addresses of bridge %s", name)
	}
	var changes []string
	removed := false
	for _, p := range addrs {
		if p == want {
			continue
		}
		if err := b.h.AddrDel(link, netlinkAddr(p)); err != nil && !errors.Is(err, unix.EADDRNOTAVAIL) {
			return changes, fail(err, "removing stale address %s from bridge %s", p, name)
		}
		changes = append(changes, fmt.Sprintf("removed stale address %s from %s", p, name))
		removed = true
	}
	if removed { // deleting a primary IPv4 address can take the secondaries with it
		if addrs, err = b.bridgeAddrs(link); err != nil {
			return changes, fail(err, "listing the addresses of bridge %s", name)
		}
	}
	if slices.Contains(addrs, want) {
		return changes, nil
	}
	if holder := b.leaseHolder(d.Key, d.Gateway); holder != "" {
		return changes, netbackend.Errorf(netbackend.ReasonAddressInUse,
			"gateway %s of network %s is leased by host-local to container %s; not adding it to bridge %s", d.Gateway, d.Key, holder, name)
	}
	if holder, err := b.addressHolder(d.Gateway, link.Attrs().Index); err != nil {
		return changes, fail(err, "listing the addresses of the namespace")
	} else if holder != "" {
		return changes, netbackend.Errorf(netbackend.ReasonAddressInUse,
			"gateway %s of network %s is already on interface %s; not adding it to bridge %s", d.Gateway, d.Key, holder, name)
	}
	if err := b.h.AddrAdd(link, netlinkAddr(want)); err != nil {
		if errors.Is(err, unix.EADDRINUSE) || errors.Is(err, unix.EEXIST) {
			return changes, &netbackend.Error{Reason: netbackend.ReasonAddressInUse,
				Err: fmt.Errorf("adding gateway %s to bridge %s: %w", want, name, err)}
		}
		return changes, fail(err, "adding gateway %s to bridge %s", want, name)
	}
	return append(changes, fmt.Sprintf("added address %s to %s", want, name)), nil
}

// netlinkAddr is the netlink form of p. IPv6 gateways skip duplicate address detection so
// that they are usable at once (host-local never hands the gateway out).
func netlinkAddr(p netip.Prefix) *netlink.Addr {
	a := &netlink.Addr{IPNet: &net.IPNet{
		IP:   p.Addr().AsSlice(),
		Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen()),
	}}
	if p.Addr().Is6() {
		a.Flags = unix.IFA_F_NODAD
	}
	return a
}

// addressHolder returns the name of an interface other than index that has ip, "" if none.
func (b *Backend) addressHolder(ip netip.Addr, index int) (string, error) {
	family := netlink.FAMILY_V4
	if ip.Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := dump(func() ([]netlink.Addr, error) { return b.h.AddrList(nil, family) })
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if p, ok := prefixOf(a.IP, 0); !ok || p.Addr() != ip || a.LinkIndex == index {
			continue
		}
		if l, err := b.h.LinkByIndex(a.LinkIndex); err == nil {
			return l.Attrs().Name, nil
		}
		return fmt.Sprintf("index %d", a.LinkIndex), nil
	}
	return "", nil
}

// Remove implements netbackend.Backend: it deletes key's bridge and configuration if they are
// ours and leaves anything else with their names alone.
func (b *Backend) Remove(_ context.Context, key string) error {
	if key == "" {
		return netbackend.Errorf(netbackend.ReasonBackendError, "network key is empty")
	}
	name := netbackend.BridgeName(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	link, err := b.linkByName(name)
	if err != nil {
		return fail(err, "looking up bridge %s of network %s", name, key)
	}
	if link != nil && isOurs(link, key) {
		if err := b.h.LinkDel(link); err != nil && !errors.Is(err, unix.ENODEV) {
			return fail(err, "deleting bridge %s of network %s", name, key)
		}
	}
	staged, err := b.linkByName(stagingName(key))
	if err != nil {
		return fail(err, "looking up %s", stagingName(key))
	}
	if staged != nil && isStaged(staged, key) {
		if err := b.h.LinkDel(staged); err != nil && !errors.Is(err, unix.ENODEV) {
			return fail(err, "deleting %s of network %s", stagingName(key), key)
		}
	}
	_, state, err := readConfig(b.cfg.CNIConfDir, key)
	if err != nil {
		return fail(err, "reading the CNI configuration of network %s", key)
	}
	if state == confOurs {
		path := ConfPath(b.cfg.CNIConfDir, key)
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fail(err, "removing CNI configuration %s", path)
		}
		if err := syncDir(b.cfg.CNIConfDir); err != nil {
			return fail(err, "syncing %s", b.cfg.CNIConfDir)
		}
	}
	// host-local's reservations for the network: without the configuration no runtime can DEL
	// against it any more, so whatever is left there is a leak.
	leases := b.leaseDir(key)
	if _, err := os.Lstat(leases); err == nil {
		if err := os.RemoveAll(leases); err != nil {
			return fail(err, "removing host-local's leftover reservations %s", leases)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return fail(err, "looking at host-local's reservations %s", leases)
	}
	b.forget(key)
	return nil
}

// List implements netbackend.Backend: the keys in the aliases of our bridges (including one
// left under its staging name) and in our configuration lists, sorted.
func (b *Backend) List(context.Context) ([]string, error) {
	b.mu.Lock()
	links, err := dump(b.h.LinkList)
	b.mu.Unlock()
	if err != nil {
		return nil, fail(err, "listing links")
	}
	var keys []string
	for _, l := range links {
		key, ok := KeyOfAlias(l.Attrs().Alias)
		switch {
		case ok && isOurs(l, key):
			keys = append(keys, key)
			b.remember(key, l.Attrs().Name, l.Attrs().Index)
		case ok && isStaged(l, key):
			keys = append(keys, key) // left by an interrupted creation; Remove deletes it
		}
	}
	confKeys, err := listConfigKeys(b.cfg.CNIConfDir)
	if err != nil {
		return nil, fail(err, "listing CNI configurations in %s", b.cfg.CNIConfDir)
	}
	for _, key := range confKeys {
		b.remember(key, netbackend.BridgeName(key), 0)
	}
	keys = append(keys, confKeys...)
	leaseKeys, err := b.leaseDirKeys()
	if err != nil {
		return nil, fail(err, "listing host-local's data directory %s", b.ipamDataDir())
	}
	keys = append(keys, leaseKeys...)
	slices.Sort(keys)
	return slices.Compact(keys), nil
}
