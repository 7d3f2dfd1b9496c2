package bth

import (
	"encoding/binary"
	"net/netip"
)

// Encap holds what goes in front of the BTH: Ethernet, an optional 802.1Q
// tag, IPv4 or IPv6, and UDP to port 4791. Src and Dst must both be IPv4 or
// both IPv6 (an IPv4-mapped IPv6 address counts as IPv4).
type Encap struct {
	DstMAC, SrcMAC [6]byte
	HasVLAN        bool
	VLANTCI        uint16
	Src, Dst       netip.Addr
	TOS            uint8  // IPv4 TOS or IPv6 traffic class
	TTL            uint8  // IPv4 TTL or IPv6 hop limit
	FlowLabel      uint32 // IPv6 only (20 bits)
	ID             uint16 // IPv4 identification
	DF             bool   // IPv4 don't-fragment
	SrcPort        uint16 // UDP source port
}

// IPv6 reports whether e describes an IPv6 datagram.
func (e *Encap) IPv6() bool { return !e.Src.Unmap().Is4() }

// Len returns the number of bytes before the BTH.
func (e *Encap) Len() int {
	n := EthernetLen + UDPLen
	if e.HasVLAN {
		n += VLANTagLen
	}
	if e.IPv6() {
		return n + IPv6Len
	}
	return n + IPv4MinLen
}

// Encode writes the Ethernet, IP and UDP headers for a transport packet of
// transportLen bytes (BTH to ICRC inclusive) into frame, which must hold
// e.Len() bytes. It returns the offset of the IP header. The UDP checksum is
// zero, as rdma_rxe and RoCE NICs send it.
func (e *Encap) Encode(frame []byte, transportLen int) (l3 int, err error) {
	src, dst := e.Src.Unmap(), e.Dst.Unmap()
	v6 := !src.Is4()
	if !src.IsValid() || !dst.IsValid() || v6 == dst.Is4() || e.FlowLabel > 0xfffff {
		return 0, errAt(LayerAny, KindOutOfRange)
	}
	copy(frame[0:6], e.DstMAC[:])
	copy(frame[6:12], e.SrcMAC[:])
	l3 = EthernetLen
	if e.HasVLAN {
		binary.BigEndian.PutUint16(frame[12:], EtherTypeVLAN)
		binary.BigEndian.PutUint16(frame[14:], e.VLANTCI)
		l3 += VLANTagLen
	}
	udpLen := UDPLen + transportLen
	var l4 int
	if v6 {
		if udpLen > 0xffff {
			return 0, errAt(LayerIPv6, KindOutOfRange)
		}
		binary.BigEndian.PutUint16(frame[l3-2:], EtherTypeIPv6)
		ip := frame[l3 : l3+IPv6Len]
		binary.BigEndian.PutUint32(ip[0:], 6<<28|uint32(e.TOS)<<20|e.FlowLabel)
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = protoUDP
		ip[7] = e.TTL
		a, b := src.As16(), dst.As16()
		copy(ip[8:24], a[:])
		copy(ip[24:40], b[:])
		l4 = l3 + IPv6Len
	} else {
		tl := IPv4MinLen + udpLen
		if tl > 0xffff {
			return 0, errAt(LayerIPv4, KindOutOfRange)
		}
		binary.BigEndian.PutUint16(frame[l3-2:], EtherTypeIPv4)
		ip := frame[l3 : l3+IPv4MinLen]
		ip[0] = 0x45
		ip[1] = e.TOS
		binary.BigEndian.PutUint16(ip[2:], uint16(tl))
		binary.BigEndian.PutUint16(ip[4:], e.ID)
		var frag uint16
		if e.DF {
			frag = 0x4000
		}
		binary.BigEndian.PutUint16(ip[6:], frag)
		ip[8] = e.TTL
		ip[9] = protoUDP
		ip[10], ip[11] = 0, 0
		a, b := src.As4(), dst.As4()
		copy(ip[12:16], a[:])
		copy(ip[16:20], b[:])
		binary.BigEndian.PutUint16(ip[10:], IPv4Checksum(ip))
		l4 = l3 + IPv4MinLen
	}
	udp := frame[l4 : l4+UDPLen]
	binary.BigEndian.PutUint16(udp[0:], e.SrcPort)
	binary.BigEndian.PutUint16(udp[2:], UDPPort)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	udp[6], udp[7] = 0, 0
	return l3, nil
}

// IPv4Checksum returns the Internet checksum of an IPv4 header whose
// checksum field is zero.
func IPv4Checksum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for s > 0xffff {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// Encap decodes the headers in front of the BTH of a parsed packet.
func (p *Packet) Encap() Encap {
	f := p.Frame
	e := Encap{HasVLAN: p.HasVLAN, VLANTCI: p.VLANTCI, Src: p.SrcAddr(), Dst: p.DstAddr(), SrcPort: p.SrcPort()}
	copy(e.DstMAC[:], f[0:6])
	copy(e.SrcMAC[:], f[6:12])
	ip := f[p.L3:]
	if p.IPv6 {
		w := binary.BigEndian.Uint32(ip)
		e.TOS, e.FlowLabel, e.TTL = uint8(w>>20), w&0xfffff, ip[7]
	} else {
		e.TOS, e.TTL = ip[1], ip[8]
		e.ID = binary.BigEndian.Uint16(ip[4:])
		e.DF = ip[6]&0x40 != 0
	}
	return e
}

// Headers is the decoded form of a BTH and every extended header an opcode
// can carry. Only the headers the opcode's table entry lists are used.
type Headers struct {
	BTH       BTHFields
	RETH      RETHFields
	AETH      AETHFields
	Atomic    AtomicETHFields
	AtomicAck uint64 // AtomicAckETH original remote data
	Imm       uint32 // ImmDt
	IETH      uint32 // R_Key to invalidate
	DETH      DETHFields
	FETH      FETHFields
}

// Headers decodes the BTH and the extended headers of a parsed packet.
func (p *Packet) Headers() Headers {
	h := Headers{BTH: p.BTH().Fields()}
	hs := p.info.Headers
	if hs&HdrRETH != 0 {
		h.RETH = p.RETH().Fields()
	}
	if hs&HdrAETH != 0 {
		h.AETH = p.AETH().Fields()
	}
	if hs&HdrAtomicETH != 0 {
		h.Atomic = p.AtomicETH().Fields()
	}
	if hs&HdrAtomicAckETH != 0 {
		h.AtomicAck = p.AtomicAckETH().OrigRemDt()
	}
	if hs&HdrImmDt != 0 {
		h.Imm = p.ImmDt().Value()
	}
	if hs&HdrIETH != 0 {
		h.IETH = p.IETH().RKey()
	}
	if hs&HdrDETH != 0 {
		h.DETH = p.DETH().Fields()
	}
	if hs&HdrFETH != 0 {
		h.FETH = p.FETH().Fields()
	}
	return h
}

// TransportLen returns the length of the transport packet (BTH to ICRC
// inclusive) that h would make with a payload of n bytes.
func (h *Headers) TransportLen(n int) int {
	return BTHLen + opTable[h.BTH.Opcode].ExtLen + n + (-n)&3 + ICRCLen
}

// Encode writes the BTH, the extended headers in the opcode's order, the
// payload and zero pad into b, and sets the BTH pad count from the payload
// length. b must hold TransportLen(len(payload)) bytes; the ICRC field is
// left for PutICRC. It returns the number of bytes written before the ICRC.
func (h *Headers) Encode(b []byte, payload []byte) (int, error) {
	off, err := h.EncodeHeaders(b, len(payload))
	if err != nil {
		return 0, err
	}
	n := off + copy(b[off:], payload)
	return n + (-n)&3, nil
}

// Build writes a whole RoCEv2 frame (headers, payload, pad and ICRC) into
// frame and returns its length. frame must hold
// e.Len()+h.TransportLen(len(payload)) bytes.
func Build(frame []byte, e *Encap, h *Headers, payload []byte) (int, error) {
	tl := h.TransportLen(len(payload))
	hl := e.Len()
	if len(frame) < hl+tl {
		return 0, errAt(LayerAny, KindTooShort)
	}
	l3, err := e.Encode(frame, tl)
	if err != nil {
		return 0, err
	}
	if _, err := h.Encode(frame[hl:], payload); err != nil {
		return 0, err
	}
	PutICRC(frame[l3:hl+tl], e.IPv6())
	return hl + tl, nil
}
