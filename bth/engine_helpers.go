package bth

// Helpers for the engine's transmit path, which gathers payload straight
// from registered memory into the frame instead of from a separate slice.

// EncodeHeaders is Headers.Encode without the payload copy: it writes the
// BTH (with the pad count for a payload of payloadLen bytes) and the
// extended headers in the opcode's order into b, zeroes the pad that follows
// the payload, and returns the offset of the payload in b. The caller fills
// b[off:off+payloadLen] itself. b must hold TransportLen(payloadLen) bytes;
// the ICRC field is left for PutICRC.
func (h *Headers) EncodeHeaders(b []byte, payloadLen int) (int, error) {
	info := &opTable[h.BTH.Opcode]
	if !info.valid {
		return 0, errAt(LayerBTH, KindUnknownOpcode)
	}
	if payloadLen < 0 || (info.FixedPayload >= 0 && payloadLen != info.FixedPayload) {
		return 0, errAt(LayerPayload, KindUnexpectedPayload)
	}
	pad := (-payloadLen) & 3
	bf := h.BTH
	bf.PadCnt = uint8(pad)
	if err := bf.Encode(BTH(b)); err != nil {
		return 0, err
	}
	x := b[BTHLen:]
	for _, hd := range info.Order {
		o := int(info.off[hdrIndex(hd)])
		switch hd {
		case HdrRETH:
			h.RETH.Encode(RETH(x[o:]))
		case HdrAETH:
			if err := h.AETH.Encode(AETH(x[o:])); err != nil {
				return 0, err
			}
		case HdrAtomicETH:
			h.Atomic.Encode(AtomicETH(x[o:]))
		case HdrAtomicAckETH:
			AtomicAckETH(x[o:]).SetOrigRemDt(h.AtomicAck)
		case HdrImmDt:
			ImmDt(x[o:]).SetValue(h.Imm)
		case HdrIETH:
			IETH(x[o:]).SetRKey(h.IETH)
		case HdrDETH:
			if err := h.DETH.Encode(DETH(x[o:])); err != nil {
				return 0, err
			}
		case HdrFETH:
			if err := h.FETH.Encode(FETH(x[o:])); err != nil {
				return 0, err
			}
		case HdrXRCETH:
			if err := h.XRCETH.Encode(XRCETH(x[o:])); err != nil {
				return 0, err
			}
		case HdrCNPResv:
			clear(x[o : o+CNPResvLen])
		}
	}
	off := BTHLen + info.ExtLen
	clear(b[off+payloadLen : off+payloadLen+pad])
	return off, nil
}
