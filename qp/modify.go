package qp

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
)

// atomicState publishes the QP state to posting goroutines.
type atomicState struct{ v atomic.Uint32 }

func (a *atomicState) load() State   { return State(a.v.Load()) }
func (a *atomicState) store(s State) { a.v.Store(uint32(s)) }

// ModifyError explains why Modify refused a change.
type ModifyError struct {
	From, To State
	Type     Type
	Missing  AttrMask // required attributes that were not given
	Extra    AttrMask // attributes the transition does not allow
	Reason   string   // a bad attribute value, or an illegal transition
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
	req   [5]AttrMask
	opt   [5]AttrMask
}

// perType builds a per-type mask array: ud applies to UD and GSI.
func perType(ud, uc, rc AttrMask) [5]AttrMask {
	var m [5]AttrMask
	m[TypeGSI], m[TypeUD], m[TypeUC], m[TypeRC] = ud, ud, uc, rc
	return m
}

// modifyTable is the verbs QP state machine (the kernel's qp_state_table
// for RC, UC, UD and GSI).
var modifyTable = func() (t [numStates][numStates]transition) {
	all := func(m AttrMask) [5]AttrMask { return perType(m, m, m) }
	for s := State(0); s < numStates; s++ {
		t[s][StateReset].valid = true
		if s != StateReset {
			t[s][StateErr].valid = true
		}
	}
	t[StateReset][StateInit] = transition{valid: true, req: perType(
		AttrPKeyIndex|AttrPort|AttrQKey,
		AttrPKeyIndex|AttrPort|AttrAccessFlags,
		AttrPKeyIndex|AttrPort|AttrAccessFlags)}
	t[StateReset][StateInit].req[TypeGSI] = AttrPKeyIndex | AttrQKey
	t[StateInit][StateInit] = transition{valid: true, opt: perType(
		AttrPKeyIndex|AttrPort|AttrQKey,
		AttrPKeyIndex|AttrPort|AttrAccessFlags,
		AttrPKeyIndex|AttrPort|AttrAccessFlags)}
	t[StateInit][StateInit].opt[TypeGSI] = AttrPKeyIndex | AttrQKey
	t[StateInit][StateRTR] = transition{valid: true,
		req: perType(0,
			AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN,
			AttrAV|AttrPathMTU|AttrDestQPN|AttrRQPSN|AttrMaxDestRdAtomic|AttrMinRNRTimer),
		opt: perType(AttrPKeyIndex|AttrQKey,
			AttrAltPath|AttrAccessFlags|AttrPKeyIndex,
			AttrAltPath|AttrAccessFlags|AttrPKeyIndex)}
	t[StateRTR][StateRTS] = transition{valid: true,
		req: perType(AttrSQPSN, AttrSQPSN,
			AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrSQPSN|AttrMaxQPRdAtomic),
		opt: perType(AttrCurState|AttrQKey,
			AttrCurState|AttrAltPath|AttrAccessFlags|AttrPathMigState,
			AttrCurState|AttrAltPath|AttrAccessFlags|AttrMinRNRTimer|AttrPathMigState)}
	t[StateRTS][StateRTS] = transition{valid: true, opt: perType(AttrCurState|AttrQKey,
		AttrCurState|AttrAccessFlags|AttrAltPath|AttrPathMigState,
		AttrCurState|AttrAccessFlags|AttrAltPath|AttrPathMigState|AttrMinRNRTimer)}
	t[StateRTS][StateSQD] = transition{valid: true, opt: all(AttrEnSQDAsyncNotify)}
	t[StateSQD][StateRTS] = transition{valid: true, opt: perType(AttrCurState|AttrQKey,
		AttrCurState|AttrAltPath|AttrAccessFlags|AttrPathMigState,
		AttrCurState|AttrAltPath|AttrAccessFlags|AttrMinRNRTimer|AttrPathMigState)}
	t[StateSQD][StateSQD] = transition{valid: true, opt: perType(AttrPKeyIndex|AttrQKey,
		AttrAV|AttrAltPath|AttrAccessFlags|AttrPKeyIndex|AttrPathMigState,
		AttrPort|AttrAV|AttrTimeout|AttrRetryCnt|AttrRNRRetry|AttrMaxQPRdAtomic|
			AttrMaxDestRdAtomic|AttrAltPath|AttrAccessFlags|AttrPKeyIndex|AttrMinRNRTimer|AttrPathMigState)}
	t[StateSQE][StateRTS] = transition{valid: true, opt: perType(AttrCurState|AttrQKey,
		AttrCurState|AttrAccessFlags, 0)}
	t[StateSQE][StateRTS].valid = true
	return t
}()

// Modify changes the QP's attributes and state (ibv_modify_qp). It checks
// the transition against the verbs state machine and the attribute values
// against the device limits, and applies nothing unless everything is
// acceptable. The loop goroutine, or a caller holding the device lock,
// calls it.
func (q *QP) Modify(attr *Attr, mask AttrMask) error {
	cur := q.state
	if mask&^attrAll != 0 {
		return &ModifyError{From: cur, To: cur, Type: q.typ, Reason: "unknown attribute mask bits " + mask.String()}
	}
	if mask&AttrCurState != 0 && attr.CurState != cur {
		return &ModifyError{From: cur, To: attr.State, Type: q.typ,
			Reason: fmt.Sprintf("cur_qp_state %v does not match the current state %v", attr.CurState, cur)}
	}
	next := cur
	if mask&AttrState != 0 {
		next = attr.State
		if next >= numStates {
			return &ModifyError{From: cur, To: next, Type: q.typ, Reason: "invalid target state"}
		}
	}
	tr := &modifyTable[cur][next]
	if !tr.valid || (q.typ == TypeRC && cur == StateSQE) {
		return &ModifyError{From: cur, To: next, Type: q.typ, Reason: "illegal state transition"}
	}
	req, opt := tr.req[q.typ], tr.opt[q.typ]
	given := mask &^ AttrState
	if miss := req &^ given; miss != 0 {
		return &ModifyError{From: cur, To: next, Type: q.typ, Missing: miss}
	}
	if extra := given &^ (req | opt); extra != 0 {
		return &ModifyError{From: cur, To: next, Type: q.typ, Extra: extra}
	}
	bad := func(f string, a ...any) error {
		return &ModifyError{From: cur, To: next, Type: q.typ, Reason: fmt.Sprintf(f, a...)}
	}
	if mask&AttrPort != 0 && attr.PortNum != 1 {
		return bad("port %d does not exist (only port 1)", attr.PortNum)
	}
	if mask&AttrPKeyIndex != 0 && attr.PKeyIndex != 0 {
		return bad("P_Key index %d out of range (the table holds only 0xffff)", attr.PKeyIndex)
	}
	if mask&AttrAccessFlags != 0 && attr.AccessFlags&^(mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteRead|mr.AccessRemoteAtomic) != 0 {
		return bad("unknown access flags %v", attr.AccessFlags)
	}
	if mask&AttrPathMTU != 0 {
		if !attr.PathMTU.Valid() {
			return bad("invalid path MTU %d", attr.PathMTU)
		}
		if attr.PathMTU > q.portMTU {
			return bad("path MTU %v above the port's active MTU %v", attr.PathMTU, q.portMTU)
		}
	}
	if mask&AttrTimeout != 0 && attr.Timeout > 31 {
		return bad("timeout %d above 31", attr.Timeout)
	}
	if mask&AttrRetryCnt != 0 && attr.RetryCnt > 7 {
		return bad("retry_cnt %d above 7", attr.RetryCnt)
	}
	if mask&AttrRNRRetry != 0 && attr.RNRRetry > 7 {
		return bad("rnr_retry %d above 7", attr.RNRRetry)
	}
	if mask&AttrMinRNRTimer != 0 && attr.MinRNRTimer > 31 {
		return bad("min_rnr_timer %d above 31", attr.MinRNRTimer)
	}
	if mask&AttrMaxQPRdAtomic != 0 && attr.MaxRdAtomic > MaxRdAtomic {
		return bad("max_rd_atomic %d above %d", attr.MaxRdAtomic, MaxRdAtomic)
	}
	if mask&AttrMaxDestRdAtomic != 0 && attr.MaxDestRdAtomic > MaxRdAtomic {
		return bad("max_dest_rd_atomic %d above %d", attr.MaxDestRdAtomic, MaxRdAtomic)
	}
	if mask&AttrRQPSN != 0 && !attr.RQPSN.Valid() {
		return bad("rq_psn %#x does not fit 24 bits", attr.RQPSN)
	}
	if mask&AttrSQPSN != 0 && !attr.SQPSN.Valid() {
		return bad("sq_psn %#x does not fit 24 bits", attr.SQPSN)
	}
	if mask&AttrDestQPN != 0 && !attr.DestQPN.Valid() {
		return bad("dest_qp_num %#x does not fit 24 bits", attr.DestQPN)
	}
	var ah AH
	if mask&AttrAV != 0 {
		if err := q.env.ResolveAH(&attr.AH, &ah); err != nil {
			return bad("address vector: %v", err)
		}
	}

	// Apply.
	a := &q.attr
	if mask&AttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&AttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&AttrPort != 0 {
		a.PortNum = attr.PortNum
	}
	if mask&AttrQKey != 0 {
		a.QKey = attr.QKey
		if q.typ != TypeGSI {
			q.qkey = attr.QKey
		}
	}
	if mask&AttrAV != 0 {
		a.AH = attr.AH
		q.av = ah
	}
	if mask&AttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
		if !q.typ.datagram() {
			q.mtu = attr.PathMTU.Bytes()
		}
	}
	if mask&AttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN
	}
	if mask&AttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN
		q.resp.psn = attr.RQPSN
		q.resp.ackPSN = attr.RQPSN
	}
	if mask&AttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
		q.resp.res = make([]resource, ResourcesFor(attr.MaxDestRdAtomic))
		q.resp.resHead, q.resp.resBusy = 0, 0
	}
	if mask&AttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&AttrTimeout != 0 {
		a.Timeout = attr.Timeout
		q.rto = 0
		if attr.Timeout != 0 {
			q.rto = 4096 * time.Nanosecond << attr.Timeout
		}
	}
	if mask&AttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
		q.req.retryLeft = attr.RetryCnt
	}
	if mask&AttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
		q.req.rnrLeft = attr.RNRRetry
	}
	if mask&AttrMaxQPRdAtomic != 0 {
		inUse := int(a.MaxRdAtomic) - q.req.rdAvail
		a.MaxRdAtomic = attr.MaxRdAtomic
		q.req.rdAvail = int(attr.MaxRdAtomic) - inUse
	}
	if mask&AttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN
		q.req.psn, q.req.compPSN, q.req.maxPSN = attr.SQPSN, attr.SQPSN, attr.SQPSN
	}
	if mask&AttrEnSQDAsyncNotify != 0 {
		a.EnSQDAsyncNotify = attr.EnSQDAsyncNotify
	}

	if next == cur {
		return nil
	}
	switch next {
	case StateReset:
		q.reset()
	case StateErr:
		q.toErr()
	case StateSQD:
		q.setState(StateSQD)
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
	q.setState(StateReset)
	r := &q.req
	prod := q.sq.prod.Load()
	for i := r.compIdx; i != prod; i++ {
		q.sq.at(i).hasRd = false
	}
	r.compIdx, r.reqIdx = prod, prod
	q.sq.cons.Store(prod)
	if q.srq == nil {
		q.rq.cons.Store(q.rq.prod.Load())
	}
	*r = requester{reqIdx: prod, compIdx: prod}
	q.attr.MaxRdAtomic, q.attr.MaxDestRdAtomic = 0, 0
	q.attr.SQDraining = false
	q.resp.res = nil
	q.resetResponder()
	q.resp.psn, q.resp.ackPSN = 0, 0
}

// Query returns the QP's attributes (ibv_query_qp).
func (q *QP) Query() Attr {
	a := q.attr
	a.State = q.state
	a.CurState = q.state
	a.SQPSN = q.req.psn
	a.RQPSN = q.resp.psn
	a.Cap = q.cap
	if q.typ == TypeGSI {
		a.QKey = GSIQKey
	}
	return a
}

// Outstanding returns the number of PSNs the requester has in flight and
// the next PSNs of the requester and responder; for tests and diagnostics.
func (q *QP) Outstanding() (inflight int32, sqPSN, rqPSN bth.PSN) {
	return int32(q.req.ahead(q.req.maxPSN)), q.req.psn, q.resp.psn
}
