// Multicast groups of a Link (roce.GroupListener). The steering program
// sends every UDP 4791 frame to the socket, multicast ones included, but a
// NIC drops frames to Ethernet addresses it was not told of, and switches
// that snoop IGMP or MLD forward a group only to ports that reported it.
// So a group the device joins is joined on the interface by the kernel's
// IP stack: a datagram socket of the group's family, a member of the
// group on the link's interface for as long as a QP is attached, makes
// the kernel add the group's Ethernet address to the NIC's filter and
// answer queries (rdma_rxe's attach adds only the Ethernet address; the
// IGMP or MLD membership comes from rdma_cm's join, which a program
// without rdma_cm does not make). The socket binds no port and
// receives nothing: the group's frames go to the AF_XDP socket.

package xdp

import (
	"fmt"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"
)

// groups holds the membership sockets of a Link's groups.
type groups struct {
	mu  sync.Mutex
	fds map[netip.Addr]int
}

// JoinGroup joins group on the link's interface. The kernel joins it in
// the network namespace of the calling thread, which must be the
// interface's.
func (l *Link) JoinGroup(group netip.Addr) error {
	group = group.Unmap()
	if !group.IsMulticast() {
		return fmt.Errorf("xdp: %v is not a multicast group", group)
	}
	g := &l.mc
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.fds[group]; ok {
		return nil
	}
	fd, err := joinSocket(group, l.s.ifindex)
	if err != nil {
		return fmt.Errorf("xdp: join %v on %s: %w", group, l.s.ifname, err)
	}
	if g.fds == nil {
		g.fds = make(map[netip.Addr]int)
	}
	g.fds[group] = fd
	return nil
}

// LeaveGroup leaves group on the link's interface.
func (l *Link) LeaveGroup(group netip.Addr) error {
	group = group.Unmap()
	g := &l.mc
	g.mu.Lock()
	defer g.mu.Unlock()
	fd, ok := g.fds[group]
	if !ok {
		return nil
	}
	delete(g.fds, group)
	return unix.Close(fd) // the kernel leaves the group with its last member
}

// closeAll leaves every group, as the link closes.
func (g *groups) closeAll() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for a, fd := range g.fds {
		unix.Close(fd)
		delete(g.fds, a)
	}
}

// joinSocket opens a datagram socket that is a member of group on the
// interface ifindex.
func joinSocket(group netip.Addr, ifindex int) (int, error) {
	family := unix.AF_INET
	if group.Is6() {
		family = unix.AF_INET6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return -1, err
	}
	if group.Is6() {
		err = unix.SetsockoptIPv6Mreq(fd, unix.IPPROTO_IPV6, unix.IPV6_JOIN_GROUP,
			&unix.IPv6Mreq{Multiaddr: group.As16(), Interface: uint32(ifindex)})
	} else {
		err = unix.SetsockoptIPMreqn(fd, unix.IPPROTO_IP, unix.IP_ADD_MEMBERSHIP,
			&unix.IPMreqn{Multiaddr: group.As4(), Ifindex: int32(ifindex)})
	}
	if err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}
