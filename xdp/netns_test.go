package xdp

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"

	"github.com/sroce/sroce/internal/nsutil"
)

// Test topology: two network namespaces joined by a veth pair (made by
// package nsutil).
//
//	ns A: veth "sxaN" 10.77.N.1/24  <---->  ns B: veth "sxbN" 10.77.N.2/24

func requireRoot(tb testing.TB) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("skipping: needs root (network namespaces, XDP, AF_XDP)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		tb.Skip("skipping: needs the ip command (iproute2)")
	}
}

var pairSeq atomic.Int32

// vethPair is the test topology.
type vethPair struct {
	nsA, nsB   *nsutil.Namespace
	ifA, ifB   string
	ipA, ipB   net.IP
	macA, macB net.HardwareAddr
}

// newVethPair creates the namespaces and the veth pair with the given MTU
// and queue count; t.Cleanup deletes them even if the test fails.
func newVethPair(tb testing.TB, mtu, queues int) *vethPair {
	tb.Helper()
	requireRoot(tb)
	seq := pairSeq.Add(1)
	p := &vethPair{
		ifA: fmt.Sprintf("sxa%d", seq),
		ifB: fmt.Sprintf("sxb%d", seq),
		ipA: net.IPv4(10, 77, byte(seq), 1).To4(),
		ipB: net.IPv4(10, 77, byte(seq), 2).To4(),
	}
	prefix := func(ip net.IP) []netip.Prefix {
		a, _ := netip.AddrFromSlice(ip)
		return []netip.Prefix{netip.PrefixFrom(a, 24)}
	}
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-xdp", Veth: nsutil.VethConfig{
		NameA: p.ifA, NameB: p.ifB, AddrA: prefix(p.ipA), AddrB: prefix(p.ipB), MTU: mtu, Queues: queues,
	}})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { pair.Close() })
	p.nsA, p.nsB = pair.A, pair.B
	p.macA, p.macB = pair.Veth.MACA, pair.Veth.MACB
	return p
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// openIn opens a socket on queue of ifname inside ns; t.Cleanup closes it.
func openIn(tb testing.TB, ns *nsutil.Namespace, ifname string, queue int, opts Options) *Socket {
	tb.Helper()
	var s *Socket
	must(tb, ns.Do(func() (err error) {
		s, err = Open(ifname, queue, opts)
		return err
	}))
	tb.Cleanup(func() { s.Close() })
	return s
}

// udpFrame builds Ethernet/IPv4/UDP with payload; byte i of the payload is
// byte(i+seed). UDP checksum 0, as RoCEv2 sends it.
func udpFrame(dst, src net.HardwareAddr, srcIP, dstIP net.IP, dport uint16, payload int, seed byte) []byte {
	b := make([]byte, 14+20+8+payload)
	copy(b[0:], dst)
	copy(b[6:], src)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:34]
	ip[0] = 0x45
	binary.BigEndian.PutUint16(ip[2:], uint16(20+8+payload))
	binary.BigEndian.PutUint16(ip[4:], 1)
	binary.BigEndian.PutUint16(ip[6:], 0x4000) // DF
	ip[8] = 64
	ip[9] = 17
	copy(ip[12:], srcIP.To4())
	copy(ip[16:], dstIP.To4())
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(binary.BigEndian.Uint16(ip[i:]))
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(ip[10:], ^uint16(sum))
	udp := b[34:42]
	binary.BigEndian.PutUint16(udp[0:], 0xc001)
	binary.BigEndian.PutUint16(udp[2:], dport)
	binary.BigEndian.PutUint16(udp[4:], uint16(8+payload))
	for i := 0; i < payload; i++ {
		b[42+i] = byte(i) + seed
	}
	return b
}

// frameAtoB builds a frame of total length size from A to B on port 4791.
func (p *vethPair) frameAtoB(size int, seed byte) []byte {
	return udpFrame(p.macB, p.macA, p.ipA, p.ipB, 4791, size-42, seed)
}

func (p *vethPair) frameBtoA(size int, seed byte) []byte {
	return udpFrame(p.macA, p.macB, p.ipB, p.ipA, 4791, size-42, seed)
}
