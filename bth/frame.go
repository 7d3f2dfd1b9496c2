package bth

import "net/netip"

// Packet locates the layers of one RoCEv2 frame. Parse fills it in without
// copying or allocating; its accessors return views into Frame. A Packet can
// be reused for the next frame.
type Packet struct {
	// Frame is the frame from the Ethernet header to the end of the ICRC.
	// Ethernet padding after the IP datagram is not part of it.
	Frame   []byte
	HasVLAN bool
	IPv6    bool
	VLANTCI uint16 // 802.1Q tag control information, when HasVLAN
	Opcode  Opcode
	L3      int // offset of the IP header
	L4      int // offset of the UDP header
	BTHOff  int // offset of the BTH
	Payload int // offset of the payload
	PayLen  int // payload length, pad excluded
	info    *OpInfo
}

// Parse decodes frame as Ethernet / [802.1Q] / IPv4 or IPv6 / UDP 4791 / BTH /
// extended headers / payload / pad / ICRC. It checks every length but not the
// ICRC (see VerifyICRC). Frames that are not UDP to port 4791 give an error
// matching ErrNotRoCE.
func (p *Packet) Parse(frame []byte) error {
	if p.parseFast(frame) {
		return nil
	}
	return p.parse(frame)
}

// fastLen is the shortest frame the fast path looks at: Ethernet, a 20-byte
// IPv4 header, UDP, BTH and ICRC.
const fastLen = EthernetLen + IPv4MinLen + UDPLen + BTHLen + ICRCLen

// parseFast handles the common case, an untagged IPv4 frame without IP
// options, with the fixed offsets checked once. It accepts exactly what
// parse accepts for such a frame and leaves everything else, including every
// error, to parse.
func (p *Packet) parseFast(frame []byte) bool {
	if len(frame) < fastLen {
		return false
	}
	h := (*[fastLen]byte)(frame)
	const l4 = EthernetLen + IPv4MinLen
	const bthOff = l4 + UDPLen
	eth := Ethernet(h[:EthernetLen])
	ip := IPv4(h[EthernetLen:l4])
	udp := UDP(h[l4:bthOff])
	b := BTH(h[bthOff : bthOff+BTHLen])
	if eth.EtherType() != EtherTypeIPv4 || ip.Version() != 4 || ip.HeaderLen() != IPv4MinLen ||
		ip.Protocol() != IPProtocolUDP || ip.IsFragment() || udp.DstPort() != UDPPort || b.TVer() != 0 {
		return false
	}
	tl := int(ip.TotalLen())
	end := EthernetLen + tl
	if end > len(frame) || tl < IPv4MinLen+UDPLen+BTHLen+ICRCLen || int(udp.Length()) != tl-IPv4MinLen {
		return false
	}
	op := b.Opcode()
	info := &opTable[op]
	payload := bthOff + BTHLen + info.ExtLen
	n := end - ICRCLen - payload
	pad := b.PadCnt()
	if !info.valid || n < pad || n&3 != 0 || (info.FixedPayload >= 0 && n-pad != info.FixedPayload) {
		return false
	}
	p.Frame = frame[:end]
	p.HasVLAN, p.IPv6, p.VLANTCI = false, false, 0
	p.Opcode = op
	p.L3, p.L4, p.BTHOff, p.Payload, p.PayLen = EthernetLen, l4, bthOff, payload, n-pad
	p.info = info
	return true
}

// parse is the general parser: VLAN tags, IPv4 options, IPv6, and the
// precise error for whatever is wrong.
func (p *Packet) parse(frame []byte) error {
	if len(frame) < EthernetLen {
		return errAt(LayerEthernet, KindTooShort)
	}
	et := Ethernet(frame).EtherType()
	l3 := EthernetLen
	p.HasVLAN = false
	p.VLANTCI = 0
	if et == EtherTypeVLAN || et == EtherTypeQinQ {
		if len(frame) < EthernetLen+VLANTagLen {
			return errAt(LayerVLAN, KindTooShort)
		}
		tag := VLAN(frame[EthernetLen:])
		p.HasVLAN = true
		p.VLANTCI = tag.TCI()
		et = tag.EtherType()
		l3 += VLANTagLen
	}
	var l4, end int
	switch et {
	case EtherTypeIPv4:
		if len(frame) < l3+IPv4MinLen {
			return errAt(LayerIPv4, KindTooShort)
		}
		ip := IPv4(frame[l3:])
		ihl := ip.HeaderLen()
		if ip.Version() != 4 || ihl < IPv4MinLen {
			return errAt(LayerIPv4, KindBadIPHeader)
		}
		if len(ip) < ihl {
			return errAt(LayerIPv4, KindTooShort)
		}
		if ip.Protocol() != IPProtocolUDP {
			return errAt(LayerIPv4, KindNotRoCE)
		}
		if ip.IsFragment() {
			return errAt(LayerIPv4, KindBadIPHeader)
		}
		tl := int(ip.TotalLen())
		if tl < ihl+UDPLen {
			return errAt(LayerIPv4, KindIPLengthMismatch)
		}
		if len(ip) < tl {
			return errAt(LayerIPv4, KindTooShort)
		}
		p.IPv6 = false
		l4, end = l3+ihl, l3+tl
	case EtherTypeIPv6:
		if len(frame) < l3+IPv6Len {
			return errAt(LayerIPv6, KindTooShort)
		}
		ip := IPv6(frame[l3:])
		if ip.Version() != 6 {
			return errAt(LayerIPv6, KindBadIPHeader)
		}
		if ip.NextHeader() != IPProtocolUDP {
			return errAt(LayerIPv6, KindNotRoCE)
		}
		pl := int(ip.PayloadLen())
		if pl < UDPLen {
			return errAt(LayerIPv6, KindIPLengthMismatch)
		}
		if len(ip) < IPv6Len+pl {
			return errAt(LayerIPv6, KindTooShort)
		}
		p.IPv6 = true
		l4, end = l3+IPv6Len, l3+IPv6Len+pl
	default:
		return errAt(LayerEthernet, KindNotRoCE)
	}
	udp := UDP(frame[l4:end])
	if len(udp) < UDPLen {
		return errAt(LayerUDP, KindTooShort)
	}
	if udp.DstPort() != UDPPort {
		return errAt(LayerUDP, KindNotRoCE)
	}
	if int(udp.Length()) != len(udp) {
		return errAt(LayerUDP, KindIPLengthMismatch)
	}
	bth := l4 + UDPLen
	if end-bth < BTHLen+ICRCLen {
		return errAt(LayerBTH, KindTooShort)
	}
	b := BTH(frame[bth:])
	if b.TVer() != 0 {
		return errAt(LayerBTH, KindBadTransportVer)
	}
	op := b.Opcode()
	info := &opTable[op]
	if !info.valid {
		return errAt(LayerBTH, KindUnknownOpcode)
	}
	payload := bth + BTHLen + info.ExtLen
	n := end - ICRCLen - payload // payload + pad
	if n < 0 {
		return errAt(LayerExt, KindTooShort)
	}
	pad := b.PadCnt()
	if n < pad || n&3 != 0 {
		return errAt(LayerPayload, KindBadPadCount)
	}
	if info.FixedPayload >= 0 && n-pad != info.FixedPayload {
		if !info.Payload && pad != 0 {
			return errAt(LayerPayload, KindBadPadCount)
		}
		return errAt(LayerPayload, KindUnexpectedPayload)
	}
	p.Frame = frame[:end]
	p.Opcode = op
	p.L3, p.L4, p.BTHOff, p.Payload, p.PayLen = l3, l4, bth, payload, n-pad
	p.info = info
	return nil
}

// Info returns the opcode table entry of the parsed packet.
func (p *Packet) Info() *OpInfo { return p.info }

// BTH returns the base transport header.
func (p *Packet) BTH() BTH { return BTH(p.Frame[p.BTHOff : p.BTHOff+BTHLen]) }

// PayloadBytes returns the payload, pad excluded.
func (p *Packet) PayloadBytes() []byte { return p.Frame[p.Payload : p.Payload+p.PayLen] }

// Transport returns the bytes from the BTH to the end of the ICRC.
func (p *Packet) Transport() []byte { return p.Frame[p.BTHOff:] }

func (p *Packet) ext(h Hdr, n int) []byte {
	if p.info.Headers&h == 0 {
		return nil
	}
	o := p.BTHOff + BTHLen + int(p.info.off[hdrIndex(h)])
	return p.Frame[o : o+n]
}

// RETH returns the RETH, or nil if the opcode has none.
func (p *Packet) RETH() RETH { return RETH(p.ext(HdrRETH, RETHLen)) }

// AETH returns the AETH, or nil.
func (p *Packet) AETH() AETH { return AETH(p.ext(HdrAETH, AETHLen)) }

// AtomicETH returns the AtomicETH, or nil.
func (p *Packet) AtomicETH() AtomicETH { return AtomicETH(p.ext(HdrAtomicETH, AtomicETHLen)) }

// AtomicAckETH returns the AtomicAckETH, or nil.
func (p *Packet) AtomicAckETH() AtomicAckETH {
	return AtomicAckETH(p.ext(HdrAtomicAckETH, AtomicAckETHLen))
}

// ImmDt returns the immediate data header, or nil.
func (p *Packet) ImmDt() ImmDt { return ImmDt(p.ext(HdrImmDt, ImmDtLen)) }

// IETH returns the IETH, or nil.
func (p *Packet) IETH() IETH { return IETH(p.ext(HdrIETH, IETHLen)) }

// DETH returns the DETH, or nil.
func (p *Packet) DETH() DETH { return DETH(p.ext(HdrDETH, DETHLen)) }

// XRCETH returns the XRCETH, or nil.
func (p *Packet) XRCETH() XRCETH { return XRCETH(p.ext(HdrXRCETH, XRCETHLen)) }

// FETH returns the FETH, or nil.
func (p *Packet) FETH() FETH { return FETH(p.ext(HdrFETH, FETHLen)) }

// Ethernet returns the Ethernet header.
func (p *Packet) Ethernet() Ethernet { return Ethernet(p.Frame[:EthernetLen]) }

// VLAN returns the 802.1Q tag, or nil if the frame has none.
func (p *Packet) VLAN() VLAN {
	if !p.HasVLAN {
		return nil
	}
	return VLAN(p.Frame[EthernetLen : EthernetLen+VLANTagLen])
}

// IPv4Header returns the IPv4 header, options included, or nil if the
// datagram is IPv6. (The name keeps clear of the IPv6 field.)
func (p *Packet) IPv4Header() IPv4 {
	if p.IPv6 {
		return nil
	}
	return IPv4(p.Frame[p.L3:p.L4])
}

// IPv6Header returns the IPv6 header, or nil if the datagram is IPv4.
func (p *Packet) IPv6Header() IPv6 {
	if !p.IPv6 {
		return nil
	}
	return IPv6(p.Frame[p.L3:p.L4])
}

// UDP returns the UDP header.
func (p *Packet) UDP() UDP { return UDP(p.Frame[p.L4 : p.L4+UDPLen]) }

// SrcAddr returns the IP source address.
func (p *Packet) SrcAddr() netip.Addr {
	if p.IPv6 {
		return IPv6(p.Frame[p.L3:]).Src()
	}
	return IPv4(p.Frame[p.L3:]).Src()
}

// DstAddr returns the IP destination address.
func (p *Packet) DstAddr() netip.Addr {
	if p.IPv6 {
		return IPv6(p.Frame[p.L3:]).Dst()
	}
	return IPv4(p.Frame[p.L3:]).Dst()
}

// SrcPort returns the UDP source port.
func (p *Packet) SrcPort() uint16 { return UDP(p.Frame[p.L4:]).SrcPort() }

// ICRC returns the ICRC carried by the frame.
func (p *Packet) ICRC() uint32 { return CarriedICRC(p.Frame) }

// ComputeICRC computes the ICRC the frame should carry.
func (p *Packet) ComputeICRC() uint32 { return ICRC(p.Frame[p.L3:], p.IPv6) }

// VerifyICRC reports whether the carried ICRC matches the computed one.
func (p *Packet) VerifyICRC() bool { return p.ICRC() == p.ComputeICRC() }

// Parse is a convenience wrapper that parses frame into a new Packet.
func Parse(frame []byte) (*Packet, error) {
	p := new(Packet)
	if err := p.Parse(frame); err != nil {
		return nil, err
	}
	return p, nil
}
