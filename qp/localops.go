// Local operations: BIND_MW, REG_MR and LOCAL_INV work requests. They send
// no packets. As in rdma_rxe, the requester executes each one when it
// reaches it in the send queue: after the requests before it have been
// sent (and, with Fence, completed), before the requests after it are
// started. It is then done and completes, in order, once the requests
// before it have completed. A failed local operation stops the requester
// and fails the QP when it completes, as a request that failed locally
// does. The memory side of each operation is package mr's: PD.BindMW,
// PD.RegFast and PD.Invalidate, called with the QP's view of its PD.
//
// This file also holds the responder's handling of a SEND with invalidate
// whose R_Key may not be invalidated.

package qp

import (
	"errors"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// ErrLocalWR means a local operation (BIND_MW, REG_MR, LOCAL_INV) carries a
// scatter/gather list or inline data.
var ErrLocalWR = errors.New("qp: local operation with a scatter/gather list or inline data")

// checkLocalWR refuses a local operation that carries data when it is
// posted; other requests pass. Its operands are checked against the window
// or MR when it runs, and a failure completes it with an error.
func checkLocalWR(wr *verbs.SendWR) error {
	if i := wr.Opcode.Info(); i != nil && i.Payload == verbs.PayloadNone && (len(wr.SGL) != 0 || wr.InlineData != nil) {
		return ErrLocalWR
	}
	return nil
}

// localOp executes w, a local operation the requester has reached. On
// success w is done and the requester moves past it; on failure it
// completes with IBV_WC_MW_BIND_ERR (a binding) or IBV_WC_LOC_QP_OP_ERR (a
// registration or invalidation), as with rdma_rxe, and the requester stops
// at it.
func (q *QP) localOp(w *sendWQE) {
	r := &q.req
	var err error
	status := verbs.WCLocQPOpErr
	switch w.wr.Opcode {
	case verbs.WROpBindMW:
		status = verbs.WCMWBindErr
		err = q.pd.BindMW(w.wr.RKey, &w.wr.Bind)
	case verbs.WROpRegMR:
		err = q.pd.RegFast(w.wr.RKey, w.wr.RegAccess)
	case verbs.WROpLocalInv:
		err = q.pd.Invalidate(w.wr.InvalidateRKey, false)
	}
	// It holds no PSNs: its PSN range is empty and ends where the next
	// request starts, so that a requester rewound past it resumes there.
	w.started = true
	w.firstPSN, w.lastPSN = r.psn, r.psn.Add(bth.PSNMask)
	if err != nil {
		q.failWQE(w, status)
		return
	}
	w.state = wqeDone
	w.status = verbs.WCSuccess
	r.reqIdx++
}

// invalidateFailed ends an RC SEND with invalidate whose R_Key the QP may
// not invalidate (mr.ErrNotInvalidatable, or a key naming nothing), as
// rdma_rxe's responder does (its class J): the message was received and its
// data placed, so the packet is acknowledged like any other when it asks
// for an acknowledgement, with no NAK; the receive request completes with
// IBV_WC_REM_INV_REQ_ERR; the message sequence number does not advance;
// and the QP moves to the error state. The requester's SEND completes
// successfully.
func (q *QP) invalidateFailed(psn bth.PSN, ackReq bool) {
	if ackReq {
		q.queueAck(bth.SyndromeACKUnlimited, psn)
	}
	if q.resp.rwqe != nil {
		wc := verbs.WC{Status: verbs.WCRemInvReqErr, Opcode: verbs.WCRecv}
		q.completeRecv(&wc, false)
	}
	q.toErr()
}
