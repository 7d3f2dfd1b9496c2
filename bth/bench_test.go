package bth

import "testing"

func benchFrame(b *testing.B, op Opcode, n int) []byte {
	e := testEncap(false, false)
	h := testHeaders(op)
	frame := make([]byte, e.Len()+h.TransportLen(n))
	if _, err := Build(frame, &e, &h, make([]byte, n)); err != nil {
		b.Fatal(err)
	}
	return frame
}

// BenchmarkParse parses a full RDMA WRITE FIRST frame (Ethernet to BTH and
// RETH) and locates the payload.
func BenchmarkParse(b *testing.B) {
	frame := benchFrame(b, RCWriteFirst, 1024)
	var p Packet
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	var sink uint64
	for b.Loop() {
		if err := p.Parse(frame); err != nil {
			b.Fatal(err)
		}
		sink += p.RETH().VA() + uint64(len(p.PayloadBytes()))
	}
	_ = sink
}

// BenchmarkICRC4K computes the ICRC of a frame with a 4 KiB payload.
func BenchmarkICRC4K(b *testing.B) {
	frame := benchFrame(b, RCWriteMiddle, 4096)
	var p Packet
	if err := p.Parse(frame); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(4096)
	for b.Loop() {
		if !p.VerifyICRC() {
			b.Fatal("bad ICRC")
		}
	}
}

// BenchmarkCopy4K is a plain copy of 4 KiB, the yardstick for ICRC4K.
func BenchmarkCopy4K(b *testing.B) {
	src := make([]byte, 4096)
	dst := make([]byte, 4096)
	b.ReportAllocs()
	b.SetBytes(4096)
	for b.Loop() {
		copy(dst, src)
	}
}

// BenchmarkBuild builds a whole RDMA WRITE FIRST frame with a 1 KiB payload,
// ICRC included.
func BenchmarkBuild(b *testing.B) {
	e := testEncap(false, false)
	h := testHeaders(RCWriteFirst)
	payload := make([]byte, 1024)
	frame := make([]byte, e.Len()+h.TransportLen(len(payload)))
	b.ReportAllocs()
	b.SetBytes(int64(len(frame)))
	for b.Loop() {
		if _, err := Build(frame, &e, &h, payload); err != nil {
			b.Fatal(err)
		}
	}
}
