// QPs as the application sees them. Control calls (Modify, Query,
// Destroy) take the QP's own lock, which its engine holds only while it
// handles one packet, timer or transmit turn of that QP, never across a
// batch; a change that the engine must act on rings the QP's doorbell; posting takes only the QP's own post lock
// (one per queue), copies the request into the qp package's ring and rings
// the device's doorbell, which wakes the loop.

package roce

import (
	"sync"
	"sync/atomic"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/verbs"
)

// QPInitAttr describes a QP to create (struct ibv_qp_init_attr).
type QPInitAttr struct {
	Type   verbs.QPType
	SendCQ *CQ
	RecvCQ *CQ
	SRQ    *SRQ
	Cap    verbs.QPCap
	// SigAll makes every send request generate a completion
	// (sq_sig_all).
	SigAll bool
	// XRCD is the domain of an XRC_RECV QP (set by XRCD.CreateQP).
	XRCD *XRCD
	// Context is free for the application.
	Context any
}

// QP is a queue pair (struct ibv_qp).
type QP struct {
	dev  *Device
	eng  *engine // the engine that runs it
	pd   *PD
	qp   *qp.QP
	init QPInitAttr

	sendMu   sync.Mutex
	recvMu   sync.Mutex
	doorbell atomic.Bool
	gone     atomic.Bool // destroyed, set under mu

	// mu is the QP lock: held around every call into qp, by the engine
	// and by control calls; cnt holds the QP's counters, under mu.
	mu  sync.Mutex
	cnt verbs.Counters

	// Loop state, under the engine lock.
	queued   bool
	heapIdx  int
	deadline monotime.Time

	liveIx int // place in the device's live list, under the device lock
	// mcGroups lists the multicast groups the QP is attached to, under
	// the device lock.
	mcGroups []bth.GID
}

// CreateQP creates a queue pair in the RESET state (ibv_create_qp). A
// TypeGSI QP gets QP number 1; other QPs get numbers from 17 up. Caps
// above the device's limits are refused (ErrInvalid) as rdma_rxe refuses
// them; the send queue's scatter list and inline data share one room, as
// on rdma_rxe, so the QP gets (and Query reports) the larger of the two in
// both: 1 SGE and no inline data give 16 bytes of inline, 64 bytes of
// inline and 1 SGE give 4 SGEs.
func (pd *PD) CreateQP(attr *QPInitAttr) (*QP, error) {
	d := pd.dev
	c := attr.Cap
	switch attr.Type {
	case verbs.QPTypeRC, verbs.QPTypeUC, verbs.QPTypeUD, verbs.QPTypeGSI, verbs.QPTypeXRCSend:
		if attr.XRCD != nil {
			return nil, ErrInvalid
		}
	case verbs.QPTypeXRCRecv:
		// No CQs, no SRQ, no send queue: its messages go to the XRC
		// SRQs of its domain.
		if attr.XRCD == nil || attr.XRCD.pd != pd || attr.SendCQ != nil || attr.RecvCQ != nil || attr.SRQ != nil {
			return nil, ErrInvalid
		}
		c = verbs.QPCap{}
	default:
		return nil, ErrInvalid
	}
	// An XRC initiator receives nothing: its receive CQ is optional.
	needRecvCQ := attr.Type != verbs.QPTypeXRCSend && attr.Type != verbs.QPTypeXRCRecv
	if attr.Type != verbs.QPTypeXRCRecv && (attr.SendCQ == nil || attr.SendCQ.dev != d) {
		return nil, ErrInvalid
	}
	if (needRecvCQ && attr.RecvCQ == nil) || (attr.RecvCQ != nil && attr.RecvCQ.dev != d) {
		return nil, ErrInvalid
	}
	if attr.Type == verbs.QPTypeXRCSend && attr.SRQ != nil {
		return nil, ErrInvalid
	}
	if c.MaxSendWR > MaxQPWR || c.MaxSendSGE > MaxSGE || c.MaxInlineData > MaxInlineData {
		return nil, ErrInvalid
	}
	if attr.SRQ == nil && (c.MaxRecvWR > MaxQPWR || c.MaxRecvSGE > MaxSGE) {
		return nil, ErrInvalid
	}
	if attr.SRQ != nil && attr.SRQ.pd != pd {
		return nil, ErrInvalid
	}
	c = sendRoom(c)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, ErrClosed
	}
	if pd.dead || (attr.SendCQ != nil && attr.SendCQ.dead) || (attr.RecvCQ != nil && attr.RecvCQ.dead) ||
		(attr.SRQ != nil && attr.SRQ.dead) || (attr.XRCD != nil && attr.XRCD.dead) {
		return nil, ErrDestroyed
	}
	var qpn bth.QPN
	if attr.Type == verbs.QPTypeGSI {
		if d.gsi.Load() != nil {
			return nil, ErrBusy
		}
		qpn = 1
	} else {
		if n := len(d.live) - d.gsiCount(); n == len(d.qps) {
			return nil, ErrNoResources
		}
		// Numbers are handed out cyclically, so that a number is not
		// reused soon after its QP is destroyed.
		for d.qps[d.nextQPN-firstQPN].Load() != nil {
			d.nextQPN++
			if d.nextQPN-firstQPN == len(d.qps) {
				d.nextQPN = firstQPN
			}
		}
		qpn = bth.QPN(d.nextQPN)
	}
	e := d.engineFor(qpn, attr.SRQ)
	if attr.XRCD != nil {
		e = attr.XRCD.eng // the one engine that consumes the domain's SRQs
	}
	q := &QP{dev: d, eng: e, pd: pd, init: *attr, heapIdx: -1}
	q.init.Cap = c
	cfg := &qp.Config{
		QPN: qpn, Type: attr.Type, PD: pd.pd.ForQP(), SendCQ: sink(attr.SendCQ), RecvCQ: sink(attr.RecvCQ),
		Cap: c, SigAll: attr.SigAll, PortMTU: d.portMTU, Env: (*env)(e), Counters: &q.cnt, Context: q,
		Tracing: &d.tracing,
	}
	if attr.XRCD != nil {
		cfg.XRCD, cfg.XRCSRQ = attr.XRCD.x, d.findXRCSRQ
		attr.XRCD.nobj++
	}
	if attr.SRQ != nil {
		cfg.SRQ = attr.SRQ.srq
		q.init.Cap.MaxRecvWR, q.init.Cap.MaxRecvSGE = 0, 0
	}
	q.qp = qp.New(cfg)
	if qpn == 1 {
		d.gsi.Store(q)
	} else {
		d.qps[int(qpn)-firstQPN].Store(q)
		d.nextQPN++
		if d.nextQPN-firstQPN == len(d.qps) {
			d.nextQPN = firstQPN
		}
	}
	q.liveIx = len(d.live)
	d.live = append(d.live, q)
	pd.nobj++
	if attr.SendCQ != nil {
		attr.SendCQ.nqp++
	}
	if attr.RecvCQ != nil {
		attr.RecvCQ.nqp++
	}
	if attr.SRQ != nil {
		attr.SRQ.nqp++
	}
	return q, nil
}

// sink is c as the completion sink of a QP, or no sink.
func sink(c *CQ) qp.CQ {
	if c == nil {
		return nil
	}
	return (*cqSink)(c)
}

// QPN returns the QP number.
func (q *QP) QPN() bth.QPN { return q.qp.QPN() }

// AttachRecvRing makes ring g the QP's receive queue: memory shared with
// another process (the daemon's client), initialized empty by the caller
// (ring.Init), which posts receives by writing it as the C library does.
// The engine then takes each request from the ring where it lies, reads
// it once, and releases its slot when the request completes; a ring that
// breaks the rules stops being read and the QP's EventQPFatal is raised
// (RecvRingFault says why). The QP must be in RESET with its own, empty,
// receive queue. The caller keeps g's memory mapped until Destroy.
func (q *QP) AttachRecvRing(g *ring.Ring[ring.RecvWQE]) error {
	if q.gone.Load() {
		return ErrDestroyed
	}
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.qp.State() != verbs.QPStateReset {
		return ErrInvalid
	}
	if err := q.qp.AttachRecvRing(g); err != nil {
		return ErrInvalid
	}
	return nil
}

// AttachSendRing makes ring g the QP's send queue: memory shared with
// another process (the daemon's client), initialized empty by the caller
// (ring.Init) with room in each slot for the QP's SGEs and inline data
// and no more entries than the QP's max_send_wr, which posts sends by
// writing it as the C library does. The engine takes each request from
// the ring where it lies, reads and checks it once, works from what it
// read (retransmissions included), and releases the slot when the
// request completes; a request it cannot execute completes with
// IBV_WC_LOC_QP_OP_ERR, a ring that breaks the rules stops being read and
// the QP's EventQPFatal is raised (SendRingFault says why). A UD QP finds
// a request's address handle by its number (ring.SendWQE.AH) through
// resolve. After it, PostSend fails: the ring's poster is the other
// process, which tells the engine with SendRung. The QP must be in RESET
// with an empty send queue. The caller keeps g's memory mapped until
// Destroy.
func (q *QP) AttachSendRing(g *ring.Ring[ring.SendWQE], resolve qp.AHResolver) error {
	if q.gone.Load() {
		return ErrDestroyed
	}
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.qp.AttachSendRing(g, resolve); err != nil {
		return ErrInvalid
	}
	return nil
}

// SendRung tells the engine that sends were written into the QP's ring
// (AttachSendRing): the doorbell of a QP, which the engine then serves as
// it serves one whose PostSend returned.
func (q *QP) SendRung() {
	if !q.gone.Load() {
		q.dev.ring(q)
	}
}

// SendRingFault reports whether the QP's send ring (AttachSendRing)
// broke the rules: a producer index beyond the ring's limit, or an entry
// with more SGEs or inline bytes than its slot or the QP takes.
func (q *QP) SendRingFault() bool { return q.qp.SendRingFault() }

// RecvPosted tells the engine that receives were written into the QP's
// ring (AttachRecvRing). Only a QP in the error state needs it, to flush
// them; the others find them when a message comes.
func (q *QP) RecvPosted() {
	if q.qp.State() == verbs.QPStateErr && !q.gone.Load() {
		q.dev.ringRecv(q)
	}
}

// RecvRingFault reports whether the QP's receive ring (AttachRecvRing)
// broke the rules: a producer index beyond the ring's limit, or an entry
// with more SGEs than the queue takes.
func (q *QP) RecvRingFault() bool { return q.qp.RecvRingFault() }

// SetStateWatch sets f, which is called with the QP's new state whenever
// it changes: by Modify, or by the device's loop (the error state after a
// remote error, a retry count used up, a flush). It runs on the goroutine
// that makes the change, with the QP's lock held, in the order of the
// changes; it must be quick and must not call into the QP. The daemon
// uses it to keep the state its clients read in shared memory current.
// nil removes it.
func (q *QP) SetStateWatch(f func(verbs.QPState)) { q.qp.SetStateWatch(f) }

// PD returns the protection domain of the QP.
func (q *QP) PD() *PD { return q.pd }

// Type returns the transport service.
func (q *QP) Type() verbs.QPType { return q.qp.Type() }

// SendQueueLen returns the number of send requests posted and not yet
// completed.
func (q *QP) SendQueueLen() uint32 { return q.qp.SendQueueLen() }

// State returns the current state; the answer may be stale.
func (q *QP) State() verbs.QPState { return q.qp.State() }

// Context returns the application's context from QPInitAttr.
func (q *QP) Context() any { return q.init.Context }

// Modify changes attributes and state (ibv_modify_qp). Errors are
// *qp.ModifyError values that name the transition and what is wrong.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	q.mu.Lock()
	if q.gone.Load() {
		q.mu.Unlock()
		return ErrDestroyed
	}
	err := q.qp.Modify(attr, mask)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	// The engine reschedules the QP: new timers, work to send.
	q.dev.ringRecv(q)
	return nil
}

// Query returns the QP's attributes and creation attributes
// (ibv_query_qp).
func (q *QP) Query() (verbs.QPAttr, QPInitAttr) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Query(), q.init
}

// PostSend posts one send work request (ibv_post_send). The request is
// copied; wr and its SGL may be reused when PostSend returns.
func (q *QP) PostSend(wr *verbs.SendWR) error {
	if q.gone.Load() {
		return ErrDestroyed
	}
	var t monotime.Time
	tracing := q.dev.tracing.Load()
	if tracing {
		// The loop may send the request before it is reported: the
		// event carries the time of the post.
		t = q.dev.clock.Now()
	}
	q.sendMu.Lock()
	err := q.qp.PostSend(wr)
	q.sendMu.Unlock()
	if err == nil {
		if tracing {
			q.tracePost(wr, t)
		}
		q.dev.ring(q)
	}
	return err
}

// PostSendList posts work requests in order and returns how many were
// posted; on error, wrs[n] is the request that was refused.
func (q *QP) PostSendList(wrs []verbs.SendWR) (int, error) {
	if q.gone.Load() {
		return 0, ErrDestroyed
	}
	var t monotime.Time
	tracing := q.dev.tracing.Load()
	if tracing {
		t = q.dev.clock.Now()
	}
	q.sendMu.Lock()
	n := 0
	var err error
	for i := range wrs {
		if err = q.qp.PostSend(&wrs[i]); err != nil {
			break
		}
		n++
	}
	q.sendMu.Unlock()
	if n > 0 && tracing {
		for i := range wrs[:n] {
			q.tracePost(&wrs[i], t)
		}
	}
	if n > 0 {
		q.dev.ring(q)
	}
	return n, err
}

// MWBindWR is a binding of a type 1 memory window, for QP.BindMW (struct
// ibv_mw_bind).
type MWBindWR struct {
	WRID  uint64
	Flags verbs.SendFlags // Signaled, Fence
	Bind  mr.MWBind
}

// BindMW binds a type 1 memory window (ibv_bind_mw): it posts a
// verbs.WROpBindMW work request that binds w to b.Bind.Length bytes at b.Bind.Addr of the
// MR whose local key is b.Bind.LKey, with the remote rights b.Bind.Access
// (a zero length unbinds the window), and returns the rkey the window gets
// when the request executes: the window's index bits and a key byte from
// crypto/rand. The request completes with verbs.WCBindMW, or with
// verbs.WCMWBindErr if the binding is refused, which also moves the QP to
// the error state. Type 2 windows are bound by posting verbs.WROpBindMW
// with PostSend.
func (q *QP) BindMW(w *mr.MW, b *MWBindWR) (uint32, error) {
	if w == nil || w.Type() != mr.MWType1 {
		return 0, ErrInvalid
	}
	key := w.NewKey()
	err := q.PostSend(&verbs.SendWR{WRID: b.WRID, Opcode: verbs.WROpBindMW, Flags: b.Flags, RKey: key, Bind: b.Bind})
	return key, err
}

// PostRecv posts one receive work request (ibv_post_recv).
func (q *QP) PostRecv(wr *verbs.RecvWR) error {
	if q.gone.Load() {
		return ErrDestroyed
	}
	q.recvMu.Lock()
	err := q.qp.PostRecv(wr)
	q.recvMu.Unlock()
	if err == nil {
		if q.dev.tracing.Load() {
			q.traceRecv(wr)
		}
		q.dev.ringRecv(q)
	}
	return err
}

// PostRecvList posts receive work requests in order and returns how many
// were posted.
func (q *QP) PostRecvList(wrs []verbs.RecvWR) (int, error) {
	if q.gone.Load() {
		return 0, ErrDestroyed
	}
	q.recvMu.Lock()
	n := 0
	var err error
	for i := range wrs {
		if err = q.qp.PostRecv(&wrs[i]); err != nil {
			break
		}
		n++
	}
	q.recvMu.Unlock()
	if n > 0 && q.dev.tracing.Load() {
		for i := range wrs[:n] {
			q.traceRecv(&wrs[i])
		}
	}
	if n > 0 {
		q.dev.ringRecv(q)
	}
	return n, err
}

// maxSendPostedSteps bounds the pump passes of SendPosted.
const maxSendPostedSteps = 64

// SendPosted transmits, once, the work requests posted on the QP so far,
// whatever the engine mode, as a NIC sends what it was handed before the
// QP is destroyed (the daemon calls it before Destroy: a program may post
// unsignaled sends and destroy the QP at once). It waits for the engine's
// lock; frames the link has no room for stay in the engine's batch, which
// goes out with its next step. Requests that would wait for the peer (a
// full window, an RNR wait) are not sent.
func (q *QP) SendPosted() {
	e := q.eng
	e.mu.Lock()
	defer e.mu.Unlock()
	if q.dev.closed.Load() || q.gone.Load() {
		return
	}
	now := q.dev.clock.Now()
	e.doorbells()
	for i := 0; i < maxSendPostedSteps && q.queued && e.pump(now, false); i++ {
	}
	e.flushTx()
}

// QueueBytes returns the memory the engine holds for the QP's work queues
// (qp.QP.QueueBytes), for callers that budget memory.
func (q *QP) QueueBytes() int { return q.qp.QueueBytes() }

// Destroy destroys the QP (ibv_destroy_qp). Outstanding work requests are
// discarded without completions, as in verbs; packets that arrive for the
// QP afterwards are dropped as addressed to an unknown QP. A QP attached to
// multicast groups is not destroyed: ErrBusy (EBUSY, as rxe), until
// DetachMcast or DetachAllMcast.
func (q *QP) Destroy() error {
	d := q.dev
	d.mu.Lock()
	defer d.mu.Unlock()
	q.mu.Lock()
	if q.gone.Load() {
		q.mu.Unlock()
		return ErrDestroyed
	}
	if len(q.mcGroups) > 0 {
		// As with rxe (IBA o10-2.2.3): detach first.
		q.mu.Unlock()
		return ErrBusy
	}
	q.gone.Store(true)
	// The device keeps the counts of its destroyed QPs.
	for i, v := range q.cnt {
		d.cnt[i] += v
	}
	q.mu.Unlock()
	// The engine drops the QP from its timers and run queue.
	d.ringRecv(q)
	if n := q.qp.QPN(); n == 1 {
		d.gsi.Store(nil)
	} else {
		d.qps[int(n)-firstQPN].Store(nil)
	}
	last := d.live[len(d.live)-1]
	d.live[q.liveIx], last.liveIx = last, q.liveIx
	d.live[len(d.live)-1] = nil
	d.live = d.live[:len(d.live)-1]
	q.pd.nobj--
	if q.init.SendCQ != nil {
		q.init.SendCQ.nqp--
	}
	if q.init.RecvCQ != nil {
		q.init.RecvCQ.nqp--
	}
	if q.init.SRQ != nil {
		q.init.SRQ.nqp--
	}
	if q.init.XRCD != nil {
		q.init.XRCD.nobj--
	}
	return nil
}

// SRQ is a shared receive queue (struct ibv_srq).
type SRQ struct {
	dev  *Device
	eng  *engine // the engine of the QPs that use it
	pd   *PD
	srq  *qp.SRQ
	mu   sync.Mutex
	nqp  int
	dead bool
	// An XRC SRQ's domain and CQ (nil for an SRQ of QPs).
	xrcd *XRCD
	cq   *CQ
	// Context is free for the application.
	Context any
}

// CreateSRQ creates a shared receive queue for maxWR requests of up to
// maxSGE elements (ibv_create_srq). limit arms the limit event at once
// (0: not armed).
func (pd *PD) CreateSRQ(maxWR, maxSGE, limit uint32) (*SRQ, error) {
	d := pd.dev
	if maxWR == 0 || maxWR > MaxSRQWR || maxSGE > MaxSGE || limit > maxWR {
		return nil, ErrInvalid
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed.Load() {
		return nil, ErrClosed
	}
	s := &SRQ{dev: d, eng: d.eng[d.nsrq%len(d.eng)], pd: pd, srq: qp.NewSRQ(maxWR, maxSGE)}
	d.nsrq++
	s.srq.Context = s
	s.srq.Arm(limit)
	pd.nobj++
	return s, nil
}

// AttachRing makes ring g the SRQ's queue, as QP.AttachRecvRing does for
// a QP's: the engine takes requests from g where they lie; a ring that
// breaks the rules stops being read and EventSRQErr is raised (RingFault).
// The SRQ must be empty; the caller keeps g's memory mapped until Destroy
// or a ResizeRing that replaces it.
func (s *SRQ) AttachRing(g *ring.Ring[ring.RecvWQE]) error {
	s.eng.mu.Lock()
	defer s.eng.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.srq.AttachRing(g); err != nil {
		return ErrInvalid
	}
	return nil
}

// RingFault reports whether the SRQ's ring (AttachRing) broke the rules.
func (s *SRQ) RingFault() bool { return s.srq.RingFault() }

// ResizeRing is Resize for an SRQ whose queue is a ring shared with
// another process: the requests that wait are copied into g (initialized
// empty, of maxWR entries), which becomes the queue. The old ring's
// memory may go once it returns.
func (s *SRQ) ResizeRing(g *ring.Ring[ring.RecvWQE]) error {
	return s.resize(g.Limit(), func() *ring.Ring[ring.RecvWQE] { return g })
}

// PostRecv posts a receive work request to the SRQ (ibv_post_srq_recv).
func (s *SRQ) PostRecv(wr *verbs.RecvWR) error {
	s.mu.Lock()
	err := s.srq.PostRecv(wr)
	s.mu.Unlock()
	return err
}

// Arm sets the SRQ limit (ibv_modify_srq with IBV_SRQ_LIMIT): when fewer
// than limit requests remain, an EventSRQLimitReached event is posted once.
func (s *SRQ) Arm(limit uint32) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if limit > s.srq.MaxWR() {
		return ErrInvalid
	}
	s.srq.Arm(limit)
	return nil
}

// Resize changes the capacity of the SRQ to maxWR requests (ibv_modify_srq
// with IBV_SRQ_MAX_WR), keeping the requests posted and not yet taken, in
// order. As with rdma_rxe it fails with ErrInvalid if maxWR is 0 or above
// MaxSRQWR, below the armed limit, or below the number of requests
// posted; and with ErrDestroyed after Destroy. The engine of the SRQ's QPs
// waits meanwhile.
func (s *SRQ) Resize(maxWR uint32) error {
	return s.resize(maxWR, func() *ring.Ring[ring.RecvWQE] { return s.srq.NewRing(maxWR) })
}

// resize moves the SRQ to the ring newRing makes, of maxWR entries, with
// Resize's checks.
func (s *SRQ) resize(maxWR uint32, newRing func() *ring.Ring[ring.RecvWQE]) error {
	if maxWR == 0 || maxWR > MaxSRQWR {
		return ErrInvalid
	}
	if s.dev.destroyed(&s.dead) {
		return ErrDestroyed
	}
	// The new storage is made before the locks: the engine stops only for
	// the copy. The engine lock keeps the QPs from taking requests, the
	// SRQ's lock keeps posters out.
	g := newRing()
	s.eng.mu.Lock()
	defer s.eng.mu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if l := s.srq.Limit(); l != 0 && maxWR < l {
		return ErrInvalid
	}
	if err := s.srq.ResizeTo(g); err != nil {
		return ErrInvalid
	}
	return nil
}

// Query returns the capacity, the armed limit and the number of requests
// waiting (ibv_query_srq).
func (s *SRQ) Query() (maxWR, limit, posted uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srq.MaxWR(), s.srq.Limit(), s.srq.Len()
}

// QueueBytes returns the memory the engine holds for the SRQ's requests.
func (s *SRQ) QueueBytes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.srq.QueueBytes()
}

// Destroy destroys the SRQ (ibv_destroy_srq); it fails with ErrBusy while
// QPs use it.
func (s *SRQ) Destroy() error {
	d := s.dev
	fence := false
	defer func() {
		// An XRC SRQ is found by number by any engine's XRC targets,
		// which check that it is not closed under their engine's lock:
		// once every engine has been through that lock, none reads its
		// ring again, and the ring's memory (a daemon's client's) may
		// go.
		if fence {
			for _, e := range d.eng {
				e.mu.Lock()
				e.mu.Unlock() //nolint:staticcheck // a fence, not a critical section
			}
		}
	}()
	d.mu.Lock()
	defer d.mu.Unlock()
	if s.dead {
		return ErrDestroyed
	}
	if s.nqp > 0 {
		return ErrBusy
	}
	s.dead = true
	s.pd.nobj--
	if s.xrcd != nil {
		d.xrcSRQs.Delete(s.srq.Num())
		s.srq.Close()
		fence = true
		s.xrcd.nobj--
		s.cq.nqp--
	}
	return nil
}

// Outstanding reports the requester's PSNs in flight and the next PSNs of
// the requester and responder, for diagnostics.
func (q *QP) Outstanding() (inflight int32, sqPSN, rqPSN bth.PSN) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.qp.Outstanding()
}

// sgeBytes is the room one scatter entry takes in rdma_rxe's send queue
// entry (struct ib_sge).
const sgeBytes = 16

// sendRoom returns c with MaxSendSGE and MaxInlineData both as large as
// the room the larger of them needs, as rdma_rxe's rxe_qp_init_req sizes
// and reports them (at most MaxSGE and MaxInlineData when c is within the
// limits).
func sendRoom(c verbs.QPCap) verbs.QPCap {
	room := max(c.MaxSendSGE*sgeBytes, c.MaxInlineData)
	c.MaxSendSGE, c.MaxInlineData = room/sgeBytes, room
	return c
}
