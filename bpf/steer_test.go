package bpf

import (
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/sroce/sroce/internal/nsutil"
	"golang.org/x/sys/unix"
)

// xdpMD mirrors struct xdp_md, the context of an XDP program.
type xdpMD struct {
	Data           uint32
	DataEnd        uint32
	DataMeta       uint32
	IngressIfindex uint32
	RxQueueIndex   uint32
	EgressIfindex  uint32
}

func requireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: loading XDP programs needs root (CAP_BPF, CAP_NET_ADMIN)")
	}
}

// frame describes a test frame to build.
type frame struct {
	vlan     uint16 // outer tag EtherType (0: untagged)
	inner    uint16 // EtherType after the tag or the MAC addresses
	ipv6     bool
	ihl      int    // IPv4 header length in 32-bit words (0: 5)
	proto    byte   // IP protocol / next header (0: UDP)
	fragOff  uint16 // IPv4 flags+fragment offset field (host order)
	dport    uint16 // UDP destination port
	payload  int    // bytes after the UDP header
	noL3     bool   // build only Ethernet (+tag) with inner EtherType
	hopByHop bool   // IPv6 next header 0 (hop-by-hop options) instead of proto
	rawInner []byte // bytes after the Ethernet header when noL3
	mcast    bool   // to a multicast group (MAC and IP destination)
}

func (f frame) build() []byte {
	b := make([]byte, 12, 128+f.payload)
	copy(b[0:6], []byte{0x02, 0, 0, 0, 0, 2})
	copy(b[6:12], []byte{0x02, 0, 0, 0, 0, 1})
	if f.vlan != 0 {
		b = binary.BigEndian.AppendUint16(b, f.vlan)
		b = binary.BigEndian.AppendUint16(b, 42) // TCI
	}
	inner := f.inner
	if inner == 0 {
		inner = etherTypeIPv4
		if f.ipv6 {
			inner = etherTypeIPv6
		}
	}
	if f.mcast {
		copy(b[0:6], []byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03})
		if f.ipv6 {
			copy(b[0:6], []byte{0x33, 0x33, 0, 0, 0, 2})
		}
	}
	b = binary.BigEndian.AppendUint16(b, inner)
	if f.noL3 {
		return append(b, f.rawInner...)
	}
	proto := f.proto
	if proto == 0 {
		proto = ipProtoUDP
	}
	if f.hopByHop {
		proto = 0
	}
	l4len := udpHeaderLen + f.payload
	if f.ipv6 {
		h := make([]byte, ipv6HeaderLen)
		h[0] = 0x60
		binary.BigEndian.PutUint16(h[4:], uint16(l4len))
		h[6] = proto
		h[7] = 64
		h[23], h[39] = 1, 2
		if f.mcast {
			h[24], h[25] = 0xff, 0x0e // ff0e::2
		}
		b = append(b, h...)
	} else {
		ihl := f.ihl
		if ihl == 0 {
			ihl = 5
		}
		h := make([]byte, ihl*4)
		h[0] = 0x40 | byte(ihl)
		binary.BigEndian.PutUint16(h[2:], uint16(len(h)+l4len))
		binary.BigEndian.PutUint16(h[6:], f.fragOff)
		h[8] = 64
		h[9] = proto
		copy(h[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
		if f.mcast {
			copy(h[16:], []byte{239, 1, 2, 3})
		}
		for i := 20; i < len(h); i++ {
			h[i] = 1 // NOP options
		}
		b = append(b, h...)
	}
	u := make([]byte, udpHeaderLen+f.payload)
	binary.BigEndian.PutUint16(u[0:], 0xc000)
	binary.BigEndian.PutUint16(u[2:], f.dport)
	binary.BigEndian.PutUint16(u[4:], uint16(l4len))
	for i := udpHeaderLen; i < len(u); i++ {
		u[i] = byte(i)
	}
	return append(b, u...)
}

// run executes the program once on data with rx_queue_index queue (on the
// loopback device, which has one queue) and returns the verdict.
func run(t *testing.T, p *ebpf.Program, data []byte) uint32 {
	t.Helper()
	ret, err := p.Run(&ebpf.RunOptions{
		Data:    data,
		Context: xdpMD{DataEnd: uint32(len(data)), IngressIfindex: 1, RxQueueIndex: 0},
	})
	if err != nil {
		t.Fatalf("BPF_PROG_RUN on %d bytes: %v", len(data), err)
	}
	return ret
}

// cases returns the frames of the verdict tests; redirect says whether each
// is a RoCEv2 frame the program must steer.
func cases() []struct {
	name     string
	f        frame
	redirect bool
} {
	arp := make([]byte, 28)
	return []struct {
		name     string
		f        frame
		redirect bool
	}{
		{"ipv4 udp 4791", frame{dport: RoCEv2Port, payload: 40}, true},
		{"ipv4 udp 4791 no payload", frame{dport: RoCEv2Port}, true},
		{"ipv4 options ihl 6", frame{ihl: 6, dport: RoCEv2Port, payload: 40}, true},
		{"ipv4 options ihl 15", frame{ihl: 15, dport: RoCEv2Port, payload: 40}, true},
		{"ipv4 DF set", frame{fragOff: 0x4000, dport: RoCEv2Port, payload: 40}, true},
		{"ipv6 udp 4791", frame{ipv6: true, dport: RoCEv2Port, payload: 40}, true},
		{"ipv4 multicast udp 4791", frame{mcast: true, dport: RoCEv2Port, payload: 40}, true},
		{"ipv6 multicast udp 4791", frame{mcast: true, ipv6: true, dport: RoCEv2Port, payload: 40}, true},
		{"ipv4 multicast udp other port", frame{mcast: true, dport: 5353, payload: 40}, false},
		{"vlan ipv4 udp 4791", frame{vlan: etherTypeVLAN, dport: RoCEv2Port, payload: 40}, true},
		{"vlan ipv6 udp 4791", frame{vlan: etherTypeVLAN, ipv6: true, dport: RoCEv2Port, payload: 40}, true},
		{"qinq-tag ipv4 udp 4791", frame{vlan: etherTypeQinQ, dport: RoCEv2Port, payload: 40}, true},
		{"qinq-tag ipv6 udp 4791", frame{vlan: etherTypeQinQ, ipv6: true, dport: RoCEv2Port, payload: 40}, true},
		{"ipv4 udp other port", frame{dport: 4792, payload: 40}, false},
		{"ipv4 udp port 4791 byte-swapped", frame{dport: 0xb712, payload: 40}, false},
		{"ipv6 udp other port", frame{ipv6: true, dport: 53, payload: 40}, false},
		{"vlan ipv4 udp other port", frame{vlan: etherTypeVLAN, dport: 9999, payload: 40}, false},
		{"ipv4 tcp", frame{proto: 6, dport: RoCEv2Port, payload: 40}, false},
		{"ipv6 tcp", frame{ipv6: true, proto: 6, dport: RoCEv2Port, payload: 40}, false},
		{"ipv6 hop-by-hop ext header", frame{ipv6: true, hopByHop: true, dport: RoCEv2Port, payload: 40}, false},
		{"ipv4 non-first fragment", frame{fragOff: 185, dport: RoCEv2Port, payload: 40}, false},
		{"ipv4 first fragment MF", frame{fragOff: 0x2000, dport: RoCEv2Port, payload: 40}, false},
		{"ipv4 last fragment", frame{fragOff: 0x0010, dport: RoCEv2Port, payload: 40}, false},
		{"ipv4 bad ihl 4", frame{ihl: 4, dport: RoCEv2Port, payload: 40}, false},
		{"arp", frame{noL3: true, inner: 0x0806, rawInner: arp}, false},
		{"double tagged", frame{vlan: etherTypeQinQ, inner: etherTypeVLAN, noL3: true, rawInner: frame{dport: RoCEv2Port}.build()[12:]}, false},
		{"ipv4 ethertype with ipv6 header", frame{ipv6: true, inner: etherTypeIPv4, dport: RoCEv2Port, payload: 40}, false},
		{"ipv6 ethertype with ipv4 header", frame{inner: etherTypeIPv6, dport: RoCEv2Port, payload: 40}, false},
	}
}

// withSocket loads the program and optionally puts an AF_XDP socket in
// slot 0 of its XSKMAP. An unbound socket is enough for the map lookup that
// bpf_redirect_map does under BPF_PROG_RUN.
func withSocket(t *testing.T, socket bool) *Program {
	t.Helper()
	requireRoot(t)
	p, err := Load(LoadOptions{Queues: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if socket {
		fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatalf("AF_XDP socket: %v", err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := p.Register(0, fd); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

func TestVerdictsWithSocket(t *testing.T) {
	p := withSocket(t, true)
	for _, c := range cases() {
		want := uint32(XDPPass)
		if c.redirect {
			want = XDPRedirect
		}
		if got := run(t, p.XDP(), c.f.build()); got != want {
			t.Errorf("%s: verdict %d, want %d", c.name, got, want)
		}
	}
}

// TestVerdictsEmptyMap checks the fallback: with no socket registered for
// the queue, bpf_redirect_map returns its flags argument, XDP_PASS, so
// RoCEv2 frames reach the kernel.
func TestVerdictsEmptyMap(t *testing.T) {
	p := withSocket(t, false)
	for _, c := range cases() {
		if got := run(t, p.XDP(), c.f.build()); got != XDPPass {
			t.Errorf("%s: verdict %d, want XDP_PASS (%d)", c.name, got, XDPPass)
		}
	}
}

// TestUnregister checks that removing the socket restores the fallback.
func TestUnregister(t *testing.T) {
	p := withSocket(t, true)
	f := frame{dport: RoCEv2Port, payload: 40}.build()
	if got := run(t, p.XDP(), f); got != XDPRedirect {
		t.Fatalf("verdict %d before unregister, want XDP_REDIRECT", got)
	}
	if err := p.Unregister(0); err != nil {
		t.Fatal(err)
	}
	if err := p.Unregister(0); err != nil {
		t.Fatalf("second unregister: %v", err)
	}
	if got := run(t, p.XDP(), f); got != XDPPass {
		t.Fatalf("verdict %d after unregister, want XDP_PASS", got)
	}
	if err := p.Register(1, 0); err == nil {
		t.Fatal("Register outside the map succeeded")
	}
}

// TestTruncated runs every prefix of every RoCEv2 frame: the program must
// pass all of them (the verifier guarantees it never reads past data_end;
// this checks it does not redirect a frame whose UDP header is cut).
// BPF_PROG_RUN needs at least an Ethernet header; shorter inputs are
// rejected by the kernel with EINVAL, which is checked too.
func TestTruncated(t *testing.T) {
	p := withSocket(t, true)
	for _, c := range cases() {
		if !c.redirect {
			continue
		}
		full := c.f.build()
		// The UDP header ends 8 bytes before the payload.
		udpEnd := len(full) - c.f.payload
		for n := 0; n < len(full); n++ {
			data := full[:n]
			if n < ethHeaderLen {
				_, err := p.XDP().Run(&ebpf.RunOptions{Data: data})
				if err == nil {
					t.Errorf("%s: BPF_PROG_RUN accepted %d bytes", c.name, n)
				}
				continue
			}
			want := uint32(XDPPass)
			if n >= udpEnd {
				want = XDPRedirect
			}
			if got := run(t, p.XDP(), data); got != want {
				t.Errorf("%s: %d of %d bytes: verdict %d, want %d", c.name, n, len(full), got, want)
			}
		}
	}
}

// TestQueueOutsideDevice records the kernel's answer when BPF_PROG_RUN is
// given a receive queue the ingress device does not have: it refuses to
// run. (Queues beyond the XSKMAP are covered by the netns tests in xdp/.)
func TestQueueOutsideDevice(t *testing.T) {
	p := withSocket(t, true)
	f := frame{dport: RoCEv2Port, payload: 40}.build()
	_, err := p.XDP().Run(&ebpf.RunOptions{
		Data:    f,
		Context: xdpMD{DataEnd: uint32(len(f)), IngressIfindex: 1, RxQueueIndex: 7},
	})
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("BPF_PROG_RUN with rx_queue_index beyond the device: %v, want EINVAL", err)
	}
}

func TestInstructionsVerify(t *testing.T) {
	requireRoot(t)
	for _, noFrags := range []bool{false, true} {
		p, err := Load(LoadOptions{Queues: 4, NoFrags: noFrags})
		if err != nil {
			t.Fatalf("NoFrags=%v: %v", noFrags, err)
		}
		if p.HasFrags() == noFrags {
			t.Errorf("NoFrags=%v: HasFrags=%v", noFrags, p.HasFrags())
		}
		if p.Queues() != 4 {
			t.Errorf("Queues()=%d", p.Queues())
		}
		p.Close()
	}
	t.Logf("steering program: %d instructions", len(Instructions(3)))
}

func TestAttachModeString(t *testing.T) {
	for m, s := range map[AttachMode]string{AttachAuto: "auto", AttachDriver: "driver", AttachGeneric: "generic", 9: "AttachMode(9)"} {
		if m.String() != s {
			t.Errorf("%d: %q", int(m), m.String())
		}
	}
}

// inNetns runs fn inside a new network namespace holding a veth pair with
// two queues (q0 and q1, both ends inside it, down); it passes fn the
// index of q0.
func inNetns(t *testing.T, fn func(ifindex int)) {
	t.Helper()
	ns, err := nsutil.New("sroce-bpf")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	v, err := nsutil.NewVeth(ns, ns, nsutil.VethConfig{NameA: "q0", NameB: "q1", Queues: 2, Down: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := ns.Do(func() error { fn(v.IndexA); return nil }); err != nil {
		t.Fatal(err)
	}
}

// TestRxQueueIndex checks that the program keys the XSKMAP by the receive
// queue of the frame: with a socket for queue 0 only, a RoCEv2 frame on
// queue 0 is redirected and one on queue 1 passes; with a one-slot map,
// queue 1 is outside the map and passes too.
func TestRxQueueIndex(t *testing.T) {
	requireRoot(t)
	fd, err := unix.Socket(unix.AF_XDP, unix.SOCK_RAW|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	f := frame{dport: RoCEv2Port, payload: 40}.build()
	inNetns(t, func(ifindex int) {
		for _, queues := range []int{2, 1} {
			p, err := Load(LoadOptions{Queues: queues})
			if err != nil {
				t.Error(err)
				return
			}
			defer p.Close()
			if err := p.Register(0, fd); err != nil {
				t.Error(err)
				return
			}
			for q, want := range []uint32{XDPRedirect, XDPPass} {
				got, err := p.XDP().Run(&ebpf.RunOptions{
					Data:    f,
					Context: xdpMD{DataEnd: uint32(len(f)), IngressIfindex: uint32(ifindex), RxQueueIndex: uint32(q)},
				})
				if err != nil {
					t.Errorf("map of %d, queue %d: %v", queues, q, err)
				} else if got != want {
					t.Errorf("map of %d, queue %d: verdict %d, want %d", queues, q, got, want)
				}
			}
		}
	})
}
