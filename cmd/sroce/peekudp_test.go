package main

import (
	"testing"

	"github.com/sroce/sroce/bth"
)

// TestPeekUDPPrefixes: a prefix of a frame is accepted exactly when it
// holds the headers up to the UDP ports, and then gives what the whole
// frame gives.
func TestPeekUDPPrefixes(t *testing.T) {
	for _, f := range fixtures(t) {
		var p bth.Packet
		if p.Parse(f.frame) != nil {
			continue
		}
		whole, ok := peekUDP(f.frame)
		if !ok {
			t.Fatalf("%s: whole frame refused", f.name)
		}
		need := p.L4 + 4 // the two ports
		for n := 0; n <= len(f.frame); n++ {
			u, ok := peekUDP(f.frame[:n])
			if ok != (n >= need) || ok && u != whole {
				t.Fatalf("%s: %d-byte prefix: ok %v %+v, whole %+v (ports end at %d)", f.name, n, ok, u, whole, need)
			}
		}
	}
}

// FuzzPeekUDP: peekUDP never panics, and on every frame bth.Parse accepts
// it finds the same addresses and ports.
func FuzzPeekUDP(f *testing.F) {
	for _, fx := range fixtures(f) {
		f.Add(fx.frame)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		u, ok := peekUDP(b)
		var p bth.Packet
		if p.Parse(b) != nil {
			return
		}
		if !ok || u.src != p.SrcAddr() || u.dst != p.DstAddr() || u.sport != p.SrcPort() || u.dport != bth.UDPPort {
			t.Fatalf("peekUDP %v %+v, Parse %v:%d > %v", ok, u, p.SrcAddr(), p.SrcPort(), p.DstAddr())
		}
	})
}
