package bth

import (
	"bytes"
	"encoding/hex"
	"errors"
	"net/netip"
	"strings"
	"testing"
)

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The headers below are written out byte by byte, so the tests check the
// accessors' offsets against the wire layout and not against themselves.

func TestEthernetVLANLayout(t *testing.T) {
	b := unhex(t, "020000000002 020000000001 8100 b005 86dd")
	eth := Ethernet(b[:EthernetLen])
	want := EthernetFields{DstMAC: [6]byte{2, 0, 0, 0, 0, 2}, SrcMAC: [6]byte{2, 0, 0, 0, 0, 1}, EtherType: EtherTypeVLAN}
	if got := eth.Fields(); got != want {
		t.Fatalf("Ethernet %+v, want %+v", got, want)
	}
	tag := VLAN(b[EthernetLen:])
	if tag.TCI() != 0xb005 || tag.PCP() != 5 || !tag.DEI() || tag.VID() != 5 || tag.EtherType() != EtherTypeIPv6 {
		t.Fatalf("VLAN %+v pcp %d dei %v vid %d", tag.Fields(), tag.PCP(), tag.DEI(), tag.VID())
	}

	out := make([]byte, len(b))
	want.Encode(Ethernet(out))
	vf := tag.Fields()
	vf.Encode(VLAN(out[EthernetLen:]))
	if !bytes.Equal(out, b) {
		t.Fatalf("encode\n got %x\nwant %x", out, b)
	}

	eth = Ethernet(out)
	eth.SetDstMAC([6]byte{1, 2, 3, 4, 5, 6})
	eth.SetSrcMAC([6]byte{7, 8, 9, 10, 11, 12})
	eth.SetEtherType(EtherTypeIPv4)
	VLAN(out[EthernetLen:]).SetTCI(0x0fff)
	VLAN(out[EthernetLen:]).SetEtherType(EtherTypeQinQ)
	if got := hex.EncodeToString(out); got != "010203040506"+"0708090a0b0c"+"0800"+"0fff"+"88a8" {
		t.Fatalf("setters wrote %s", got)
	}
}

// ipv4Example is a UDP datagram header from 192.168.0.1 to 192.168.0.199
// with a correct checksum (0xb861).
const ipv4Example = "4500 0073 0000 4000 4011 b861 c0a8 0001 c0a8 00c7"

func TestIPv4Layout(t *testing.T) {
	b := unhex(t, ipv4Example)
	ip := IPv4(b)
	want := IPv4Fields{
		TotalLen: 0x73, Flags: IPv4FlagDF, TTL: 64, Protocol: IPProtocolUDP,
		Src: netip.MustParseAddr("192.168.0.1"), Dst: netip.MustParseAddr("192.168.0.199"),
	}
	if got := ip.Fields(); got != want {
		t.Fatalf("IPv4 %+v, want %+v", got, want)
	}
	if ip.Version() != 4 || ip.HeaderLen() != IPv4MinLen || ip.Checksum() != 0xb861 || !ip.DF() || ip.MF() ||
		ip.IsFragment() || !ip.IsChecksumValid() || ip.CalculateChecksum() != 0xb861 || IPVersion(b) != 4 {
		t.Fatalf("IPv4 accessors wrong on %x", b)
	}
	out := make([]byte, IPv4MinLen)
	if err := want.Encode(IPv4(out)); err != nil || !bytes.Equal(out, b) {
		t.Fatalf("encode: %v\n got %x\nwant %x", err, out, b)
	}

	ip = IPv4(out)
	ip.SetTOS(0xb8)
	ip.SetTotalLen(0x1234)
	ip.SetID(0xabcd)
	ip.SetFlagsFragmentOffset(IPv4FlagMF, 0x1fff)
	ip.SetTTL(1)
	ip.SetProtocol(6)
	ip.SetSrc(netip.MustParseAddr("::ffff:10.0.0.1"))
	ip.SetDst(netip.MustParseAddr("10.0.0.2"))
	ip.SetChecksum(0)
	if got, want := hex.EncodeToString(out), "45b81234abcd3fff01060000"+"0a000001"+"0a000002"; got != want {
		t.Fatalf("setters wrote %s, want %s", got, want)
	}
	if !ip.MF() || ip.DF() || ip.FragmentOffset() != 0x1fff || !ip.IsFragment() {
		t.Fatal("flags")
	}
	ip.SetFlagsFragmentOffset(0, 1)
	if !ip.IsFragment() || ip.Flags() != 0 {
		t.Fatal("a nonzero offset is a fragment")
	}
	ip.SetFlagsFragmentOffset(IPv4FlagDF, 0)
	if ip.IsFragment() || ip.Flags() != IPv4FlagDF {
		t.Fatal("DF alone is not a fragment")
	}
}

func TestIPv4Checksum(t *testing.T) {
	b := unhex(t, ipv4Example)
	ip := IPv4(b)
	ip.SetChecksum(0)
	if IPv4Checksum(b) != 0xb861 {
		t.Fatalf("IPv4Checksum %#x", IPv4Checksum(b))
	}
	ip.SetChecksum(0x1234)
	if ip.IsChecksumValid() || ip.CalculateChecksum() != 0xb861 {
		t.Fatal("CalculateChecksum must ignore the field's value")
	}
	// With options the checksum covers them.
	opt := unhex(t, "4600 0077 0000 4000 4011 0000 c0a8 0001 c0a8 00c7 0102 0304")
	o := IPv4(opt)
	if o.HeaderLen() != 24 {
		t.Fatal("IHL 6")
	}
	c := o.CalculateChecksum()
	if c != IPv4Checksum(opt) {
		t.Fatalf("with options %#x vs %#x", c, IPv4Checksum(opt))
	}
	o.SetChecksum(c)
	if !o.IsChecksumValid() || IPv4Checksum(opt) != 0 {
		t.Fatal("checksum with options does not verify")
	}
	opt[21] ^= 1
	if o.IsChecksumValid() {
		t.Fatal("a changed option byte still verifies")
	}
}

func TestIPv6Layout(t *testing.T) {
	b := unhex(t, "6b81 2345 0020 1140"+
		"fd00 0000 0000 0000 0000 0000 0000 0001"+
		"fd00 0000 0000 0000 0000 0000 0000 0002")
	ip := IPv6(b)
	want := IPv6Fields{
		TrafficClass: 0xb8, FlowLabel: 0x12345, PayloadLen: 0x20, NextHeader: IPProtocolUDP, HopLimit: 64,
		Src: netip.MustParseAddr("fd00::1"), Dst: netip.MustParseAddr("fd00::2"),
	}
	if got := ip.Fields(); got != want || ip.Version() != 6 || IPVersion(b) != 6 {
		t.Fatalf("IPv6 %+v version %d, want %+v", got, ip.Version(), want)
	}
	out := make([]byte, IPv6Len)
	if err := want.Encode(IPv6(out)); err != nil || !bytes.Equal(out, b) {
		t.Fatalf("encode: %v\n got %x\nwant %x", err, out, b)
	}
	ip = IPv6(out)
	ip.SetTrafficClass(0x01)
	if ip.Version() != 6 || ip.TrafficClass() != 0x01 || ip.FlowLabel() != 0x12345 {
		t.Fatalf("SetTrafficClass: %x", out[:4])
	}
	ip.SetFlowLabel(0xfedcba) // only 20 bits are kept
	if ip.Version() != 6 || ip.TrafficClass() != 0x01 || ip.FlowLabel() != 0xedcba {
		t.Fatalf("SetFlowLabel: %x", out[:4])
	}
	ip.SetPayloadLen(0x1234)
	ip.SetNextHeader(6)
	ip.SetHopLimit(1)
	ip.SetSrc(netip.MustParseAddr("10.0.0.1"))
	ip.SetDst(netip.MustParseAddr("fd00::9"))
	if got, want := hex.EncodeToString(out), "601edcba12340601"+
		"00000000000000000000ffff0a000001"+"fd000000000000000000000000000009"; got != want {
		t.Fatalf("setters wrote %s, want %s", got, want)
	}
	if IPVersion(nil) != -1 {
		t.Fatal("IPVersion of nothing")
	}
}

func TestUDPLayout(t *testing.T) {
	b := unhex(t, "c123 12b7 0020 abcd")
	u := UDP(b)
	want := UDPFields{SrcPort: 0xc123, DstPort: UDPPort, Length: 32, Checksum: 0xabcd}
	if got := u.Fields(); got != want {
		t.Fatalf("UDP %+v, want %+v", got, want)
	}
	out := make([]byte, UDPLen)
	want.Encode(UDP(out))
	if !bytes.Equal(out, b) {
		t.Fatalf("encode\n got %x\nwant %x", out, b)
	}
	u = UDP(out)
	u.SetSrcPort(1)
	u.SetDstPort(2)
	u.SetLength(3)
	u.SetChecksum(4)
	if got := hex.EncodeToString(out); got != "0001000200030004" {
		t.Fatalf("setters wrote %s", got)
	}
}

func TestIPEncodeRefusesOutOfRange(t *testing.T) {
	v4, v6 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("fd00::1")
	buf := make([]byte, IPv6Len)
	for _, f := range []IPv4Fields{
		{Src: v6, Dst: v4},
		{Src: v4, Dst: v6},
		{Src: v4},
		{Src: v4, Dst: v4, Flags: 8},
		{Src: v4, Dst: v4, FragmentOffset: 0x2000},
	} {
		if err := f.Encode(IPv4(buf)); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("IPv4 %+v: %v", f, err)
		}
	}
	for _, f := range []IPv6Fields{
		{Src: v4, Dst: v6},
		{Src: v6, Dst: v4},
		{Src: v6},
		{Src: v6, Dst: v6, FlowLabel: 1 << 20},
	} {
		if err := f.Encode(IPv6(buf)); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("IPv6 %+v: %v", f, err)
		}
	}
	// An IPv4-mapped address is IPv4 to the IPv4 encoder.
	f := IPv4Fields{Src: netip.MustParseAddr("::ffff:10.0.0.1"), Dst: v4}
	if err := f.Encode(IPv4(buf)); err != nil || IPv4(buf).Src() != v4 {
		t.Errorf("mapped source: %v %v", err, IPv4(buf).Src())
	}
}

// TestPacketHeaderViews checks the header views of a parsed packet against
// what built it.
func TestPacketHeaderViews(t *testing.T) {
	for _, v := range []struct{ v6, vlan bool }{{false, false}, {true, false}, {false, true}, {true, true}} {
		e := testEncap(v.v6, v.vlan)
		h := testHeaders(RCSendOnly)
		frame := make([]byte, e.Len()+h.TransportLen(7))
		if _, err := Build(frame, &e, &h, make([]byte, 7)); err != nil {
			t.Fatal(err)
		}
		var p Packet
		if err := p.Parse(frame); err != nil {
			t.Fatal(err)
		}
		eth := p.Ethernet()
		if eth.DstMAC() != e.DstMAC || eth.SrcMAC() != e.SrcMAC {
			t.Errorf("%+v: Ethernet %+v", v, eth.Fields())
		}
		et := uint16(EtherTypeIPv4)
		if v.v6 {
			et = EtherTypeIPv6
		}
		if tag := p.VLAN(); v.vlan != (tag != nil) || v.vlan && (eth.EtherType() != EtherTypeVLAN || tag.TCI() != e.VLANTCI || tag.EtherType() != et) ||
			!v.vlan && eth.EtherType() != et {
			t.Errorf("%+v: EtherType %#x tag %x", v, eth.EtherType(), tag)
		}
		ulen := uint16(UDPLen + h.TransportLen(7))
		if v.v6 {
			ip := p.IPv6Header()
			want := IPv6Fields{TrafficClass: e.TOS, FlowLabel: e.FlowLabel, PayloadLen: ulen, NextHeader: IPProtocolUDP,
				HopLimit: e.TTL, Src: e.Src, Dst: e.Dst}
			if p.IPv4Header() != nil || len(ip) != IPv6Len || ip.Fields() != want {
				t.Errorf("%+v: IPv6 %+v, want %+v", v, ip.Fields(), want)
			}
		} else {
			ip := p.IPv4Header()
			want := IPv4Fields{TOS: e.TOS, TotalLen: IPv4MinLen + ulen, ID: e.ID, Flags: IPv4FlagDF, TTL: e.TTL,
				Protocol: IPProtocolUDP, Src: e.Src, Dst: e.Dst}
			if p.IPv6Header() != nil || len(ip) != IPv4MinLen || ip.Fields() != want || !ip.IsChecksumValid() {
				t.Errorf("%+v: IPv4 %+v, want %+v", v, ip.Fields(), want)
			}
		}
		if u := p.UDP(); u.Fields() != (UDPFields{SrcPort: e.SrcPort, DstPort: UDPPort, Length: ulen}) {
			t.Errorf("%+v: UDP %+v", v, u.Fields())
		}
		if p.ICRC() != CarriedICRC(frame) || p.ICRC() != ICRC(frame[p.L3:], p.IPv6) {
			t.Errorf("%+v: ICRC", v)
		}
	}
}

// TestICRCOfIPv4Options: the ICRC covers IPv4 options unmasked.
func TestICRCOfIPv4Options(t *testing.T) {
	e := testEncap(false, false)
	h := testHeaders(RCSendOnly)
	plain := make([]byte, e.Len()+h.TransportLen(4))
	if _, err := Build(plain, &e, &h, []byte("abcd")); err != nil {
		t.Fatal(err)
	}
	// Insert 4 bytes of options (NOP, NOP, NOP, EOL) after the IPv4 header.
	l4 := EthernetLen + IPv4MinLen
	frame := append(append(bytes.Clone(plain[:l4]), 1, 1, 1, 0), plain[l4:]...)
	ip := IPv4(frame[EthernetLen:])
	ip.SetVersionIHL(IPv4MinLen + 4)
	ip.SetTotalLen(ip.TotalLen() + 4)
	ip.SetChecksum(ip.CalculateChecksum())
	PutICRC(frame[EthernetLen:], false)
	var p Packet
	if err := p.Parse(frame); err != nil || !p.VerifyICRC() || len(p.IPv4Header()) != 24 {
		t.Fatalf("parse with options: %v", err)
	}
	checkFlips(t, frame)
	checkPrefixes(t, frame)
}

// FuzzEncapHeaders decodes arbitrary bytes as each encapsulation header,
// encodes the fields again and requires the same fields and bytes back:
// at the start of the input, and where Parse finds the headers when the
// input is a RoCEv2 frame.
func FuzzEncapHeaders(f *testing.F) {
	for _, fr := range testFrames(f) {
		f.Add(fr)
	}
	for _, fr := range goldenFramesForSeed() {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkEthernetRoundTrip(t, b)
		checkVLANRoundTrip(t, b)
		checkIPv4RoundTrip(t, b)
		checkIPv6RoundTrip(t, b)
		checkUDPRoundTrip(t, b)
		var p Packet
		if p.Parse(b) != nil {
			return
		}
		checkEthernetRoundTrip(t, p.Ethernet())
		if p.HasVLAN {
			checkVLANRoundTrip(t, p.VLAN())
		}
		if p.IPv6 {
			checkIPv6RoundTrip(t, p.IPv6Header())
		} else {
			checkIPv4RoundTrip(t, p.IPv4Header())
		}
		checkUDPRoundTrip(t, p.UDP())
	})
}

func checkEthernetRoundTrip(t *testing.T, b []byte) {
	if len(b) < EthernetLen {
		return
	}
	out := make([]byte, EthernetLen)
	f := Ethernet(b).Fields()
	f.Encode(Ethernet(out))
	if !bytes.Equal(out, b[:EthernetLen]) || Ethernet(out).Fields() != f {
		t.Fatalf("Ethernet round trip: %x -> %x", b[:EthernetLen], out)
	}
}

func checkVLANRoundTrip(t *testing.T, b []byte) {
	if len(b) < VLANTagLen {
		return
	}
	out := make([]byte, VLANTagLen)
	f := VLAN(b).Fields()
	f.Encode(VLAN(out))
	if !bytes.Equal(out, b[:VLANTagLen]) || VLAN(out).Fields() != f {
		t.Fatalf("VLAN round trip: %x -> %x", b[:VLANTagLen], out)
	}
}

func checkUDPRoundTrip(t *testing.T, b []byte) {
	if len(b) < UDPLen {
		return
	}
	out := make([]byte, UDPLen)
	f := UDP(b).Fields()
	f.Encode(UDP(out))
	if !bytes.Equal(out, b[:UDPLen]) || UDP(out).Fields() != f {
		t.Fatalf("UDP round trip: %x -> %x", b[:UDPLen], out)
	}
}

func checkIPv6RoundTrip(t *testing.T, b []byte) {
	if len(b) < IPv6Len {
		return
	}
	out := make([]byte, IPv6Len)
	f := IPv6(b).Fields()
	if err := f.Encode(IPv6(out)); err != nil {
		t.Fatalf("IPv6 encode %+v: %v", f, err)
	}
	// The version is not a field: Encode writes 6.
	if IPv6(out).Fields() != f || IPv6(out).Version() != 6 || !bytes.Equal(out[1:], b[1:IPv6Len]) || out[0]&0x0f != b[0]&0x0f {
		t.Fatalf("IPv6 round trip: %x -> %x", b[:IPv6Len], out)
	}
}

func checkIPv4RoundTrip(t *testing.T, b []byte) {
	if len(b) < IPv4MinLen {
		return
	}
	out := make([]byte, IPv4MinLen)
	f := IPv4(b).Fields()
	if err := f.Encode(IPv4(out)); err != nil {
		t.Fatalf("IPv4 encode %+v: %v", f, err)
	}
	// Version, IHL and checksum are not fields: Encode writes 4, 5 and
	// the right checksum. Options are not carried over.
	o := IPv4(out)
	if o.Fields() != f || o.Version() != 4 || o.HeaderLen() != IPv4MinLen || !o.IsChecksumValid() ||
		!bytes.Equal(out[1:ipv4Checksum], b[1:ipv4Checksum]) ||
		!bytes.Equal(out[ipv4Checksum+2:], b[ipv4Checksum+2:IPv4MinLen]) {
		t.Fatalf("IPv4 round trip: %x -> %x", b[:IPv4MinLen], out)
	}
	if in := IPv4(b); in.HeaderLen() >= IPv4MinLen && in.HeaderLen() <= len(b) {
		c := bytes.Clone(b[:in.HeaderLen()])
		IPv4(c).SetChecksum(0)
		if in.CalculateChecksum() != IPv4Checksum(c) {
			t.Fatal("CalculateChecksum disagrees with IPv4Checksum")
		}
	}
}
