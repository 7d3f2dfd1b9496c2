package dissect

// Formatting: a decoded frame as a text line or a JSON object, appended to
// a reused byte slice without allocating.

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/sroce/sroce/bth"
)

// Format is the form of the lines a Printer writes.
type Format uint8

// Output formats.
const (
	// Text is one line per packet, in aligned columns:
	//
	//	     3  192.0.2.1:49320 > 192.0.2.2  RC_RDMA_WRITE_FIRST  destqp=0x000011  psn=0x5f8c2e  ackreq  payload=1024  icrc=ok   RETH va=0x7f2c5e400000 rkey=0x1d2b dmalen=65536
	Text Format = iota
	// JSON is one JSON object per packet on a line of its own, keyed by
	// Wireshark's field names (infiniband.bth.psn, ...), so that it can
	// be compared with tshark's output.
	JSON
)

// Printer formats decoded frames, one line each. The zero value prints
// text. In text, the address, opcode and flags columns start at a width
// that suits IPv4 traffic and the common opcodes and grow to the widest
// value printed so far, so the columns of a capture line up.
type Printer struct {
	// Format is the output form.
	Format Format
	// OpcodeWidth is the starting width of the opcode column (0: 28,
	// which fits RC_RDMA_READ_RESPONSE_MIDDLE). A printer of live traffic
	// sets it to the widest opcode it expects, so that the columns do not
	// move in the middle of a run.
	OpcodeWidth int

	wEndpoints, wOpcode, wFlags int // text column widths so far
}

// Minimum column widths of the text output.
const (
	minEndpointsWidth = 0  // grows with the first line
	minOpcodeWidth    = 28 // len("RC_RDMA_READ_RESPONSE_MIDDLE")
	minFlagsWidth     = 6  // len("ackreq")
	payloadWidth      = 4  // up to 4096 without shifting the columns
)

// Append appends the line of frame n, f, to b: for a RoCE frame the packet
// p (the Decoder's Packet), for a Malformed or Truncated one the datagram's
// addresses and what is wrong, and nothing for a frame that is not RoCEv2.
func (pr *Printer) Append(b []byte, n int, f Frame, p *bth.Packet) []byte {
	switch f.Kind {
	case RoCE:
		return pr.AppendPacket(b, n, p, f.ICRCOK)
	case Truncated:
		msg := fmt.Sprintf("captured %d of %d bytes (snap length), not decoded", f.CapLen, f.WireLen)
		return pr.appendProblem(b, n, f.UDP, "TRUNCATED", msg)
	case Malformed:
		return pr.appendProblem(b, n, f.UDP, "MALFORMED", reason(f.Err))
	}
	return b
}

// AppendPacket appends the line of the decoded RoCEv2 packet p, numbered
// n, whose ICRC verifies when icrcOK is true, to b. Once b has room it
// allocates nothing, except for a MAD to QP1.
func (pr *Printer) AppendPacket(b []byte, n int, p *bth.Packet, icrcOK bool) []byte {
	if pr.Format == JSON {
		return appendJSON(b, n, p, icrcOK)
	}
	return pr.appendText(b, n, p, icrcOK)
}

// reason returns why bth.Parse rejected a packet, without the package
// prefix of its message.
func reason(err error) string {
	var be *bth.Error
	if errors.As(err, &be) {
		return be.Reason()
	}
	return err.Error()
}

// syndromeText holds Syndrome.String for every syndrome byte, so that
// printing an AETH does not allocate.
var syndromeText = func() (t [256]string) {
	for i := range t {
		t[i] = bth.Syndrome(i).String()
	}
	return t
}()

// appendProblem appends the line of frame n, a UDP datagram u to port 4791
// that could not be decoded: what (MALFORMED or TRUNCATED) and why, msg.
func (pr *Printer) appendProblem(b []byte, n int, u Endpoints, what, msg string) []byte {
	if pr.Format == JSON {
		b = append(b, `{"frame.number":`...)
		b = strconv.AppendInt(b, int64(n), 10)
		if u.Src.Is6() {
			b = jsonAddr(b, "ipv6.src", u.Src)
			b = jsonAddr(b, "ipv6.dst", u.Dst)
		} else {
			b = jsonAddr(b, "ip.src", u.Src)
			b = jsonAddr(b, "ip.dst", u.Dst)
		}
		b = jsonUint(b, "udp.srcport", uint64(u.SrcPort))
		b = append(b, `,"error":`...)
		b = appendJSONString(b, msg)
		return append(b, "}\n"...)
	}
	b = appendIntRight(b, n, 6)
	b = append(b, "  "...)
	start := len(b)
	b = netip.AddrPortFrom(u.Src, u.SrcPort).AppendTo(b)
	b = append(b, " > "...)
	b = u.Dst.AppendTo(b)
	b = padColumn(b, start, &pr.wEndpoints, minEndpointsWidth)
	b = append(b, "  "...)
	b = append(b, what...)
	b = append(b, ": "...)
	b = append(b, msg...)
	return append(b, '\n')
}

// appendText appends the text line of the decoded packet p, frame n:
//
//	3  192.0.2.1:49320 > 192.0.2.2  RC_RDMA_WRITE_FIRST  destqp=0x000011  psn=0x5f8c2e  ackreq  payload=1024  icrc=ok   RETH va=0x7f2c5e400000 rkey=0x1d2b dmalen=65536
//
// (the frame number is right-aligned in six columns). The fixed columns come
// first; the extended headers, the VLAN tag and the ICRC values of a bad
// packet follow.
func (pr *Printer) appendText(b []byte, n int, p *bth.Packet, icrcOK bool) []byte {
	h := p.BTH()
	b = appendIntRight(b, n, 6)
	b = append(b, "  "...)

	start := len(b)
	b = netip.AddrPortFrom(p.SrcAddr(), p.SrcPort()).AppendTo(b)
	b = append(b, " > "...)
	b = p.DstAddr().AppendTo(b)
	b = padColumn(b, start, &pr.wEndpoints, minEndpointsWidth)
	b = append(b, "  "...)

	start = len(b)
	b = append(b, p.Opcode.String()...)
	b = padColumn(b, start, &pr.wOpcode, cmp.Or(pr.OpcodeWidth, minOpcodeWidth))

	b = append(b, "  destqp="...)
	b = appendHex(b, uint64(h.DestQP()), 6)
	b = append(b, "  psn="...)
	b = appendHex(b, uint64(h.PSN()), 6)
	b = append(b, "  "...)

	start = len(b)
	b = appendFlag(b, start, h.AckReq(), "ackreq")
	b = appendFlag(b, start, h.SE(), "se")
	b = appendFlag(b, start, h.FECN(), "fecn")
	b = appendFlag(b, start, h.BECN(), "becn")
	b = padColumn(b, start, &pr.wFlags, minFlagsWidth)

	b = append(b, "  payload="...)
	start = len(b)
	b = strconv.AppendInt(b, int64(p.PayLen), 10)
	b = padTo(b, start, payloadWidth)
	if icrcOK {
		b = append(b, "  icrc=ok "...)
	} else {
		b = append(b, "  icrc=BAD"...)
	}

	for _, x := range p.Info().Order {
		b = appendExtText(b, p, x)
	}
	if m, ok := DecodeMAD(p); ok {
		b = appendMADText(b, &m)
	}
	if p.HasVLAN {
		b = append(b, "  vlan="...)
		b = strconv.AppendUint(b, uint64(p.VLANTCI&0x0fff), 10)
	}
	if !icrcOK {
		b = append(b, "  ICRC carried="...)
		b = appendWireICRC(b, p.ICRC())
		b = append(b, " computed="...)
		b = appendWireICRC(b, p.ComputeICRC())
	}
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return append(b, '\n')
}

// appendExtText appends the text form of extended header x of p.
func appendExtText(b []byte, p *bth.Packet, x bth.Hdr) []byte {
	switch x {
	case bth.HdrRETH:
		r := p.RETH()
		b = append(b, "  RETH va="...)
		b = appendHex(b, r.VA(), 0)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(r.RKey()), 0)
		b = append(b, " dmalen="...)
		b = strconv.AppendUint(b, uint64(r.DMALen()), 10)
	case bth.HdrAETH:
		a := p.AETH()
		b = append(b, "  AETH "...)
		b = append(b, syndromeText[a.Syndrome()]...)
		b = append(b, " msn="...)
		b = strconv.AppendUint(b, uint64(a.MSN()), 10)
	case bth.HdrAtomicETH:
		a := p.AtomicETH()
		b = append(b, "  AtomicETH va="...)
		b = appendHex(b, a.VA(), 0)
		b = append(b, " rkey="...)
		b = appendHex(b, uint64(a.RKey()), 0)
		if p.Opcode.RCEquivalent() == bth.RCCompareSwap {
			b = append(b, " compare="...)
			b = strconv.AppendUint(b, a.Compare(), 10)
			b = append(b, " swap="...)
		} else {
			b = append(b, " add="...)
		}
		b = strconv.AppendUint(b, a.SwapAdd(), 10)
	case bth.HdrAtomicAckETH:
		b = append(b, "  AtomicAckETH orig="...)
		b = strconv.AppendUint(b, p.AtomicAckETH().OrigRemDt(), 10)
	case bth.HdrImmDt:
		b = append(b, "  ImmDt "...)
		b = appendHex(b, uint64(p.ImmDt().Value()), 8)
	case bth.HdrIETH:
		b = append(b, "  IETH rkey="...)
		b = appendHex(b, uint64(p.IETH().RKey()), 0)
	case bth.HdrDETH:
		dt := p.DETH()
		b = append(b, "  DETH qkey="...)
		b = appendHex(b, uint64(dt.QKey()), 0)
		b = append(b, " srcqp="...)
		b = appendHex(b, uint64(dt.SrcQP()), 6)
	case bth.HdrFETH:
		ft := p.FETH()
		b = append(b, "  FETH selectivity="...)
		b = strconv.AppendUint(b, uint64(ft.SelectivityLevel()), 10)
		b = append(b, " placement="...)
		b = strconv.AppendUint(b, uint64(ft.PlacementType()), 10)
	case bth.HdrXRCETH:
		b = append(b, "  XRCETH srq="...)
		b = appendHex(b, uint64(p.XRCETH().SRQN()), 6)
	}
	return b
}

// appendJSON appends the JSON object of the decoded packet p, frame n,
// on one line. Keys are Wireshark's field names where Wireshark has one, in
// the order tshark shows them; every number is a JSON number. Where tshark
// prints something else for the same field:
//
//   - infiniband.bth.destqp, reth.va, reth.r_key, deth.q_key, deth.srcqp and
//     invariant.crc are hex strings in tshark ("0x000011"); here numbers.
//   - infiniband.immdt and infiniband.ieth are byte strings in tshark
//     ("01020304" with -T fields, "01:02:03:04" with -T json); here the
//     32-bit big-endian number.
//   - infiniband.bth.se, .m and .a are "1"/"0" in tshark; here 1/0.
//   - Wireshark shows the AtomicETH's virtual address and R_Key under the
//     RETH's names, infiniband.reth.va and infiniband.reth.r_key (it has no
//     infiniband.atomiceth.va); so does this output.
//   - infiniband.invariant.crc is the ICRC's four bytes read big-endian, as
//     Wireshark shows them. The CRC-32 value itself is their byte swap (the
//     ICRC is sent least significant byte first).
//
// A management datagram to QP1 adds the MAD's and its CM message's fields
// (appendMADJSON).
//
// Keys of our own: opcode_name, aeth_syndrome_name, feth_selectivity_level,
// feth_placement_type (Wireshark 4.0 does not decode FLUSH), payload_len
// (pad excluded), icrc_ok, and icrc_computed (same byte order as
// infiniband.invariant.crc) when the ICRC is wrong.
func appendJSON(b []byte, n int, p *bth.Packet, icrcOK bool) []byte {
	h := p.BTH()
	b = append(b, `{"frame.number":`...)
	b = strconv.AppendInt(b, int64(n), 10)
	if p.HasVLAN {
		b = jsonUint(b, "vlan.id", uint64(p.VLANTCI&0x0fff))
	}
	if p.IPv6 {
		b = jsonAddr(b, "ipv6.src", p.SrcAddr())
		b = jsonAddr(b, "ipv6.dst", p.DstAddr())
	} else {
		b = jsonAddr(b, "ip.src", p.SrcAddr())
		b = jsonAddr(b, "ip.dst", p.DstAddr())
	}
	b = jsonUint(b, "udp.srcport", uint64(p.SrcPort()))
	b = jsonUint(b, "infiniband.bth.opcode", uint64(p.Opcode))
	b = append(b, `,"opcode_name":`...)
	b = appendJSONString(b, p.Opcode.String())
	b = jsonBit(b, "infiniband.bth.se", h.SE())
	b = jsonBit(b, "infiniband.bth.m", h.MigReq())
	b = jsonUint(b, "infiniband.bth.padcnt", uint64(h.PadCnt()))
	b = jsonUint(b, "infiniband.bth.tver", uint64(h.TVer()))
	b = jsonUint(b, "infiniband.bth.p_key", uint64(h.PKey()))
	b = jsonUint(b, "infiniband.bth.destqp", uint64(h.DestQP()))
	b = jsonBit(b, "infiniband.bth.a", h.AckReq())
	b = jsonUint(b, "infiniband.bth.psn", uint64(h.PSN()))
	for _, x := range p.Info().Order {
		switch x {
		case bth.HdrRETH:
			r := p.RETH()
			b = jsonUint(b, "infiniband.reth.va", r.VA())
			b = jsonUint(b, "infiniband.reth.r_key", uint64(r.RKey()))
			b = jsonUint(b, "infiniband.reth.dmalen", uint64(r.DMALen()))
		case bth.HdrAETH:
			a := p.AETH()
			b = jsonUint(b, "infiniband.aeth.syndrome", uint64(a.Syndrome()))
			b = append(b, `,"aeth_syndrome_name":`...)
			b = appendJSONString(b, syndromeText[a.Syndrome()])
			b = jsonUint(b, "infiniband.aeth.msn", uint64(a.MSN()))
		case bth.HdrAtomicETH:
			a := p.AtomicETH()
			b = jsonUint(b, "infiniband.reth.va", a.VA())
			b = jsonUint(b, "infiniband.reth.r_key", uint64(a.RKey()))
			b = jsonUint(b, "infiniband.atomiceth.swapdt", a.SwapAdd())
			b = jsonUint(b, "infiniband.atomiceth.cmpdt", a.Compare())
		case bth.HdrAtomicAckETH:
			b = jsonUint(b, "infiniband.atomicacketh.origremdt", p.AtomicAckETH().OrigRemDt())
		case bth.HdrImmDt:
			b = jsonUint(b, "infiniband.immdt", uint64(p.ImmDt().Value()))
		case bth.HdrIETH:
			b = jsonUint(b, "infiniband.ieth", uint64(p.IETH().RKey()))
		case bth.HdrDETH:
			dt := p.DETH()
			b = jsonUint(b, "infiniband.deth.q_key", uint64(dt.QKey()))
			b = jsonUint(b, "infiniband.deth.srcqp", uint64(dt.SrcQP()))
		case bth.HdrFETH:
			ft := p.FETH()
			b = jsonUint(b, "feth_selectivity_level", uint64(ft.SelectivityLevel()))
			b = jsonUint(b, "feth_placement_type", uint64(ft.PlacementType()))
		case bth.HdrXRCETH:
			b = jsonUint(b, "xrceth_srqn", uint64(p.XRCETH().SRQN()))
		}
	}
	if m, ok := DecodeMAD(p); ok {
		b = appendMADJSON(b, &m)
	}
	b = jsonUint(b, "payload_len", uint64(p.PayLen))
	b = jsonUint(b, "infiniband.invariant.crc", uint64(wireOrder(p.ICRC())))
	b = append(b, `,"icrc_ok":`...)
	b = strconv.AppendBool(b, icrcOK)
	if !icrcOK {
		b = jsonUint(b, "icrc_computed", uint64(wireOrder(p.ComputeICRC())))
	}
	return append(b, "}\n"...)
}

// wireOrder returns the ICRC value v (a CRC-32, sent least significant byte
// first) as its four wire bytes read big-endian, which is how Wireshark
// shows infiniband.invariant.crc.
func wireOrder(v uint32) uint32 {
	return v>>24 | v>>8&0xff00 | v<<8&0xff0000 | v<<24
}

// appendWireICRC appends the ICRC v as its four wire bytes in hex.
func appendWireICRC(b []byte, v uint32) []byte {
	return appendHexDigits(b, uint64(wireOrder(v)), 8)
}

// jsonUint appends ,"key":v.
func jsonUint(b []byte, key string, v uint64) []byte {
	b = append(b, ",\""...)
	b = append(b, key...)
	b = append(b, "\":"...)
	return strconv.AppendUint(b, v, 10)
}

// jsonBit appends ,"key":1 or ,"key":0, as Wireshark reports flag bits.
func jsonBit(b []byte, key string, v bool) []byte {
	var n uint64
	if v {
		n = 1
	}
	return jsonUint(b, key, n)
}

// jsonAddr appends ,"key":"address".
func jsonAddr(b []byte, key string, a netip.Addr) []byte {
	b = append(b, ",\""...)
	b = append(b, key...)
	b = append(b, "\":\""...)
	b = a.AppendTo(b)
	return append(b, '"')
}

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendHex appends v as 0x followed by at least digits hex digits.
func appendHex(b []byte, v uint64, digits int) []byte {
	return appendHexDigits(append(b, "0x"...), v, digits)
}

// appendHexDigits appends v in hex, zero-padded to at least digits digits.
func appendHexDigits(b []byte, v uint64, digits int) []byte {
	n := 1
	for x := v >> 4; x != 0; x >>= 4 {
		n++
	}
	for ; n < digits; n++ {
		b = append(b, '0')
	}
	return strconv.AppendUint(b, v, 16)
}

// appendIntRight appends n right-aligned in a field of width characters.
func appendIntRight(b []byte, n, width int) []byte {
	digits := 1
	for x := n / 10; x != 0; x /= 10 {
		digits++
	}
	for ; digits < width; digits++ {
		b = append(b, ' ')
	}
	return strconv.AppendInt(b, int64(n), 10)
}

// padTo pads the field that starts at b[start] with spaces to width.
func padTo(b []byte, start, width int) []byte {
	for len(b)-start < width {
		b = append(b, ' ')
	}
	return b
}

// padColumn pads the field that starts at b[start] to the column width *w,
// at least least, first widening the column if the field is wider.
func padColumn(b []byte, start int, w *int, least int) []byte {
	*w = max(*w, least, len(b)-start)
	return padTo(b, start, *w)
}

// appendFlag appends name, comma-separated from the flags already written
// since start, when set is true.
func appendFlag(b []byte, start int, set bool, name string) []byte {
	if !set {
		return b
	}
	if len(b) > start {
		b = append(b, ',')
	}
	return append(b, name...)
}
