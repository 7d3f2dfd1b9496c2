package bth

import (
	"encoding/binary"
	"net/netip"
)

// IP header lengths and the protocol number of UDP.
const (
	IPv4MinLen    = 20 // IPv4 header without options
	IPv4MaxLen    = 60 // IPv4 header with the most options its IHL can say
	IPv6Len       = 40 // IPv6 fixed header
	IPProtocolUDP = 17 // UDP, as IPv4 Protocol and IPv6 Next Header
)

// IPVersion returns the version field of the IP packet b (4 or 6 for the
// packets sroce handles; IPv4 and IPv6 keep it in the same place), or -1 if
// b is empty.
func IPVersion(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0] >> 4)
}

// IPv4 is the IPv4 header: 20 bytes, then IHL*4-20 bytes of options.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-------+-------+---------------+-------------------------------+
//	|Version|  IHL  |      TOS      |         Total Length          |
//	+-------+-------+---------------+-----+-------------------------+
//	|        Identification         |Flags|     Fragment Offset     |
//	+---------------+---------------+-----+-------------------------+
//	|      TTL      |   Protocol    |        Header Checksum        |
//	+---------------+---------------+-------------------------------+
//	|                        Source Address                         |
//	+---------------------------------------------------------------+
//	|                      Destination Address                      |
//	+---------------------------------------------------------------+
//	|                     Options (IHL > 5 only)                    |
//	+---------------------------------------------------------------+
//
// Flags are, from the most significant bit: reserved, DF, MF.
type IPv4 []byte

const (
	ipv4VerIHL   = 0
	ipv4TOS      = 1
	ipv4TotalLen = 2
	ipv4ID       = 4
	ipv4Frag     = 6 // flags and fragment offset
	ipv4TTL      = 8
	ipv4Protocol = 9
	ipv4Checksum = 10
	ipv4Src      = 12
	ipv4Dst      = 16

	ipv4AddrLen = 4
)

// IPv4IDOffset is the offset of the Identification field in an IPv4
// header, for code that needs to know where the field sits rather than
// read or write it (the ICRC algebra that solves for an unknown ID).
const IPv4IDOffset = ipv4ID

// IPv4 flags, as IPv4.Flags returns them and IPv4Fields holds them.
const (
	IPv4FlagMF = 1 << 0 // more fragments
	IPv4FlagDF = 1 << 1 // don't fragment
)

const (
	ipv4FlagsShift = 13
	ipv4OffsetMask = 0x1fff
)

// Version returns the IP version (4 for an IPv4 header).
func (b IPv4) Version() uint8 { return b[ipv4VerIHL] >> 4 }

// HeaderLen returns the header length in bytes (IHL times four), options
// included.
func (b IPv4) HeaderLen() int { return int(b[ipv4VerIHL]&0x0f) * 4 }

// TOS returns the type of service byte (DSCP and ECN).
func (b IPv4) TOS() uint8 { return b[ipv4TOS] }

// TotalLen returns the length of the datagram, header included.
func (b IPv4) TotalLen() uint16 { return binary.BigEndian.Uint16(b[ipv4TotalLen:]) }

// ID returns the Identification field.
func (b IPv4) ID() uint16 { return binary.BigEndian.Uint16(b[ipv4ID:]) }

// Flags returns the three flag bits (IPv4FlagDF, IPv4FlagMF).
func (b IPv4) Flags() uint8 {
	return uint8(binary.BigEndian.Uint16(b[ipv4Frag:]) >> ipv4FlagsShift)
}

// DF returns the don't-fragment flag.
func (b IPv4) DF() bool { return b.Flags()&IPv4FlagDF != 0 }

// MF returns the more-fragments flag.
func (b IPv4) MF() bool { return b.Flags()&IPv4FlagMF != 0 }

// FragmentOffset returns the fragment offset in units of 8 bytes.
func (b IPv4) FragmentOffset() uint16 {
	return binary.BigEndian.Uint16(b[ipv4Frag:]) & ipv4OffsetMask
}

// IsFragment reports whether the datagram is a fragment of a larger one:
// MF is set or the fragment offset is not zero.
func (b IPv4) IsFragment() bool {
	return binary.BigEndian.Uint16(b[ipv4Frag:])&(IPv4FlagMF<<ipv4FlagsShift|ipv4OffsetMask) != 0
}

// TTL returns the time to live.
func (b IPv4) TTL() uint8 { return b[ipv4TTL] }

// Protocol returns the protocol of the payload (IPProtocolUDP for RoCEv2).
func (b IPv4) Protocol() uint8 { return b[ipv4Protocol] }

// Checksum returns the header checksum field.
func (b IPv4) Checksum() uint16 { return binary.BigEndian.Uint16(b[ipv4Checksum:]) }

// Src returns the source address.
func (b IPv4) Src() netip.Addr {
	return netip.AddrFrom4([ipv4AddrLen]byte(b[ipv4Src : ipv4Src+ipv4AddrLen]))
}

// Dst returns the destination address.
func (b IPv4) Dst() netip.Addr {
	return netip.AddrFrom4([ipv4AddrLen]byte(b[ipv4Dst : ipv4Dst+ipv4AddrLen]))
}

// SetVersionIHL sets the version to 4 and the header length to n bytes
// (a multiple of four from IPv4MinLen to IPv4MaxLen).
func (b IPv4) SetVersionIHL(n int) { b[ipv4VerIHL] = 4<<4 | byte(n/4)&0x0f }

// SetTOS sets the type of service byte.
func (b IPv4) SetTOS(v uint8) { b[ipv4TOS] = v }

// SetTotalLen sets the total length.
func (b IPv4) SetTotalLen(n uint16) { binary.BigEndian.PutUint16(b[ipv4TotalLen:], n) }

// SetID sets the Identification field.
func (b IPv4) SetID(id uint16) { binary.BigEndian.PutUint16(b[ipv4ID:], id) }

// SetFlagsFragmentOffset sets the flags (the low three bits of flags) and
// the fragment offset (the low 13 bits of offset, in units of 8 bytes).
func (b IPv4) SetFlagsFragmentOffset(flags uint8, offset uint16) {
	binary.BigEndian.PutUint16(b[ipv4Frag:], uint16(flags&7)<<ipv4FlagsShift|offset&ipv4OffsetMask)
}

// SetTTL sets the time to live.
func (b IPv4) SetTTL(v uint8) { b[ipv4TTL] = v }

// SetProtocol sets the protocol of the payload.
func (b IPv4) SetProtocol(v uint8) { b[ipv4Protocol] = v }

// SetChecksum sets the header checksum field.
func (b IPv4) SetChecksum(v uint16) { binary.BigEndian.PutUint16(b[ipv4Checksum:], v) }

// SetSrc sets the source address, which must be an IPv4 or IPv4-mapped
// address.
func (b IPv4) SetSrc(a netip.Addr) {
	a4 := a.Unmap().As4()
	copy(b[ipv4Src:ipv4Src+ipv4AddrLen], a4[:])
}

// SetDst sets the destination address, which must be an IPv4 or
// IPv4-mapped address.
func (b IPv4) SetDst(a netip.Addr) {
	a4 := a.Unmap().As4()
	copy(b[ipv4Dst:ipv4Dst+ipv4AddrLen], a4[:])
}

// CalculateChecksum returns the checksum of the header (HeaderLen bytes,
// options included) with the checksum field taken as zero: the value
// SetChecksum should store.
func (b IPv4) CalculateChecksum() uint16 {
	hl := b.HeaderLen()
	return ^foldSum(onesSum(b[:ipv4Checksum]) + onesSum(b[ipv4Checksum+2:hl]))
}

// IsChecksumValid reports whether the header checksum field is right.
func (b IPv4) IsChecksumValid() bool { return IPv4Checksum(b[:b.HeaderLen()]) == 0 }

// onesSum adds the big-endian 16-bit words of h; an odd last byte is left
// out.
func onesSum(h []byte) uint32 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	return s
}

// foldSum folds the carries of a sum of 16-bit words back into 16 bits.
func foldSum(s uint32) uint16 {
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

// IPv4Checksum returns the Internet checksum of h, an IPv4 header: the
// value to store when its checksum field is zero, and zero when the
// field is right. A last odd byte is left out.
func IPv4Checksum(h []byte) uint16 { return ^foldSum(onesSum(h)) }

// IPv4Fields is the decoded form of an IPv4 header. Options are not
// represented, and the header checksum is computed by Encode.
type IPv4Fields struct {
	TOS            uint8
	TotalLen       uint16
	ID             uint16
	Flags          uint8  // IPv4FlagDF, IPv4FlagMF
	FragmentOffset uint16 // in units of 8 bytes
	TTL            uint8
	Protocol       uint8
	Src, Dst       netip.Addr
}

// Fields decodes b.
func (b IPv4) Fields() IPv4Fields {
	return IPv4Fields{
		TOS: b.TOS(), TotalLen: b.TotalLen(), ID: b.ID(), Flags: b.Flags(),
		FragmentOffset: b.FragmentOffset(), TTL: b.TTL(), Protocol: b.Protocol(),
		Src: b.Src(), Dst: b.Dst(),
	}
}

// Encode writes f into b, which must hold IPv4MinLen bytes, as a header
// without options, checksum included. It refuses addresses that are not
// IPv4 (IPv4-mapped ones count as IPv4), flags above 7 and a fragment
// offset above 0x1fff.
func (f *IPv4Fields) Encode(b IPv4) error {
	src, dst := f.Src.Unmap(), f.Dst.Unmap()
	if !src.Is4() || !dst.Is4() || f.Flags > 7 || f.FragmentOffset > ipv4OffsetMask {
		return errAt(LayerIPv4, KindOutOfRange)
	}
	b = b[:IPv4MinLen]
	b.SetVersionIHL(IPv4MinLen)
	b.SetTOS(f.TOS)
	b.SetTotalLen(f.TotalLen)
	b.SetID(f.ID)
	b.SetFlagsFragmentOffset(f.Flags, f.FragmentOffset)
	b.SetTTL(f.TTL)
	b.SetProtocol(f.Protocol)
	s, d := src.As4(), dst.As4()
	copy(b[ipv4Src:ipv4Src+ipv4AddrLen], s[:])
	copy(b[ipv4Dst:ipv4Dst+ipv4AddrLen], d[:])
	b.SetChecksum(0)
	b.SetChecksum(IPv4Checksum(b))
	return nil
}

// IPv6 is the 40-byte IPv6 fixed header.
//
//	 0                   1                   2                   3
//	 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//	+-------+---------------+---------------------------------------+
//	|Version| Traffic Class |              Flow Label               |
//	+-------+---------------+-------+---------------+---------------+
//	|        Payload Length         |  Next Header  |   Hop Limit   |
//	+-------------------------------+---------------+---------------+
//	|                                                               |
//	+                                                               +
//	|                   Source Address (16 bytes)                   |
//	+                                                               +
//	|                                                               |
//	+---------------------------------------------------------------+
//	|                                                               |
//	+                                                               +
//	|                Destination Address (16 bytes)                 |
//	+                                                               +
//	|                                                               |
//	+---------------------------------------------------------------+
type IPv6 []byte

const (
	ipv6VerTCFlow  = 0 // version, traffic class, flow label
	ipv6PayloadLen = 4
	ipv6NextHeader = 6
	ipv6HopLimit   = 7
	ipv6Src        = 8
	ipv6Dst        = 24

	ipv6AddrLen  = 16
	ipv6TCShift  = 20
	ipv6FlowMask = 0xfffff
)

func (b IPv6) word0() uint32 { return binary.BigEndian.Uint32(b[ipv6VerTCFlow:]) }

// Version returns the IP version (6 for an IPv6 header).
func (b IPv6) Version() uint8 { return b[ipv6VerTCFlow] >> 4 }

// TrafficClass returns the traffic class (DSCP and ECN).
func (b IPv6) TrafficClass() uint8 { return uint8(b.word0() >> ipv6TCShift) }

// FlowLabel returns the 20-bit flow label.
func (b IPv6) FlowLabel() uint32 { return b.word0() & ipv6FlowMask }

// PayloadLen returns the length of what follows the fixed header.
func (b IPv6) PayloadLen() uint16 { return binary.BigEndian.Uint16(b[ipv6PayloadLen:]) }

// NextHeader returns the type of the next header (IPProtocolUDP for
// RoCEv2).
func (b IPv6) NextHeader() uint8 { return b[ipv6NextHeader] }

// HopLimit returns the hop limit.
func (b IPv6) HopLimit() uint8 { return b[ipv6HopLimit] }

// Src returns the source address.
func (b IPv6) Src() netip.Addr {
	return netip.AddrFrom16([ipv6AddrLen]byte(b[ipv6Src : ipv6Src+ipv6AddrLen]))
}

// Dst returns the destination address.
func (b IPv6) Dst() netip.Addr {
	return netip.AddrFrom16([ipv6AddrLen]byte(b[ipv6Dst : ipv6Dst+ipv6AddrLen]))
}

// SetVersionTrafficClassFlowLabel sets the version to 6, the traffic
// class and the flow label (the low 20 bits of flow).
func (b IPv6) SetVersionTrafficClassFlowLabel(tc uint8, flow uint32) {
	binary.BigEndian.PutUint32(b[ipv6VerTCFlow:], 6<<28|uint32(tc)<<ipv6TCShift|flow&ipv6FlowMask)
}

// SetTrafficClass sets the traffic class, keeping the version and the flow
// label.
func (b IPv6) SetTrafficClass(tc uint8) {
	w := b.word0()&^(0xff<<ipv6TCShift) | uint32(tc)<<ipv6TCShift
	binary.BigEndian.PutUint32(b[ipv6VerTCFlow:], w)
}

// SetFlowLabel sets the flow label (the low 20 bits of flow), keeping the
// version and the traffic class.
func (b IPv6) SetFlowLabel(flow uint32) {
	w := b.word0()&^ipv6FlowMask | flow&ipv6FlowMask
	binary.BigEndian.PutUint32(b[ipv6VerTCFlow:], w)
}

// SetPayloadLen sets the payload length.
func (b IPv6) SetPayloadLen(n uint16) { binary.BigEndian.PutUint16(b[ipv6PayloadLen:], n) }

// SetNextHeader sets the type of the next header.
func (b IPv6) SetNextHeader(v uint8) { b[ipv6NextHeader] = v }

// SetHopLimit sets the hop limit.
func (b IPv6) SetHopLimit(v uint8) { b[ipv6HopLimit] = v }

// SetSrc sets the source address (an IPv4 address is stored IPv4-mapped).
func (b IPv6) SetSrc(a netip.Addr) {
	a16 := a.As16()
	copy(b[ipv6Src:ipv6Src+ipv6AddrLen], a16[:])
}

// SetDst sets the destination address (an IPv4 address is stored
// IPv4-mapped).
func (b IPv6) SetDst(a netip.Addr) {
	a16 := a.As16()
	copy(b[ipv6Dst:ipv6Dst+ipv6AddrLen], a16[:])
}

// IPv6Fields is the decoded form of an IPv6 fixed header.
type IPv6Fields struct {
	TrafficClass uint8
	FlowLabel    uint32 // 20 bits
	PayloadLen   uint16
	NextHeader   uint8
	HopLimit     uint8
	Src, Dst     netip.Addr
}

// Fields decodes b.
func (b IPv6) Fields() IPv6Fields {
	return IPv6Fields{
		TrafficClass: b.TrafficClass(), FlowLabel: b.FlowLabel(), PayloadLen: b.PayloadLen(),
		NextHeader: b.NextHeader(), HopLimit: b.HopLimit(), Src: b.Src(), Dst: b.Dst(),
	}
}

// Encode writes f into b, which must hold IPv6Len bytes. It refuses a flow
// label of 2^20 or more and addresses that are not IPv6 (IPv4-mapped ones
// are IPv6 addresses here).
func (f *IPv6Fields) Encode(b IPv6) error {
	if f.FlowLabel > ipv6FlowMask || !f.Src.Is6() || !f.Dst.Is6() {
		return errAt(LayerIPv6, KindOutOfRange)
	}
	b = b[:IPv6Len]
	b.SetVersionTrafficClassFlowLabel(f.TrafficClass, f.FlowLabel)
	b.SetPayloadLen(f.PayloadLen)
	b.SetNextHeader(f.NextHeader)
	b.SetHopLimit(f.HopLimit)
	b.SetSrc(f.Src)
	b.SetDst(f.Dst)
	return nil
}
