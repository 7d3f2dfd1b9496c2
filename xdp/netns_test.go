package xdp

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// Test topology: two network namespaces joined by a veth pair.
//
//	ns A: veth "a" 10.77.N.1/24  <---->  ns B: veth "b" 10.77.N.2/24

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

// netns is a named network namespace under /run/netns.
type netns struct{ name string }

// do runs fn on a dedicated OS thread switched into the namespace. The
// thread stays locked, so the runtime discards it when fn returns; sockets
// and file descriptors created by fn stay usable from any goroutine.
func (n netns) do(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		fd, err := unix.Open("/run/netns/"+n.name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			errc <- err
			return
		}
		err = unix.Setns(fd, unix.CLONE_NEWNET)
		unix.Close(fd)
		if err != nil {
			errc <- fmt.Errorf("setns %s: %w", n.name, err)
			return
		}
		errc <- fn()
	}()
	return <-errc
}

// vethPair is the test topology.
type vethPair struct {
	nsA, nsB   netns
	ifA, ifB   string
	ipA, ipB   net.IP
	macA, macB net.HardwareAddr
}

func run(tb testing.TB, args ...string) {
	tb.Helper()
	out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
	if err != nil {
		tb.Fatalf("%s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// newVethPair creates the namespaces and the veth pair with the given MTU
// and queue count; t.Cleanup deletes them even if the test fails.
func newVethPair(tb testing.TB, mtu, queues int) *vethPair {
	tb.Helper()
	requireRoot(tb)
	seq := pairSeq.Add(1)
	id := fmt.Sprintf("%d-%d", os.Getpid(), seq)
	p := &vethPair{
		nsA: netns{"sroce-xdp-a-" + id},
		nsB: netns{"sroce-xdp-b-" + id},
		ifA: fmt.Sprintf("sxa%d", seq),
		ifB: fmt.Sprintf("sxb%d", seq),
		ipA: net.IPv4(10, 77, byte(seq), 1).To4(),
		ipB: net.IPv4(10, 77, byte(seq), 2).To4(),
	}
	run(tb, "ip", "netns", "add", p.nsA.name)
	tb.Cleanup(func() { exec.Command("ip", "netns", "del", p.nsA.name).Run() })
	run(tb, "ip", "netns", "add", p.nsB.name)
	tb.Cleanup(func() { exec.Command("ip", "netns", "del", p.nsB.name).Run() })
	q := fmt.Sprint(queues)
	run(tb, "ip", "link", "add", p.ifA, "netns", p.nsA.name, "numtxqueues", q, "numrxqueues", q,
		"type", "veth", "peer", "name", p.ifB, "netns", p.nsB.name, "numtxqueues", q, "numrxqueues", q)
	for _, e := range []struct {
		ns, ifname string
		ip         net.IP
	}{{p.nsA.name, p.ifA, p.ipA}, {p.nsB.name, p.ifB, p.ipB}} {
		run(tb, "ip", "-n", e.ns, "link", "set", e.ifname, "mtu", fmt.Sprint(mtu))
		run(tb, "ip", "-n", e.ns, "addr", "add", e.ip.String()+"/24", "dev", e.ifname)
		run(tb, "ip", "-n", e.ns, "link", "set", "lo", "up")
		run(tb, "ip", "-n", e.ns, "link", "set", e.ifname, "up")
	}
	must(tb, p.nsA.do(func() error {
		ifi, err := net.InterfaceByName(p.ifA)
		if err == nil {
			p.macA = ifi.HardwareAddr
		}
		return err
	}))
	must(tb, p.nsB.do(func() error {
		ifi, err := net.InterfaceByName(p.ifB)
		if err == nil {
			p.macB = ifi.HardwareAddr
		}
		return err
	}))
	return p
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}

// openIn opens a socket on queue of ifname inside ns; t.Cleanup closes it.
func openIn(tb testing.TB, ns netns, ifname string, queue int, opts Options) *Socket {
	tb.Helper()
	var s *Socket
	must(tb, ns.do(func() (err error) {
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
