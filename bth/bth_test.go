package bth

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"net/netip"
	"testing"
)

func TestPSNArithmetic(t *testing.T) {
	cases := []struct {
		a, b PSN
		diff int32
	}{
		{0, 0, 0},
		{1, 0, 1},
		{0, PSNMask, 1},
		{PSNMask, 0, -1},
		{5, PSNMask - 4, 10},
		{1 << 23, 0, -(1 << 23)},
		{1<<23 - 1, 0, 1<<23 - 1},
	}
	for _, c := range cases {
		if d := c.a.Diff(c.b); d != c.diff {
			t.Errorf("%#x.Diff(%#x) = %d, want %d", c.a, c.b, d, c.diff)
		}
		if got := c.a.LessThan(c.b); got != (c.diff < 0) {
			t.Errorf("%#x.LessThan(%#x) = %v", c.a, c.b, got)
		}
	}
	if p := PSN(PSNMask).Next(); p != 0 {
		t.Errorf("PSNMask.Next() = %#x", p)
	}
	if p := PSN(PSNMask - 1).Add(5); p != 3 {
		t.Errorf("Add across wrap = %#x", p)
	}
	if !PSN(2).InWindow(PSNMask-1, 8) || PSN(7).InWindow(PSNMask-1, 8) {
		t.Error("InWindow across wrap")
	}
	if PSN(1<<24).Valid() || !PSN(PSNMask).Valid() || QPN(1<<24).Valid() {
		t.Error("Valid")
	}
	if q := QPN(QPNMask).Next(); q != 0 {
		t.Errorf("QPN wrap %#x", q)
	}
}

func TestEncodersRefuseOutOfRange(t *testing.T) {
	b := make([]byte, 64)
	for _, f := range []BTHFields{{PSN: 1 << 24}, {DestQP: 1 << 24}, {PadCnt: 4}, {TVer: 16}} {
		if err := f.Encode(b); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("BTH %+v: err %v", f, err)
		}
	}
	if err := (&AETHFields{MSN: 1 << 24}).Encode(b); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("AETH: %v", err)
	}
	if err := (&DETHFields{SrcQP: 1 << 24}).Encode(b); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("DETH: %v", err)
	}
	if err := (&XRCETHFields{SRQN: 1 << 24}).Encode(b); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("XRCETH: %v", err)
	}
	ok := BTHFields{PSN: PSNMask, DestQP: QPNMask, PadCnt: 3}
	if err := ok.Encode(b); err != nil {
		t.Fatal(err)
	}
	if got := BTH(b).Fields(); got != ok {
		t.Errorf("round trip %+v != %+v", got, ok)
	}
}

func TestOpcodeTable(t *testing.T) {
	n := 0
	for i := 0; i < 256; i++ {
		op := Opcode(i)
		if !op.Valid() {
			continue
		}
		n++
		info := op.Info()
		sum := 0
		for _, h := range info.Order {
			o, ok := info.Offset(h)
			if !ok || o != sum {
				t.Errorf("%v: %v at %d, want %d", op, h, o, sum)
			}
			sum += hdrLen[hdrIndex(h)]
		}
		if sum != info.ExtLen {
			t.Errorf("%v: ExtLen %d, headers sum %d", op, info.ExtLen, sum)
		}
	}
	// 12 RC+UC shared, 13 RC-only (incl. FLUSH, ATOMIC_WRITE), 12 UC, 2 UD,
	// CNP, and the 23 of XRC (RC's but FLUSH and ATOMIC_WRITE).
	if n != 63 {
		t.Errorf("%d opcodes in table, want 63", n)
	}
	for op, want := range map[Opcode]string{
		RCWriteOnlyImm: "RETH+ImmDt", RCAtomicAcknowledge: "AETH+AtomicAckETH",
		RCFlush: "RETH+FETH", UDSendOnlyImm: "ImmDt+DETH", RCSendOnlyInvalidate: "IETH",
		Opcode(0xab): "RETH+ImmDt+XRCETH", XRCAtomicAcknowledge: "AETH+AtomicAckETH", XRCSendOnly: "XRCETH",
		Opcode(0xb3): "AtomicETH+XRCETH", XRCReadResponseOnly: "AETH",
	} {
		if got := op.Info().Headers.String(); got != want {
			t.Errorf("%v headers %s, want %s", op, got, want)
		}
	}
	if o, _ := RCFlush.Info().Offset(HdrRETH); o != FETHLen {
		t.Errorf("FLUSH RETH offset %d", o)
	}
	if o, _ := UDSendOnlyImm.Info().Offset(HdrImmDt); o != DETHLen {
		t.Errorf("UD imm offset %d", o)
	}
	// The XRCETH comes first, right after the BTH (IBTA 9.3: BTH, XRCETH,
	// then RETH or AtomicETH, then ImmDt or IETH).
	for _, op := range []Opcode{0xab, 0xb3, 0xac, 0xb7} {
		if o, ok := op.Info().Offset(HdrXRCETH); !ok || o != 0 {
			t.Errorf("%v: XRCETH at %d", op, o)
		}
	}
	if o, _ := Opcode(0xab).Info().Offset(HdrImmDt); o != XRCETHLen+RETHLen {
		t.Errorf("XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE ImmDt offset %d", o)
	}
	if Opcode(0xab).String() != "XRC_RDMA_WRITE_ONLY_WITH_IMMEDIATE" || Opcode(0xab).RCEquivalent() != RCWriteOnlyImm ||
		Opcode(0xb5).Valid() || Opcode(0xbc).Valid() || Opcode(0xbd).Valid() {
		t.Error("XRC opcodes")
	}
	if Opcode(0x15).Valid() || Opcode(0x66).Valid() || Opcode(0x80).Valid() {
		t.Error("reserved opcodes in table")
	}
}

func TestSyndrome(t *testing.T) {
	for s, want := range map[Syndrome]string{
		0x1f:                              "ACK credits=31",
		RNRSyndrome(12):                   "RNR NAK timer=12 (640us)",
		RNRSyndrome(0):                    "RNR NAK timer=0 (655360us)",
		NAKSyndrome(NAKPSNSeqError):       "NAK PSN sequence error",
		NAKSyndrome(NAKRemoteAccessError): "NAK remote access error",
	} {
		if got := s.String(); got != want {
			t.Errorf("%#x: %q, want %q", uint8(s), got, want)
		}
	}
	if !RNRSyndrome(3).IsRNR() || !NAKSyndrome(1).IsNAK() || !Syndrome(0x1f).IsACK() {
		t.Error("kind predicates")
	}
}

var (
	testSrc4 = netip.MustParseAddr("10.0.0.1")
	testDst4 = netip.MustParseAddr("10.0.0.2")
	testSrc6 = netip.MustParseAddr("fd00::1")
	testDst6 = netip.MustParseAddr("fd00::2")
)

func testEncap(v6, vlan bool) Encap {
	e := Encap{
		DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1},
		Src: testSrc4, Dst: testDst4, TTL: 64, ID: 0x1234, DF: true, SrcPort: 0xc123,
		HasVLAN: vlan, VLANTCI: 0x2005,
	}
	if v6 {
		e.Src, e.Dst, e.FlowLabel, e.TOS = testSrc6, testDst6, 0x12345, 0x20
	}
	return e
}

func testHeaders(op Opcode) Headers {
	return Headers{
		BTH:       BTHFields{Opcode: op, SE: true, PKey: 0xffff, DestQP: 0x000011, AckReq: true, PSN: 0xabcdef},
		RETH:      RETHFields{VA: 0x00007f0012345678, RKey: 0x1234, DMALen: 8192},
		AETH:      AETHFields{Syndrome: 0x1f, MSN: 7},
		Atomic:    AtomicETHFields{VA: 0x1000, RKey: 0x99, SwapAdd: 5, Compare: 6},
		AtomicAck: 0x1122334455667788,
		Imm:       0xdeadbeef,
		IETH:      0x4242,
		DETH:      DETHFields{QKey: 0x11111111, SrcQP: 0x12},
		FETH:      FETHFields{SelectivityLevel: 1, PlacementType: 1},
		XRCETH:    XRCETHFields{SRQN: 0x00abcd},
	}
}

// testFrames builds one frame for every opcode, IPv4 and IPv6, with and
// without a VLAN tag, with payload lengths exercising every pad count.
func testFrames(t testing.TB) [][]byte {
	var out [][]byte
	for i := 0; i < 256; i++ {
		op := Opcode(i)
		if !op.Valid() {
			continue
		}
		for _, v := range []struct{ v6, vlan bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
			e := testEncap(v.v6, v.vlan)
			h := testHeaders(op)
			lens := []int{0, 1, 2, 3, 1024}
			if fp := op.Info().FixedPayload; fp >= 0 {
				lens = []int{fp}
			}
			for _, n := range lens {
				payload := make([]byte, n)
				for j := range payload {
					payload[j] = byte(j*7 + i)
				}
				frame := make([]byte, e.Len()+h.TransportLen(n))
				if _, err := Build(frame, &e, &h, payload); err != nil {
					t.Fatalf("build %v: %v", op, err)
				}
				out = append(out, frame)
			}
		}
	}
	return out
}

func TestBuildParseRoundTrip(t *testing.T) {
	for _, frame := range testFrames(t) {
		var p Packet
		if err := p.Parse(frame); err != nil {
			t.Fatalf("parse: %v\n%x", err, frame)
		}
		if !p.VerifyICRC() {
			t.Fatalf("%v: ICRC does not verify", p.Opcode)
		}
		e, h := p.Encap(), p.Headers()
		again := make([]byte, len(frame))
		n, err := Build(again, &e, &h, p.PayloadBytes())
		if err != nil || n != len(frame) || !bytes.Equal(again, frame) {
			t.Fatalf("%v: rebuild differs (n=%d err=%v)\n got %x\nwant %x", p.Opcode, n, err, again, frame)
		}
		want := testHeaders(p.Opcode)
		if h.BTH.PSN != want.BTH.PSN || h.BTH.DestQP != want.BTH.DestQP || !h.BTH.AckReq || !h.BTH.SE {
			t.Errorf("%v: BTH %+v", p.Opcode, h.BTH)
		}
		if r := p.RETH(); r != nil && r.Fields() != want.RETH {
			t.Errorf("%v: RETH %+v", p.Opcode, r.Fields())
		}
		if d := p.DETH(); d != nil && d.Fields() != want.DETH {
			t.Errorf("%v: DETH %+v", p.Opcode, d.Fields())
		}
		if im := p.ImmDt(); im != nil && im.Value() != want.Imm {
			t.Errorf("%v: imm %#x", p.Opcode, im.Value())
		}
		if p.IPv6 && p.SrcAddr() != testSrc6 || !p.IPv6 && p.DstAddr() != testDst4 {
			t.Errorf("addresses %v %v", p.SrcAddr(), p.DstAddr())
		}
	}
}

// maskedOffsets returns the frame offsets the ICRC does not cover or masks.
func maskedOffsets(p *Packet) map[int]bool {
	m := map[int]bool{}
	for i := 0; i < p.L3; i++ {
		m[i] = true // Ethernet and VLAN are outside the ICRC
	}
	if p.IPv6 {
		for i := 0; i < 4; i++ {
			m[p.L3+i] = true // version nibble is covered; checked below
		}
		m[p.L3+7] = true
	} else {
		for _, o := range []int{1, 8, 10, 11} {
			m[p.L3+o] = true
		}
	}
	m[p.L4+6], m[p.L4+7] = true, true
	m[p.BTHOff+4] = true
	return m
}

func TestICRCSingleByteFlips(t *testing.T) {
	for _, frame := range testFrames(t)[:40] {
		checkFlips(t, frame)
	}
}

// checkFlips flips each byte of frame in turn: outside masked fields the
// ICRC must fail (or the frame must no longer parse), inside them it must
// still verify.
func checkFlips(t *testing.T, frame []byte) {
	t.Helper()
	var p Packet
	if err := p.Parse(frame); err != nil {
		t.Fatal(err)
	}
	masked := maskedOffsets(&p)
	end := len(p.Frame)
	buf := make([]byte, len(frame))
	for i := 0; i < end; i++ {
		copy(buf, frame)
		buf[i] ^= 0xff
		if p.IPv6 && i == p.L3 {
			buf[i] = frame[i] ^ 0x0f // keep version 6: flip the traffic class half
		}
		var q Packet
		if err := q.Parse(buf); err != nil {
			if masked[i] {
				// Only the Ethernet type can make a masked-field flip unparsable.
				if i != 12 && i != 13 && !(p.HasVLAN && (i == 16 || i == 17)) {
					t.Errorf("flip at %d (masked) broke parsing: %v", i, err)
				}
			}
			continue
		}
		if ok := q.VerifyICRC(); ok != masked[i] {
			t.Errorf("%v: flip at offset %d: ICRC ok=%v, masked=%v", p.Opcode, i, ok, masked[i])
		}
	}
}

func TestEveryPrefixRejected(t *testing.T) {
	for _, frame := range testFrames(t) {
		checkPrefixes(t, frame)
	}
}

func checkPrefixes(t *testing.T, frame []byte) {
	t.Helper()
	var p Packet
	if err := p.Parse(frame); err != nil {
		t.Fatal(err)
	}
	for n := 0; n < len(p.Frame); n++ {
		var q Packet
		err := q.Parse(frame[:n])
		if err == nil {
			t.Fatalf("%v: prefix of %d/%d bytes accepted", p.Opcode, n, len(frame))
		}
		var e *Error
		if !errors.As(err, &e) {
			t.Fatalf("untyped error %T", err)
		}
	}
}

func TestMalformedErrors(t *testing.T) {
	e := testEncap(false, false)
	h := testHeaders(RCWriteFirst)
	good := make([]byte, e.Len()+h.TransportLen(16))
	if _, err := Build(good, &e, &h, make([]byte, 16)); err != nil {
		t.Fatal(err)
	}
	l4 := EthernetLen + IPv4MinLen
	bth := l4 + UDPLen
	mod := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	cases := []struct {
		name  string
		frame []byte
		want  error
	}{
		{"short", good[:10], ErrTooShort},
		{"arp", mod(func(b []byte) { b[12], b[13] = 0x08, 0x06 }), ErrNotRoCE},
		{"tcp", mod(func(b []byte) { b[EthernetLen+9] = 6 }), ErrNotRoCE},
		{"port", mod(func(b []byte) { b[l4+3]++ }), ErrNotRoCE},
		{"ipver", mod(func(b []byte) { b[EthernetLen] = 0x55 }), ErrBadIPHeader},
		{"ihl", mod(func(b []byte) { b[EthernetLen] = 0x44 }), ErrBadIPHeader},
		{"fragment", mod(func(b []byte) { b[EthernetLen+6] |= 0x20 }), ErrBadIPHeader},
		{"iplen big", mod(func(b []byte) { binary.BigEndian.PutUint16(b[EthernetLen+2:], 2000) }), ErrTooShort},
		{"iplen small", mod(func(b []byte) { binary.BigEndian.PutUint16(b[EthernetLen+2:], 24) }), ErrIPLengthMismatch},
		{"udplen", mod(func(b []byte) { b[l4+5]-- }), ErrIPLengthMismatch},
		{"tver", mod(func(b []byte) { b[bth+1] |= 1 }), ErrBadTransportVer},
		{"opcode", mod(func(b []byte) { b[bth] = 0x15 }), ErrUnknownOpcode},
		{"pad", mod(func(b []byte) { b[bth+1] |= 0x30; b[bth] = byte(RCWriteMiddle) }), nil},
		{"ack with payload", mod(func(b []byte) { b[bth] = byte(RCAcknowledge) }), ErrUnexpectedPayload},
	}
	for _, c := range cases {
		var p Packet
		err := p.Parse(c.frame)
		if c.want == nil { // pad 3 on a 16+16-byte payload region: fine, just shorter payload
			if err != nil || p.PayLen != 16+RETHLen-3 {
				t.Errorf("%s: err %v paylen %d", c.name, err, p.PayLen)
			}
			continue
		}
		if !errors.Is(err, c.want) {
			t.Errorf("%s: got %v, want %v", c.name, err, c.want)
		}
	}
	// A pad count larger than what is there.
	h = testHeaders(RCAcknowledge)
	ack := make([]byte, e.Len()+h.TransportLen(0))
	Build(ack, &e, &h, nil)
	ack[bth+1] |= 0x10
	var p Packet
	if err := p.Parse(ack); !errors.Is(err, ErrBadPadCount) {
		t.Errorf("ack pad: %v", err)
	}
	err := p.Parse(ack)
	if err.Error() != "bth: payload: bad pad count" {
		t.Errorf("message %q", err)
	}
	var be *Error
	if !errors.As(err, &be) || be.Reason() != "payload: bad pad count" {
		t.Errorf("reason of %q: %v", err, be)
	}
}

func TestICRCMatchesPlainCRC(t *testing.T) {
	// The ICRC is CRC-32 over 8 bytes of ones and the masked datagram.
	e := testEncap(false, false)
	h := testHeaders(RCSendOnly)
	frame := make([]byte, e.Len()+h.TransportLen(5))
	Build(frame, &e, &h, []byte("hello"))
	in := append(bytes.Repeat([]byte{0xff}, 8), frame[EthernetLen:len(frame)-4]...)
	for _, o := range []int{8 + 1, 8 + 8, 8 + 10, 8 + 11, 8 + 20 + 6, 8 + 20 + 7, 8 + 28 + 4} {
		in[o] = 0xff
	}
	want := crc32.ChecksumIEEE(in)
	if got := binary.LittleEndian.Uint32(frame[len(frame)-4:]); got != want {
		t.Fatalf("ICRC %#x, want %#x", got, want)
	}
}

func TestGID(t *testing.T) {
	g := GIDFromAddr(netip.MustParseAddr("10.0.0.1"))
	if g.String() != "0000:0000:0000:0000:0000:ffff:0a00:0001" || !g.IsIPv4() {
		t.Errorf("GID %s", g)
	}
	if g.Addr() != netip.MustParseAddr("10.0.0.1") {
		t.Errorf("Addr %v", g.Addr())
	}
	for _, s := range []string{"10.0.0.1", "::ffff:10.0.0.1", "0000:0000:0000:0000:0000:ffff:0a00:0001", "00000000000000000000ffff0a000001"} {
		if p, err := ParseGID(s); err != nil || p != g {
			t.Errorf("ParseGID(%q) = %s, %v", s, p, err)
		}
	}
	if _, err := ParseGID("nonsense"); err == nil {
		t.Error("ParseGID accepted nonsense")
	}
	v6 := GIDFromAddr(testSrc6)
	if v6.IsIPv4() || v6.Addr() != testSrc6 {
		t.Error("v6 GID")
	}
}

func TestMulticastGID(t *testing.T) {
	for _, c := range []struct {
		addr string
		mac  [MACLen]byte
		ok   bool
	}{
		{"239.255.129.2", [MACLen]byte{0x01, 0x00, 0x5e, 0x7f, 0x81, 0x02}, true},
		{"224.0.0.1", [MACLen]byte{0x01, 0x00, 0x5e, 0x00, 0x00, 0x01}, true},
		{"ff12::1:ff00:1234", [MACLen]byte{0x33, 0x33, 0xff, 0x00, 0x12, 0x34}, true},
		{"10.0.0.1", [MACLen]byte{}, false},
		{"223.255.255.255", [MACLen]byte{}, false},
		{"fe80::1", [MACLen]byte{}, false},
	} {
		g := GIDFromAddr(netip.MustParseAddr(c.addr))
		mac, ok := g.MulticastMAC()
		if ok != c.ok || mac != c.mac || g.IsMulticast() != c.ok {
			t.Errorf("%s: MulticastMAC %x %v, IsMulticast %v; want %x %v", c.addr, mac, ok, g.IsMulticast(), c.mac, c.ok)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, fr := range testFrames(f) {
		f.Add(fr)
	}
	for _, fr := range goldenFramesForSeed() {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkFastPath(t, b)
		var p Packet
		if err := p.Parse(b); err != nil {
			var e *Error
			if !errors.As(err, &e) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		// Everything a parsed packet offers must be safe to touch.
		_ = p.VerifyICRC()
		h := p.Headers()
		_ = p.Encap()
		_ = p.PayloadBytes()
		_ = p.SrcAddr()
		if p.PayLen < 0 || p.Payload+p.PayLen > len(p.Frame)-ICRCLen {
			t.Fatalf("payload out of frame")
		}
		// Re-encoding what was decoded gives the same transport bytes
		// (reserved bits aside, which the encoder zeroes).
		out := make([]byte, h.TransportLen(p.PayLen))
		if _, err := h.Encode(out, p.PayloadBytes()); err != nil {
			t.Fatalf("re-encode: %v", err)
		}
	})
}

func FuzzHeaders(f *testing.F) {
	f.Add(make([]byte, 64))
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < BTHLen+AtomicETHLen {
			return
		}
		bf := BTH(b).Fields()
		out := make([]byte, BTHLen)
		if err := bf.Encode(out); err != nil {
			t.Fatal(err)
		}
		if BTH(out).Fields() != bf {
			t.Fatal("BTH round trip")
		}
		x := b[BTHLen:]
		if r := RETH(x).Fields(); func() RETHFields { o := make([]byte, RETHLen); r.Encode(o); return RETH(o).Fields() }() != r {
			t.Fatal("RETH round trip")
		}
		if a := AtomicETH(x).Fields(); func() AtomicETHFields {
			o := make([]byte, AtomicETHLen)
			a.Encode(o)
			return AtomicETH(o).Fields()
		}() != a {
			t.Fatal("AtomicETH round trip")
		}
		if r := XRCETH(x).Fields(); func() XRCETHFields {
			o := make([]byte, XRCETHLen)
			if err := r.Encode(o); err != nil {
				t.Fatal(err)
			}
			return XRCETH(o).Fields()
		}() != r {
			t.Fatal("XRCETH round trip")
		}
		_ = AETH(x).Syndrome().String()
	})
}

func TestCRCSlicing8MatchesHashCRC32(t *testing.T) {
	b := make([]byte, 300)
	for i := range b {
		b[i] = byte(i*31 + 7)
	}
	for n := 0; n <= len(b); n++ {
		for _, init := range []uint32{0, 0x12345678} {
			if got, want := crcSlicing8(init, b[:n]), crc32.Update(init, crc32.IEEETable, b[:n]); got != want {
				t.Fatalf("len %d init %#x: %#x != %#x", n, init, got, want)
			}
		}
	}
}

// checkFastPath requires the fast parser to agree with the general one.
func checkFastPath(t *testing.T, b []byte) {
	var fast, slow Packet
	okFast := fast.parseFast(b)
	err := slow.parse(b)
	if okFast && err != nil {
		t.Fatalf("fast path accepted what parse rejects (%v): %x", err, b)
	}
	if okFast && (fast.Opcode != slow.Opcode || fast.Payload != slow.Payload || fast.PayLen != slow.PayLen ||
		len(fast.Frame) != len(slow.Frame) || fast.BTHOff != slow.BTHOff || fast.L4 != slow.L4) {
		t.Fatalf("fast path disagrees: %+v vs %+v", fast, slow)
	}
}

func TestFastPathAgrees(t *testing.T) {
	hits := 0
	for _, f := range testFrames(t) {
		for n := 0; n <= len(f); n++ {
			checkFastPath(t, f[:n])
		}
		var p Packet
		if p.parseFast(f) {
			hits++
		}
		for i := 0; i < len(f) && i < 80; i++ {
			b := bytes.Clone(f)
			b[i] ^= 0x5a
			checkFastPath(t, b)
		}
	}
	if hits == 0 {
		t.Fatal("the fast path never ran")
	}
}
