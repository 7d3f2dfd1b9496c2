package udplink

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sroce/sroce/bth"
)

// rawCRC runs the CRC-32 register from c over p without the inversions
// hash/crc32 applies at both ends.
func rawCRC(c uint32, p []byte) uint32 {
	return ^crc32.Update(^c, crc32.IEEETable, p)
}

func TestMulModIsZeroExtension(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	zeros := make([]byte, 70000)
	for _, n := range []int{0, 1, 2, 3, 7, 8, 255, 256, 257, 1000, 4096, 65535} {
		xn := uint32(crcOne)
		for i := 0; i < 8*n; i++ {
			xn = mulX(xn)
		}
		for i := 0; i < 20; i++ {
			s := rng.Uint32()
			if got, want := mulMod(s, xn), rawCRC(s, zeros[:n]); got != want {
				t.Fatalf("n=%d s=%#x: mulMod %#x, CRC over zeros %#x", n, s, got, want)
			}
		}
		if got := mulMod(mulMod(xn, xInvBytes[n&0xff]), xInvBytes256[n>>8]); got != crcOne {
			t.Fatalf("x^(8*%d) times its inverse is %#x", n, got)
		}
	}
	for i := 0; i < 1000; i++ {
		a := rng.Uint32()
		if divX(mulX(a)) != a || mulX(divX(a)) != a {
			t.Fatalf("divX does not invert mulX at %#x", a)
		}
	}
}

// stripID returns a copy of an IPv4 frame with what a UDP socket loses
// replaced as the link fills it in: Identification 0, DF, TOS 0, TTL 64.
func stripID(f []byte) []byte {
	g := bytes.Clone(f)
	ip := bth.IPv4(g[bth.EthernetLen : bth.EthernetLen+bth.IPv4MinLen])
	ip.SetTOS(0)
	ip.SetID(0)
	ip.SetFlagsFragmentOffset(bth.IPv4FlagDF, 0)
	ip.SetTTL(64)
	ip.SetChecksum(ip.CalculateChecksum())
	return g
}

func buildFrame(t testing.TB, id uint16, payLen int, rng *rand.Rand) []byte {
	t.Helper()
	e := bth.Encap{Src: netip.MustParseAddr("10.1.2.3"), Dst: netip.MustParseAddr("10.1.2.4"),
		TTL: 64, ID: id, DF: true, SrcPort: 0xc123}
	h := bth.Headers{BTH: bth.BTHFields{Opcode: bth.RCSendOnly, PKey: 0xffff, DestQP: 0x11,
		PSN: bth.PSN(rng.IntN(1 << 24)), AckReq: true}}
	payload := make([]byte, payLen)
	for i := range payload {
		payload[i] = byte(rng.Uint32())
	}
	f := make([]byte, e.Len()+h.TransportLen(payLen))
	if _, err := bth.Build(f, &e, &h, payload); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestCheckIPv4RecoversID(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	sizes := []int{0, 1, 3, 4, 64, 1000, 1024, 4096, 9000}
	for i := 0; i < 400; i++ {
		id := uint16(rng.Uint32())
		if i%7 == 0 {
			id = 0
		}
		f := buildFrame(t, id, sizes[i%len(sizes)], rng)
		g := stripID(f)
		ok, rec := checkIPv4(g)
		if !ok || rec != (id != 0) {
			t.Fatalf("ID %#04x, %d bytes: ok=%v recovered=%v", id, len(f), ok, rec)
		}
		if gotID := bth.IPv4(g[bth.EthernetLen:]).ID(); gotID != id {
			t.Fatalf("recovered ID %#04x, sent %#04x", gotID, id)
		}
		p, err := bth.Parse(g)
		if err != nil || !p.VerifyICRC() {
			t.Fatalf("repaired frame: %v, ICRC verifies %v", err, err == nil && p.VerifyICRC())
		}
		if !bth.IPv4(g[bth.EthernetLen:]).IsChecksumValid() {
			t.Fatal("IPv4 header checksum not fixed")
		}
	}
}

// TestCheckIPv4RejectsForgeries: a zeroed, random or stale ICRC, or a
// payload changed after the ICRC was computed, is found out, whatever the
// sender's IP ID was. Each forgery passes with probability 2^-16; the seeds
// are fixed.
func TestCheckIPv4RejectsForgeries(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	icrc := func(f []byte) []byte { return f[len(f)-bth.ICRCLen:] }
	forgeries := map[string]func(f []byte){
		"zeroed ICRC": func(f []byte) { clear(icrc(f)) },
		"random ICRC": func(f []byte) { binary.LittleEndian.PutUint32(icrc(f), rng.Uint32()) },
		"flipped payload bit": func(f []byte) {
			off := bth.EthernetLen + bth.IPv4MinLen + bth.UDPLen + bth.BTHLen
			f[off+rng.IntN(len(f)-bth.ICRCLen-off)] ^= 1 << rng.IntN(8)
		},
		"other destination QP": func(f []byte) {
			b := bth.BTH(f[bth.EthernetLen+bth.IPv4MinLen+bth.UDPLen:])
			b.SetDestQP(b.DestQP() ^ 0x40)
		},
		"DF clear at the sender": func(f []byte) {
			ip := bth.IPv4(f[bth.EthernetLen:])
			ip.SetFlagsFragmentOffset(ip.Flags()&^bth.IPv4FlagDF, ip.FragmentOffset())
			bth.PutICRC(ip, false)
		},
	}
	for name, forge := range forgeries {
		for i := 0; i < 200; i++ {
			f := buildFrame(t, uint16(rng.Uint32()), 1+rng.IntN(2000), rng)
			forge(f)
			g := stripID(f)
			if ok, _ := checkIPv4(g); ok {
				t.Fatalf("%s (try %d) accepted", name, i)
			}
			if bth.IPv4(g[bth.EthernetLen:]).ID() != 0 {
				t.Fatalf("%s: header changed on a mismatch", name)
			}
		}
	}
}

// TestGoldenRxeFramesThroughTheLink puts the transport part of every frame
// rdma_rxe sent (bth/testdata/rxe, nonzero IP IDs) through the link's
// receive path, as if the kernel had delivered it to the socket, and checks
// that the ICRC verifies and the ID is the one rxe sent.
func TestGoldenRxeFramesThroughTheLink(t *testing.T) {
	f, err := os.Open(filepath.Join("..", "..", "bth", "testdata", "rxe", "golden.hex"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	n4 := 0
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		label, hx, _ := strings.Cut(line, " ")
		frame, err := hex.DecodeString(strings.TrimSpace(hx))
		if err != nil {
			t.Fatal(err)
		}
		p, err := bth.Parse(frame)
		if err != nil {
			t.Fatalf("%s: %v", label, err)
		}
		l := &Link{local: p.DstAddr(), v6: p.IPv6, mac: syntheticMAC(p.DstAddr())}
		l.hdrLen = bth.EthernetLen + bth.IPv4MinLen + bth.UDPLen
		if p.IPv6 {
			l.hdrLen = bth.EthernetLen + bth.IPv6Len + bth.UDPLen
		}
		dgram := p.Transport()
		buf := make([]byte, l.hdrLen+len(dgram))
		copy(buf[l.hdrLen:], dgram)
		l.synthesize(buf, netip.AddrPortFrom(p.SrcAddr(), p.SrcPort()), len(dgram))
		if !p.IPv6 {
			n4++
			ok, rec := checkIPv4(buf)
			wantID := p.IPv4Header().ID()
			if !ok || rec != (wantID != 0) {
				t.Fatalf("%s: ok=%v recovered=%v", label, ok, rec)
			}
			if id := bth.IPv4(buf[bth.EthernetLen:]).ID(); id != wantID {
				t.Fatalf("%s: recovered ID %#04x, rxe sent %#04x", label, id, wantID)
			}
		}
		q, err := bth.Parse(buf)
		if err != nil || !q.VerifyICRC() {
			t.Fatalf("%s: through the link: %v, ICRC verifies %v", label, err, err == nil && q.VerifyICRC())
		}
	}
	if n4 == 0 {
		t.Fatal("no IPv4 golden frames")
	}
}

func TestCheckIPv4DoesNotAllocate(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	g := stripID(buildFrame(t, 0x1234, 1024, rng))
	h := bytes.Clone(g)
	if n := testing.AllocsPerRun(100, func() {
		copy(g, h)
		checkIPv4(g)
	}); n != 0 {
		t.Fatalf("%v allocations per packet", n)
	}
}

// BenchmarkICRC compares, per packet, the plain ICRC check the engine does
// on every frame with the link's check: a frame with IP ID 0 (sroce to
// sroce: one CRC) and one with a nonzero ID (rxe: one CRC and the solving).
func BenchmarkICRC(b *testing.B) {
	rng := rand.New(rand.NewPCG(9, 10))
	for _, size := range []int{64, 1024, 4096} {
		zero := stripID(buildFrame(b, 0, size, rng))
		rxe := stripID(buildFrame(b, 0xbeef, size, rng))
		orig := bytes.Clone(rxe)
		b.Run(fmt.Sprintf("%dB/", size)+"plain", func(b *testing.B) {
			var p bth.Packet
			if err := p.Parse(zero); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(zero)))
			for b.Loop() {
				if !p.VerifyICRC() {
					b.Fatal("mismatch")
				}
			}
		})
		b.Run(fmt.Sprintf("%dB/", size)+"link-id0", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(zero)))
			for b.Loop() {
				if ok, _ := checkIPv4(zero); !ok {
					b.Fatal("mismatch")
				}
			}
		})
		b.Run(fmt.Sprintf("%dB/", size)+"link-solve", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(rxe)))
			for b.Loop() {
				bth.IPv4(rxe[bth.EthernetLen:]).SetID(0)
				if ok, rec := checkIPv4(rxe); !ok || !rec {
					b.Fatal("not recovered")
				}
			}
			copy(rxe, orig)
		})
	}
	b.Run("solve-only", func(b *testing.B) {
		b.ReportAllocs()
		s := uint32(0x12345678)
		for b.Loop() {
			if _, ok := solveIPv4ID(s, 1044); ok {
				s++
			}
			s += 0x9e3779b9
		}
	})
}
