package udplink

// Multicast groups (roce.GroupJoiner). A socket bound to one unicast
// address receives no datagram sent to a group, so each group the device
// joins gets a socket of its own, bound to the group's address and port
// 4791 (shared with other devices of the host, SO_REUSEADDR) and a member
// of the group on the interface of the link's address. A goroutine per
// group reads it and queues the datagrams, behind the same synthetic
// headers as the link's own (the group as destination), for ReadBatch,
// which takes them first. The link's own socket sends to a group through
// that interface, and the kernel loops the datagram back to the host's
// members, the device itself among them.

import (
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// mcastHops is the TTL or hop limit of datagrams to a group: the hop
// limit sroce's packets carry (an AH's 0 is 64).
const mcastHops = 64

// maxMcastQueue bounds the datagrams from groups waiting for ReadBatch;
// beyond it they are dropped, as a full socket drops them.
const maxMcastQueue = 1024

// mcast is the link's multicast state.
type mcast struct {
	mu     sync.Mutex
	queue  [][]byte // synthesized frames, oldest first
	queued atomic.Int32
	ifi    *net.Interface
}

// JoinGroup makes the link receive datagrams to group (roce.GroupJoiner)
// until the returned membership is closed: a socket of the group's own,
// whose datagrams a goroutine queues for ReadBatch. The caller (the
// device) keeps the memberships; it must close them before the link.
func (l *Link) JoinGroup(group netip.Addr) (io.Closer, error) {
	group = group.Unmap()
	if !group.IsMulticast() || group.Is6() != l.v6 {
		return nil, fmt.Errorf("udplink: %v is not a multicast group of the link's IP version", group)
	}
	m := &l.mc
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ifi == nil {
		// Open found no interface with the address; it may have one now.
		ifi, err := interfaceOf(l.local)
		if err != nil {
			return nil, err
		}
		if err := l.useGroupInterface(ifi); err != nil {
			return nil, err
		}
	}
	conn, err := l.groupSocket(group)
	if err != nil {
		return nil, err
	}
	ga := &net.UDPAddr{IP: net.IP(group.AsSlice())}
	if l.v6 {
		err = ipv6.NewPacketConn(conn).JoinGroup(m.ifi, ga)
	} else {
		err = ipv4.NewPacketConn(conn).JoinGroup(m.ifi, ga)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("udplink: join %v on %s: %w", group, m.ifi.Name, err)
	}
	go l.readGroup(conn, group)
	return conn, nil // the kernel leaves the group with the socket
}

// groupSocket opens a UDP socket bound to group and the link's port. Go's
// net package would bind a multicast address as the wildcard, which
// would take the unicast datagrams of every address of the host; the
// group's own address takes only the group's.
func (l *Link) groupSocket(group netip.Addr) (*net.UDPConn, error) {
	family := unix.AF_INET
	var sa unix.Sockaddr = &unix.SockaddrInet4{Port: int(l.port), Addr: group.As4()}
	if l.v6 {
		family = unix.AF_INET6
		sa = &unix.SockaddrInet6{Port: int(l.port), Addr: group.As16()}
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return nil, fmt.Errorf("udplink: socket for group %v: %w", group, err)
	}
	err = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEADDR, 1)
	if err == nil && l.v6 {
		err = unix.SetsockoptInt(fd, unix.SOL_UDP, unix.UDP_NO_CHECK6_RX, 1)
	}
	if err == nil {
		err = unix.Bind(fd, sa)
	}
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("udplink: bind group %v port %d: %w", group, l.port, err)
	}
	f := os.NewFile(uintptr(fd), "udplink-group")
	defer f.Close()
	pc, err := net.FilePacketConn(f)
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// readGroup queues the datagrams to group until its socket closes.
func (l *Link) readGroup(conn *net.UDPConn, group netip.Addr) {
	buf := make([]byte, l.mtu+1) // one byte more shows a datagram too large
	for {
		n, src, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if n > l.mtu {
			atomic.AddUint64(&l.stats.RxTruncated, 1)
			continue
		}
		f := make([]byte, l.hdrLen+n)
		copy(f[l.hdrLen:], buf[:n])
		l.synthesizeTo(f, src, group, n)
		if !l.v6 {
			if ok, rec := checkIPv4(f); !ok {
				atomic.AddUint64(&l.stats.RxICRCMismatch, 1)
			} else if rec {
				atomic.AddUint64(&l.stats.RxIPIDRecovered, 1)
			}
		}
		m := &l.mc
		m.mu.Lock()
		first := len(m.queue) == 0
		if len(m.queue) < maxMcastQueue {
			m.queue = append(m.queue, f)
			m.queued.Store(int32(len(m.queue)))
		}
		m.mu.Unlock()
		if first {
			l.Wake() // a reader that took the queue empty may be asleep
		}
	}
}

// takeGroupFrames moves queued group datagrams into bufs and returns how
// many; a frame larger than its buffer is dropped as truncated.
func (l *Link) takeGroupFrames(bufs [][]byte, sizes []int, n int) int {
	m := &l.mc
	if m.queued.Load() == 0 {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	out, k, bytes := 0, 0, 0
	for ; k < len(m.queue) && out < n; k++ {
		f := m.queue[k]
		if len(f) > len(bufs[out]) {
			atomic.AddUint64(&l.stats.RxTruncated, 1)
			continue
		}
		sizes[out] = copy(bufs[out], f)
		bytes += len(f) - l.hdrLen
		out++
	}
	rest := copy(m.queue, m.queue[k:])
	clear(m.queue[rest:])
	m.queue = m.queue[:rest]
	m.queued.Store(int32(rest))
	atomic.AddUint64(&l.stats.RxPackets, uint64(out))
	atomic.AddUint64(&l.stats.RxBytes, uint64(bytes))
	return out
}

// useGroupInterface makes ifi the interface the link joins groups on and
// its socket sends to groups through (with l.mc.mu held, or before the
// link is shared).
func (l *Link) useGroupInterface(ifi *net.Interface) error {
	var err error
	if l.v6 {
		err = ipv6.NewPacketConn(l.conn).SetMulticastInterface(ifi)
	} else {
		err = ipv4.NewPacketConn(l.conn).SetMulticastInterface(ifi)
	}
	if err != nil {
		return fmt.Errorf("udplink: multicast interface %s: %w", ifi.Name, err)
	}
	l.mc.ifi = ifi
	return nil
}

// interfaceOf returns the interface that has address a.
func interfaceOf(a netip.Addr) (*net.Interface, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil, err
	}
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, ad := range addrs {
			if n, ok := ad.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok && (ip.Unmap() == a || a.IsLoopback() && ip.IsLoopback() && n.Contains(net.IP(a.AsSlice()))) {
					return &ifs[i], nil
				}
			}
		}
	}
	return nil, fmt.Errorf("udplink: no interface has address %v", a)
}
