// Package trace explains reliable-connected (RC) RoCEv2 traffic: fed the
// decoded packets of a capture (or of a live trace) in the order they were
// seen, it groups them per QP pair, follows each direction's PSNs as its
// receiver would, and annotates every packet with short analysis strings:
// retransmissions, duplicates, sequence gaps, what an ACK acknowledges,
// RNR NAKs and NAKs in words, READ responses paired with their request,
// the READ and atomic requests outstanding, bad ICRCs.
//
// The analysis keeps a bounded state per connection (a window of the PSNs
// each side sent, the READ and atomic requests outstanding, the PSN each
// receiver expects), never the packets themselves, so it can follow a
// capture of any length.
package trace

// Pipeline: the caller decodes a frame into a bth.Packet (package dissect)
// and hands it to Analyzer.Add with its frame number and time; Add finds
// the connection, updates the state of the packet's direction and returns
// an Event that owns copies of the fields a ladder prints. One goroutine
// owns an Analyzer.

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/dissect"
)

// Bounds on what one connection keeps.
const (
	// SentWindow is how many PSNs of each direction's requests (and of
	// its READ responses) a connection remembers to recognise a
	// retransmission.
	SentWindow = 4096
	// MaxOutstanding is how many READ and atomic requests per direction
	// a connection keeps waiting for their responses (rdma_rxe allows
	// 128 at most).
	MaxOutstanding = 256
	// MaxConns is how many QP pairs an Analyzer follows at once; a new
	// pair beyond it makes the analyzer forget the oldest one (a later
	// packet of that pair starts a new pair, with a new number).
	MaxConns = 256
)

// The analysis strings that report trouble, or their beginnings: Trouble
// classifies a string by them.
const (
	textRetransmission  = "retransmission"
	textDuplicate       = "duplicate"
	textICRCBad         = "ICRC bad"
	prefixOutOfSequence = "out of sequence: "
	prefixRNRNAK        = "RNR NAK: "
	prefixNAK           = "NAK: "
	prefixImpliedNAK    = "implied NAK: "
)

// Trouble is a set of the kinds of trouble a packet shows.
type Trouble uint8

// Kinds of trouble, from the least to the most severe.
const (
	// TroubleRetransmission: the sender already sent this PSN.
	TroubleRetransmission Trouble = 1 << iota
	// TroubleDuplicate: the receiver had already taken this PSN.
	TroubleDuplicate
	// TroubleGap: a sequence gap, the packet is not the PSN expected.
	TroubleGap
	// TroubleRNR: an RNR NAK.
	TroubleRNR
	// TroubleNAK: a NAK, or an implied NAK.
	TroubleNAK
	// TroubleICRC: the ICRC does not verify.
	TroubleICRC
)

// Troubles lists the kinds of trouble from the least to the most severe.
var Troubles = []Trouble{TroubleRetransmission, TroubleDuplicate, TroubleGap, TroubleRNR, TroubleNAK, TroubleICRC}

// String names one kind of trouble ("retransmission", "duplicate",
// "sequence gap", "RNR NAK", "NAK", "bad ICRC"), or lists a set of them
// joined by "+".
func (t Trouble) String() string {
	var s string
	for _, k := range Troubles {
		if t&k == 0 {
			continue
		}
		if s != "" {
			s += "+"
		}
		s += troubleNames[k]
	}
	return s
}

// troubleNames names each kind of trouble.
var troubleNames = map[Trouble]string{
	TroubleRetransmission: "retransmission", TroubleDuplicate: "duplicate",
	TroubleGap: "sequence gap", TroubleRNR: "RNR NAK", TroubleNAK: "NAK",
	TroubleICRC: "bad ICRC",
}

// Worst returns the most severe kind of trouble in t (0 for none).
func (t Trouble) Worst() Trouble {
	for i := len(Troubles) - 1; i >= 0; i-- {
		if t&Troubles[i] != 0 {
			return Troubles[i]
		}
	}
	return 0
}

// TroubleOf returns the kind of trouble one analysis string reports (0 for
// none: "acks PSN ...", "READ response ...").
func TroubleOf(analysis string) Trouble {
	switch {
	case analysis == textRetransmission:
		return TroubleRetransmission
	case analysis == textDuplicate:
		return TroubleDuplicate
	case analysis == textICRCBad:
		return TroubleICRC
	case strings.HasPrefix(analysis, prefixOutOfSequence):
		return TroubleGap
	case strings.HasPrefix(analysis, prefixRNRNAK):
		return TroubleRNR
	case strings.HasPrefix(analysis, prefixNAK), strings.HasPrefix(analysis, prefixImpliedNAK):
		return TroubleNAK
	}
	return 0
}

// Trouble returns the kinds of trouble the packet shows: what its analysis
// strings report, and a bad ICRC.
func (e *Event) Trouble() Trouble {
	var t Trouble
	for _, s := range e.Analysis {
		t |= TroubleOf(s)
	}
	if e.Retransmission {
		t |= TroubleRetransmission
	}
	if !e.ICRCOK {
		t |= TroubleICRC
	}
	return t
}

// Endpoint is one side of a QP pair: its IP address and the QPN that
// packets to it carry.
type Endpoint struct {
	Addr netip.Addr
	QPN  bth.QPN
	// QPNKnown reports whether QPN was seen (a packet to this side, or a
	// UD packet's DETH from it).
	QPNKnown bool
}

// String returns "192.0.2.1 QP 0x000016" (QP ? when not seen yet).
func (e Endpoint) String() string {
	if !e.QPNKnown {
		return e.Addr.String() + " QP ?"
	}
	return fmt.Sprintf("%s QP %#06x", e.Addr, uint32(e.QPN))
}

// Conn is a QP pair: A is the side that sent the first packet seen, B the
// other.
type Conn struct {
	// ID numbers connections from 1 in the order they were first seen.
	ID         int
	A, B       Endpoint
	FirstFrame int
	// MTU is the path MTU as far as the payloads of FIRST and MIDDLE
	// packets show it (0 until one was seen).
	MTU int

	dir  [2]direction // [0]: A to B, [1]: B to A
	keys []dirKey     // the analyzer's keys of its directions
}

// direction is what one side sent: its requests (followed as the other
// side's responder sees them) and its responses to the other side's
// requests.
type direction struct {
	reqSeen  psnWindow // PSNs of requests sent
	respSeen psnWindow // PSNs of READ responses sent
	// ePSN is the PSN the receiver of these requests expects next.
	ePSN      bth.PSN
	ePSNKnown bool
	// ePSNLoose: after a READ request whose length in packets is not
	// known, the next request is taken as in sequence whatever its PSN
	// beyond the READ's; loosePSN is that READ's PSN, whose last
	// response tells where the next request begins.
	ePSNLoose bool
	loosePSN  bth.PSN
	// acked is the highest PSN of these requests acknowledged by the
	// other side.
	acked      bth.PSN
	ackedKnown bool
	// outstanding READ and atomic requests, oldest first.
	outstanding []pending
	// answered READ requests whose last response was seen, oldest first
	// (at most MaxOutstanding): a responder that answers a READ twice
	// (the requester sent it again while the first answer was on its
	// way) sends responses that belong to one of these.
	answered []pending
}

// pending is a READ or atomic request waiting for its response.
type pending struct {
	psn    bth.PSN
	frame  int
	op     bth.Op
	dmaLen uint32
	// next is the PSN of the response packet the requester expects next.
	next bth.PSN
}

// psnWindow remembers the last SentWindow PSNs added.
type psnWindow struct {
	set  map[bth.PSN]int // PSN -> times present in ring
	ring []bth.PSN
	next int
}

func (w *psnWindow) has(p bth.PSN) bool { return w.set[p] > 0 }

func (w *psnWindow) add(p bth.PSN) {
	if w.set == nil {
		w.set = make(map[bth.PSN]int)
	}
	if len(w.ring) < SentWindow {
		w.ring = append(w.ring, p)
	} else {
		old := w.ring[w.next]
		if w.set[old]--; w.set[old] <= 0 {
			delete(w.set, old)
		}
		w.ring[w.next] = p
		w.next = (w.next + 1) % SentWindow
	}
	w.set[p]++
}

// Event is one packet as the analysis saw it: the fields a ladder prints,
// copied out of the packet, and what the analysis says about it.
type Event struct {
	Frame int       // position in the capture, from 1
	Time  time.Time // when it was captured
	Conn  *Conn     // its QP pair
	// FromA reports whether Conn.A sent it.
	FromA    bool
	Src, Dst netip.Addr
	Opcode   bth.Opcode
	DestQP   bth.QPN
	PSN      bth.PSN
	AckReq   bool
	PayLen   int
	ICRCOK   bool
	// HasAETH reports whether Syndrome and MSN are set.
	HasAETH  bool
	Syndrome bth.Syndrome
	MSN      bth.MSN
	// HasRETH reports whether DMALen is set.
	HasRETH bool
	DMALen  uint32
	// MAD names the management datagram a UD SEND ONLY to QP1 carries
	// ("CM REQ", "CM REJ", dissect.MAD.Name), empty for other packets.
	MAD string
	// Retransmission reports that the same sender already sent this PSN
	// on this QP (a request, or a READ response).
	Retransmission bool
	// Analysis holds the analysis strings, in a fixed order.
	Analysis []string
}

// dirKey names one direction: who sends to which QP of whom.
type dirKey struct {
	src, dst netip.Addr
	qpn      bth.QPN
}

// half locates one direction of a connection.
type half struct {
	c *Conn
	d int // index into Conn.dir; 0 when the sender is A
}

// Analyzer follows the connections of one capture. The zero value is
// ready to use.
type Analyzer struct {
	dirs    map[dirKey]half
	conns   []*Conn // followed now, oldest first
	seen    int     // pairs ever created
	evicted int     // pairs forgotten to stay within MaxConns
}

// Conns returns the connections followed now (at most MaxConns), in the
// order they appeared.
func (a *Analyzer) Conns() []*Conn { return a.conns }

// Seen returns how many QP pairs the analyzer has met, those it forgot
// to stay within MaxConns included.
func (a *Analyzer) Seen() int { return a.seen }

// Forgotten returns how many QP pairs the analyzer forgot to stay within
// MaxConns.
func (a *Analyzer) Forgotten() int { return a.evicted }

// Add analyses one decoded RoCEv2 packet: its frame number, its capture
// time, the packet and whether its ICRC verified. The packet is not kept.
func (a *Analyzer) Add(frame int, t time.Time, p *bth.Packet, icrcOK bool) Event {
	ev := newEvent(frame, t, p, icrcOK)
	info := p.Info()
	var srcQP bth.QPN
	hasSrcQP := info.Headers&bth.HdrDETH != 0
	if hasSrcQP {
		srcQP = p.DETH().SrcQP()
	}
	h := a.find(ev.Src, ev.Dst, ev.DestQP, info, srcQP, hasSrcQP, ev.PSN, frame)
	ev.Conn, ev.FromA = h.c, h.d == 0
	if !icrcOK {
		ev.Analysis = append(ev.Analysis, textICRCBad)
	}
	if info.Service == bth.ServiceRC {
		h.c.analyse(&ev, h.d, info)
	}
	return ev
}

// newEvent copies a packet's fields into an Event.
func newEvent(frame int, t time.Time, p *bth.Packet, icrcOK bool) Event {
	b := p.BTH()
	info := p.Info()
	ev := Event{
		Frame: frame, Time: t, Src: p.SrcAddr(), Dst: p.DstAddr(),
		Opcode: p.Opcode, DestQP: b.DestQP(), PSN: b.PSN(), AckReq: b.AckReq(),
		PayLen: p.PayLen, ICRCOK: icrcOK,
	}
	if info.Headers&bth.HdrAETH != 0 {
		ae := p.AETH()
		ev.HasAETH, ev.Syndrome, ev.MSN = true, ae.Syndrome(), ae.MSN()
	}
	if info.Headers&bth.HdrRETH != 0 {
		ev.HasRETH, ev.DMALen = true, p.RETH().DMALen()
	}
	if m, ok := dissect.DecodeMAD(p); ok {
		ev.MAD = m.Name()
	}
	return ev
}

// find returns the direction of a packet, creating it (and pairing it
// with the reverse direction, or making a new connection) when new.
func (a *Analyzer) find(src, dst netip.Addr, qpn bth.QPN, info *bth.OpInfo, srcQP bth.QPN, hasSrcQP bool, psn bth.PSN, frame int) half {
	k := dirKey{src, dst, qpn}
	if h, ok := a.dirs[k]; ok {
		return h
	}
	if a.dirs == nil {
		a.dirs = make(map[dirKey]half)
	}
	var h half
	switch {
	case hasSrcQP:
		// UD: the DETH names the sender's QP, so the reverse direction's
		// key is known.
		if r, ok := a.dirs[dirKey{dst, src, srcQP}]; ok {
			h = half{r.c, 1 - r.d}
		}
	default:
		h = a.pair(src, dst, qpn, info, psn)
	}
	if h.c == nil {
		if len(a.conns) >= MaxConns {
			a.forgetOldest()
		}
		a.seen++
		c := &Conn{ID: a.seen, FirstFrame: frame,
			A: Endpoint{Addr: src, QPN: srcQP, QPNKnown: hasSrcQP},
			B: Endpoint{Addr: dst, QPN: qpn, QPNKnown: true}}
		a.conns = append(a.conns, c)
		h = half{c, 0}
	} else {
		to := &h.c.B
		if h.d == 1 {
			to = &h.c.A
		}
		to.QPN, to.QPNKnown = qpn, true
	}
	a.dirs[k] = h
	h.c.keys = append(h.c.keys, k)
	return h
}

// forgetOldest drops the oldest connection and its directions.
func (a *Analyzer) forgetOldest() {
	c := a.conns[0]
	for _, k := range c.keys {
		delete(a.dirs, k)
	}
	a.conns[0] = nil
	a.conns = a.conns[1:]
	a.evicted++
}

// pair looks for the connection whose one direction is the reverse of
// src -> dst and whose other direction has not been seen: for a response,
// one whose requests include its PSN; otherwise the newest such.
func (a *Analyzer) pair(src, dst netip.Addr, qpn bth.QPN, info *bth.OpInfo, psn bth.PSN) half {
	var newest half
	for i := len(a.conns) - 1; i >= 0; i-- {
		c := a.conns[i]
		var d int
		switch {
		case c.A.Addr == dst && c.B.Addr == src && !c.A.QPNKnown:
			d = 1 // the packet goes from B to A
		case c.B.Addr == dst && c.A.Addr == src && !c.B.QPNKnown:
			d = 0
		default:
			continue
		}
		if !info.Request && c.dir[1-d].reqSeen.has(psn) {
			return half{c, d}
		}
		if newest.c == nil {
			newest = half{c, d}
		}
	}
	return newest
}

// psnText formats a PSN as the ladder and sroce dissect print it.
func psnText(p bth.PSN) string { return fmt.Sprintf("%#06x", uint32(p)) }

// analyse follows one RC packet sent in direction d.
func (c *Conn) analyse(ev *Event, d int, info *bth.OpInfo) {
	if info.Payload && (info.Position == bth.PosFirst || info.Position == bth.PosMiddle) && ev.PayLen > 0 {
		c.MTU = ev.PayLen
	}
	if info.Request {
		c.request(ev, &c.dir[d], info)
		return
	}
	c.response(ev, &c.dir[d], &c.dir[1-d], info)
}

// request follows a request sent in direction dir.
func (c *Conn) request(ev *Event, dir *direction, info *bth.OpInfo) {
	p := ev.PSN
	if dir.reqSeen.has(p) {
		ev.Retransmission = true
		ev.Analysis = append(ev.Analysis, textRetransmission)
	}
	dir.reqSeen.add(p)
	if !dir.ackedKnown {
		dir.acked, dir.ackedKnown = p.Add(bth.PSNMask), true // p - 1
	}
	if !dir.ePSNKnown {
		dir.ePSN, dir.ePSNKnown = p, true
	}
	taken := false
	switch diff := p.Diff(dir.ePSN); {
	case diff == 0 || (diff > 0 && dir.ePSNLoose):
		taken = ev.ICRCOK
	case diff < 0:
		ev.Analysis = append(ev.Analysis, textDuplicate)
	default:
		ev.Analysis = append(ev.Analysis, prefixOutOfSequence+"expected PSN "+psnText(dir.ePSN))
	}
	isRead, isAtomic := info.Op == bth.OpReadRequest, info.Op.Atomic()
	if taken {
		dir.ePSNLoose = false
		n := uint32(1)
		if isRead {
			if k, ok := c.readPackets(ev.DMALen); ok {
				n = k
			} else {
				dir.ePSNLoose, dir.loosePSN = true, p
			}
		}
		dir.ePSN = p.Add(n)
	}
	if isRead || isAtomic {
		// A retransmitted request replaces the one it repeats.
		for i := range dir.outstanding {
			if dir.outstanding[i].psn == p {
				dir.outstanding = append(dir.outstanding[:i], dir.outstanding[i+1:]...)
				break
			}
		}
		if len(dir.outstanding) >= MaxOutstanding {
			dir.outstanding = append(dir.outstanding[:0], dir.outstanding[1:]...)
		}
		dir.outstanding = append(dir.outstanding, pending{psn: p, frame: ev.Frame, op: info.Op, dmaLen: ev.DMALen, next: p})
		ev.Analysis = append(ev.Analysis, "READ/atomic outstanding: "+strconv.Itoa(len(dir.outstanding)))
	}
}

// minMTU is the smallest path MTU (IBV_MTU_256): a READ of at most this
// many bytes takes one response packet whatever the MTU.
const minMTU = 256

// readPackets returns how many response packets a READ of n bytes takes,
// when the MTU is known.
func (c *Conn) readPackets(n uint32) (uint32, bool) {
	if n <= minMTU {
		return 1, true
	}
	if c.MTU == 0 {
		return 0, false
	}
	return (n + uint32(c.MTU) - 1) / uint32(c.MTU), true
}

// response follows a response (ACK, READ response, atomic ACK) sent in
// direction resp to the requests of direction req.
func (c *Conn) response(ev *Event, resp, req *direction, info *bth.OpInfo) {
	p := ev.PSN
	switch info.Op {
	case bth.OpReadResponse:
		if resp.respSeen.has(p) {
			ev.Retransmission = true
			ev.Analysis = append(ev.Analysis, textRetransmission)
		}
		resp.respSeen.add(p)
		c.readResponse(ev, req, info)
	case bth.OpAtomicAck:
		if i := req.find(p); i >= 0 && req.outstanding[i].psn == p && req.outstanding[i].op.Atomic() {
			r := req.outstanding[i]
			ev.Analysis = append(ev.Analysis, fmt.Sprintf("%s response for the request at frame %d", opName(r.op), r.frame))
			req.outstanding = append(req.outstanding[:i], req.outstanding[i+1:]...)
		}
	}
	if !ev.HasAETH {
		return
	}
	s := ev.Syndrome
	switch {
	case s.IsACK():
		upTo := p
		if info.Op == bth.OpReadResponse && info.Position == bth.PosFirst {
			upTo = p.Add(bth.PSNMask) // the READ itself is not done yet
		}
		c.ack(ev, req, upTo, info.Op == bth.OpAck)
	case s.IsRNR():
		us := bth.RNRTimerMicros(s.Value())
		ev.Analysis = append(ev.Analysis, prefixRNRNAK+"retry after "+
			strconv.FormatFloat(float64(us)/1000, 'f', -1, 64)+" ms")
		c.ack(ev, req, p.Add(bth.PSNMask), false)
		req.ePSN, req.ePSNKnown, req.ePSNLoose = p, true, false // not taken
	case s.IsNAK():
		ev.Analysis = append(ev.Analysis, prefixNAK+nakText(s.Value()))
		if s.Value() == bth.NAKPSNSeqError {
			ev.Analysis = append(ev.Analysis, "expects PSN "+psnText(p))
			c.ack(ev, req, p.Add(bth.PSNMask), false)
			req.ePSN, req.ePSNKnown, req.ePSNLoose = p, true, false
		}
	}
}

// nakText returns the NAK code in words.
func nakText(code uint8) string {
	switch code {
	case bth.NAKPSNSeqError:
		return "PSN sequence error"
	case bth.NAKInvalidRequest:
		return "invalid request"
	case bth.NAKRemoteAccessError:
		return "remote access error"
	case bth.NAKRemoteOpError:
		return "remote operational error"
	case bth.NAKInvalidRDRequest:
		return "invalid RD request"
	}
	return "reserved code " + strconv.Itoa(int(code))
}

// opName names a READ or atomic request in analysis strings.
func opName(op bth.Op) string {
	switch op {
	case bth.OpReadRequest:
		return "READ"
	case bth.OpCompareSwap:
		return "COMPARE_SWAP"
	case bth.OpFetchAdd:
		return "FETCH_ADD"
	}
	return "?"
}

// find returns the index of the outstanding request whose PSN range may
// hold p (a READ's range is its response packets, whose number the caller
// checks), or -1: the newest request at p itself, else the READ that
// starts closest before p. Requests are outstanding in the order they
// were sent, not in PSN order: a requester that asks again for the rest
// of an earlier READ sends a READ whose PSN is below those of READs still
// outstanding.
func (dir *direction) find(p bth.PSN) int {
	best := -1
	for i := len(dir.outstanding) - 1; i >= 0; i-- {
		r := dir.outstanding[i]
		if p == r.psn {
			return i
		}
		if r.op == bth.OpReadRequest && r.psn.LessThan(p) &&
			(best < 0 || p.Diff(r.psn) < p.Diff(dir.outstanding[best].psn)) {
			best = i // checked against the READ's length by the caller
		}
	}
	return best
}

// readPosition returns where the response packet at p (of position pos)
// stands in the response of READ r: its index from 1 and, when the MTU
// is known, the number of packets; ok is false when p is outside r's
// response.
func (c *Conn) readPosition(r *pending, p bth.PSN, pos bth.Position) (idx int, total uint32, known, ok bool) {
	if p.LessThan(r.psn) {
		return 0, 0, false, false
	}
	idx = int(p.Diff(r.psn)) + 1
	total, known = c.readPackets(r.dmaLen)
	if pos == bth.PosOnly && idx == 1 {
		total, known = 1, true
	}
	return idx, total, known, !known || idx <= int(total)
}

// readText names a READ response packet's place in its READ's response.
func readText(idx int, total uint32, known bool, frame int) string {
	if known {
		return fmt.Sprintf("READ response %d/%d for the READ request at frame %d", idx, total, frame)
	}
	return fmt.Sprintf("READ response %d for the READ request at frame %d", idx, frame)
}

// answeredResponse explains a READ response that belongs to no
// outstanding READ: a response to a READ already answered (the
// responder answers a READ the requester sent again), or one whose READ
// was not seen.
func (c *Conn) answeredResponse(ev *Event, req *direction, info *bth.OpInfo) {
	p := ev.PSN
	best := -1
	for j := len(req.answered) - 1; j >= 0; j-- {
		a := &req.answered[j]
		if _, _, _, ok := c.readPosition(a, p, info.Position); ok &&
			(best < 0 || p.Diff(a.psn) < p.Diff(req.answered[best].psn)) {
			best = j
		}
	}
	if best < 0 {
		ev.Analysis = append(ev.Analysis, "READ response without a READ request seen")
		return
	}
	a := &req.answered[best]
	idx, total, known, _ := c.readPosition(a, p, info.Position)
	ev.Analysis = append(ev.Analysis, "duplicate", readText(idx, total, known, a.frame)+", answered already")
}

// readResponse pairs a READ response packet with its request.
func (c *Conn) readResponse(ev *Event, req *direction, info *bth.OpInfo) {
	p := ev.PSN
	i := req.find(p)
	if i < 0 || req.outstanding[i].op != bth.OpReadRequest {
		c.answeredResponse(ev, req, info)
		return
	}
	r := &req.outstanding[i]
	idx, total, known, ok := c.readPosition(r, p, info.Position)
	if !ok {
		c.answeredResponse(ev, req, info)
		return
	}
	switch d := p.Diff(r.next); {
	case d < 0:
		ev.Analysis = append(ev.Analysis, textDuplicate)
	case d > 0:
		ev.Analysis = append(ev.Analysis, prefixOutOfSequence+"expected PSN "+psnText(r.next))
		r.next = p.Next() // the requester retries; the ladder follows what came
	default:
		r.next = p.Next()
	}
	ev.Analysis = append(ev.Analysis, readText(idx, total, known, r.frame))
	if info.Position == bth.PosLast || info.Position == bth.PosOnly {
		readPSN := r.psn
		if len(req.answered) >= MaxOutstanding {
			req.answered = append(req.answered[:0], req.answered[1:]...)
		}
		req.answered = append(req.answered, *r)
		req.outstanding = append(req.outstanding[:i], req.outstanding[i+1:]...)
		// The end of a READ's response is where the requests after it
		// begin: it settles the expected PSN when that READ is the one
		// whose length was not known (the last request taken), and only
		// moves it forward otherwise. An older READ ending says nothing
		// about requests sent after the loose one.
		switch {
		case !req.ePSNKnown:
			req.ePSN, req.ePSNKnown = p.Next(), true
		case req.ePSNLoose:
			if readPSN == req.loosePSN {
				req.ePSN, req.ePSNLoose = p.Next(), false
			}
		case req.ePSN.LessThan(p.Next()):
			req.ePSN = p.Next()
		}
	}
}

// ack records that the other side acknowledged req's requests up to and
// including upTo, and says so; an ACK (not a READ response) beyond an
// outstanding READ or atomic request says that request's response was lost.
func (c *Conn) ack(ev *Event, req *direction, upTo bth.PSN, plainACK bool) {
	if !req.ackedKnown {
		req.acked, req.ackedKnown = upTo, true
		if ev.Syndrome.IsACK() {
			ev.Analysis = append(ev.Analysis, "acks PSN "+psnText(upTo))
		}
	} else if first := req.acked.Next(); first.LessThanEq(upTo) {
		if first == upTo {
			ev.Analysis = append(ev.Analysis, "acks PSN "+psnText(upTo))
		} else {
			ev.Analysis = append(ev.Analysis, "acks PSN "+psnText(first)+".."+psnText(upTo))
		}
		req.acked = upTo
	} else if ev.Syndrome.IsACK() && plainACK {
		ev.Analysis = append(ev.Analysis, "repeats the acknowledgement of PSN "+psnText(upTo))
	}
	// The receiver has taken everything up to upTo.
	if !req.ePSNKnown || req.ePSN.LessThanEq(upTo) {
		req.ePSN, req.ePSNKnown, req.ePSNLoose = upTo.Next(), true, false
	}
	if !plainACK {
		return
	}
	// Each such request is said once, then forgotten (its retransmission
	// comes as a new request).
	kept := req.outstanding[:0]
	for _, r := range req.outstanding {
		if r.psn.LessThanEq(upTo) {
			ev.Analysis = append(ev.Analysis, fmt.Sprintf(prefixImpliedNAK+"no response to the %s request at frame %d", opName(r.op), r.frame))
			continue
		}
		kept = append(kept, r)
	}
	req.outstanding = kept
}
