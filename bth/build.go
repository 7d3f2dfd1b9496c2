package bth

import "net/netip"

// Encap holds what goes in front of the BTH: Ethernet, an optional 802.1Q
// tag, IPv4 or IPv6, and UDP to port 4791. Src and Dst must both be IPv4 or
// both IPv6 (an IPv4-mapped IPv6 address counts as IPv4).
type Encap struct {
	DstMAC, SrcMAC [MACLen]byte
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
	eth := Ethernet(frame[:EthernetLen])
	eth.SetDstMAC(e.DstMAC)
	eth.SetSrcMAC(e.SrcMAC)
	et := uint16(EtherTypeIPv4)
	if v6 {
		et = EtherTypeIPv6
	}
	l3 = EthernetLen
	if e.HasVLAN {
		eth.SetEtherType(EtherTypeVLAN)
		tag := VLAN(frame[EthernetLen : EthernetLen+VLANTagLen])
		tag.SetTCI(e.VLANTCI)
		tag.SetEtherType(et)
		l3 += VLANTagLen
	} else {
		eth.SetEtherType(et)
	}
	udpLen := UDPLen + transportLen
	var l4 int
	if v6 {
		if udpLen > 0xffff {
			return 0, errAt(LayerIPv6, KindOutOfRange)
		}
		ip := IPv6(frame[l3 : l3+IPv6Len])
		ip.SetVersionTrafficClassFlowLabel(e.TOS, e.FlowLabel)
		ip.SetPayloadLen(uint16(udpLen))
		ip.SetNextHeader(IPProtocolUDP)
		ip.SetHopLimit(e.TTL)
		ip.SetSrc(src)
		ip.SetDst(dst)
		l4 = l3 + IPv6Len
	} else {
		tl := IPv4MinLen + udpLen
		if tl > 0xffff {
			return 0, errAt(LayerIPv4, KindOutOfRange)
		}
		var flags uint8
		if e.DF {
			flags = IPv4FlagDF
		}
		ip := IPv4(frame[l3 : l3+IPv4MinLen])
		ip.SetVersionIHL(IPv4MinLen)
		ip.SetTOS(e.TOS)
		ip.SetTotalLen(uint16(tl))
		ip.SetID(e.ID)
		ip.SetFlagsFragmentOffset(flags, 0)
		ip.SetTTL(e.TTL)
		ip.SetProtocol(IPProtocolUDP)
		ip.SetSrc(src)
		ip.SetDst(dst)
		ip.SetChecksum(0)
		ip.SetChecksum(IPv4Checksum(ip))
		l4 = l3 + IPv4MinLen
	}
	udp := UDPFields{SrcPort: e.SrcPort, DstPort: UDPPort, Length: uint16(udpLen)}
	udp.Encode(UDP(frame[l4 : l4+UDPLen]))
	return l3, nil
}

// Encap decodes the headers in front of the BTH of a parsed packet.
func (p *Packet) Encap() Encap {
	eth := p.Ethernet()
	e := Encap{
		DstMAC: eth.DstMAC(), SrcMAC: eth.SrcMAC(), HasVLAN: p.HasVLAN, VLANTCI: p.VLANTCI,
		Src: p.SrcAddr(), Dst: p.DstAddr(), SrcPort: p.SrcPort(),
	}
	if p.IPv6 {
		ip := IPv6(p.Frame[p.L3:])
		e.TOS, e.FlowLabel, e.TTL = ip.TrafficClass(), ip.FlowLabel(), ip.HopLimit()
	} else {
		ip := IPv4(p.Frame[p.L3:])
		e.TOS, e.TTL = ip.TOS(), ip.TTL()
		e.ID = ip.ID()
		e.DF = ip.DF()
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
	XRCETH    XRCETHFields
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
	if hs&HdrXRCETH != 0 {
		h.XRCETH = p.XRCETH().Fields()
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
