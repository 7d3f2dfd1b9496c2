// Congestion window: how many packets an RC requester lets be in flight,
// learned from what the path carries. It sits on top of the fixed limits
// (MaxUnackedPSNs, the peer's max_rd_atomic): on a clean path it stays at
// the fixed limit and changes nothing; a loss halves it, clean
// acknowledgements grow it back, as TCP's AIMD does. Packets in flight are
// counted in PSNs from the oldest unacknowledged one, so a READ occupies
// one packet of the window per response packet it asks for: the window
// bounds the READ response data outstanding as well as the requests.
// Owned by the loop goroutine with the rest of the requester; plain
// integers, nothing allocated.

package qp

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// Congestion window bounds, in packets (PSNs).
const (
	// CwndMax is the largest congestion window: the packets the fixed
	// limit of MaxUnackedPSNs lets out (a packet is sent while at most
	// MaxUnackedPSNs are outstanding). A window this large adds no
	// limit of its own, so a clean path behaves as without a window.
	CwndMax = MaxUnackedPSNs + 1
	// CwndInit is the window of a new connection: the fixed limit, so
	// that lossless paths see exactly the packets and AckReq bits they
	// saw before there was a window.
	CwndInit = CwndMax
	// CwndMin is the smallest window. The requester always sends when
	// nothing is outstanding, so progress never stops, and the packet
	// that fills a reduced window asks for an ACK.
	CwndMin = 4
)

// window is the requester's congestion window state.
type window struct {
	cwnd     int     // packets allowed in flight
	ssthresh int     // below it the window grows by a packet per packet acknowledged (slow start)
	acked    int     // packets acknowledged toward the next additive increase
	recover  bth.PSN // one past the highest PSN sent when the window was last reduced
	inLoss   bool    // a reduction happened and compPSN has not passed recover
	off      bool    // no window: the fixed limits only (SetCwnd)
}

// initWindow returns the window of a new connection (on unless SetCwnd
// turned it off).
func initWindow() window { return window{cwnd: CwndInit, ssthresh: CwndMax} }

// reset returns the window of a new connection, keeping whether it is on.
func (w *window) reset() window {
	n := initWindow()
	n.off = w.off
	return n
}

// reduced reports whether the window is below the fixed limit, where it
// also decides where ACKs are requested.
func (w *window) reduced() bool { return !w.off && w.cwnd < CwndMax }

// ackEvery returns after how many packets without AckReq the requester
// asks for an ACK: MaxPktPerAck on a full window, as rdma_rxe, and half
// the window when it is reduced, so that ACKs come back often enough to
// keep the window moving.
func (w *window) ackEvery() int {
	if !w.reduced() {
		return MaxPktPerAck
	}
	return max(w.cwnd/2-1, 0)
}

// allows reports whether cost more packets may go out with inflight
// outstanding. With nothing outstanding everything may, so that a READ
// larger than the window is still sent (alone). A full window adds no
// limit to the fixed one, which lets a READ go while its first PSN is
// within MaxUnackedPSNs of the oldest outstanding, as rdma_rxe does with
// its own bound (the responses may then reach past it: nine 64-packet
// READs in flight, rxe's 128 lets three); a reduced window counts every
// response packet.
func (w *window) allows(inflight, cost int) bool {
	return inflight == 0 || !w.reduced() || inflight+cost <= w.cwnd
}

// lossSignal reduces the window after a loss: a PSN sequence error NAK, a
// READ or atomic response overtaken by a later one, or (timeout) the
// retransmit timer. Losses of packets sent before the last reduction are
// part of the same event and do not reduce it again, except a timeout,
// which drops the window to CwndMin and lets it slow-start back to half
// of what it was. maxPSN is one past the highest PSN sent. It reports
// whether the window was reduced.
func (w *window) lossSignal(maxPSN bth.PSN, timeout bool) bool {
	if w.off || w.inLoss && !timeout {
		return false
	}
	w.ssthresh = max(w.cwnd/2, CwndMin)
	if timeout {
		w.cwnd = CwndMin
	} else {
		w.cwnd = w.ssthresh
	}
	w.acked = 0
	w.recover = maxPSN
	w.inLoss = true
	return true
}

// onAck grows the window for n packets newly acknowledged, compPSN being
// the oldest PSN still unacknowledged and maxPSN one past the highest
// sent. Acknowledgements of packets sent before the last reduction end the
// loss event once they pass its recovery point, and do not grow the
// window.
func (w *window) onAck(n uint32, compPSN, maxPSN bth.PSN) {
	if n == 0 {
		return
	}
	if w.inLoss {
		// compPSN has passed recover when recover lies in [old
		// compPSN, compPSN], i.e. no longer ahead of it within what
		// was sent.
		if uint32(w.recover-compPSN)&bth.PSNMask <= uint32(maxPSN-compPSN)&bth.PSNMask &&
			w.recover != compPSN {
			return
		}
		w.inLoss = false
		return
	}
	if w.cwnd >= CwndMax {
		return
	}
	if w.cwnd < w.ssthresh {
		w.cwnd = min(w.cwnd+int(n), w.ssthresh, CwndMax)
		return
	}
	w.acked += int(n)
	for w.acked >= w.cwnd && w.cwnd < CwndMax {
		w.acked -= w.cwnd
		w.cwnd++
	}
}

// Cwnd returns the requester's congestion window in packets; for tests
// and diagnostics. Like every method that reads loop state, it must be
// called by the loop's owner.
func (q *QP) Cwnd() int { return q.req.cw.cwnd }

// SetCwnd turns the congestion window on (the default) or off. Off, the
// RC requester keeps only the fixed limits (MaxUnackedPSNs, max_rd_atomic)
// and never reduces what it has in flight; for comparison, and for paths
// known to be clean. Turning it either way starts it again at CwndInit.
// It must be called by the loop's owner.
func (q *QP) SetCwnd(on bool) {
	q.req.cw = initWindow()
	q.req.cw.off = !on
}

// lossSignal reduces the congestion window after a loss and counts it.
func (q *QP) lossSignal(timeout bool) {
	if !q.typ.Reliable() {
		return
	}
	if q.req.cw.lossSignal(q.req.maxPSN, timeout) {
		q.cnt[verbs.CntCwndReductions]++
	}
}
