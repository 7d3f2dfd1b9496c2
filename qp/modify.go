package qp

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// atomicState publishes the QP state to posting goroutines.
type atomicState struct{ v atomic.Uint32 }

func (a *atomicState) load() verbs.QPState   { return verbs.QPState(a.v.Load()) }
func (a *atomicState) store(s verbs.QPState) { a.v.Store(uint32(s)) }

// ModifyError explains why Modify refused a change.
type ModifyError struct {
	From, To verbs.QPState
	Type     verbs.QPType
	Missing  verbs.QPAttrMask // required attributes that were not given
	Extra    verbs.QPAttrMask // attributes the transition does not allow
	Reason   string           // a bad attribute value, or an illegal transition
}

// Error describes the refused transition and the reason.
func (e *ModifyError) Error() string {
	s := fmt.Sprintf("qp: modify %v QP %v->%v: ", e.Type, e.From, e.To)
	switch {
	case e.Reason != "":
		s += e.Reason
	case e.Missing != 0:
		s += "missing required attributes " + e.Missing.String()
	default:
		s += "attributes not allowed in this transition: " + e.Extra.String()
	}
	return s
}

// transition lists the attributes a state transition requires and allows,
// per QP type (indexed by Type; GSI follows the kernel's table).
type transition struct {
	valid bool
	req   [numTypes]verbs.QPAttrMask
	opt   [numTypes]verbs.QPAttrMask
}

// numTypes is the size of a table indexed by QP type.
const numTypes = verbs.QPTypeXRCRecv + 1

// perType builds a per-type mask array: ud applies to UD and GSI, rc to RC
// and both halves of XRC (the kernel's table differs for XRC in three
// places, set after).
func perType(ud, uc, rc verbs.QPAttrMask) [numTypes]verbs.QPAttrMask {
	var m [numTypes]verbs.QPAttrMask
	m[verbs.QPTypeGSI], m[verbs.QPTypeUD], m[verbs.QPTypeUC], m[verbs.QPTypeRC] = ud, ud, uc, rc
	m[verbs.QPTypeXRCSend], m[verbs.QPTypeXRCRecv] = rc, rc
	return m
}

// modifyTable is the verbs QP state machine (the kernel's qp_state_table
// for RC, UC, UD and GSI).
var modifyTable = func() (t [numStates][numStates]transition) {
	all := func(m verbs.QPAttrMask) [numTypes]verbs.QPAttrMask { return perType(m, m, m) }
	for s := verbs.QPState(0); s < numStates; s++ {
		t[s][verbs.QPStateReset].valid = true
		if s != verbs.QPStateReset {
			t[s][verbs.QPStateErr].valid = true
		}
	}
	t[verbs.QPStateReset][verbs.QPStateInit] = transition{valid: true, req: perType(
		verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey,
		verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags,
		verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)}
	t[verbs.QPStateReset][verbs.QPStateInit].req[verbs.QPTypeGSI] = verbs.AttrPKeyIndex | verbs.AttrQKey
	t[verbs.QPStateInit][verbs.QPStateInit] = transition{valid: true, opt: perType(
		verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey,
		verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags,
		verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)}
	t[verbs.QPStateInit][verbs.QPStateInit].opt[verbs.QPTypeGSI] = verbs.AttrPKeyIndex | verbs.AttrQKey
	t[verbs.QPStateInit][verbs.QPStateRTR] = transition{valid: true,
		req: perType(0,
			verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN,
			verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer),
		opt: perType(verbs.AttrPKeyIndex|verbs.AttrQKey,
			verbs.AttrAltPath|verbs.AttrAccessFlags|verbs.AttrPKeyIndex,
			verbs.AttrAltPath|verbs.AttrAccessFlags|verbs.AttrPKeyIndex)}
	t[verbs.QPStateRTR][verbs.QPStateRTS] = transition{valid: true,
		req: perType(verbs.AttrSQPSN, verbs.AttrSQPSN,
			verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrSQPSN|verbs.AttrMaxQPRdAtomic),
		opt: perType(verbs.AttrCurState|verbs.AttrQKey,
			verbs.AttrCurState|verbs.AttrAltPath|verbs.AttrAccessFlags|verbs.AttrPathMigState,
			verbs.AttrCurState|verbs.AttrAltPath|verbs.AttrAccessFlags|verbs.AttrMinRNRTimer|verbs.AttrPathMigState)}
	t[verbs.QPStateRTS][verbs.QPStateRTS] = transition{valid: true, opt: perType(verbs.AttrCurState|verbs.AttrQKey,
		verbs.AttrCurState|verbs.AttrAccessFlags|verbs.AttrAltPath|verbs.AttrPathMigState,
		verbs.AttrCurState|verbs.AttrAccessFlags|verbs.AttrAltPath|verbs.AttrPathMigState|verbs.AttrMinRNRTimer)}
	t[verbs.QPStateRTS][verbs.QPStateSQD] = transition{valid: true, opt: all(verbs.AttrEnSQDAsyncNotify)}
	t[verbs.QPStateSQD][verbs.QPStateRTS] = transition{valid: true, opt: perType(verbs.AttrCurState|verbs.AttrQKey,
		verbs.AttrCurState|verbs.AttrAltPath|verbs.AttrAccessFlags|verbs.AttrPathMigState,
		verbs.AttrCurState|verbs.AttrAltPath|verbs.AttrAccessFlags|verbs.AttrMinRNRTimer|verbs.AttrPathMigState)}
	t[verbs.QPStateSQD][verbs.QPStateSQD] = transition{valid: true, opt: perType(verbs.AttrPKeyIndex|verbs.AttrQKey,
		verbs.AttrAV|verbs.AttrAltPath|verbs.AttrAccessFlags|verbs.AttrPKeyIndex|verbs.AttrPathMigState,
		verbs.AttrPort|verbs.AttrAV|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic|
			verbs.AttrMaxDestRdAtomic|verbs.AttrAltPath|verbs.AttrAccessFlags|verbs.AttrPKeyIndex|verbs.AttrMinRNRTimer|verbs.AttrPathMigState)}
	t[verbs.QPStateSQE][verbs.QPStateRTS] = transition{valid: true, opt: perType(verbs.AttrCurState|verbs.AttrQKey,
		verbs.AttrCurState|verbs.AttrAccessFlags, 0)}
	t[verbs.QPStateSQE][verbs.QPStateRTS].valid = true
	// XRC as the kernel's qp_state_table has it: an initiator's RESET->INIT
	// needs no access flags and its INIT->RTR none of the responder's
	// attributes; a target's RTR->RTS needs only the timeout and SQ PSN.
	reset2init := &t[verbs.QPStateReset][verbs.QPStateInit]
	reset2init.req[verbs.QPTypeXRCSend] = verbs.AttrPKeyIndex | verbs.AttrPort
	reset2init.opt[verbs.QPTypeXRCSend] = verbs.AttrAccessFlags
	init2rtr := &t[verbs.QPStateInit][verbs.QPStateRTR]
	init2rtr.req[verbs.QPTypeXRCSend] = verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN
	init2rtr.opt[verbs.QPTypeXRCSend] |= verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	rtr2rts := &t[verbs.QPStateRTR][verbs.QPStateRTS]
	rtr2rts.req[verbs.QPTypeXRCRecv] = verbs.AttrTimeout | verbs.AttrSQPSN
	rtr2rts.opt[verbs.QPTypeXRCRecv] |= verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	return t
}()

// Modify changes the QP's attributes and state (ibv_modify_qp). It checks
// the transition against the verbs state machine and the attribute values
// against the device limits, and applies nothing unless everything is
// acceptable. The loop goroutine, or a caller holding the device lock,
// calls it.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	cur := q.state
	if mask&^verbs.AttrAll != 0 {
		return &ModifyError{From: cur, To: cur, Type: q.typ, Reason: "unknown attribute mask bits " + mask.String()}
	}
	if mask&verbs.AttrCurState != 0 && attr.CurState != cur {
		return &ModifyError{From: cur, To: attr.State, Type: q.typ,
			Reason: fmt.Sprintf("cur_qp_state %v does not match the current state %v", attr.CurState, cur)}
	}
	next := cur
	if mask&verbs.AttrState != 0 {
		next = attr.State
		if next >= numStates {
			return &ModifyError{From: cur, To: next, Type: q.typ, Reason: "invalid target state"}
		}
	}
	tr := &modifyTable[cur][next]
	if !tr.valid || (q.typ.Reliable() && cur == verbs.QPStateSQE) {
		return &ModifyError{From: cur, To: next, Type: q.typ, Reason: "illegal state transition"}
	}
	req, opt := tr.req[q.typ], tr.opt[q.typ]
	given := mask &^ verbs.AttrState
	if miss := req &^ given; miss != 0 {
		return &ModifyError{From: cur, To: next, Type: q.typ, Missing: miss}
	}
	if extra := given &^ (req | opt); extra != 0 {
		return &ModifyError{From: cur, To: next, Type: q.typ, Extra: extra}
	}
	bad := func(f string, a ...any) error {
		return &ModifyError{From: cur, To: next, Type: q.typ, Reason: fmt.Sprintf(f, a...)}
	}
	if mask&verbs.AttrPort != 0 && attr.PortNum != 1 {
		return bad("port %d does not exist (only port 1)", attr.PortNum)
	}
	if mask&verbs.AttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return bad("P_Key index %d out of range (the table holds only 0xffff)", attr.PKeyIndex)
	}
	// The QP's access flags are taken as given, as rxe and the kernel take
	// them (a program may pass its MRs' flags, IBV_ACCESS_ON_DEMAND
	// included): only the remote ones mean anything to a responder.
	if mask&verbs.AttrPathMTU != 0 {
		if !attr.PathMTU.Valid() {
			return bad("invalid path MTU %d", attr.PathMTU)
		}
		if attr.PathMTU > q.portMTU {
			return bad("path MTU %v above the port's active MTU %v", attr.PathMTU, q.portMTU)
		}
	}
	if mask&verbs.AttrTimeout != 0 && attr.Timeout > 31 {
		return bad("timeout %d above 31", attr.Timeout)
	}
	if mask&verbs.AttrRetryCnt != 0 && attr.RetryCnt > 7 {
		return bad("retry_cnt %d above 7", attr.RetryCnt)
	}
	if mask&verbs.AttrRNRRetry != 0 && attr.RNRRetry > 7 {
		return bad("rnr_retry %d above 7", attr.RNRRetry)
	}
	if mask&verbs.AttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return bad("min_rnr_timer %d above 31", attr.MinRNRTimer)
	}
	if mask&verbs.AttrMaxQPRdAtomic != 0 && attr.MaxRdAtomic > MaxRdAtomic {
		return bad("max_rd_atomic %d above %d", attr.MaxRdAtomic, MaxRdAtomic)
	}
	if mask&verbs.AttrMaxDestRdAtomic != 0 && attr.MaxDestRdAtomic > MaxRdAtomic {
		return bad("max_dest_rd_atomic %d above %d", attr.MaxDestRdAtomic, MaxRdAtomic)
	}
	var ah verbs.AH
	if mask&verbs.AttrAV != 0 {
		if err := q.env.ResolveAH(&attr.AH, &ah); err != nil {
			return bad("address vector: %v", err)
		}
	}

	// Apply.
	a := &q.attr
	if mask&verbs.AttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&verbs.AttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&verbs.AttrPort != 0 {
		a.PortNum = attr.PortNum
	}
	if mask&verbs.AttrQKey != 0 {
		a.QKey = attr.QKey
		if q.typ != verbs.QPTypeGSI {
			q.qkey = attr.QKey
		}
	}
	if mask&verbs.AttrAV != 0 {
		a.AH = attr.AH
		q.av = ah
	}
	if mask&verbs.AttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
		if !datagram(q.typ) {
			q.mtu = attr.PathMTU.Bytes()
		}
	}
	// PSNs and the destination QP number are their low 24 bits, as
	// rdma_rxe takes them (ibv_modify_qp accepts any 32-bit value).
	if mask&verbs.AttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN & bth.QPNMask
	}
	if mask&verbs.AttrRQPSN != 0 {
		psn := attr.RQPSN & bth.PSNMask
		a.RQPSN = psn
		q.resp.psn = psn
		q.resp.ackPSN = psn
	}
	if mask&verbs.AttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
		q.resp.res = make([]resource, ResourcesFor(attr.MaxDestRdAtomic))
		q.resp.resHead, q.resp.resBusy = 0, 0
	}
	if mask&verbs.AttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&verbs.AttrTimeout != 0 {
		a.Timeout = attr.Timeout
		q.rto = 0
		if attr.Timeout != 0 {
			q.rto = 4096 * time.Nanosecond << attr.Timeout
		}
	}
	if mask&verbs.AttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
		q.req.retryLeft = attr.RetryCnt
	}
	if mask&verbs.AttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
		q.req.rnrLeft = attr.RNRRetry
	}
	if mask&verbs.AttrMaxQPRdAtomic != 0 {
		inUse := int(a.MaxRdAtomic) - q.req.rdAvail
		a.MaxRdAtomic = attr.MaxRdAtomic
		q.req.rdAvail = int(attr.MaxRdAtomic) - inUse
	}
	if mask&verbs.AttrSQPSN != 0 {
		psn := attr.SQPSN & bth.PSNMask
		a.SQPSN = psn
		q.req.psn, q.req.compPSN, q.req.maxPSN = psn, psn, psn
	}
	if mask&verbs.AttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}

	if next == cur {
		return nil
	}
	switch next {
	case verbs.QPStateReset:
		q.reset()
	case verbs.QPStateErr:
		q.toErr()
	case verbs.QPStateSQD:
		q.setState(verbs.QPStateSQD)
		a.SQDraining = true
		q.req.drainNotified = false
		q.checkDrained()
	default:
		q.setState(next)
	}
	return nil
}

// reset returns the QP to the RESET state: queues emptied without
// completions, sequence state cleared.
func (q *QP) reset() {
	q.setState(verbs.QPStateReset)
	r := &q.req
	prod := q.sqPull()
	for i := r.compIdx; i != prod; i++ {
		q.sq.at(i).hasRd = false
	}
	r.compIdx, r.reqIdx = prod, prod
	q.sq.setCons(prod)
	if q.srq == nil {
		q.rq.drop()
	}
	*r = requester{reqIdx: prod, compIdx: prod, cw: r.cw.reset()}
	q.attr.MaxRdAtomic, q.attr.MaxDestRdAtomic = 0, 0
	q.attr.SQDraining = false
	q.resp.res = nil
	q.resetResponder()
	q.resp.psn, q.resp.ackPSN = 0, 0
}

// Query returns the QP's attributes (ibv_query_qp).
func (q *QP) Query() verbs.QPAttr {
	a := q.attr
	a.State = q.state
	a.CurState = q.state
	a.SQPSN = q.req.psn
	a.RQPSN = q.resp.psn
	a.Cap = q.cap
	if q.typ == verbs.QPTypeGSI {
		a.QKey = verbs.GSIQKey
	}
	return a
}

// Outstanding returns the number of PSNs the requester has in flight and
// the next PSNs of the requester and responder; for tests and diagnostics.
func (q *QP) Outstanding() (inflight int32, sqPSN, rqPSN bth.PSN) {
	return int32(q.req.ahead(q.req.maxPSN)), q.req.psn, q.resp.psn
}
