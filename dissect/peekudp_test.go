package dissect

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/sroce/sroce/bth"
)

// TestPeekUDP checks how frames that bth.Parse rejects are told apart:
// UDP to port 4791 (malformed RoCEv2) or anything else (skipped).
func TestPeekUDP(t *testing.T) {
	fs := fixtures(t)
	v4, v6, vlan := fs[0].frame, fs[2].frame, fs[3].frame
	laterFragment := bytes.Clone(v4)
	binary.BigEndian.PutUint16(laterFragment[14+6:], 0x00b9) // offset 185*8
	badVersion := bytes.Clone(v4)
	badVersion[14] = 0x55
	notUDP := tcpFrame()
	qinq := bytes.Clone(vlan)
	binary.BigEndian.PutUint16(qinq[12:], 0x88a8)
	cases := []struct {
		name  string
		frame []byte
		ok    bool
		sport uint16
	}{
		{"ipv4", v4, true, 0xc001},
		{"ipv6", v6, true, 0xc003},
		{"802.1Q", vlan, true, 0xc001},
		{"802.1ad", qinq, true, 0xc001},
		{"later fragment", laterFragment, false, 0},
		{"ipv4 bad version", badVersion, false, 0},
		{"tcp", notUDP, false, 0},
		{"arp", arpFrame(), false, 0},
		{"short ethernet", v4[:13], false, 0},
		{"short vlan", vlan[:16], false, 0},
		{"short ipv4", v4[:30], false, 0},
		{"short ipv6", v6[:50], false, 0},
		{"short udp", v4[:36], false, 0},
	}
	for _, c := range cases {
		u, ok := PeekUDP(c.frame)
		if ok != c.ok || ok && (u.SrcPort != c.sport || u.DstPort != 4791) {
			t.Errorf("%s: ok %v, %+v", c.name, ok, u)
		}
	}
}

// TestPeekUDPPrefixes: a prefix of a frame is accepted exactly when it
// holds the headers up to the UDP ports, and then gives what the whole
// frame gives.
func TestPeekUDPPrefixes(t *testing.T) {
	for _, f := range fixtures(t) {
		var p bth.Packet
		if p.Parse(f.frame) != nil {
			continue
		}
		whole, ok := PeekUDP(f.frame)
		if !ok {
			t.Fatalf("%s: whole frame refused", f.name)
		}
		need := p.L4 + 4 // the two ports
		for n := 0; n <= len(f.frame); n++ {
			u, ok := PeekUDP(f.frame[:n])
			if ok != (n >= need) || ok && u != whole {
				t.Fatalf("%s: %d-byte prefix: ok %v %+v, whole %+v (ports end at %d)", f.name, n, ok, u, whole, need)
			}
		}
	}
}

// FuzzPeekUDP: PeekUDP never panics, and on every frame bth.Parse accepts
// it finds the same addresses and ports.
func FuzzPeekUDP(f *testing.F) {
	for _, fx := range fixtures(f) {
		f.Add(fx.frame)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u, ok := PeekUDP(b)
		var p bth.Packet
		if p.Parse(b) != nil {
			return
		}
		if !ok || u.Src != p.SrcAddr() || u.Dst != p.DstAddr() || u.SrcPort != p.SrcPort() || u.DstPort != bth.UDPPort {
			t.Fatalf("PeekUDP %v %+v, Parse %v:%d > %v", ok, u, p.SrcAddr(), p.SrcPort(), p.DstAddr())
		}
	})
}
