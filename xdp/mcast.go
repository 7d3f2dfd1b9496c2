// Multicast groups of a Link (roce.GroupJoiner). The steering program
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
	"io"
	"net/netip"
	"sync"

	"golang.org/x/sys/unix"
)

// JoinGroup joins group on the link's interface (roce.GroupJoiner) until
// the returned membership is closed. The kernel joins it in the network
// namespace of the calling thread, which must be the interface's. The
// caller (the device) keeps the memberships: each call opens a socket,
// and the kernel leaves the group when its last member closes.
func (l *Link) JoinGroup(group netip.Addr) (io.Closer, error) {
	group = group.Unmap()
	if !group.IsMulticast() {
		return nil, fmt.Errorf("xdp: %v is not a multicast group", group)
	}
	fd, err := joinSocket(group, l.s.ifindex)
	if err != nil {
		return nil, fmt.Errorf("xdp: join %v on %s: %w", group, l.s.ifname, err)
	}
	return &membership{fd: fd}, nil
}

// membership is a socket that is a member of a group; Close leaves.
type membership struct {
	once sync.Once
	fd   int
	err  error
}

// Close closes the socket, once.
func (m *membership) Close() error {
	m.once.Do(func() { m.err = unix.Close(m.fd) })
	return m.err
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
