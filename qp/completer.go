// Completer: handles ACKs, NAKs, READ responses and atomic ACKs arriving
// for an RC requester. It retires send requests in order, places READ data
// and atomic results, and decides on retries (NAK, timeout) and RNR waits,
// following rdma_rxe's completer. Runs on the loop goroutine only.

package qp

import (
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// resetRetry restores the retry budgets after progress.
func (q *QP) resetRetry() {
	q.req.retryLeft = q.attr.RetryCnt
	q.req.rnrLeft = q.attr.RNRRetry
	q.req.startedRetry = false
}

// response handles a response packet (RC only).
func (q *QP) response(now monotime.Time, pkt *bth.Packet) {
	r := &q.req
	psn := pkt.BTH().PSN()
	// A response must be for a PSN this requester has transmitted: in the
	// window, or a duplicate of one at most 2^22 PSNs before it.
	if !r.sentBefore(psn) && (r.compPSN-psn)&bth.PSNMask > 1<<22 {
		q.cnt[verbs.CntBadResponse]++
		return
	}
	oldComp := r.compPSN
	progress := q.handleResponse(now, pkt, psn)
	r.cw.onAck(uint32(r.compPSN-oldComp)&bth.PSNMask, r.compPSN, r.maxPSN)
	q.completeSends()
	if q.state == verbs.QPStateErr {
		return
	}
	if progress {
		if q.outstanding() {
			q.armRetrans(now)
		} else if r.retransArmed {
			r.retransArmed = false
			if q.tracing() {
				q.trace(Trace{Kind: TraceTimerStopped, Timer: TimerRetransmit})
			}
		}
	}
	if q.state == verbs.QPStateSQD {
		q.checkDrained()
	}
}

// handleResponse applies one response; it reports whether the requester
// made progress (something was acknowledged).
func (q *QP) handleResponse(now monotime.Time, pkt *bth.Packet, psn bth.PSN) bool {
	r := &q.req
	op := pkt.Opcode.RCEquivalent() // XRC responses are RC's under the XRC service bits
	prod := q.sqPull()
	progress := false
	var w *sendWQE
	// Retire the requests this response acknowledges implicitly.
	for {
		if r.compIdx == prod {
			q.cnt[verbs.CntBadResponse]++
			return progress
		}
		w = q.sq.at(r.compIdx)
		if !w.started || w.state == wqePosted || w.state == wqeError {
			// nothing of it is in flight (rewound for a retry, or failed)
			return progress
		}
		if w.state == wqeDone {
			q.completeSends()
			if q.state == verbs.QPStateErr {
				return progress
			}
			continue
		}
		if !r.sentBefore(psn) || r.ahead(psn) <= r.ahead(w.lastPSN) {
			break // a duplicate, or a response within w
		}
		if !w.awaitingAck() {
			return progress
		}
		if w.op().RdAtomic {
			// A later PSN answered before this READ or atomic: its
			// response was lost. Go back for it.
			q.errorRetry(now, RetryImpliedNAK)
			return progress
		}
		q.finishWQE(w)
		// Progress, whatever the response is (an implied ACK of a
		// sequence or RNR NAK too): the retry budgets start again, as
		// rdma_rxe's completer resets them for every ACK that completes
		// a request.
		q.resetRetry()
		progress = true
		q.completeSends()
		if q.state == verbs.QPStateErr {
			return progress
		}
	}

	// d: where psn lies relative to compPSN, negative for a duplicate.
	d := int64(r.ahead(psn))
	if !r.sentBefore(psn) {
		d = -int64((r.compPSN - psn) & bth.PSNMask)
	}
	rdAtomic := w.op().RdAtomic
	if d < 0 {
		// A duplicate of a response already handled.
		if psn == w.lastPSN && w.awaitingAck() && !rdAtomic && op == bth.RCAcknowledge &&
			pkt.AETH().Syndrome().IsACK() {
			q.finishWQE(w)
			return true
		}
		return progress
	}
	if d > 0 && rdAtomic {
		// A gap in the responses of a READ or atomic: wait for the retry.
		return progress
	}

	switch op {
	case bth.RCReadResponseFirst, bth.RCReadResponseMiddle, bth.RCReadResponseLast, bth.RCReadResponseOnly:
		if op != bth.RCReadResponseMiddle && !pkt.AETH().Syndrome().IsACK() {
			q.protoError(w, verbs.WCBadRespErr)
			return progress
		}
		if w.op().Response != bth.OpReadResponse {
			q.protoError(w, verbs.WCBadRespErr)
			return progress
		}
		return q.readResponse(pkt, w, psn) || progress
	case bth.RCAtomicAcknowledge:
		if !pkt.AETH().Syndrome().IsACK() || w.op().Response != bth.OpAtomicAck {
			q.protoError(w, verbs.WCBadRespErr)
			return progress
		}
		q.resetRetry()
		var b [8]byte
		orig := pkt.AtomicAckETH().OrigRemDt()
		putHostU64(b[:], orig)
		w.atomic = orig
		if _, err := q.pd.Scatter(q.sq.sglOf(w), 0, b[:]); err != nil {
			q.localError(w, err)
			return progress
		}
		r.compPSN = psn.Next()
		q.finishWQE(w)
		return true
	case bth.RCAcknowledge:
	default:
		q.cnt[verbs.CntBadResponse]++
		return progress
	}

	syn := pkt.AETH().Syndrome()
	switch syn.Kind() {
	case bth.SyndromeACK:
		if rdAtomic {
			// an ACK cannot acknowledge a READ or atomic
			q.cnt[verbs.CntBadResponse]++
			return progress
		}
		q.resetRetry()
		r.compPSN = psn.Next()
		if psn == w.lastPSN && w.awaitingAck() {
			q.finishWQE(w)
		}
		if r.compPSN.Diff(r.psn) > 0 {
			// The ACK covers packets sent before a go-back that have
			// not been sent again yet: resume after it instead of
			// waiting for a timeout with nothing to send.
			q.goBack()
		}
		return true
	case bth.SyndromeRNR:
		q.cnt[verbs.CntRcvdRNRErr]++
		if d > 0 {
			r.compPSN = psn // everything before it was taken
			progress = true
		}
		if r.rnrLeft > 0 {
			if q.attr.RNRRetry != 7 {
				r.rnrLeft--
			}
			r.waitRNR = true
			r.rnrAt = now.Add(time.Duration(bth.RNRTimerMicros(syn.Value())) * time.Microsecond)
			q.goBack()
			if q.tracing() {
				q.trace(Trace{Kind: TraceTimerArmed, Timer: TimerRNR, At: r.rnrAt})
				q.traceRetry(RetryRNR)
			}
		} else {
			q.cnt[verbs.CntRetryRNRExceededErr]++
			q.failHead(w, verbs.WCRNRRetryExcErr)
		}
		return progress
	case bth.SyndromeNAK:
		switch syn.Value() {
		case bth.NAKPSNSeqError:
			if d > 0 {
				q.cnt[verbs.CntRcvdSeqErr]++
				r.compPSN = psn
				progress = true
			}
			q.errorRetry(now, RetrySeqNAK)
		case bth.NAKInvalidRequest:
			q.failHead(w, verbs.WCRemInvReqErr)
		case bth.NAKRemoteAccessError:
			q.failHead(w, verbs.WCRemAccessErr)
		default:
			q.failHead(w, verbs.WCRemOpErr)
		}
		return progress
	}
	q.protoError(w, verbs.WCBadRespErr)
	return progress
}

// readResponse places one READ response packet at the expected PSN.
func (q *QP) readResponse(pkt *bth.Packet, w *sendWQE, psn bth.PSN) bool {
	mtu := uint32(q.mtu)
	remaining := w.length - w.rdDone
	if w.op().Class != verbs.ClassRead {
		// ATOMIC_WRITE: a zero-length READ response acknowledges it.
		remaining = 0
	}
	n := uint32(pkt.PayLen)
	op := pkt.Opcode.RCEquivalent()
	lastKind := op == bth.RCReadResponseLast || op == bth.RCReadResponseOnly
	if remaining > mtu {
		if lastKind || n != mtu {
			q.protoError(w, verbs.WCBadRespErr)
			return false
		}
	} else if !lastKind || n != remaining {
		q.protoError(w, verbs.WCBadRespErr)
		return false
	}
	q.resetRetry()
	if n > 0 {
		if _, err := q.pd.Scatter(q.sq.sglOf(w), uint64(w.rdDone), pkt.PayloadBytes()); err != nil {
			q.localError(w, err)
			return false
		}
	}
	w.rdDone += n
	q.req.compPSN = psn.Next()
	if lastKind {
		q.finishWQE(w)
	}
	return true
}

// awaitingAck reports whether an acknowledgement can finish w: all of it
// was sent (pending), or it was sent and the requester has rewound it for
// a retry and is part way through sending it again (sending). A response
// covering its last PSN proves the responder has the whole message, which
// ends the resend too (completeSends moves the requester past it). A
// request still in its first transmission is also "sending", but no
// response can cover its last PSN, which was never sent (response checks
// every PSN against maxPSN).
func (w *sendWQE) awaitingAck() bool {
	return w.state == wqePending || w.state == wqeSending
}

// finishWQE marks a request acknowledged.
func (q *QP) finishWQE(w *sendWQE) {
	r := &q.req
	if w.lastPSN.Diff(r.compPSN) >= 0 {
		r.compPSN = w.lastPSN.Next()
	}
	w.state = wqeDone
	w.status = verbs.WCSuccess
}

// failHead completes the oldest request with status and moves the QP to
// the error state (through completeSends).
func (q *QP) failHead(w *sendWQE, status verbs.WCStatus) {
	w.state = wqeError
	w.status = status
}

// protoError handles a response that breaks the protocol: the request
// fails with status, as rdma_rxe's completer does.
func (q *QP) protoError(w *sendWQE, status verbs.WCStatus) {
	q.cnt[verbs.CntBadResponse]++
	q.failHead(w, status)
}

// localError fails the request for a problem with its local buffers.
func (q *QP) localError(w *sendWQE, err error) {
	st := verbs.WCLocProtErr
	if err == mr.ErrLength {
		st = verbs.WCLocLenErr
	}
	q.failHead(w, st)
}

// errorRetry starts a retry after a PSN sequence NAK, a lost READ or atomic
// response, or a timeout; or fails the oldest request when the retry
// budget is spent (rdma_rxe's COMPST_ERROR_RETRY).
func (q *QP) errorRetry(now monotime.Time, reason RetryReason) {
	timeout := reason == RetryTimeout
	r := &q.req
	if r.compIdx == q.sqPull() {
		return
	}
	w := q.sq.at(r.compIdx)
	if !w.started || w.state == wqePosted {
		return
	}
	if r.startedRetry && !timeout {
		return
	}
	if r.retryLeft > 0 {
		if q.attr.RetryCnt != 7 {
			r.retryLeft--
		}
		if q.outstanding() {
			q.cnt[verbs.CntCompleterRetryErr]++
			q.lossSignal(timeout)
			q.goBack()
			r.startedRetry = true
			q.traceRetry(reason)
		}
		return
	}
	q.cnt[verbs.CntRetryExceededErr]++
	q.failHead(w, verbs.WCRetryExcErr)
}
