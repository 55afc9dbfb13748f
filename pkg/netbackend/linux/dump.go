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
	"net/netip"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// A bridge's ports are asked of the kernel with a link dump filtered by master (IFLA_MASTER in
// the request, as `ip link show master BRIDGE` does): the kernel sends only the bridge's ports,
// so finding them costs the same with 10 bridges in the namespace or 10,000. An unfiltered dump
// made each Network's reconcile cost O(Networks on the node) in parsing alone (the profile of
// 1000 Networks created at once spent 44% of the server's CPU in LinkList). vishvananda/netlink
// has no filtered form, so the request is built here and sent on a socket of its own in the
// namespace. A kernel without the filter answers with every link; portsOf filters again.

// The addresses of one link likewise: vishvananda/netlink's AddrList dumps every address of
// the namespace and keeps the link's; with strict checking on the socket
// (NETLINK_GET_STRICT_CHK, Linux 4.20) the kernel sends only those of the index in the
// request's ifaddrmsg. Without strict checking the kernel sends all; addrsOf filters again.

// openDumpSocket opens the route socket of the filtered dumps in ns, with strict checking.
func openDumpSocket(ns netns.NsHandle) (*nl.SocketHandle, error) {
	s, err := nl.GetNetlinkSocketAt(ns, netns.None(), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, err
	}
	// An older kernel refuses the option: its dumps are unfiltered, and the callers filter.
	_ = unix.SetsockoptInt(s.GetFd(), unix.SOL_NETLINK, unix.NETLINK_GET_STRICT_CHK, 1)
	return &nl.SocketHandle{Socket: s}, nil
}

// linkAddrs returns the addresses (with their prefix lengths) on the link with index, of
// family (unix.AF_UNSPEC for both). Callers hold b.mu (for reading).
func (b *Backend) linkAddrs(index, family int) ([]netip.Prefix, error) {
	return dump(func() ([]netip.Prefix, error) {
		netlinkRequests.Inc()
		req := nl.NewNetlinkRequest(unix.RTM_GETADDR, unix.NLM_F_DUMP)
		req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: b.dumpSock}
		msg := nl.NewIfAddrmsg(family)
		msg.Index = uint32(index)
		req.AddData(msg)
		msgs, execErr := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWADDR)
		if execErr != nil && !errors.Is(execErr, netlink.ErrDumpInterrupted) {
			return nil, execErr
		}
		return addrsOf(msgs, index), execErr
	})
}

// addrsOf parses RTM_NEWADDR messages and keeps the addresses of the link with index: IFA_LOCAL
// where present (IPv4; IFA_ADDRESS is then the peer), else IFA_ADDRESS.
func addrsOf(msgs [][]byte, index int) []netip.Prefix {
	var out []netip.Prefix
	for _, m := range msgs {
		if len(m) < unix.SizeofIfAddrmsg {
			continue
		}
		h := nl.DeserializeIfAddrmsg(m)
		if int(h.Index) != index {
			continue
		}
		attrs, err := nl.ParseRouteAttr(m[unix.SizeofIfAddrmsg:])
		if err != nil {
			continue
		}
		var local, address []byte
		for _, a := range attrs {
			switch a.Attr.Type {
			case unix.IFA_LOCAL:
				local = a.Value
			case unix.IFA_ADDRESS:
				address = a.Value
			}
		}
		ip := local
		if ip == nil {
			ip = address
		}
		if p, ok := prefixOf(ip, int(h.Prefixlen)); ok {
			out = append(out, p)
		}
	}
	return out
}

// portLinks returns the links whose master is the link with index master (its ports), and may
// return others where the kernel does not filter. Callers hold b.mu (for reading).
func (b *Backend) portLinks(master int) ([]netlink.Link, error) {
	return dump(func() ([]netlink.Link, error) {
		netlinkRequests.Inc()
		req := nl.NewNetlinkRequest(unix.RTM_GETLINK, unix.NLM_F_DUMP)
		req.Sockets = map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: b.dumpSock}
		req.AddData(nl.NewIfInfomsg(unix.AF_UNSPEC))
		req.AddData(nl.NewRtAttr(unix.IFLA_EXT_MASK, nl.Uint32Attr(nl.RTEXT_FILTER_VF)))
		req.AddData(nl.NewRtAttr(unix.IFLA_MASTER, nl.Uint32Attr(uint32(master))))
		msgs, execErr := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWLINK)
		if execErr != nil && !errors.Is(execErr, netlink.ErrDumpInterrupted) {
			return nil, execErr
		}
		links := make([]netlink.Link, 0, len(msgs))
		for _, m := range msgs {
			l, err := netlink.LinkDeserialize(nil, m)
			if err != nil {
				return nil, err
			}
			links = append(links, l)
		}
		return links, execErr
	})
}

// linkByIndex returns the link with index, nil when there is none.
func (b *Backend) linkByIndex(index int) (netlink.Link, error) {
	l, err := b.nl().LinkByIndex(index)
	var notFound netlink.LinkNotFoundError
	if errors.As(err, &notFound) || errors.Is(err, unix.ENODEV) {
		return nil, nil
	}
	return l, err
}
