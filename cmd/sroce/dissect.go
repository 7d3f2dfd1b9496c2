package main

// sroce dissect: decode the RoCEv2 packets of a capture file, one line (or
// one JSON object) per packet, with the ICRC checked. The file is streamed:
// one frame in memory at a time, one bth.Packet reused for all of them, one
// output buffer reused for every line.

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/gopacket/gopacket/layers"
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/capture"
)

// dissectAbout is the description printed by "sroce dissect -h".
const dissectAbout = `
Dissect reads a classic pcap or pcapng capture (gzip-compressed or not; FILE
"-" is standard input) and prints one line per RoCEv2 packet: the frame
number, IP source:UDP source port > IP destination, the opcode, the
destination QP (destqp) and the PSN (both in hex, as ibv_rc_pingpong and
perftest print them), the AckReq flag (and SE, FECN, BECN when set), the
payload length, whether the ICRC is correct, and the key fields of the
extended headers: RETH, AETH (ACK, RNR NAK or NAK, and MSN), AtomicETH,
AtomicAckETH, ImmDt, IETH, DETH and FETH. Frames that are not RoCEv2 are
counted as skipped; RoCEv2 frames that cannot be decoded are printed with
the reason. The last line sums up.

Link types: Ethernet (with at most one 802.1Q tag), Linux cooked capture
(SLL and SLL2, as written by tcpdump -i any), raw IP and BSD loopback.

With --json each RoCEv2 packet is a JSON object on a line of its own, keyed
by Wireshark's field names (infiniband.bth.psn, infiniband.reth.va, ...) so
that it can be compared with tshark's output; the summary goes to standard
error.

Exit status: 0 when every RoCEv2 packet decoded and its ICRC verified, 1 when
an ICRC was wrong or a RoCEv2 packet was malformed, 2 when the input could
not be read (no such file, not a capture, a damaged file, a record longer
than 262144 bytes). The capture is read as a stream, so memory stays small
whatever its size or compression ratio.`

// runDissect implements "sroce dissect".
func runDissect(e *env, args []string) int {
	f := newFlags(e, "dissect", "sroce dissect [--json] FILE", dissectAbout)
	asJSON := f.Bool("json", false, "print one JSON object per packet, keyed by Wireshark field names")
	pos, status, ok := f.parse(args)
	if !ok {
		return status
	}
	if len(pos) != 1 {
		return f.usageError("expected one capture file (or - for standard input)")
	}
	in, name, err := openInput(e, pos[0])
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce dissect: %v\n", err)
		return exitUsage
	}
	defer in.Close()
	fr, err := capture.Open(in, name)
	if err != nil {
		fmt.Fprintf(e.Stderr, "sroce dissect: %s\n", errText(err))
		return exitUsage
	}

	out := bufio.NewWriterSize(e.Stdout, 64<<10)
	d := &dissector{out: out, json: *asJSON}
	readErr, writeErr := d.run(fr)
	summary := d.t.summary()
	if !d.json {
		out.WriteString(summary)
		out.WriteByte('\n')
	}
	if err := out.Flush(); err != nil && writeErr == nil {
		writeErr = err
	}
	if d.json {
		fmt.Fprintln(e.Stderr, summary)
	}
	for _, l := range d.t.unsupportedLinks() {
		fmt.Fprintf(e.Stderr, "sroce dissect: note: skipped %d %s of link type %d (%s), which dissect does not decode\n",
			d.t.unsupported[l], plural(d.t.unsupported[l], "packet", "packets"), uint16(l), l)
	}
	switch {
	case writeErr != nil:
		fmt.Fprintf(e.Stderr, "sroce dissect: writing the output: %s\n", errText(writeErr))
		return exitProblem
	case readErr != nil:
		fmt.Fprintf(e.Stderr, "sroce dissect: %s: the capture is damaged or cut short in packet %d: %s\n",
			name, d.t.packets+1, errText(readErr))
		return exitUsage
	case d.t.icrcBad > 0 || d.t.malformed > 0:
		return exitProblem
	}
	return exitOK
}

// openInput opens the capture named by arg ("-" is standard input) and
// returns it with the name to use in messages.
func openInput(e *env, arg string) (io.ReadCloser, string, error) {
	if arg == "-" {
		return io.NopCloser(e.Stdin), "standard input", nil
	}
	f, err := os.Open(arg)
	if err != nil {
		return nil, arg, fmt.Errorf("cannot open %s: %s", arg, errText(err))
	}
	return f, arg, nil
}

// errText returns err's message without the "op path:" prefix of an
// fs.PathError, whose path the caller's sentence already names.
func errText(err error) string {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}

// tally counts what dissect saw.
type tally struct {
	packets   int // frames in the capture
	roce      int // RoCEv2 packets decoded
	skipped   int // frames that are not RoCEv2 (including unsupported link types)
	malformed int // frames to UDP port 4791 that bth.Parse rejects
	truncated int // RoCEv2-looking frames cut short by the capture's snap length
	icrcBad   int // decoded RoCEv2 packets whose ICRC is wrong

	unsupported map[layers.LinkType]int // skipped frames per unsupported link type
}

// summary returns the closing line, e.g. "12 packets: 10 RoCEv2, 1 skipped
// (not RoCEv2), 1 malformed, 0 ICRC failures".
func (t *tally) summary() string {
	s := fmt.Sprintf("%d %s: %d RoCEv2, %d skipped (not RoCEv2), %d malformed, %d ICRC %s",
		t.packets, plural(t.packets, "packet", "packets"), t.roce, t.skipped, t.malformed,
		t.icrcBad, plural(t.icrcBad, "failure", "failures"))
	if t.truncated > 0 {
		s += fmt.Sprintf(", %d cut short by the snap length", t.truncated)
	}
	return s
}

// unsupportedLinks returns the unsupported link types seen, in order.
func (t *tally) unsupportedLinks() []layers.LinkType {
	var ls []layers.LinkType
	for l := range t.unsupported {
		ls = append(ls, l)
	}
	slices.Sort(ls)
	return ls
}

// plural returns one or many depending on n.
func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// syndromeText holds Syndrome.String for every syndrome byte, so that
// printing an AETH does not allocate.
var syndromeText = func() (t [256]string) {
	for i := range t {
		t[i] = bth.Syndrome(i).String()
	}
	return t
}()

// dissector holds the state of one run over a capture. Everything in it is
// reused from one frame to the next.
type dissector struct {
	out  *bufio.Writer
	json bool
	t    tally
	pkt  bth.Packet
	link capture.LinkAdapter
	line []byte // the output line being built

	// Column widths of the text output. They start at a width that suits
	// IPv4 traffic and the common opcodes, and grow to the widest value seen
	// so far, so the columns of a capture line up.
	wEndpoints, wOpcode, wFlags int
}

// Minimum column widths of the text output.
const (
	minEndpointsWidth = 0  // grows with the first line
	minOpcodeWidth    = 28 // len("RC_RDMA_READ_RESPONSE_MIDDLE")
	minFlagsWidth     = 6  // len("ackreq")
	payloadWidth      = 4  // up to 4096 without shifting the columns
)

// run dissects every frame of fr. It returns the error that stopped reading
// before the end of the capture, if any, and the first output error.
func (d *dissector) run(fr capture.Reader) (readErr, writeErr error) {
	d.wEndpoints, d.wOpcode, d.wFlags = minEndpointsWidth, minOpcodeWidth, minFlagsWidth
	for {
		data, link, wireLen, err := fr.Next()
		if err == io.EOF {
			return nil, nil
		}
		if err != nil {
			return err, nil
		}
		d.t.packets++
		d.line = d.frame(d.line[:0], data, link, wireLen)
		if len(d.line) > 0 {
			if _, err := d.out.Write(d.line); err != nil {
				return nil, err
			}
		}
	}
}

// frame dissects one frame, counts it and appends its output line (none for
// frames that are not RoCEv2) to b.
func (d *dissector) frame(b, data []byte, link layers.LinkType, wireLen int) []byte {
	n := d.t.packets
	f, ok := d.link.Ethernet(data, link)
	if !ok {
		d.t.skipped++
		if d.t.unsupported == nil {
			d.t.unsupported = make(map[layers.LinkType]int)
		}
		d.t.unsupported[link]++
		return b
	}
	err := d.pkt.Parse(f)
	if err == nil {
		d.t.roce++
		icrcOK := d.pkt.VerifyICRC()
		if !icrcOK {
			d.t.icrcBad++
		}
		if d.json {
			return d.appendJSON(b, n, icrcOK)
		}
		return d.appendText(b, n, icrcOK)
	}
	u, isUDP := peekUDP(f)
	switch {
	case errors.Is(err, bth.ErrNotRoCE) || !isUDP || u.dport != bth.UDPPort:
		d.t.skipped++
		return b
	case len(data) < wireLen:
		d.t.truncated++
		msg := fmt.Sprintf("captured %d of %d bytes (snap length), not decoded", len(data), wireLen)
		return d.appendProblem(b, n, u, "TRUNCATED", msg)
	default:
		d.t.malformed++
		return d.appendProblem(b, n, u, "MALFORMED", strings.TrimPrefix(err.Error(), "bth: "))
	}
}

// appendProblem appends the line of frame n, a UDP datagram u to port 4791
// that could not be decoded: what (MALFORMED or TRUNCATED) and why, msg.
func (d *dissector) appendProblem(b []byte, n int, u udpView, what, msg string) []byte {
	if d.json {
		b = append(b, `{"frame.number":`...)
		b = strconv.AppendInt(b, int64(n), 10)
		if u.src.Is6() {
			b = jsonAddr(b, "ipv6.src", u.src)
			b = jsonAddr(b, "ipv6.dst", u.dst)
		} else {
			b = jsonAddr(b, "ip.src", u.src)
			b = jsonAddr(b, "ip.dst", u.dst)
		}
		b = jsonUint(b, "udp.srcport", uint64(u.sport))
		b = append(b, `,"error":`...)
		b = appendJSONString(b, msg)
		return append(b, "}\n"...)
	}
	b = appendIntRight(b, n, 6)
	b = append(b, "  "...)
	start := len(b)
	b = netip.AddrPortFrom(u.src, u.sport).AppendTo(b)
	b = append(b, " > "...)
	b = u.dst.AppendTo(b)
	b = padColumn(b, start, &d.wEndpoints)
	b = append(b, "  "...)
	b = append(b, what...)
	b = append(b, ": "...)
	b = append(b, msg...)
	return append(b, '\n')
}

// appendText appends the text line of the decoded packet d.pkt, frame n:
//
//	3  192.0.2.1:49320 > 192.0.2.2  RC_RDMA_WRITE_FIRST  destqp=0x000011  psn=0x5f8c2e  ackreq  payload=1024  icrc=ok   RETH va=0x7f2c5e400000 rkey=0x1d2b dmalen=65536
//
// (the frame number is right-aligned in six columns). The fixed columns come
// first; the extended headers, the VLAN tag and the ICRC values of a bad
// packet follow.
func (d *dissector) appendText(b []byte, n int, icrcOK bool) []byte {
	p := &d.pkt
	h := p.BTH()
	b = appendIntRight(b, n, 6)
	b = append(b, "  "...)

	start := len(b)
	b = netip.AddrPortFrom(p.SrcAddr(), p.SrcPort()).AppendTo(b)
	b = append(b, " > "...)
	b = p.DstAddr().AppendTo(b)
	b = padColumn(b, start, &d.wEndpoints)
	b = append(b, "  "...)

	start = len(b)
	b = append(b, p.Opcode.String()...)
	b = padColumn(b, start, &d.wOpcode)

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
	b = padColumn(b, start, &d.wFlags)

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
		b = d.appendExtText(b, x)
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

// appendExtText appends the text form of extended header x of d.pkt.
func (d *dissector) appendExtText(b []byte, x bth.Hdr) []byte {
	p := &d.pkt
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
		if p.Opcode == bth.RCCompareSwap {
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
	}
	return b
}

// appendJSON appends the JSON object of the decoded packet d.pkt, frame n,
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
// Keys of our own: opcode_name, aeth_syndrome_name, feth_selectivity_level,
// feth_placement_type (Wireshark 4.0 does not decode FLUSH), payload_len
// (pad excluded), icrc_ok, and icrc_computed (same byte order as
// infiniband.invariant.crc) when the ICRC is wrong.
func (d *dissector) appendJSON(b []byte, n int, icrcOK bool) []byte {
	p := &d.pkt
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
		}
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
// first widening the column if the field is wider.
func padColumn(b []byte, start int, w *int) []byte {
	*w = max(*w, len(b)-start)
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
