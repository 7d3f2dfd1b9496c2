// QP core. The device loop goroutine owns a QP: it delivers arriving
// packets (Receive), lets it transmit (Pump), fires its timers (OnTimer)
// and modifies it (Modify). Application goroutines only post work requests
// (PostSend, PostRecv), which touch the work queue rings and immutable
// configuration, never the state below. Time is always an argument.

package qp

import (
	"encoding/binary"
	"sync/atomic"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	sring "github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/verbs"
)

// Protocol constants.
const (
	// MaxUnackedPSNs bounds the PSNs an RC requester has outstanding: it
	// waits while its next PSN is more than this many ahead of the oldest
	// unacknowledged one. rdma_rxe's bound is 128; sroce's is four times
	// that, because what bounds a requester's speed on a path with a long
	// round trip is what it keeps in flight, and its congestion window
	// (cwnd.go) halves what it keeps in flight when the path loses
	// packets. Between two one-vCPU guests (docs/performance.md) 512
	// moved 64 KiB WRITEs from 1.31 to 1.65 times rdma_rxe's bandwidth
	// and 64 KiB READs from 0.89 to 1.05 (medians of five alternating
	// rounds, the two builds side by side).
	MaxUnackedPSNs = 512
	// MaxUnackedBytes bounds the payload those PSNs may carry: at a path
	// MTU of 4096 the requester keeps at most 128 PSNs outstanding, as
	// rdma_rxe does (512 KiB), at 2048 256, at 1024 and below 512. What
	// is outstanding waits in the queues of the path and the peer; at
	// 512 PSNs of 4 KiB (2 MiB) on a veth moving about 130 MB/s the
	// oldest packet's ACK came back 16 ms after it left, as late as the
	// retransmit timer of timeout 12 (16.8 ms), which then fired on a
	// clean link.
	MaxUnackedBytes = 512 << 10
	// MaxPktPerAck: a requester sets AckReq on the last packet of every
	// message and after this many packets without it, as rdma_rxe does.
	MaxPktPerAck = 64
	// MaxRdAtomic is the largest max_rd_atomic and max_dest_rd_atomic
	// (rdma_rxe's too).
	MaxRdAtomic = 128
)

// Env is the QP's view of the device that drives it.
type Env interface {
	// Frame returns a buffer of n bytes for a transport packet (BTH to
	// ICRC) to be sent toward ah, or nil if no transmit buffer is free.
	Frame(ah *verbs.AH, n int) []byte
	// Send transmits the packet built in the buffer Frame returned last.
	// src is the sending QP, which fixes the UDP source port.
	Send(ah *verbs.AH, src bth.QPN, pkt []byte)
	// ResolveAH fills in ah from attr: the source address from the GID
	// table and the Ethernet, IP and UDP headers.
	ResolveAH(attr *verbs.AHAttr, ah *verbs.AH) error
	// Invalidate invalidates rkey for a SEND with invalidate received by a
	// QP of pd.
	Invalidate(pd *mr.PD, rkey uint32) error
	// Event reports an asynchronous event about q or srq.
	Event(t verbs.EventType, q *QP, srq *SRQ)
}

// CQ receives completions.
type CQ interface {
	// Push appends wc; it reports false if the queue is full, in which
	// case the completion is lost. solicited is set for receive
	// completions of messages with the solicited event bit. wc is passed
	// by value so that completing work allocates nothing.
	Push(wc verbs.WC, solicited bool) bool
}

// Config describes a QP to create (struct ibv_qp_init_attr plus what the
// device supplies).
type Config struct {
	QPN    bth.QPN
	Type   verbs.QPType
	PD     *mr.PD
	SendCQ CQ
	RecvCQ CQ
	SRQ    *SRQ // receive requests come from here instead of the QP's own queue
	// XRCD is an XRC_RECV QP's domain, and XRCSRQ finds an XRC SRQ by
	// number (the device's table): each request names the SRQ of the
	// domain that receives it.
	XRCD     *XRCD
	XRCSRQ   func(num uint32) *SRQ
	Cap      verbs.QPCap
	SigAll   bool      // every send request completes, Signaled or not
	PortMTU  verbs.MTU // active MTU of the port: the UD message limit and path MTU bound
	Env      Env
	Counters *verbs.Counters
	Context  any // free for the device's use
	// Tracing, when not nil, says whether someone listens to the QP's
	// timers, retries and state changes; while it is set the QP reports
	// them to Env, which must then implement Tracer.
	Tracing *atomic.Bool
}

// QP is one queue pair's transport state machines: requester, completer and
// responder.
type QP struct {
	qpn     bth.QPN
	typ     verbs.QPType
	pd      *mr.PD
	scq     CQ
	rcq     CQ
	srq     *SRQ
	xrcd    *XRCD
	findSRQ func(uint32) *SRQ
	cap     verbs.QPCap
	sigAll  bool
	portMTU verbs.MTU
	env     Env
	cnt     *verbs.Counters
	// Context is free for the device's use.
	Context any

	pubState atomicState // state as seen by posters
	sq       sendQueue
	rq       recvRing

	// Loop-owned state.
	state verbs.QPState
	attr  verbs.QPAttr
	mtu   int // path MTU in bytes
	av    verbs.AH
	qkey  uint32
	rto   time.Duration // retransmit timeout, 0 if disabled
	hdr   bth.Headers   // scratch for building packets

	req  requester
	resp responder

	traceOn *atomic.Bool // Config.Tracing
	tracer  Tracer

	stateWatch atomic.Pointer[func(verbs.QPState)] // SetStateWatch
}

// AttachRecvRing makes ring g, freshly initialized and empty, the QP's
// receive queue in place of its own: the memory a daemon shares with its
// client, from which the loop then takes requests where the client wrote
// them (read once each, when taken). The QP must have its own receive
// queue and hold no request; the caller keeps the loop and posters away.
func (q *QP) AttachRecvRing(g *sring.Ring[sring.RecvWQE]) error {
	if q.srq != nil || q.rq.r == nil {
		return ErrHasSRQ
	}
	return q.rq.attach(g)
}

// AttachSendRing makes ring g, freshly initialized and empty, the QP's
// send queue in place of its own: memory shared with another process
// (the daemon's client), which posts by writing it as the C library
// does. The loop then takes each request from g where it lies, reads it
// once and checks it then (a request the QP cannot execute completes with
// IBV_WC_LOC_QP_OP_ERR), and releases its slot when it completes. A ring
// that breaks the rules stops being read and EventQPFatal is raised
// (SendRingFault). A UD QP finds its requests' address handles through
// resolve. The QP must be in RESET with an empty send queue; the poster
// of g is the other process (PostSend fails with ErrPostState).
func (q *QP) AttachSendRing(g *sring.Ring[sring.SendWQE], resolve AHResolver) error {
	if q.state != verbs.QPStateReset {
		return ErrPostState
	}
	return q.sq.attach(g, q.typ, resolve)
}

// SendRingFault reports whether the QP's attached send ring broke the
// rules (a producer index beyond the limit, an entry with more SGEs or
// inline bytes than its slot or the QP takes): nothing is taken from it
// any more, and the loop raised EventQPFatal for it.
func (q *QP) SendRingFault() bool { return q.sq.fault.Load() }

// sqPull takes what the poster published on the send ring since the loop
// last looked and returns the end of the requests taken, raising
// EventQPFatal once for a ring that broke the rules.
func (q *QP) sqPull() uint32 {
	from := q.sq.prod
	p := q.sq.pull(q.typ)
	if p != from && q.sq.attached && q.tracing() {
		for i := from; i != p; i++ {
			w := q.sq.at(i)
			q.trace(Trace{Kind: TracePosted, WRID: w.wr.WRID, Opcode: w.wr.Opcode, Length: w.length})
		}
	}
	if q.sq.fault.Load() && q.sq.told.CompareAndSwap(false, true) {
		q.env.Event(verbs.EventQPFatal, q, nil)
	}
	return p
}

// RecvRingFault reports whether the QP's receive ring broke the rules (a
// producer index beyond the limit, an entry with more SGEs than the
// queue takes): nothing is taken from it any more, and the loop raised
// EventQPFatal for it.
func (q *QP) RecvRingFault() bool { return q.rq.r != nil && q.rq.fault.Load() }

// New creates a QP in the RESET state.
func New(c *Config) *QP {
	q := &QP{
		qpn: c.QPN, typ: c.Type, pd: c.PD, scq: c.SendCQ, rcq: c.RecvCQ, srq: c.SRQ, xrcd: c.XRCD, findSRQ: c.XRCSRQ,
		cap: c.Cap, sigAll: c.SigAll, portMTU: c.PortMTU, env: c.Env, cnt: c.Counters,
		Context: c.Context,
	}
	if q.cnt == nil {
		q.cnt = new(verbs.Counters)
	}
	q.traceSetup(c)
	if q.typ == verbs.QPTypeGSI {
		q.qkey = verbs.GSIQKey
	}
	q.sq.initSend(max(c.Cap.MaxSendWR, 1), c.Cap.MaxSendSGE, c.Cap.MaxInlineData, datagram(c.Type))
	if c.SRQ == nil {
		q.rq.initRecv(max(c.Cap.MaxRecvWR, 1), c.Cap.MaxRecvSGE)
		q.resp.rqWQE.sgl = make([]mr.SGE, 0, c.Cap.MaxRecvSGE)
	}
	if c.Type == verbs.QPTypeXRCRecv {
		q.cap.MaxRecvWR = 0 // its receives come from the XRC SRQs
	}
	if c.SRQ != nil {
		q.resp.srqWQE.sgl = make([]mr.SGE, 0, c.SRQ.rq.maxSGE)
	}
	q.attr.PortNum = 1
	q.attr.Cap = c.Cap
	q.mtu = c.PortMTU.Bytes()
	q.attr.PathMTU = c.PortMTU
	q.reset()
	return q
}

// QPN returns the QP number.
func (q *QP) QPN() bth.QPN { return q.qpn }

// Type returns the transport type.
func (q *QP) Type() verbs.QPType { return q.typ }

// PD returns the protection domain.
func (q *QP) PD() *mr.PD { return q.pd }

// SRQ returns the shared receive queue, or nil.
func (q *QP) SRQ() *SRQ { return q.srq }

// State returns the current state. It may be called from any goroutine;
// the answer may be stale.
func (q *QP) State() verbs.QPState { return q.pubState.load() }

// AH returns the QP's resolved primary path (RC and UC).
func (q *QP) AH() *verbs.AH { return &q.av }

func (q *QP) setState(s verbs.QPState) {
	if q.tracing() && s != q.state {
		q.trace(Trace{Kind: TraceState, From: q.state, To: s})
	}
	changed := s != q.state
	q.state = s
	q.attr.State = s
	q.pubState.store(s)
	if f := q.stateWatch.Load(); f != nil && changed {
		(*f)(s)
	}
}

// SetStateWatch sets f, which the QP calls with its new state whenever the
// state changes, whoever changes it (a modify, or the loop: the error state
// after a NAK or a retry count used up). It runs where the change is made,
// under the caller's serialization of the QP, so calls come in the order
// of the changes; it must be quick and must not call back into the QP.
// nil removes it.
func (q *QP) SetStateWatch(f func(verbs.QPState)) {
	if f == nil {
		q.stateWatch.Store(nil)
		return
	}
	q.stateWatch.Store(&f)
}

// --- Posting ---------------------------------------------------------------

// CheckSendWR reports what is wrong with wr as a request for a QP of type
// typ with capacities cap, as PostSend does before it queues anything: the
// opcode for the QP type, the SGE count, the message and inline sizes, an
// atomic's buffer and alignment, a local operation's fields, a UD
// request's address handle. A process that queues requests for a QP of
// another process (the daemon's clients) checks them with it so that a
// post is refused exactly when the engine would refuse it.
func CheckSendWR(typ verbs.QPType, cap *verbs.QPCap, wr *verbs.SendWR) error {
	if uint32(len(wr.SGL)) > cap.MaxSendSGE && !(wr.Flags&verbs.Inline != 0 && wr.InlineData != nil) {
		return ErrTooManySGE
	}
	info := wr.Opcode.Info()
	if info == nil || !info.Types.Has(typ) {
		return ErrOpcode
	}
	if datagram(typ) && wr.AH == nil {
		return ErrNoAH
	}
	if typ == verbs.QPTypeXRCSend && wr.RemoteSRQN > bth.PSNMask {
		return ErrXRCSRQ
	}
	if err := checkLocalWR(wr); err != nil {
		return err
	}
	total, inline := sendSize(wr)
	if total > MaxMsgSize {
		return ErrMsgTooBig
	}
	// An 8-byte operand is held by the request itself (rxe's WQE holds an
	// ATOMIC_WRITE's value too), whatever max_inline_data.
	if inline && total > uint64(cap.MaxInlineData) && info.Payload != verbs.PayloadAtomic8 {
		return ErrInlineTooBig
	}
	if info.Payload == verbs.PayloadAtomic8 && (total != 8 || wr.RemoteAddr&7 != 0) {
		return ErrAtomicWR
	}
	return nil
}

// sendSize returns wr's message length and whether its data is inline.
func sendSize(wr *verbs.SendWR) (total uint64, inline bool) {
	inline = wr.Flags&verbs.Inline != 0 && wr.Opcode.Info() != nil && wr.Opcode.Info().Inline
	if inline && wr.InlineData != nil {
		return uint64(len(wr.InlineData)), true
	}
	for i := range wr.SGL {
		total += uint64(wr.SGL[i].Length)
	}
	return total, inline
}

// PostSend validates wr and queues it (ibv_post_send for one request). It
// may be called from any goroutine, but calls for one QP must be
// serialized by the caller. Errors name what is wrong with the request;
// requests whose problems show only when executed (bad lkey, remote
// errors) complete with an error status instead.
func (q *QP) PostSend(wr *verbs.SendWR) error {
	switch q.pubState.load() {
	case verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE, verbs.QPStateErr:
	default:
		return ErrPostState
	}
	if q.sq.attached {
		return ErrPostState // the ring's poster is another process
	}
	if err := CheckSendWR(q.typ, &q.cap, wr); err != nil {
		return err
	}
	total, inline := sendSize(wr)
	return q.sq.post(q.typ, q.pd, wr, total, inline)
}

// PostRecv validates wr and queues it on the QP's receive queue
// (ibv_post_recv for one request). The same rules as for PostSend apply.
func (q *QP) PostRecv(wr *verbs.RecvWR) error {
	if q.srq != nil {
		return ErrHasSRQ
	}
	if q.pubState.load() == verbs.QPStateReset {
		return ErrPostState
	}
	return q.rq.post(wr)
}

// SendQueueLen returns the number of send requests posted and not yet
// completed.
func (q *QP) SendQueueLen() uint32 { return q.sq.count() }

// RecvQueueLen returns the number of receive requests posted and not yet
// completed.
func (q *QP) RecvQueueLen() uint32 {
	if q.srq != nil {
		return 0
	}
	return q.rq.count()
}

// --- Driving -----------------------------------------------------------------

// Pump lets the QP transmit: pending responses first (ACKs, NAKs, READ
// responses), then requests. It sends at most budget packets and reports
// how many it sent and whether it stopped with more to send (budget
// exhausted or no transmit buffer). It also completes work that needs no
// packets: flushing requests posted to a QP in the error state, and
// completions of UD and UC sends.
func (q *QP) Pump(now monotime.Time, budget int) (sent int, more bool) {
	return q.PumpLimit(now, budget, budget)
}

// PumpLimit is Pump sending at most reqBudget request packets (new or
// retransmitted) within budget; responses may use all of budget. A device
// whose receive side is behind passes 0, so that it answers its peers
// without starting requests whose acknowledgements it could not read in
// time.
func (q *QP) PumpLimit(now monotime.Time, budget, reqBudget int) (sent int, more bool) {
	switch q.state {
	case verbs.QPStateErr:
		q.flush()
	case verbs.QPStateSQE:
		q.toSQE() // requests posted in SQE are flushed
	}
	n, blocked := q.pumpResp(budget)
	sent += n
	if blocked {
		return sent, true
	}
	if q.state == verbs.QPStateErr {
		q.flush() // a failed READ response may have moved the QP to error
		return sent, false
	}
	n, blocked = q.pumpSend(now, min(budget-sent, reqBudget))
	sent += n
	q.completeSends()
	return sent, blocked || (sent >= budget && q.HasWork())
}

// HasWork reports whether Pump has something to do now.
func (q *QP) HasWork() bool {
	// The send ring is looked at in every state: requests are taken
	// (read and checked) as soon as the engine hears of them, and a
	// ring that broke the rules is found at once.
	prod := q.sqPull()
	if !q.resp.out.empty() {
		return true
	}
	switch q.state {
	case verbs.QPStateErr:
		return prod != q.req.compIdx || (q.srq == nil && q.rq.count() != 0)
	case verbs.QPStateSQE:
		return prod != q.req.compIdx
	}
	return q.hasSendWork()
}

func (q *QP) hasSendWork() bool {
	if q.state != verbs.QPStateRTS && q.state != verbs.QPStateSQD {
		return false
	}
	return q.req.reqIdx != q.sqPull() && !q.req.waitRNR
}

// NextDeadline returns the earliest time OnTimer has work to do, if any.
func (q *QP) NextDeadline() (monotime.Time, bool) {
	r := &q.req
	switch {
	case r.retransArmed && r.waitRNR:
		return min(r.retransAt, r.rnrAt), true
	case r.retransArmed:
		return r.retransAt, true
	case r.waitRNR:
		return r.rnrAt, true
	}
	return 0, false
}

// OnTimer fires the timers that expired at or before now.
func (q *QP) OnTimer(now monotime.Time) {
	r := &q.req
	if r.waitRNR && now >= r.rnrAt {
		r.waitRNR = false
		if q.tracing() {
			q.trace(Trace{Kind: TraceTimerFired, Timer: TimerRNR})
		}
		if q.state == verbs.QPStateRTS || q.state == verbs.QPStateSQD {
			q.goBack()
		}
	}
	if r.retransArmed && now >= r.retransAt {
		r.retransArmed = false
		if q.tracing() {
			q.trace(Trace{Kind: TraceTimerFired, Timer: TimerRetransmit})
		}
		if (q.state == verbs.QPStateRTS || q.state == verbs.QPStateSQD) && q.outstanding() {
			q.cnt[verbs.CntTimeouts]++
			q.errorRetry(now, RetryTimeout)
			if q.state != verbs.QPStateErr && q.outstanding() && !r.retransArmed {
				q.armRetrans(now)
			}
		}
	}
	q.completeSends()
}

// Receive handles an arriving packet addressed to this QP. The device has
// checked the frame, its ICRC and the destination QPN. Packets the QP does
// not accept are dropped and counted.
func (q *QP) Receive(now monotime.Time, pkt *bth.Packet) {
	info := pkt.Info()
	var want bth.Service
	switch q.typ {
	case verbs.QPTypeRC:
		want = bth.ServiceRC
	case verbs.QPTypeUC:
		want = bth.ServiceUC
	case verbs.QPTypeXRCSend, verbs.QPTypeXRCRecv:
		want = bth.ServiceXRC
	default:
		want = bth.ServiceUD
	}
	if info.Service != want {
		q.cnt[verbs.CntWrongType]++
		return
	}
	if info.Request {
		switch q.state {
		case verbs.QPStateRTR, verbs.QPStateRTS, verbs.QPStateSQD, verbs.QPStateSQE:
		default:
			q.cnt[verbs.CntWrongState]++
			return
		}
	} else if q.state != verbs.QPStateRTS && q.state != verbs.QPStateSQD {
		q.cnt[verbs.CntWrongState]++
		return
	}
	b := pkt.BTH()
	if b.PKey()&0x7fff != verbs.DefaultPKey&0x7fff {
		q.cnt[verbs.CntBadPKey]++
		return
	}
	if datagram(q.typ) {
		if pkt.DETH().QKey() != q.qkey {
			q.cnt[verbs.CntBadQKey]++
			return
		}
	} else if pkt.SrcAddr() != q.av.Encap.Dst || pkt.DstAddr() != q.av.Encap.Src {
		q.cnt[verbs.CntBadAddr]++
		return
	}
	q.cnt[verbs.CntRcvdPkts]++
	// An XRC initiator only sends requests, a target only answers them.
	if info.Request && q.typ == verbs.QPTypeXRCSend || !info.Request && q.typ == verbs.QPTypeXRCRecv {
		q.cnt[verbs.CntWrongType]++
		return
	}
	if info.Request {
		switch q.typ {
		case verbs.QPTypeRC, verbs.QPTypeXRCRecv:
			q.rcRequest(pkt)
		case verbs.QPTypeUC:
			q.ucRequest(pkt)
		default:
			q.udRequest(pkt)
		}
	} else {
		q.response(now, pkt)
	}
}

// --- Errors and flushing -----------------------------------------------------

// toErr moves the QP to the error state and flushes its queues.
func (q *QP) toErr() {
	if q.state == verbs.QPStateErr {
		return
	}
	q.setState(verbs.QPStateErr)
	q.req.retransArmed = false
	q.req.waitRNR = false
	q.resp.out.dropReads()
	q.releaseAll()
	q.flush()
}

// flush completes every outstanding work request with WR_FLUSH_ERR.
func (q *QP) flush() {
	r := &q.req
	prod := q.sqPull()
	for r.compIdx != prod {
		w := q.sq.at(r.compIdx)
		wc := verbs.WC{WRID: w.wr.WRID, Status: verbs.WCWRFlushErr, Opcode: w.wr.Opcode.WCOpcode(), QPNum: q.qpn}
		if w.state == wqeError {
			wc.Status = w.status
		}
		q.pushSend(&wc)
		w.hasRd = false
		r.compIdx++
	}
	r.reqIdx = r.compIdx
	q.sq.setCons(r.compIdx)
	rs := &q.resp
	if q.srq != nil {
		if rs.rwqe != nil {
			wc := verbs.WC{WRID: rs.rwqe.wrid, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.qpn}
			q.pushRecv(&wc, false)
		}
	} else {
		for n := q.rq.ready(); n > 0; n-- {
			wc := verbs.WC{WRID: q.rq.wridAt(), Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPNum: q.qpn}
			q.rq.release()
			q.pushRecv(&wc, false)
		}
	}
	rs.rwqe = nil
}

func (q *QP) pushSend(wc *verbs.WC) {
	if !q.scq.Push(*wc, false) {
		q.cnt[verbs.CntCQOverflow]++
		if q.state != verbs.QPStateErr {
			q.toErr()
		}
	}
}

func (q *QP) pushRecv(wc *verbs.WC, solicited bool) {
	if q.rcq == nil {
		return // an XRC_RECV QP that has served no SRQ yet
	}
	if !q.rcq.Push(*wc, solicited) {
		q.cnt[verbs.CntCQOverflow]++
		if q.state != verbs.QPStateErr {
			q.toErr()
		}
	}
}

// putHostU64 stores v in host byte order, as verbs returns atomic results.
func putHostU64(b []byte, v uint64) { binary.NativeEndian.PutUint64(b, v) }
