// Requester: turns send work requests into request packets. It segments
// messages by the path MTU, assigns PSNs, sets AckReq, keeps the window of
// unacknowledged PSNs and the max_rd_atomic budget, honours fences, and on
// a retry goes back to the oldest unacknowledged PSN. The loop goroutine
// owns all of it; the send queue slots carry each request's progress.

package qp

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/verbs"
)

type requester struct {
	reqIdx  uint32  // next send queue slot to transmit
	compIdx uint32  // oldest slot not completed (mirrors sq.cons)
	psn     bth.PSN // next PSN to transmit
	compPSN bth.PSN // oldest PSN not acknowledged
	maxPSN  bth.PSN // one past the highest PSN ever transmitted
	noAck   int     // packets since the last AckReq
	rdAvail int     // free max_rd_atomic credits
	cw      window  // congestion window (cwnd.go)

	retryLeft    uint8
	rnrLeft      uint8
	startedRetry bool

	retransArmed bool
	retransAt    monotime.Time
	waitRNR      bool
	rnrAt        monotime.Time

	drainNotified bool
}

// outstanding reports whether transmitted PSNs await acknowledgement.
func (q *QP) outstanding() bool { return q.req.maxPSN != q.req.compPSN }

// ahead returns how far p lies past the oldest unacknowledged PSN, in
// [0, 2^24). The requester's window (compPSN to maxPSN) can span more than
// 2^23 PSNs: one READ of 2^31 bytes at path MTU 256 takes 2^23 response
// PSNs, and a signed 24-bit comparison would see such a window as
// negative. So positions inside it are compared as unsigned offsets from
// compPSN, which the window never exceeds (at most 2^23 + MaxUnackedPSNs).
func (r *requester) ahead(p bth.PSN) uint32 { return uint32(p-r.compPSN) & bth.PSNMask }

// sentBefore reports whether p lies in the window of PSNs already
// transmitted and not acknowledged: [compPSN, maxPSN).
func (r *requester) sentBefore(p bth.PSN) bool { return r.ahead(p) < r.ahead(r.maxPSN) }

func (q *QP) armRetrans(now monotime.Time) {
	if q.rto > 0 {
		q.req.retransArmed = true
		q.req.retransAt = now.Add(q.rto)
		if q.tracing() {
			q.trace(Trace{Kind: TraceTimerArmed, Timer: TimerRetransmit, At: q.req.retransAt})
		}
	}
}

// pumpSend transmits request packets. It returns the number sent and
// whether it stopped for lack of a transmit buffer.
func (q *QP) pumpSend(now monotime.Time, budget int) (int, bool) {
	r := &q.req
	if q.state != verbs.QPStateRTS && q.state != verbs.QPStateSQD {
		return 0, false
	}
	if r.waitRNR {
		return 0, false
	}
	n := 0
	prod := q.sqPull()
	for n < budget && r.reqIdx != prod {
		w := q.sq.at(r.reqIdx)
		if w.state == wqeError || w.state == wqeDone {
			// A local error stops the requester until the completer
			// reaches this request; UD/UC requests are done when sent.
			if w.state == wqeError {
				return n, false
			}
			r.reqIdx++
			continue
		}
		if !w.started {
			if q.state == verbs.QPStateSQD {
				return n, false
			}
			if w.wr.Flags&verbs.Fence != 0 && r.reqIdx != r.compIdx {
				return n, false
			}
			if w.op().Class == verbs.ClassLocal {
				q.localOp(w)
				continue
			}
			if q.typ.Reliable() && w.op().RdAtomic && !w.hasRd {
				if r.rdAvail <= 0 {
					return n, false
				}
				r.rdAvail--
				w.hasRd = true
			}
		}
		if q.typ.Reliable() {
			inflight := int(r.ahead(r.psn))
			if inflight > q.unackedLimit() {
				return n, false
			}
			if !r.cw.allows(inflight, q.packetCost(w)) {
				q.cnt[verbs.CntCwndLimited]++
				return n, false
			}
		}
		ok := q.sendPacket(now, w)
		if !ok {
			q.cnt[verbs.CntTxNoBuf]++
			return n, true
		}
		n++
	}
	return n, false
}

// packetCost returns how many PSNs the next packet of w takes from the
// congestion window: one for a SEND or WRITE packet or an atomic, and one
// per response packet for a READ request.
func (q *QP) packetCost(w *sendWQE) int {
	if w.op().Class != verbs.ClassRead {
		return 1
	}
	mtu := uint32(q.mtu)
	return int(max((w.length-w.sent+mtu-1)/mtu, 1))
}

// sendPacket builds and transmits the next packet of w. It reports false
// if no transmit buffer was available (nothing changed).
func (q *QP) sendPacket(now monotime.Time, w *sendWQE) bool {
	r := &q.req
	op := w.op()
	mtu := uint32(q.mtu)
	if !w.started {
		npkts := uint32(1)
		if op.Segmented() || op.Class == verbs.ClassRead {
			npkts = max((w.length+mtu-1)/mtu, 1)
		}
		if datagram(q.typ) {
			npkts = 1
			if w.length > mtu {
				// IBTA C10-93.1.1, as rdma_rxe: a UD message longer than
				// the port MTU is not sent and completes successfully.
				w.started = true
				w.firstPSN, w.lastPSN = r.psn, r.psn
				r.psn = r.psn.Next()
				w.state = wqeDone
				r.reqIdx++
				return true
			}
		}
		w.started = true
		w.firstPSN = r.psn
		w.lastPSN = r.psn.Add(npkts - 1)
		w.sent = 0
	}

	h := &q.hdr
	*h = bth.Headers{}
	h.BTH.PKey = verbs.DefaultPKey
	h.BTH.PSN = r.psn
	h.BTH.DestQP = q.attr.DestQPN
	// Every XRC request names the SRQ it goes to (the XRCETH).
	h.XRCETH.SRQN = w.wr.RemoteSRQN
	ah := &q.av
	var payload uint32
	var last bool // last packet of the message
	remaining := w.length - w.sent

	switch op.Class {
	case verbs.ClassRead:
		h.BTH.Opcode = op.Opcode(q.typ, true, true)
		h.RETH = bth.RETHFields{VA: w.wr.RemoteAddr + uint64(w.sent), RKey: w.wr.RKey, DMALen: remaining}
		last = true
	case verbs.ClassAtomic:
		h.BTH.Opcode = op.Opcode(q.typ, true, true)
		h.Atomic = bth.AtomicETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, SwapAdd: w.wr.CompareAdd}
		if h.BTH.Opcode.RCEquivalent() == bth.RCCompareSwap {
			h.Atomic.SwapAdd, h.Atomic.Compare = w.wr.Swap, w.wr.CompareAdd
		}
		last = true
	case verbs.ClassAtomicWrite:
		h.BTH.Opcode = op.Opcode(q.typ, true, true)
		h.RETH = bth.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
		payload = w.length
		last = true
	default:
		first := w.sent == 0
		last = remaining <= mtu
		payload = min(remaining, mtu)
		h.BTH.Opcode = op.Opcode(q.typ, first, last)
		if op.Class == verbs.ClassWrite && first {
			h.RETH = bth.RETHFields{VA: w.wr.RemoteAddr, RKey: w.wr.RKey, DMALen: w.length}
		}
		if last {
			if op.Imm {
				h.Imm = w.wr.Imm
			}
			if op.Inv {
				h.IETH = w.wr.InvalidateRKey
			}
			if w.wr.Flags&verbs.Solicited != 0 && op.Solicited {
				h.BTH.SE = true
			}
		}
		if datagram(q.typ) {
			ah = q.sq.ahOf(w)
			h.BTH.DestQP = w.wr.RemoteQPN
			h.DETH = bth.DETHFields{QKey: w.wr.RemoteQKey, SrcQP: q.qpn}
			if q.typ == verbs.QPTypeGSI || w.wr.RemoteQKey&verbs.ControlledQKey != 0 {
				// IBTA C10-15: a Q_Key with the high bit set in the work
				// request means "use the QP's own Q_Key"; QP1's is fixed.
				h.DETH.QKey = q.qkey
			}
		}
	}
	// rdma_rxe's rule: AckReq on the last packet, and when more than
	// MaxPktPerAck packets went without one. A reduced congestion window
	// asks every half window, and on the packet that fills it, so that
	// an ACK always comes back to open it.
	h.BTH.AckReq = last || r.noAck > r.cw.ackEvery()
	if q.typ.Reliable() && r.cw.reduced() && int(r.ahead(r.psn))+1 >= r.cw.cwnd {
		h.BTH.AckReq = true
	}

	tl := h.TransportLen(int(payload))
	buf := q.env.Frame(ah, tl)
	if buf == nil {
		return false
	}
	if h.BTH.AckReq {
		r.noAck = 0
	} else {
		r.noAck++
	}
	off, err := h.EncodeHeaders(buf, int(payload))
	if err == nil && payload > 0 {
		if w.inline {
			copy(buf[off:off+int(payload)], q.sq.inlineOf(w)[w.sent:])
		} else if _, gerr := q.pd.Gather(q.sq.sglOf(w), uint64(w.sent), buf[off:off+int(payload)]); gerr != nil {
			err = gerr
		}
	}
	if err != nil {
		// The request cannot be sent: a bad lkey, missing access or a
		// range outside its MR (IBV_WC_LOC_PROT_ERR).
		q.failWQE(w, verbs.WCLocProtErr)
		return true
	}
	q.env.Send(ah, q.qpn, buf[:tl])
	q.cnt[verbs.CntSentPkts]++
	if r.sentBefore(r.psn) {
		q.cnt[verbs.CntRetransmitPkts]++
	}

	// Advance.
	if op.Class == verbs.ClassRead {
		n := max((remaining+mtu-1)/mtu, 1)
		r.psn = r.psn.Add(n)
	} else {
		r.psn = r.psn.Next()
	}
	if r.ahead(r.psn) > r.ahead(r.maxPSN) {
		r.maxPSN = r.psn
	}
	w.sent += payload
	if last {
		r.reqIdx++
		if q.typ.Reliable() {
			w.state = wqePending
		} else {
			w.state = wqeDone
		}
	} else {
		w.state = wqeSending
	}
	if q.typ.Reliable() && !r.retransArmed {
		q.armRetrans(now)
	}
	return true
}

// failWQE marks w failed locally. For RC the requester stops; the
// completer reports the failure when it reaches w and then moves the QP to
// the error state. For UD and UC the QP goes to SQE.
func (q *QP) failWQE(w *sendWQE, status verbs.WCStatus) {
	w.state = wqeError
	w.status = status
	if !w.started {
		w.started = true
	}
}

// goBack rewinds the requester to the oldest unacknowledged PSN
// (go-back-N). The first unfinished request resumes where the
// acknowledgements stop: a SEND or WRITE at the packet of compPSN, a READ
// with a new request for the bytes not yet received; later requests are
// sent again from their start with the same PSNs.
func (q *QP) goBack() {
	r := &q.req
	prod := q.sqPull()
	first := true
	mtu := uint32(q.mtu)
	for i := r.compIdx; i != prod; i++ {
		w := q.sq.at(i)
		if w.op().Class == verbs.ClassLocal && w.state == wqeDone {
			continue // executed already, and it sends no packets
		}
		if !w.started || w.state == wqePosted || w.state == wqeDone || w.state == wqeError {
			// Finished requests at the head are completed by
			// completeSends; an unstarted or failed one ends the rewind.
			break
		}
		if first {
			first = false
			switch w.op().Class {
			case verbs.ClassRead:
				k := w.rdDone / mtu
				w.sent = k * mtu
				r.psn = w.firstPSN.Add(k)
			case verbs.ClassAtomic:
				w.sent = 0
				r.psn = w.firstPSN
			default:
				k := r.compPSN.Diff(w.firstPSN)
				npkts := w.lastPSN.Diff(w.firstPSN) + 1
				if k < 0 {
					k = 0
				}
				if k >= npkts {
					k = npkts - 1
				}
				w.sent = uint32(k) * mtu
				r.psn = w.firstPSN.Add(uint32(k))
			}
			r.reqIdx = i
		} else {
			w.sent = 0
			w.rdDone = 0
		}
		w.state = wqeSending
	}
	if first {
		// nothing in flight to resend
		return
	}
	r.noAck = 0
}

// completeSends generates the completions of finished requests, in order.
func (q *QP) completeSends() {
	r := &q.req
	changed := false
	prod := q.sqPull()
	for r.compIdx != prod {
		w := q.sq.at(r.compIdx)
		if w.state != wqeDone && w.state != wqeError {
			break
		}
		if w.hasRd {
			r.rdAvail++
			w.hasRd = false
		}
		failed := w.state == wqeError
		wc := verbs.WC{WRID: w.wr.WRID, Status: w.status, Opcode: w.wr.Opcode.WCOpcode(), QPNum: q.qpn}
		if w.status == verbs.WCSuccess {
			wc.ByteLen = w.length
			if w.op().Imm {
				wc.Flags = verbs.WCWithImm
			}
		}
		r.compIdx++
		if int32(r.reqIdx-r.compIdx) < 0 {
			// The requester was rewound to this request and had not sent
			// it again when the original answer came: skip past it.
			r.reqIdx = r.compIdx
			if span := uint32(w.lastPSN-w.firstPSN)&bth.PSNMask + 1; w.started &&
				uint32(r.psn-w.firstPSN)&bth.PSNMask < span {
				r.psn = w.lastPSN.Next()
			}
		}
		q.sq.setCons(r.compIdx)
		changed = true
		if q.sigAll || w.wr.Flags&verbs.Signaled != 0 || failed {
			q.pushSend(&wc)
		}
		if failed {
			if q.typ.Reliable() {
				q.toErr()
			} else {
				q.toSQE()
			}
			return
		}
		if q.state == verbs.QPStateErr {
			return
		}
	}
	if changed && q.state == verbs.QPStateSQD {
		q.checkDrained()
	}
}

// toSQE moves a UD or UC QP to the send queue error state: outstanding send
// requests are flushed, receives continue.
func (q *QP) toSQE() {
	q.setState(verbs.QPStateSQE)
	r := &q.req
	prod := q.sqPull()
	for r.compIdx != prod {
		w := q.sq.at(r.compIdx)
		wc := verbs.WC{WRID: w.wr.WRID, Status: verbs.WCWRFlushErr, Opcode: w.wr.Opcode.WCOpcode(), QPNum: q.qpn}
		r.compIdx++
		q.sq.setCons(r.compIdx)
		q.pushSend(&wc)
	}
	r.reqIdx = r.compIdx
}

// checkDrained reports the end of an SQD drain: every request started
// before the drain has completed.
func (q *QP) checkDrained() {
	r := &q.req
	if r.drainNotified || !q.attr.SQDraining {
		return
	}
	if r.compIdx != r.reqIdx || q.outstanding() {
		return
	}
	if r.reqIdx != q.sqPull() && q.sq.at(r.reqIdx).started {
		return
	}
	r.drainNotified = true
	q.attr.SQDraining = false
	if q.attr.EnSQDAsyncNotify {
		q.env.Event(verbs.EventSQDrained, q, nil)
	}
}

// unackedLimit returns how many PSNs past the oldest unacknowledged one the
// requester may send: MaxUnackedPSNs, or fewer where the path MTU would
// make them carry more than MaxUnackedBytes (never fewer than rdma_rxe's
// 128).
func (q *QP) unackedLimit() int {
	if q.mtu <= 0 {
		return MaxUnackedPSNs
	}
	return min(MaxUnackedPSNs, max(128, MaxUnackedBytes/q.mtu))
}
