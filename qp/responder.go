// Responder: executes arriving requests. For RC it checks the PSN (one
// sequence NAK per gap, duplicates re-ACKed or replayed from the responder
// resources), the opcode sequence, the QP's remote access flags, receive
// availability (RNR NAK), lengths and R_Keys, then places the data,
// completes receives and queues ACKs, READ responses and atomic ACKs in PSN
// order. UC drops damaged messages silently; UD checks nothing beyond the
// Q_Key (done in Receive) and fills the GRH space. Everything runs on the
// loop goroutine; transmission happens later, in Pump.

package qp

import (
	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// consumesRecv reports whether a request takes a receive work request: a
// SEND, or an RDMA WRITE with immediate.
func consumesRecv(info *bth.OpInfo) bool {
	return info.Op == bth.OpSend || info.Op == bth.OpWrite && info.Headers&bth.HdrImmDt != 0
}

const (
	resRead   = 1
	resAtomic = 2
	// resAtomicWrite remembers an ATOMIC_WRITE so that a duplicate is
	// answered again without storing again.
	resAtomicWrite = 3
)

// resource remembers a READ or atomic request so that a duplicate can be
// answered again (rdma_rxe's responder resources).
type resource struct {
	kind     uint8
	firstPSN bth.PSN
	lastPSN  bth.PSN
	va       uint64
	rkey     uint32
	length   uint32
	orig     uint64
	queued   int // responses of this request still in the response queue
}

type outKind uint8

const (
	outAck outKind = iota
	outAtomicAck
	outRead
)

// outEntry is a queued response.
type outEntry struct {
	kind  outKind
	res   int16 // READ and atomic ACK: index of the responder resource, or -1
	first bool  // READ: the next packet opens a response (FIRST or ONLY)
	syn   bth.Syndrome
	psn   bth.PSN
	msn   uint32
	orig  uint64
	va    uint64
	rkey  uint32
	resid uint32
	pd    *mr.PD // READ: the PD of its R_Key (an XRC target's changes with the SRQ)
}

// respQueueLen bounds the queued responses of one QP.
const respQueueLen = 512

// respQueueMin is the room a QP's response queue gets when it first
// queues a response; it doubles as needed up to respQueueLen. ACKs
// coalesce and READ and atomic responses are bounded by the responder
// resources, so most QPs never grow it, and QPs that never respond (UD,
// a pure requester) never allocate it.
const respQueueMin = 8

// outQueue is a ring of queued responses, owned by the loop.
type outQueue struct {
	e    []outEntry
	head int
	n    int
}

func (o *outQueue) empty() bool        { return o.n == 0 }
func (o *outQueue) front() *outEntry   { return &o.e[o.head] }
func (o *outQueue) at(i int) *outEntry { return &o.e[(o.head+i)%len(o.e)] }
func (o *outQueue) reset()             { o.head, o.n = 0, 0 }
func (o *outQueue) pop()               { o.head = (o.head + 1) % len(o.e); o.n-- }
func (o *outQueue) back() *outEntry    { return o.at(o.n - 1) }
func (o *outQueue) push(e *outEntry) bool {
	if o.n == len(o.e) {
		if o.n == respQueueLen {
			return false
		}
		o.grow()
	}
	*o.at(o.n) = *e
	o.n++
	return true
}

// grow doubles the queue's room, keeping its entries in order.
func (o *outQueue) grow() {
	e := make([]outEntry, min(max(2*len(o.e), respQueueMin), respQueueLen))
	for i := 0; i < o.n; i++ {
		e[i] = *o.at(i)
	}
	o.e, o.head = e, 0
}

// dropReads removes queued READ responses (the QP went to error).
func (o *outQueue) dropReads() {
	k := 0
	for i := 0; i < o.n; i++ {
		if e := o.at(i); e.kind != outRead {
			*o.at(k) = *e
			k++
		}
	}
	o.n = k
}

// popOut removes the front response and releases its claim on a
// responder resource.
func (q *QP) popOut() {
	rs := &q.resp
	if i := rs.out.front().res; i >= 0 && int(i) < len(rs.res) {
		r := &rs.res[i]
		if r.queued--; r.queued == 0 {
			rs.resBusy--
		}
	}
	rs.out.pop()
}

// claim records a queued response of resource i.
func (q *QP) claim(i int16) {
	rs := &q.resp
	r := &rs.res[i]
	if r.queued == 0 {
		rs.resBusy++
	}
	r.queued++
}

// releaseAll forgets every resource's queued responses (the queue was
// emptied or its READ responses dropped).
func (q *QP) releaseAll() {
	rs := &q.resp
	for i := range rs.res {
		rs.res[i].queued = 0
	}
	rs.resBusy = 0
	for i := 0; i < rs.out.n; i++ {
		if e := rs.out.at(i); e.res >= 0 && int(e.res) < len(rs.res) {
			q.claim(e.res)
		}
	}
}

// ResourcesFor returns the READ/atomic responder resources kept for a
// max_dest_rd_atomic of n: n rounded up to a power of two, as rdma_rxe
// does on both sides. An rxe requester set to 3 keeps 4 requests
// outstanding, and the duplicate of the oldest must still find its
// resource.
func ResourcesFor(n uint8) int {
	if n == 0 {
		return 0
	}
	k := 1
	for k < int(n) {
		k <<= 1
	}
	return k
}

type responder struct {
	psn bth.PSN // next expected PSN
	// ackPSN is one past the last SEND, WRITE or atomic packet executed. A
	// duplicate SEND or WRITE is acknowledged again with ackPSN-1, never
	// with the PSN of a READ that followed it: an rxe requester takes an
	// ACK naming a pending READ's last PSN as completing the READ, with
	// no data placed.
	ackPSN  bth.PSN
	msn     uint32
	inSend  bool // in the middle of a multi-packet SEND
	inWrite bool // in the middle of a multi-packet RDMA WRITE
	sentNak bool // a PSN sequence NAK was sent for the current gap
	dropMsg bool // UC: dropping the rest of a damaged message

	wva    uint64 // RDMA WRITE in progress: next address, key, bytes left, total
	wrkey  uint32
	wresid uint32
	wlen   uint32

	rwqe   *recvWQE // receive request being filled
	roff   uint32   // bytes placed into it
	rqWQE  recvWQE  // copy of the receive queue's oldest request
	srqWQE recvWQE  // copy of a request taken from the SRQ

	res     []resource
	resHead int
	resBusy int // resources with responses still queued
	out     outQueue
	grh     [verbs.GRHLen]byte
}

func (q *QP) resetResponder() {
	rs := &q.resp
	rs.msn = 0
	rs.inSend, rs.inWrite, rs.sentNak, rs.dropMsg = false, false, false, false
	rs.rwqe = nil
	rs.roff = 0
	for i := range rs.res {
		rs.res[i] = resource{}
	}
	rs.resHead = 0
	rs.resBusy = 0
	rs.out.reset()
}

// --- receive requests -----------------------------------------------------

// takeRecv makes sure a receive request is at hand: it takes the oldest
// one from the receive queue (or the SRQ), reading its slot once. A ring
// that broke the rules gives nothing, and the first time the QP's (or
// the SRQ's) catastrophic error event is raised for it.
func (q *QP) takeRecv() bool {
	rs := &q.resp
	if rs.rwqe != nil {
		return true
	}
	if q.srq != nil {
		ok, ev, fault := q.srq.take(&rs.srqWQE)
		if !ok {
			if fault && q.srq.rq.told.CompareAndSwap(false, true) {
				q.env.Event(verbs.EventSRQErr, nil, q.srq)
			}
			return false
		}
		rs.rwqe = &rs.srqWQE
		if ev {
			q.env.Event(verbs.EventSRQLimitReached, q, q.srq)
		}
	} else {
		if q.rq.ready() == 0 || !q.rq.load(&rs.rqWQE) {
			if q.rq.fault.Load() && q.rq.told.CompareAndSwap(false, true) {
				q.env.Event(verbs.EventQPFatal, q, nil)
			}
			return false
		}
		rs.rwqe = &rs.rqWQE
	}
	rs.roff = 0
	return true
}

// completeRecv retires the current receive request with wc.
func (q *QP) completeRecv(wc *verbs.WC, solicited bool) {
	rs := &q.resp
	wc.WRID = rs.rwqe.wrid
	wc.QPNum = q.qpn
	if q.srq == nil {
		q.rq.release()
	}
	rs.rwqe = nil
	rs.roff = 0
	if wc.Status == verbs.WCSuccess {
		q.cnt[verbs.CntRDMARecvs]++
	}
	q.pushRecv(wc, solicited)
}

// --- response queue -------------------------------------------------------

func (q *QP) queueAck(syn bth.Syndrome, psn bth.PSN) {
	rs := &q.resp
	o := &rs.out
	if syn == bth.SyndromeACKUnlimited && o.n > 0 {
		if t := o.back(); t.kind == outAck && t.syn == bth.SyndromeACKUnlimited {
			// ACK coalescing: one ACK for the latest PSN covers the
			// earlier; an ACK for an earlier PSN adds nothing to it.
			if psn.Diff(t.psn) >= 0 {
				t.psn, t.msn = psn, rs.msn
			}
			q.cnt[verbs.CntAckDeferred]++
			return
		}
	}
	if syn.IsNAK() {
		q.cnt[verbs.CntNAKSent]++
	}
	e := outEntry{kind: outAck, res: -1, syn: syn, psn: psn, msn: rs.msn}
	if !o.push(&e) {
		q.cnt[verbs.CntRespQueueFull]++
	}
}

func (q *QP) queueAtomicAck(res int16, psn bth.PSN, orig uint64) {
	e := outEntry{kind: outAtomicAck, res: res, syn: bth.SyndromeACKUnlimited, psn: psn, msn: q.resp.msn, orig: orig}
	if !q.resp.out.push(&e) {
		q.cnt[verbs.CntRespQueueFull]++
		return
	}
	q.claim(res)
}

func (q *QP) queueRead(res int16, psn bth.PSN, va uint64, rkey, n uint32, first bool) {
	e := outEntry{kind: outRead, res: res, first: first, psn: psn, msn: q.resp.msn, va: va, rkey: rkey, resid: n, pd: q.pd}
	if !q.resp.out.push(&e) {
		q.cnt[verbs.CntRespQueueFull]++
		return
	}
	q.claim(res)
}

// newResource takes the oldest resource whose responses have all been
// sent. The caller has checked that one is free (resBusy < len(res)).
func (q *QP) newResource(kind uint8, first, last bth.PSN) int16 {
	rs := &q.resp
	n := len(rs.res)
	i := rs.resHead
	for k := 0; k < n && rs.res[i].queued != 0; k++ {
		i = (i + 1) % n
	}
	rs.resHead = (i + 1) % n
	rs.res[i] = resource{kind: kind, firstPSN: first, lastPSN: last}
	return int16(i)
}

// findResource returns the index of the resource holding psn, or -1.
func (q *QP) findResource(kind uint8, psn bth.PSN) int16 {
	rs := &q.resp
	for i := range rs.res {
		r := &rs.res[i]
		if r.kind == kind && psn.Diff(r.firstPSN) >= 0 && psn.Diff(r.lastPSN) <= 0 {
			return int16(i)
		}
	}
	return -1
}

// nextMSN advances the message sequence number.
func (q *QP) nextMSN() { q.resp.msn = (q.resp.msn + 1) & bth.PSNMask }

// classC handles an RC request error of class C (rdma_rxe's
// do_class_ac_error): NAK the packet, complete the receive request in
// progress with status, and move the QP to the error state.
func (q *QP) classC(code uint8, status verbs.WCStatus, psn bth.PSN) {
	q.queueAck(bth.NAKSyndrome(code), psn)
	if q.resp.rwqe != nil {
		wc := verbs.WC{Status: status, Opcode: verbs.WCRecv}
		q.completeRecv(&wc, false)
	}
	q.toErr()
}

// --- RC -------------------------------------------------------------------

// fault is why the responder refuses an RC request, and so what it
// answers: every fault but faultRNR is class C (rdma_rxe's
// do_class_ac_error): a NAK, the receive in progress completed with an
// error, and the QP moved to the error state.
type fault uint8

const (
	faultNone      fault = iota
	faultInvalid         // invalid request NAK, REM_INV_REQ_ERR
	faultAccess          // remote access error NAK, REM_ACCESS_ERR
	faultLength          // invalid request NAK, LOC_LEN_ERR: the receive buffer is too small
	faultLocalProt       // remote operational error NAK, LOC_PROT_ERR: the receive buffer is bad
	faultRNR             // RNR NAK: no receive request posted; nothing fails
)

// refuse answers a request that failed with f.
func (q *QP) refuse(f fault, psn bth.PSN) {
	switch f {
	case faultRNR:
		q.cnt[verbs.CntSendRNRErr]++
		q.queueAck(bth.RNRSyndrome(q.attr.MinRNRTimer), psn)
	case faultAccess:
		q.classC(bth.NAKRemoteAccessError, verbs.WCRemAccessErr, psn)
	case faultLength:
		q.classC(bth.NAKInvalidRequest, verbs.WCLocLenErr, psn)
	case faultLocalProt:
		q.classC(bth.NAKRemoteOpError, verbs.WCLocProtErr, psn)
	default:
		q.classC(bth.NAKInvalidRequest, verbs.WCRemInvReqErr, psn)
	}
}

// rcRequest executes an RC request packet, in the order of rdma_rxe's
// responder: PSN, opcode sequence, opcode and QP access, resources,
// length, then the operation itself.
func (q *QP) rcRequest(pkt *bth.Packet) {
	if !q.checkPSN(pkt) {
		return
	}
	psn := pkt.BTH().PSN()
	if q.typ == verbs.QPTypeXRCRecv {
		if f := q.xrcTarget(pkt); f != faultNone {
			q.refuse(f, psn)
			return
		}
	}
	k := pkt.Info().Op
	pos := pkt.Info().Position
	f := q.checkOpSeq(k, pos)
	wr := verbs.WRInfoOfWire(pkt.Opcode)
	if f == faultNone {
		f = q.checkOpValid(wr)
	}
	if f == faultNone {
		f = q.checkResource(wr, pkt.Info())
	}
	if f == faultNone {
		f = q.checkLength(pos, uint32(pkt.PayLen))
	}
	if f == faultNone {
		switch wr.Class {
		case verbs.ClassWrite:
			f = q.executeWrite(pkt, pos)
		case verbs.ClassRead:
			f = q.executeRead(pkt)
			if f == faultNone {
				return // a READ completes nothing here and is not ACKed
			}
		case verbs.ClassAtomic:
			f = q.executeAtomic(pkt, k)
			if f == faultNone {
				return // answered by its atomic ACK
			}
		case verbs.ClassAtomicWrite:
			f = q.executeAtomicWrite(pkt)
			if f == faultNone {
				return // answered by its zero-length READ response
			}
		default:
			f = q.executeSend(pkt)
		}
	}
	if f != faultNone {
		q.refuse(f, psn)
		return
	}
	q.completeRequest(pkt, k, pos)
}

// xrcTarget makes the XRC SRQ a request names the one the XRC_RECV QP
// serves it from: its receive requests, its protection domain for memory
// operations, its CQ for completions. An SRQ of another domain, or none,
// is an invalid request, and so is a change of SRQ inside a message.
func (q *QP) xrcTarget(pkt *bth.Packet) fault {
	n := pkt.XRCETH().SRQN()
	if q.srq != nil && q.srq.num == n && !q.srq.closed.Load() {
		return faultNone
	}
	if q.resp.rwqe != nil || q.resp.inSend || q.resp.inWrite || q.findSRQ == nil {
		return faultInvalid
	}
	s := q.findSRQ(n)
	if s == nil || s.xrcd == nil || s.xrcd != q.xrcd || s.closed.Load() {
		q.cnt[verbs.CntRecvDropped]++
		return faultInvalid
	}
	if uint32(cap(q.resp.srqWQE.sgl)) < s.rq.maxSGE {
		q.resp.srqWQE.sgl = make([]mr.SGE, 0, s.rq.maxSGE)
	}
	q.srq, q.pd, q.rcq = s, s.pd, s.cq
	return faultNone
}

// checkPSN takes the packet's PSN: it reports true for the expected PSN.
// A PSN ahead gets one sequence NAK per gap; an older one is a duplicate,
// answered again.
func (q *QP) checkPSN(pkt *bth.Packet) bool {
	rs := &q.resp
	psn := pkt.BTH().PSN()
	if d := psn.Diff(rs.psn); d > 0 {
		if !rs.sentNak {
			rs.sentNak = true
			q.cnt[verbs.CntOutOfSeqRequest]++
			q.queueAck(bth.NAKSyndrome(bth.NAKPSNSeqError), rs.psn)
		}
		return false
	} else if d < 0 {
		q.cnt[verbs.CntDuplicateRequest]++
		q.duplicate(pkt, psn)
		return false
	}
	rs.sentNak = false
	return true
}

// checkOpSeq checks that the opcode may follow the previous packet: the
// middle and last packets of a message continue one of the same kind, and
// nothing else interrupts a message.
func (q *QP) checkOpSeq(k bth.Op, pos bth.Position) fault {
	rs := &q.resp
	cont := pos == bth.PosMiddle || pos == bth.PosLast
	switch {
	case rs.inSend:
		if k != bth.OpSend || !cont {
			return faultInvalid
		}
	case rs.inWrite:
		if k != bth.OpWrite || !cont {
			return faultInvalid
		}
	case cont:
		return faultInvalid
	}
	return faultNone
}

// checkOpValid checks that the QP allows the operation: an opcode that
// some work request of the table sends (wr, nil for any other), and the
// remote access its row requires among the QP's access flags.
func (q *QP) checkOpValid(wr *verbs.WROpInfo) fault {
	if wr == nil || q.attr.AccessFlags&wr.Remote != wr.Remote {
		return faultInvalid
	}
	return faultNone
}

// checkResource checks that the request has what it consumes: a
// responder resource (the table's RdAtomic), or a receive request.
func (q *QP) checkResource(wr *verbs.WROpInfo, info *bth.OpInfo) fault {
	rs := &q.resp
	if wr.RdAtomic && rs.resBusy >= len(rs.res) {
		// More READ/atomic requests outstanding than max_dest_rd_atomic
		// (rounded up) allows: the IBTA's invalid request NAK. Without
		// this check one packet could make the responder queue any
		// number of READs at once.
		q.cnt[verbs.CntRdAtomicExceeded]++
		return faultInvalid
	}
	if consumesRecv(info) && !q.takeRecv() {
		return faultRNR
	}
	return faultNone
}

// checkLength checks the payload against the path MTU: first and middle
// packets carry exactly one MTU, last packets 1 to MTU bytes.
func (q *QP) checkLength(pos bth.Position, pay uint32) fault {
	mtu := uint32(q.mtu)
	switch pos {
	case bth.PosOnly:
		if pay > mtu {
			return faultInvalid
		}
	case bth.PosFirst, bth.PosMiddle:
		if pay != mtu {
			return faultInvalid
		}
	case bth.PosLast:
		if pay == 0 || pay > mtu {
			return faultInvalid
		}
	}
	return faultNone
}

// executeWrite places one RDMA WRITE packet; the first packet's RETH is
// checked against the R_Key for the whole message.
func (q *QP) executeWrite(pkt *bth.Packet, pos bth.Position) fault {
	rs := &q.resp
	pay, mtu := uint32(pkt.PayLen), uint32(q.mtu)
	if pos == bth.PosFirst || pos == bth.PosOnly {
		reth := pkt.RETH()
		n := reth.DMALen()
		if n > MaxMsgSize {
			return faultInvalid
		}
		rs.wva, rs.wrkey, rs.wresid, rs.wlen = reth.VA(), reth.RKey(), n, n
		if n != 0 {
			if err := q.pd.CheckRemote(rs.wrkey, rs.wva, uint64(n), mr.AccessRemoteWrite); err != nil {
				return faultAccess
			}
		}
	}
	if rs.wresid > mtu {
		if pay != mtu || pkt.BTH().PadCnt() != 0 {
			return faultInvalid
		}
	} else if pay != rs.wresid || (pos != bth.PosLast && pos != bth.PosOnly) {
		return faultInvalid
	}
	if pay > 0 {
		if err := q.pd.WriteRemote(rs.wrkey, rs.wva, pkt.PayloadBytes()); err != nil {
			return faultAccess
		}
	}
	rs.wva += uint64(pay)
	rs.wresid -= pay
	return faultNone
}

// executeRead accepts an RDMA READ request: it takes a responder resource
// and queues the response, which Pump reads from memory as it sends.
func (q *QP) executeRead(pkt *bth.Packet) fault {
	rs := &q.resp
	psn := pkt.BTH().PSN()
	reth := pkt.RETH()
	va, rkey, n := reth.VA(), reth.RKey(), reth.DMALen()
	if n > MaxMsgSize {
		return faultInvalid
	}
	if n != 0 {
		if err := q.pd.CheckRemote(rkey, va, uint64(n), mr.AccessRemoteRead); err != nil {
			return faultAccess
		}
	}
	q.nextMSN() // C9-148: a READ counts when it is accepted
	mtu := uint32(q.mtu)
	npkts := max((n+mtu-1)/mtu, 1)
	i := q.newResource(resRead, psn, psn.Add(npkts-1))
	r := &rs.res[i]
	r.va, r.rkey, r.length = va, rkey, n
	q.queueRead(i, psn, va, rkey, n, true)
	rs.psn = psn.Add(npkts)
	rs.inSend, rs.inWrite = false, false
	return faultNone
}

// executeAtomic executes a COMPARE_SWAP or FETCH_ADD once and queues its
// atomic ACK; the original value is kept for a duplicate.
func (q *QP) executeAtomic(pkt *bth.Packet, k bth.Op) fault {
	rs := &q.resp
	psn := pkt.BTH().PSN()
	a := pkt.AtomicETH()
	va := a.VA()
	if va&7 != 0 {
		return faultInvalid
	}
	var orig uint64
	var err error
	if k == bth.OpCompareSwap {
		orig, err = q.pd.CompareSwap(a.RKey(), va, a.Compare(), a.SwapAdd())
	} else {
		orig, err = q.pd.FetchAdd(a.RKey(), va, a.SwapAdd())
	}
	if err != nil {
		return atomicFault(err)
	}
	q.nextMSN()
	i := q.newResource(resAtomic, psn, psn)
	rs.res[i].orig = orig
	q.queueAtomicAck(i, psn, orig)
	q.singleDone(psn)
	return faultNone
}

// atomicFault is the fault of an atomic memory operation that failed: a
// misaligned address is an invalid request, anything else an access error.
func atomicFault(err error) fault {
	if err == mr.ErrAlignment {
		return faultInvalid
	}
	return faultAccess
}

// singleDone moves the responder past a one-packet request it executed
// at psn (an atomic, an ATOMIC_WRITE): the next PSN, the PSN a duplicate
// SEND or WRITE is acknowledged with, no message in progress.
func (q *QP) singleDone(psn bth.PSN) {
	rs := &q.resp
	rs.psn = psn.Next()
	rs.ackPSN = rs.psn
	rs.inSend, rs.inWrite = false, false
}

// executeAtomicWrite stores an ATOMIC_WRITE's 8 bytes at once and queues
// its answer, a READ RESPONSE ONLY without payload (IBTA 1.5, as rdma_rxe
// answers it); the resource it takes answers a duplicate.
func (q *QP) executeAtomicWrite(pkt *bth.Packet) fault {
	psn := pkt.BTH().PSN()
	reth := pkt.RETH()
	if reth.DMALen() != uint32(pkt.PayLen) {
		return faultInvalid
	}
	if err := q.pd.AtomicWrite(reth.RKey(), reth.VA(), pkt.PayloadBytes()); err != nil {
		return atomicFault(err)
	}
	q.nextMSN()
	i := q.newResource(resAtomicWrite, psn, psn)
	q.queueRead(i, psn, 0, 0, 0, true)
	q.singleDone(psn)
	return faultNone
}

// executeSend scatters one SEND packet into the receive request.
func (q *QP) executeSend(pkt *bth.Packet) fault {
	rs := &q.resp
	pay := uint32(pkt.PayLen)
	if pay > 0 {
		if _, err := q.pd.Scatter(rs.rwqe.sgl, uint64(rs.roff), pkt.PayloadBytes()); err != nil {
			if err == mr.ErrLength {
				return faultLength
			}
			return faultLocalProt
		}
	}
	rs.roff += pay
	return faultNone
}

// completeRequest finishes a SEND or WRITE packet that was executed: the
// invalidation a SEND carries, the message and receive completion at its
// last packet, and the ACK its AckReq asks for.
func (q *QP) completeRequest(pkt *bth.Packet, k bth.Op, pos bth.Position) {
	rs := &q.resp
	b := pkt.BTH()
	psn := b.PSN()
	info := pkt.Info()
	last := pos == bth.PosLast || pos == bth.PosOnly
	var inv uint32
	if info.Headers&bth.HdrIETH != 0 {
		inv = pkt.IETH().RKey()
		if err := q.env.Invalidate(q.pd, inv); err != nil {
			q.invalidateFailed(psn, b.AckReq())
			return
		}
	}
	if last {
		q.nextMSN()
	}
	rs.psn = psn.Next()
	rs.ackPSN = rs.psn
	rs.inSend = k == bth.OpSend && !last
	rs.inWrite = k == bth.OpWrite && !last
	if last && consumesRecv(pkt.Info()) {
		wc := verbs.WC{Opcode: verbs.WCRecv, ByteLen: rs.roff}
		if k == bth.OpWrite {
			wc.Opcode = verbs.WCRecvRDMAWithImm
			wc.ByteLen = rs.wlen
		}
		if info.Headers&bth.HdrImmDt != 0 {
			wc.Flags |= verbs.WCWithImm
			wc.Imm = pkt.ImmDt().Value()
		}
		if info.Headers&bth.HdrIETH != 0 {
			wc.Flags |= verbs.WCWithInv
			wc.InvalidatedRKey = inv
		}
		if k == bth.OpSend {
			q.cnt[verbs.CntRDMASends]++
		}
		q.completeRecv(&wc, b.SE())
		if q.state == verbs.QPStateErr {
			return // the CQ overflowed
		}
	}
	if b.AckReq() {
		q.queueAck(bth.SyndromeACKUnlimited, psn)
	}
}

// duplicate answers a request with a PSN already taken: SEND and WRITE
// packets are acknowledged again, READs are served again from memory, and
// atomics return the saved original value without executing again.
func (q *QP) duplicate(pkt *bth.Packet, psn bth.PSN) {
	rs := &q.resp
	k := pkt.Info().Op
	switch {
	case k == bth.OpSend || k == bth.OpWrite:
		// The PSN of the last SEND, WRITE or atomic executed: never a
		// READ's, which would complete that READ at an rxe requester.
		q.queueAck(bth.SyndromeACKUnlimited, rs.ackPSN.Add(bth.PSNMask))
	case k == bth.OpReadRequest:
		// The requester asks again for READ responses it did not get:
		// the loss signal of the responses, which its congestion window
		// answers by asking for less at once.
		q.cnt[verbs.CntDupReadRequest]++
		i := q.findResource(resRead, psn)
		if i < 0 {
			q.cnt[verbs.CntDupNoResource]++
			return
		}
		r := &rs.res[i]
		reth := pkt.RETH()
		va, n := reth.VA(), uint64(reth.DMALen())
		if reth.RKey() != r.rkey || va < r.va || n > uint64(r.length) || va-r.va > uint64(r.length)-n {
			q.cnt[verbs.CntDupNoResource]++
			return
		}
		if r.queued > 0 {
			// Its responses are still queued: they answer this
			// duplicate too, and queueing them again would let a peer
			// multiply one READ.
			return
		}
		q.queueRead(i, psn, va, r.rkey, uint32(n), psn == r.firstPSN)
	case k == bth.OpAtomicWrite:
		i := q.findResource(resAtomicWrite, psn)
		if i < 0 {
			q.cnt[verbs.CntDupNoResource]++
			return
		}
		if rs.res[i].queued == 0 {
			q.queueRead(i, psn, 0, 0, 0, true)
		}
	case k.Atomic():
		i := q.findResource(resAtomic, psn)
		if i < 0 {
			q.cnt[verbs.CntDupNoResource]++
			return
		}
		if rs.res[i].queued > 0 {
			return
		}
		q.queueAtomicAck(i, psn, rs.res[i].orig)
	}
}

// pumpResp transmits queued responses.
func (q *QP) pumpResp(budget int) (int, bool) {
	o := &q.resp.out
	n := 0
	mtu := uint32(q.mtu)
	for n < budget && !o.empty() {
		e := o.front()
		h := &q.hdr
		*h = bth.Headers{}
		h.BTH.PKey = verbs.DefaultPKey
		h.BTH.DestQP = q.attr.DestQPN
		h.BTH.PSN = e.psn
		var payload uint32
		switch e.kind {
		case outAck:
			h.BTH.Opcode = bth.RCAcknowledge
			h.AETH = bth.AETHFields{Syndrome: e.syn, MSN: bth.MSN(e.msn)}
		case outAtomicAck:
			h.BTH.Opcode = bth.RCAtomicAcknowledge
			h.AETH = bth.AETHFields{Syndrome: bth.SyndromeACKUnlimited, MSN: bth.MSN(e.msn)}
			h.AtomicAck = e.orig
		case outRead:
			payload = min(e.resid, mtu)
			fits := e.resid <= mtu
			switch {
			case e.first && fits:
				h.BTH.Opcode = bth.RCReadResponseOnly
			case e.first:
				h.BTH.Opcode = bth.RCReadResponseFirst
			case fits:
				h.BTH.Opcode = bth.RCReadResponseLast
			default:
				h.BTH.Opcode = bth.RCReadResponseMiddle
			}
			if h.BTH.Opcode != bth.RCReadResponseMiddle {
				h.AETH = bth.AETHFields{Syndrome: bth.SyndromeACKUnlimited, MSN: bth.MSN(e.msn)}
			}
		}
		if q.typ == verbs.QPTypeXRCRecv {
			h.BTH.Opcode += xrcShift // the same responses under the XRC service bits
		}
		tl := h.TransportLen(int(payload))
		buf := q.env.Frame(&q.av, tl)
		if buf == nil {
			q.cnt[verbs.CntTxNoBuf]++
			return n, true
		}
		off, err := h.EncodeHeaders(buf, int(payload))
		if err == nil && payload > 0 {
			err = e.pd.ReadRemote(e.rkey, e.va, buf[off:off+int(payload)])
		}
		if err != nil {
			// The memory went away while the READ was being served.
			psn := e.psn
			q.popOut()
			q.classC(bth.NAKRemoteAccessError, verbs.WCRemAccessErr, psn)
			continue
		}
		q.env.Send(&q.av, q.qpn, buf[:tl])
		q.cnt[verbs.CntSentPkts]++
		n++
		if e.kind == outRead {
			e.va += uint64(payload)
			e.resid -= payload
			e.psn = e.psn.Next()
			e.first = false
			if e.resid == 0 {
				q.popOut()
			}
		} else {
			q.popOut()
		}
	}
	return n, false
}

// --- UC -------------------------------------------------------------------

// ucDrop abandons the UC message in progress; its receive request, if any,
// is reused for the next message.
func (q *QP) ucDrop() {
	rs := &q.resp
	rs.dropMsg = true
	rs.inSend, rs.inWrite = false, false
	rs.roff = 0
	q.cnt[verbs.CntRecvDropped]++
}

func (q *QP) ucRequest(pkt *bth.Packet) {
	rs := &q.resp
	b := pkt.BTH()
	psn := b.PSN()
	info := pkt.Info()
	k := pkt.Info().Op
	pos := info.Position
	start := pos == bth.PosFirst || pos == bth.PosOnly
	if rs.dropMsg || psn != rs.psn {
		if !start {
			if !rs.dropMsg {
				q.ucDrop()
			}
			return
		}
		rs.dropMsg = false
	}
	if start {
		if rs.inSend || rs.inWrite {
			// The last packets of the previous message were lost.
			q.cnt[verbs.CntRecvDropped]++
			rs.inSend, rs.inWrite = false, false
			rs.roff = 0
		}
	} else if !(rs.inSend && k == bth.OpSend || rs.inWrite && k == bth.OpWrite) {
		q.ucDrop()
		return
	}
	if wr := verbs.WRInfoOfWire(pkt.Opcode); wr == nil || q.attr.AccessFlags&wr.Remote != wr.Remote {
		q.ucDrop()
		return
	}
	if consumesRecv(pkt.Info()) && !q.takeRecv() {
		q.ucDrop()
		return
	}
	pay := uint32(pkt.PayLen)
	mtu := uint32(q.mtu)
	switch {
	case pos == bth.PosOnly && pay > mtu,
		(pos == bth.PosFirst || pos == bth.PosMiddle) && pay != mtu,
		pos == bth.PosLast && (pay == 0 || pay > mtu):
		q.ucDrop()
		return
	}
	if k == bth.OpWrite {
		if start {
			reth := pkt.RETH()
			n := reth.DMALen()
			rs.wva, rs.wrkey, rs.wresid, rs.wlen = reth.VA(), reth.RKey(), n, n
			if n > MaxMsgSize || (n != 0 && q.pd.CheckRemote(rs.wrkey, rs.wva, uint64(n), mr.AccessRemoteWrite) != nil) {
				q.ucDrop()
				return
			}
		}
		if (rs.wresid > mtu && pay != mtu) || (rs.wresid <= mtu && (pay != rs.wresid || (pos != bth.PosLast && pos != bth.PosOnly))) {
			q.ucDrop()
			return
		}
		if pay > 0 && q.pd.WriteRemote(rs.wrkey, rs.wva, pkt.PayloadBytes()) != nil {
			q.ucDrop()
			return
		}
		rs.wva += uint64(pay)
		rs.wresid -= pay
	} else if pay > 0 {
		if _, err := q.pd.Scatter(rs.rwqe.sgl, uint64(rs.roff), pkt.PayloadBytes()); err != nil {
			q.ucDrop()
			return
		}
		rs.roff += pay
	}
	last := pos == bth.PosLast || pos == bth.PosOnly
	rs.psn = psn.Next()
	rs.inSend = k == bth.OpSend && !last
	rs.inWrite = k == bth.OpWrite && !last
	if last {
		q.nextMSN()
		if consumesRecv(pkt.Info()) {
			wc := verbs.WC{Opcode: verbs.WCRecv, ByteLen: rs.roff}
			if k == bth.OpWrite {
				wc.Opcode = verbs.WCRecvRDMAWithImm
				wc.ByteLen = rs.wlen
			}
			if info.Headers&bth.HdrImmDt != 0 {
				wc.Flags |= verbs.WCWithImm
				wc.Imm = pkt.ImmDt().Value()
			}
			q.completeRecv(&wc, b.SE())
		}
	}
}

// --- UD -------------------------------------------------------------------

func (q *QP) udRequest(pkt *bth.Packet) {
	rs := &q.resp
	pay := pkt.PayLen
	if pay > q.portMTU.Bytes() || !q.takeRecv() {
		q.cnt[verbs.CntRecvDropped]++
		return
	}
	w := rs.rwqe
	if w.length < uint64(verbs.GRHLen+pay) {
		q.cnt[verbs.CntRecvDropped]++
		if q.srq != nil {
			wc := verbs.WC{Status: verbs.WCLocLenErr, Opcode: verbs.WCRecv}
			q.completeRecv(&wc, false)
		}
		return
	}
	// The GRH space: the IPv6 header, or for IPv4 (RoCEv2 over IPv4, as
	// rdma_rxe and hardware deliver it) 20 zero bytes then the IPv4 header.
	g := rs.grh[:]
	if pkt.IPv6 {
		copy(g, pkt.IPv6Header())
	} else {
		clear(g[:verbs.GRHLen-bth.IPv4MinLen])
		copy(g[verbs.GRHLen-bth.IPv4MinLen:], pkt.IPv4Header()[:bth.IPv4MinLen])
	}
	if _, err := q.pd.Scatter(w.sgl, 0, g); err == nil {
		_, err = q.pd.Scatter(w.sgl, verbs.GRHLen, pkt.PayloadBytes())
		if err != nil {
			g = nil
		}
	} else {
		g = nil
	}
	if g == nil {
		// A bad receive buffer: rdma_rxe treats it as class A and fails
		// the QP.
		wc := verbs.WC{Status: verbs.WCLocProtErr, Opcode: verbs.WCRecv}
		q.completeRecv(&wc, false)
		q.toErr()
		return
	}
	info := pkt.Info()
	wc := verbs.WC{Opcode: verbs.WCRecv, ByteLen: uint32(verbs.GRHLen + pay), Flags: verbs.WCGRH, SrcQP: pkt.DETH().SrcQP(),
		SL: verbs.WCSLRoCEv2IPv4}
	if pkt.IPv6 {
		wc.SL = verbs.WCSLRoCEv2IPv6
	}
	if info.Headers&bth.HdrImmDt != 0 {
		wc.Flags |= verbs.WCWithImm
		wc.Imm = pkt.ImmDt().Value()
	}
	q.cnt[verbs.CntRDMASends]++
	q.completeRecv(&wc, pkt.BTH().SE())
}
