// Package udplink moves RoCEv2 frames over an ordinary kernel UDP socket
// bound to port 4791, for hosts where AF_XDP is unavailable or the user is
// not root.
//
// The engine speaks whole Ethernet frames to every link. On transmit this
// link takes the BTH-to-ICRC part of each frame and sends it with sendmmsg to
// the frame's IP destination; the kernel builds the real IP and UDP headers.
// On receive it reads datagrams with recvmmsg and puts a synthetic Ethernet,
// IP and UDP header in front of each, so the engine sees the same layout as
// on AF_XDP.
//
// What a UDP socket cannot do, and how the link copes:
//
//   - The UDP source port is the socket's port, not the per-QP port rxe
//     derives from the QPN; the receiver only needs the destination port.
//   - The kernel picks the IPv4 Identification, which the ICRC covers. An
//     unconnected socket that sets DF sends Identification 0, so the link
//     rewrites the IP ID, DF bit and UDP source port of each frame to what
//     the kernel will send and recomputes the ICRC before sending.
//   - On receive the IP header is not visible. The link builds one with
//     what the socket does show (addresses, lengths, the UDP source port);
//     TOS, TTL and the checksum are masked out of the ICRC, and DF is taken
//     as set, as rxe, RoCE NICs and this link send it. The destination is
//     the bound address: a socket bound to one unicast address only
//     receives datagrams sent to it. Over IPv6 nothing the ICRC covers is
//     missing, so the engine checks it as on any link. Over IPv4 the
//     Identification is missing: the header says 0, which matches what
//     another sroce UDP link sends, and when the ICRC does not match the
//     link solves for the Identification that makes it match (see
//     icrc.go) and writes it into the header. A datagram for which none
//     exists keeps ID 0 and a mismatching ICRC, and the engine drops it
//     under icrc_error. A forged ICRC survives this with probability 2^-16.
//   - IPv6 peers that send a zero UDP checksum (rxe does) are accepted by
//     enabling UDP_NO_CHECK6_RX.
package udplink

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/roce/linkcap"
)

// Stats counts what the link saw.
type Stats struct {
	RxPackets   uint64 // datagrams received and handed to the engine
	TxPackets   uint64 // datagrams sent
	RxBytes     uint64 // UDP payload bytes (BTH to ICRC) of RxPackets
	TxBytes     uint64 // UDP payload bytes of TxPackets
	RxTruncated uint64 // datagrams larger than the caller's buffer
	TxMalformed uint64 // frames the link could not parse and did not send
	// RxIPIDRecovered counts IPv4 datagrams whose ICRC matched only with a
	// nonzero IP Identification, which the link solved for (traffic from
	// rxe or a NIC). Such a match is worth 16 bits, not 32.
	RxIPIDRecovered uint64
	// RxICRCMismatch counts IPv4 datagrams whose ICRC no Identification
	// explains; they are handed up unchanged and the engine drops them
	// under icrc_error.
	RxICRCMismatch uint64
}

// Link is a RoCEv2 link over a UDP socket. ReadBatch is called by one
// goroutine; WriteBatch by one goroutine (possibly the same); Wake from any.
type Link struct {
	conn    *net.UDPConn
	batch   batchConn
	local   netip.Addr
	port    uint16
	mac     net.HardwareAddr
	mtu     int
	v6      bool
	hdrLen  int // synthetic header length put in front of received datagrams
	rxMsgs  []ipv4.Message
	txMsgs  []ipv4.Message
	txBufs  [][1][]byte
	rxBufs  [][1][]byte
	woken   atomic.Bool
	closed  atomic.Bool
	stats   Stats
	pkt     bth.Packet
	txAddrs []net.UDPAddr
	// waitF is a duplicate of conn's socket in the runtime's poller, where
	// WaitReady blocks: a wait on conn itself would hold conn's read lock
	// and stall the goroutine that reads meanwhile.
	waitF   *os.File
	rc      syscall.RawConn    // waitF's raw access
	peekFn  func(uintptr) bool // peek, allocated once
	peekBuf [1]byte
	mc      mcast // multicast groups (mcast.go)
}

// batchConn is what ipv4.PacketConn and ipv6.PacketConn have in common.
type batchConn interface {
	ReadBatch(ms []ipv4.Message, flags int) (int, error)
	WriteBatch(ms []ipv4.Message, flags int) (int, error)
}

// MaxBatch is the most datagrams one ReadBatch or WriteBatch call moves.
const MaxBatch = 64

// Open binds a UDP socket to addr and port (0 means 4791). mtu is the
// interface MTU to report (0: the MTU of the interface that owns addr).
func Open(addr netip.Addr, port int, mtu int) (*Link, error) {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return nil, errors.New("udplink: no local address")
	}
	if addr.IsUnspecified() || addr.IsMulticast() {
		// The destination address is covered by the ICRC and the socket
		// does not report it: bound to one unicast address, it is that.
		return nil, fmt.Errorf("udplink: %v is not a unicast address", addr)
	}
	if port == 0 {
		port = bth.UDPPort
	}
	// The interface that has the address gives the MTU (unless given) and
	// the interface datagrams to groups leave by: without it, IPv6 would
	// send them where the kernel's multicast route points.
	ifi, ifErr := interfaceOf(addr)
	if mtu == 0 {
		if ifErr != nil {
			return nil, ifErr
		}
		mtu = ifi.MTU
	}
	network := "udp4"
	if addr.Is6() {
		network = "udp6"
	}
	conn, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, uint16(port))))
	if err != nil {
		return nil, fmt.Errorf("udplink: bind %v port %d: %w", addr, port, err)
	}
	l := &Link{conn: conn, local: addr, port: uint16(port), mtu: mtu, v6: addr.Is6()}
	if err := l.setSockopts(); err != nil {
		l.Close()
		return nil, err
	}
	if ifErr == nil {
		// Else the first JoinGroup looks again and fails if it finds none.
		if err := l.useGroupInterface(ifi); err != nil {
			l.Close()
			return nil, err
		}
	}
	if l.v6 {
		l.batch = ipv6.NewPacketConn(conn)
		l.hdrLen = bth.EthernetLen + bth.IPv6Len + bth.UDPLen
	} else {
		l.batch = ipv4.NewPacketConn(conn)
		l.hdrLen = bth.EthernetLen + bth.IPv4MinLen + bth.UDPLen
	}
	l.mac = syntheticMAC(addr)
	l.rxMsgs = make([]ipv4.Message, MaxBatch)
	l.rxBufs = make([][1][]byte, MaxBatch)
	l.txMsgs = make([]ipv4.Message, MaxBatch)
	l.txBufs = make([][1][]byte, MaxBatch)
	l.txAddrs = make([]net.UDPAddr, MaxBatch)
	for i := range l.txAddrs {
		l.txAddrs[i].IP = make(net.IP, 16)
	}
	return l, nil
}

func (l *Link) setSockopts() error {
	rc, err := l.conn.SyscallConn()
	if err != nil {
		return err
	}
	l.peekFn = l.peek
	var derr error
	if cerr := rc.Control(func(fd uintptr) {
		var nfd int
		nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		if derr == nil {
			l.waitF = os.NewFile(uintptr(nfd), "udplink")
		}
	}); cerr != nil || derr != nil {
		return fmt.Errorf("udplink: duplicate the socket: %w", errors.Join(cerr, derr))
	}
	if l.rc, err = l.waitF.SyscallConn(); err != nil {
		return err
	}
	var serr error
	err = rc.Control(func(fd uintptr) {
		if l.v6 {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_UDP, unix.UDP_NO_CHECK6_RX, 1)
			if serr == nil {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_DO)
			}
		} else {
			// DF on an unconnected socket: the kernel sends IP ID 0.
			serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
		}
		if serr == nil {
			// Datagrams to a group cross routers as unicast ones do
			// (the kernel's multicast default is one hop).
			if l.v6 {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MULTICAST_HOPS, mcastHops)
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MULTICAST_TTL, mcastHops)
			}
		}
		if serr == nil {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		}
	})
	if err != nil {
		return err
	}
	if serr != nil {
		return fmt.Errorf("udplink: socket options: %w", serr)
	}
	return nil
}

// syntheticMAC makes a stable locally administered MAC from an address, so
// frames the link synthesizes carry a recognisable source.
func syntheticMAC(a netip.Addr) net.HardwareAddr {
	b := a.As16()
	return net.HardwareAddr{0x02, 0x52, b[12], b[13], b[14], b[15]}
}

// LocalAddr returns the address the socket is bound to.
func (l *Link) LocalAddr() netip.Addr { return l.local }

// Port returns the local UDP port.
func (l *Link) Port() int { return int(l.port) }

// MTU returns the interface MTU.
func (l *Link) MTU() int { return l.mtu }

// HardwareAddr returns the link's synthetic MAC address.
func (l *Link) HardwareAddr() net.HardwareAddr { return l.mac }

// Caps implements roce.Link. The link waits without reading
// (roce.ReadyWaiter) and joins multicast groups on sockets of its own
// (roce.GroupJoiner). The kernel delivers a datagram to the socket's own
// address back to it, and the interface's other addresses may be other
// devices' (two devices on lo): linkcap.DeliversToSelf. It is not
// linkcap.ICRCBlind: the IPv4 Identification, the one covered field a
// UDP socket hides, is recovered from the ICRC itself (to 16 bits), so the
// engine checks every frame and drops those that do not match.
func (l *Link) Caps() linkcap.Caps {
	return linkcap.WaitReady | linkcap.Groups | linkcap.DeliversToSelf
}

// Stats returns a snapshot of the link's counters.
func (l *Link) Stats() Stats {
	return Stats{
		RxPackets:   atomic.LoadUint64(&l.stats.RxPackets),
		TxPackets:   atomic.LoadUint64(&l.stats.TxPackets),
		RxBytes:     atomic.LoadUint64(&l.stats.RxBytes),
		TxBytes:     atomic.LoadUint64(&l.stats.TxBytes),
		RxTruncated: atomic.LoadUint64(&l.stats.RxTruncated),
		TxMalformed: atomic.LoadUint64(&l.stats.TxMalformed),

		RxIPIDRecovered: atomic.LoadUint64(&l.stats.RxIPIDRecovered),
		RxICRCMismatch:  atomic.LoadUint64(&l.stats.RxICRCMismatch),
	}
}

// Wake makes a ReadBatch that is blocked, or the next one, return at once.
func (l *Link) Wake() {
	if !l.woken.Swap(true) {
		_ = l.conn.SetReadDeadline(time.Unix(1, 0))
		if l.waitF != nil {
			_ = l.waitF.SetReadDeadline(time.Unix(1, 0))
		}
	}
}

// Close closes the socket.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	if l.waitF != nil {
		l.waitF.Close()
	}
	return l.conn.Close()
}

// ReadBatch receives up to len(bufs) datagrams, waiting at most timeout (a
// negative timeout waits until a datagram arrives or Wake is called; zero
// takes what is queued without waiting). Each is stored in bufs[i] behind a
// synthetic Ethernet, IP and UDP header and sizes[i] is set to the frame
// length. It returns 0, nil on timeout or wake-up.
func (l *Link) ReadBatch(bufs [][]byte, sizes []int, timeout time.Duration) (int, error) {
	n := min(len(bufs), len(sizes), MaxBatch)
	if n == 0 {
		return 0, nil
	}
	if k := l.takeGroupFrames(bufs, sizes, n); k > 0 {
		return k, nil
	}
	ms := l.rxMsgs[:n]
	for i := range ms {
		if len(bufs[i]) <= l.hdrLen {
			return 0, errors.New("udplink: receive buffer too small")
		}
		l.rxBufs[i][0] = bufs[i][l.hdrLen:]
		ms[i].Buffers = l.rxBufs[i][:]
		ms[i].OOB = nil
	}
	var got int
	var err error
	if timeout == 0 {
		got, err = l.poll(ms)
	} else {
		got, err = l.wait(ms, timeout)
	}
	if err != nil || got == 0 {
		return 0, err
	}
	out, recovered, mismatched, bytes := 0, 0, 0, 0
	for i := 0; i < got; i++ {
		m := &ms[i]
		if m.Flags&unix.MSG_TRUNC != 0 || m.N >= len(bufs[i])-l.hdrLen {
			atomic.AddUint64(&l.stats.RxTruncated, 1)
			continue
		}
		ua, ok := m.Addr.(*net.UDPAddr)
		if !ok {
			continue
		}
		src := ua.AddrPort()
		if out != i { // compact over dropped datagrams
			copy(bufs[out][l.hdrLen:], bufs[i][l.hdrLen:l.hdrLen+m.N])
		}
		l.synthesize(bufs[out], src, m.N)
		sizes[out] = l.hdrLen + m.N
		bytes += m.N
		if !l.v6 {
			switch ok, rec := checkIPv4(bufs[out][:sizes[out]]); {
			case !ok:
				mismatched++
			case rec:
				recovered++
			}
		}
		out++
	}
	atomic.AddUint64(&l.stats.RxPackets, uint64(out))
	atomic.AddUint64(&l.stats.RxBytes, uint64(bytes))
	if recovered > 0 {
		atomic.AddUint64(&l.stats.RxIPIDRecovered, uint64(recovered))
	}
	if mismatched > 0 {
		atomic.AddUint64(&l.stats.RxICRCMismatch, uint64(mismatched))
	}
	return out, nil
}

// poll reads what is queued without blocking.
func (l *Link) poll(ms []ipv4.Message) (int, error) {
	got, err := l.batch.ReadBatch(ms, unix.MSG_DONTWAIT)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// A Wake left a deadline in the past, which fails even a
		// non-blocking read. Clear it; the wake-up itself stays pending in
		// l.woken for the next blocking read.
		if err = l.conn.SetReadDeadline(time.Time{}); err != nil {
			return 0, err
		}
		got, err = l.batch.ReadBatch(ms, unix.MSG_DONTWAIT)
	}
	return got, l.readErr(err)
}

// wait blocks until datagrams arrive, the timeout passes (negative: no
// timeout) or Wake is called.
func (l *Link) wait(ms []ipv4.Message, timeout time.Duration) (int, error) {
	if l.woken.Swap(false) {
		return 0, nil
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	if err := l.conn.SetReadDeadline(dl); err != nil {
		return 0, err
	}
	if l.woken.Swap(false) { // Wake raced with the deadline just set
		return 0, nil
	}
	got, err := l.batch.ReadBatch(ms, 0)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.woken.Store(false)
		return 0, nil
	}
	return got, l.readErr(err)
}

// WaitReady implements roce.ReadyWaiter: it waits up to timeout until a
// datagram is queued, or Wake is called, and takes nothing.
func (l *Link) WaitReady(timeout time.Duration) error {
	if l.woken.Swap(false) {
		return nil
	}
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	if err := l.waitF.SetReadDeadline(dl); err != nil {
		return l.readErr(err)
	}
	if l.woken.Swap(false) {
		return nil
	}
	err := l.rc.Read(l.peekFn)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		l.woken.Store(false)
		return nil
	}
	return l.readErr(err)
}

// Ready implements roce.ReadyWaiter. Only a system call could tell, so it
// says a datagram may be queued.
func (l *Link) Ready() bool { return true }

// peek reports whether a datagram is queued (or the socket has an error
// for the next read to report).
func (l *Link) peek(fd uintptr) bool {
	// Raw: a peek that never blocks needs none of the runtime's system
	// call bookkeeping, which would wake its monitor thread.
	_, _, e := unix.RawSyscall6(unix.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&l.peekBuf[0])), 1,
		unix.MSG_PEEK|unix.MSG_DONTWAIT, 0, 0)
	return e != unix.EAGAIN
}

func (l *Link) readErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.EAGAIN):
		return nil
	case l.closed.Load():
		return net.ErrClosed
	}
	return err
}

// synthesize writes Ethernet, IP and UDP headers for a datagram of n bytes
// from src to the local address in front of it.
func (l *Link) synthesize(b []byte, src netip.AddrPort, n int) {
	l.synthesizeTo(b, src, l.local, n)
}

// synthesizeTo is synthesize for a datagram to dst: the local address or
// a group.
func (l *Link) synthesizeTo(b []byte, src netip.AddrPort, dst netip.Addr, n int) {
	eth := bth.EthernetFields{DstMAC: [bth.MACLen]byte(l.mac), SrcMAC: [bth.MACLen]byte(syntheticMAC(src.Addr().Unmap()))}
	if m, ok := bth.GIDFromAddr(dst).MulticastMAC(); ok {
		eth.DstMAC = m
	}
	l3 := b[bth.EthernetLen:]
	var udp bth.UDP
	if l.v6 {
		eth.EtherType = bth.EtherTypeIPv6
		ip := bth.IPv6Fields{PayloadLen: uint16(bth.UDPLen + n), NextHeader: bth.IPProtocolUDP, HopLimit: 64,
			Src: netip.AddrFrom16(src.Addr().As16()), Dst: dst}
		_ = ip.Encode(bth.IPv6(l3))
		udp = bth.UDP(l3[bth.IPv6Len:])
	} else {
		eth.EtherType = bth.EtherTypeIPv4
		// ID unknown (see checkIPv4), DF.
		ip := bth.IPv4Fields{TotalLen: uint16(bth.IPv4MinLen + bth.UDPLen + n), Flags: bth.IPv4FlagDF,
			TTL: 64, Protocol: bth.IPProtocolUDP, Src: src.Addr().Unmap(), Dst: dst}
		_ = ip.Encode(bth.IPv4(l3))
		udp = bth.UDP(l3[bth.IPv4MinLen:])
	}
	eth.Encode(bth.Ethernet(b))
	u := bth.UDPFields{SrcPort: src.Port(), DstPort: bth.UDPPort, Length: uint16(bth.UDPLen + n)}
	u.Encode(udp)
}

// WriteBatch sends frames. Each must be a well-formed RoCEv2 frame from this
// link's address; the link rewrites its IP ID, DF bit and UDP source port to
// what the kernel will put on the wire and recomputes the ICRC, in place.
// Frames it cannot parse are counted in TxMalformed and skipped. It returns
// how many frames were consumed (sent or skipped).
func (l *Link) WriteBatch(frames [][]byte) (int, error) {
	done := 0
	for done < len(frames) {
		n := min(len(frames)-done, MaxBatch)
		ms := l.txMsgs[:0]
		for i := 0; i < n; i++ {
			f := frames[done+i]
			if err := l.pkt.Parse(f); err != nil {
				atomic.AddUint64(&l.stats.TxMalformed, 1)
				continue
			}
			p := &l.pkt
			if p.IPv6 != l.v6 {
				atomic.AddUint64(&l.stats.TxMalformed, 1)
				continue
			}
			p.UDP().SetSrcPort(l.port)
			if ip := p.IPv4Header(); ip != nil {
				ip.SetID(0)
				ip.SetFlagsFragmentOffset(bth.IPv4FlagDF, 0)
			}
			bth.PutICRC(p.Frame[p.L3:], p.IPv6)
			k := len(ms)
			dst := p.DstAddr()
			a := &l.txAddrs[k]
			if p.IPv6 {
				d := dst.As16()
				a.IP = a.IP[:16]
				copy(a.IP, d[:])
			} else {
				d := dst.As4()
				a.IP = a.IP[:4]
				copy(a.IP, d[:])
			}
			a.Port = bth.UDPPort
			l.txBufs[k][0] = p.Frame[p.BTHOff:]
			ms = append(ms, ipv4.Message{Buffers: l.txBufs[k][:], Addr: a})
		}
		for len(ms) > 0 {
			w, err := l.batch.WriteBatch(ms, 0)
			if err != nil {
				if errors.Is(err, unix.ECONNREFUSED) || errors.Is(err, unix.EHOSTUNREACH) || errors.Is(err, unix.ENETUNREACH) {
					// The peer is gone or unreachable: the datagram is lost,
					// as on a wire. RC retransmission deals with it.
					ms = ms[1:]
					continue
				}
				return done, err
			}
			atomic.AddUint64(&l.stats.TxPackets, uint64(w))
			sent := 0
			for i := range ms[:w] {
				sent += len(ms[i].Buffers[0])
			}
			atomic.AddUint64(&l.stats.TxBytes, uint64(sent))
			ms = ms[w:]
		}
		done += n
	}
	return done, nil
}
