// Work queues: the handoff between application goroutines, which post work
// requests, and the device loop goroutine, which executes them.
//
// Both kinds of queue are rings of package ring (the layout of
// sroce_ring.h, the one the drop-in library shares with the daemon), so
// the loop consumes a queue the same way whether this process posted to
// it or another process did: it loads the producer index once per look,
// bounded by the limit, reads each entry once when it takes it, and keeps
// what it read (and, for sends, its execution state) in storage of its
// own beside the ring. Posters must be serialized by the caller (the
// device holds a mutex per queue); the loop never waits for a poster. A
// slot goes back to the poster when the loop is done with it: a receive
// when it is taken, a send when it has completed. Nothing is allocated
// per request, and no slot holds a Go pointer.

package qp

import (
	"errors"
	"sync/atomic"
	"unsafe"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	sring "github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/verbs"
)

// Errors returned when a work request is refused at post time.
var (
	ErrQueueFull    = errors.New("qp: work queue full")
	ErrTooManySGE   = errors.New("qp: too many scatter/gather elements")
	ErrInlineTooBig = errors.New("qp: inline data larger than max_inline_data")
	ErrMsgTooBig    = errors.New("qp: message longer than 2^31 bytes")
	ErrOpcode       = errors.New("qp: opcode not supported on this QP type")
	ErrPostState    = errors.New("qp: QP state does not accept this work request")
	ErrNoAH         = errors.New("qp: UD send without an address handle")
	ErrXRCSRQ       = errors.New("qp: XRC send with a remote SRQ number of more than 24 bits")
	ErrAtomicWR     = errors.New("qp: atomic needs one 8-byte buffer and an 8-byte aligned remote address")
	ErrHasSRQ       = errors.New("qp: QP uses a shared receive queue")
	ErrInlineGather = errors.New("qp: inline data could not be gathered from the SGL")
	ErrRingFault    = errors.New("qp: the receive ring broke the rules (producer index or SGE count)")
)

// MaxMsgSize is the largest message a work request may carry, as with
// rdma_rxe (max_msg_sz).
const MaxMsgSize = 1 << 31

type wqeState uint8

const (
	wqePosted  wqeState = iota // not started, or rewound for a retry
	wqeSending                 // some packets sent
	wqePending                 // all packets sent, waiting for the ACK or response
	wqeDone                    // finished; its completion is generated in order
	wqeError                   // failed; status says why
)

// sendWR is what a send queue slot keeps of a verbs.SendWR: every field
// but the SGL, the inline data and the address handle, which live in
// per-QP arrays indexed by the slot (see sendQueue), so a slot holds no
// Go pointers.
type sendWR struct {
	WRID           uint64
	RemoteAddr     uint64
	CompareAdd     uint64
	Swap           uint64
	Bind           mr.MWBind
	Flags          verbs.SendFlags
	Imm            uint32
	InvalidateRKey uint32
	RKey           uint32
	RegAccess      mr.Access
	RemoteQPN      bth.QPN
	RemoteQKey     uint32
	RemoteSRQN     uint32
	Opcode         verbs.WROpcode
}

// sendWQE is the loop's execution state for one send queue slot: what it
// read of the request when it took it (every field but the SGL, the inline
// payload and the address handle, which sit in per-slot arrays beside it,
// see sendQueue) and how far the request has got. A slot holds no Go
// pointers.
type sendWQE struct {
	// Read from the ring once, when the loop takes the request.
	wr     sendWR
	length uint32
	nsge   uint8 // SGEs in the slot's private storage
	inline bool  // the payload is in the slot's private storage instead

	// Execution state.
	state    wqeState
	status   verbs.WCStatus
	started  bool    // PSNs assigned
	hasRd    bool    // holds one of the QP's max_rd_atomic credits
	idx      uint32  // the slot's index (ring index & mask)
	firstPSN bth.PSN // first PSN of the message (READ: of its responses)
	lastPSN  bth.PSN
	sent     uint32 // payload bytes sent in the current pass (READ: offset requested)
	rdDone   uint32 // READ response bytes placed
	atomic   uint64 // atomic original value, for tests and debugging
}

// sendQueue is a QP's send queue: a ring of package ring's SendWQE (the
// layout of sroce_ring.h, the one the drop-in library writes), each
// request's SGL or inline payload in its slot's tail, and beside it the
// loop's execution state, one sendWQE per slot. The poster writes a
// request into the slot at the ring's producer index and publishes it;
// the loop takes each published request once (take: it loads the
// producer index once per look, bounded by the limit, and copies the
// slot's fields, its SGL or inline payload, and a UD request's address
// handle into the slot's private state), and works from that copy only,
// retransmissions included: nothing of the slot is read again. The slot
// goes back to the poster (the ring's consumer index) when the request
// has completed, so a full ring is a full queue.
//
// A ring whose producer index runs more than the limit ahead, or whose
// request has more SGEs than the QP takes, an inline payload larger than
// the QP's or the slot's, or an unknown opcode, is marked (fault) and
// never read again.
type sendQueue struct {
	r         *sring.Ring[sring.SendWQE]
	exec      []sendWQE // execution state per slot
	priv      []byte    // per slot, per bytes: the SGL or inline payload taken
	per       uint32
	postAH    []verbs.AH // UD: the poster's address handle per slot, written before publish
	ahs       []verbs.AH // UD: the address handle the loop took per slot
	mask      uint32
	maxSGE    uint32
	maxInline uint32

	// The loop's indices: requests taken (the loop's producer index) and
	// released (stored to the ring, never read back from it).
	prod  uint32
	cons  uint32
	fault atomic.Bool
	told  atomic.Bool // the fault's event was raised

	// An attached ring (AttachSendRing) is written by another process:
	// every request is checked when taken, and a UD request's address
	// handle is found by its number through resolve.
	attached bool
	resolve  AHResolver
	typ      verbs.QPType
}

// AHResolver finds the address handle a UD request on an attached send
// ring names by its number (ring.SendWQE.AH), or nil if the number names
// none the QP may use. The loop calls it when it takes a request, with
// the QP's lock held: it must be quick and take no lock its owner holds
// while calling into the QP (a read-mostly table).
type AHResolver func(h uint32) *verbs.AH

func (s *sendQueue) initSend(maxWR, maxSGE, maxInline uint32, ud bool) {
	per := max(maxSGE*uint32(unsafe.Sizeof(mr.SGE{})), maxInline)
	per = (per + 15) &^ 15
	r, err := sring.New[sring.SendWQE](sring.KindSend, maxWR, sring.Stride[sring.SendWQE](int(per)))
	if err != nil {
		panic(err) // maxWR >= 1 and the stride is computed: cannot happen
	}
	n := sring.Slots(maxWR)
	s.r, s.mask, s.per = r, n-1, per
	s.maxSGE, s.maxInline = maxSGE, maxInline
	s.exec = make([]sendWQE, n)
	s.priv = sring.Alloc(int(n) * int(per))
	s.prod, s.cons = 0, 0
	if ud {
		s.postAH = make([]verbs.AH, n)
		s.ahs = make([]verbs.AH, n)
	}
}

// at returns the execution state of slot i.
func (s *sendQueue) at(i uint32) *sendWQE { return &s.exec[i&s.mask] }

// full reports, for the poster, whether no slot is free.
func (s *sendQueue) full() bool { return s.r.Full() }

// count returns the requests posted and not yet completed, for
// statistics (any goroutine).
func (s *sendQueue) count() uint32 {
	return min(s.r.Prod()-s.r.Cons(), s.r.Limit())
}

// setCons gives every slot before i back to the poster.
func (s *sendQueue) setCons(i uint32) {
	s.cons = i
	s.r.SetCons(i)
}

// pull takes the requests published since the last look and returns the
// loop's producer index: the end of the requests taken. Only the loop
// calls it.
func (s *sendQueue) pull(typ verbs.QPType) uint32 {
	if s.fault.Load() {
		return s.prod
	}
	p := s.r.Prod()
	if p == s.prod {
		return p
	}
	if p-s.cons > s.r.Limit() || p-s.prod > s.r.Limit() {
		s.fault.Store(true)
		return s.prod
	}
	for s.prod != p {
		if !s.take(s.prod, typ) {
			s.fault.Store(true)
			break
		}
		s.prod++
	}
	return s.prod
}

// take reads the request of slot i into its execution state: the one
// read of the slot. It reports false for a slot that breaks the ring's
// rules (more SGEs than the QP takes, an inline payload beyond the slot
// or the QP's bound): the ring is faulted then. A request of an attached
// ring that is well formed but that the QP cannot execute (an opcode of
// another QP type, a message too long, a misaligned atomic, an unknown
// address handle) is taken as failed: it completes in order with
// IBV_WC_LOC_QP_OP_ERR and moves the QP to the error state, as on
// rdma_rxe. (The in-process poster checked all of that already.)
func (s *sendQueue) take(i uint32, typ verbs.QPType) bool {
	e := *s.r.At(i)
	op := verbs.WROpcode(e.Opcode)
	info := op.Info()
	w := s.at(i)
	idx := i & s.mask
	if info == nil {
		if !s.attached {
			return false
		}
		// Completed with a known opcode: the rest of the loop reads
		// the opcode's description.
		*w = sendWQE{idx: idx, wr: sendWR{WRID: e.WRID, Opcode: verbs.WROpSend}, state: wqeError, status: verbs.WCLocQPOpErr}
		return true
	}
	*w = sendWQE{idx: idx, wr: sendWR{WRID: e.WRID, Opcode: op, Flags: verbs.SendFlags(e.Flags), Imm: e.Imm,
		InvalidateRKey: e.InvalidateRKey, RemoteAddr: e.RemoteAddr, RKey: e.RKey,
		CompareAdd: e.CompareAdd, Swap: e.Swap,
		Bind:      mr.MWBind{LKey: e.BindLKey, Addr: e.BindAddr, Length: e.BindLength, Access: mr.Access(e.BindAccess)},
		RegAccess: mr.Access(e.RegAccess)}}
	if typ == verbs.QPTypeXRCSend {
		w.wr.RemoteSRQN = e.UD.RemoteQPN
	} else {
		w.wr.RemoteQPN, w.wr.RemoteQKey = bth.QPN(e.UD.RemoteQPN), e.UD.RemoteQKey
	}
	mine := s.priv[idx*s.per : (idx+1)*s.per]
	var total uint64
	if w.wr.Flags&verbs.Inline != 0 && info.Inline {
		n := uint32(e.InlineLen)
		if n > s.per || int(n) > s.r.TailLen() || (n > s.maxInline && !s.attached) {
			return false
		}
		copy(mine, s.r.Tail(i)[:n])
		w.length, w.inline, total = n, true, uint64(n)
	} else {
		ns := uint32(e.NumSGE)
		if ns > s.maxSGE || int(ns) > s.r.MaxSGEs() {
			return false
		}
		w.nsge = uint8(ns)
		sgl := s.sglOf(w)
		copy(sgl, s.r.SGEs(i, int(ns)))
		for k := range sgl {
			total += uint64(sgl[k].Length)
		}
		if total > MaxMsgSize && !s.attached {
			return false
		}
		w.length = uint32(total)
	}
	if s.ahs != nil {
		if s.attached {
			if ah := s.resolve(e.AH); ah != nil {
				s.ahs[idx] = *ah
			} else {
				w.fail()
			}
		} else {
			s.ahs[idx] = s.postAH[idx]
		}
	}
	if s.attached && !s.wellFormed(w, info, total) {
		w.fail()
	}
	return true
}

// fail marks w, just taken, as refused: it completes with
// IBV_WC_LOC_QP_OP_ERR when the completer reaches it.
func (w *sendWQE) fail() {
	w.state, w.status = wqeError, verbs.WCLocQPOpErr
	w.length, w.nsge, w.inline = 0, 0, false
}

// wellFormed checks w, just taken from an attached ring, as CheckSendWR
// checks a request posted in process.
func (s *sendQueue) wellFormed(w *sendWQE, info *verbs.WROpInfo, total uint64) bool {
	switch {
	case !info.Types.Has(s.typ):
		return false
	case total > MaxMsgSize:
		return false
	case s.typ == verbs.QPTypeXRCSend && w.wr.RemoteSRQN > bth.PSNMask:
		return false
	case info.Payload == verbs.PayloadNone && (w.nsge != 0 || w.inline):
		return false
	case w.inline && total > uint64(s.maxInline) && info.Payload != verbs.PayloadAtomic8:
		return false
	case info.Payload == verbs.PayloadAtomic8 && (total != 8 || w.wr.RemoteAddr&7 != 0):
		return false
	}
	return true
}

// attach puts ring g in place of the queue's own ring: the queue is
// empty (a QP in RESET) and g was just initialized by its owner, with
// room for the QP's SGEs and inline data in each slot and no more
// requests than the QP's queue holds.
func (s *sendQueue) attach(g *sring.Ring[sring.SendWQE], typ verbs.QPType, resolve AHResolver) error {
	if g.Limit() > s.r.Limit() || g.MaxSGEs() < int(s.maxSGE) || g.TailLen() < int(s.maxInline) {
		return ErrTooManySGE
	}
	if datagram(typ) && resolve == nil {
		return ErrNoAH
	}
	if s.prod != s.cons || s.r.Prod() != s.prod || g.Prod() != g.Cons() {
		return ErrQueueFull
	}
	s.r, s.mask = g, sring.Slots(g.Limit())-1
	s.prod, s.cons = g.Cons(), g.Cons()
	s.attached, s.resolve, s.typ = true, resolve, typ
	s.fault.Store(false)
	return nil
}

// sglOf returns the SGL of w.
func (s *sendQueue) sglOf(w *sendWQE) []mr.SGE {
	if w.nsge == 0 {
		return nil
	}
	return unsafe.Slice((*mr.SGE)(unsafe.Pointer(&s.priv[w.idx*s.per])), int(w.nsge))
}

// inlineOf returns the inline payload of w, or nil if it has none.
func (s *sendQueue) inlineOf(w *sendWQE) []byte {
	if !w.inline || w.length == 0 {
		return nil
	}
	o := w.idx * s.per
	return s.priv[o : o+w.length : o+w.length]
}

// ahOf returns the destination of a UD send.
func (s *sendQueue) ahOf(w *sendWQE) *verbs.AH { return &s.ahs[w.idx] }

// post writes wr, checked by the caller and of total bytes, into the
// ring's next slot and publishes it: the in-process poster's side, the
// same entry the drop-in library writes.
func (s *sendQueue) post(typ verbs.QPType, pd *mr.PD, wr *verbs.SendWR, total uint64, inline bool) error {
	if s.full() {
		return ErrQueueFull
	}
	p := s.r.Produced()
	e := s.r.At(p)
	*e = sring.SendWQE{WRID: wr.WRID, Opcode: uint8(wr.Opcode), Flags: uint32(wr.Flags), Imm: wr.Imm,
		InvalidateRKey: wr.InvalidateRKey, RemoteAddr: wr.RemoteAddr, RKey: wr.RKey, Length: uint32(total),
		CompareAdd: wr.CompareAdd, Swap: wr.Swap, BindAddr: wr.Bind.Addr, BindLength: wr.Bind.Length,
		BindLKey: wr.Bind.LKey, BindAccess: uint32(wr.Bind.Access), RegAccess: uint32(wr.RegAccess)}
	if typ == verbs.QPTypeXRCSend {
		e.UD.RemoteQPN = wr.RemoteSRQN
	} else {
		e.UD.RemoteQPN, e.UD.RemoteQKey = uint32(wr.RemoteQPN), wr.RemoteQKey
	}
	if inline {
		in := s.r.Tail(p)[:total]
		if wr.InlineData != nil {
			copy(in, wr.InlineData)
		} else if _, err := pd.Gather(wr.SGL, 0, in); err != nil {
			return ErrInlineGather
		}
		e.InlineLen = uint16(total)
	} else {
		e.NumSGE = uint8(len(wr.SGL))
		copy(s.r.SGEs(p, len(wr.SGL)), wr.SGL)
	}
	if s.postAH != nil {
		if wr.AH != nil {
			s.postAH[p&s.mask] = *wr.AH // by value: the caller's AH may change
		} else {
			s.postAH[p&s.mask] = verbs.AH{}
		}
	}
	s.r.Publish()
	return nil
}

// recvWQE is the receive request the responder works on: a copy of what
// a receive queue slot held when the request was taken (its SGL in the
// responder's own storage, its length the SGL's sum).
type recvWQE struct {
	wrid   uint64
	sgl    []mr.SGE
	length uint64
}

// recvRing is a receive queue: a ring of plain entries (package ring's
// RecvWQE, the layout of sroce_ring.h) with each slot's SGL in the slot
// itself. The ring may lie in memory another process writes (the
// daemon's client: AttachRecvRing), so the queue is its consumer by
// rules that hold for hostile memory too: it keeps its consumer index
// itself (stored to the ring, never read back), loads the producer index
// once per look and checks it against the limit, and reads an entry once,
// when it takes it, bounding its SGE count by the queue's. A ring that
// breaks these rules is marked (fault) and never read again.
type recvRing struct {
	r      *sring.Ring[sring.RecvWQE]
	maxSGE uint32
	cons   uint32      // the next slot to take; only the loop moves it
	ext    bool        // r is another's memory (attach), not the QP's
	fault  atomic.Bool // the ring broke the rules: nothing is taken from it
	told   atomic.Bool // the fault's event was raised
}

func (r *recvRing) initRecv(maxWR, maxSGE uint32) {
	rg, err := sring.New[sring.RecvWQE](sring.KindRecv, maxWR, sring.Stride[sring.RecvWQE](int(maxSGE)*16))
	if err != nil {
		panic(err) // maxWR >= 1 and the stride is computed: cannot happen
	}
	r.r, r.maxSGE, r.cons = rg, maxSGE, 0
}

// count returns the requests posted and not yet taken, for statistics:
// 0 for a faulted ring.
func (r *recvRing) count() uint32 {
	if r.fault.Load() {
		return 0
	}
	n := r.r.Prod() - r.r.Cons()
	return min(n, r.r.Limit())
}

func (r *recvRing) limit() uint32 { return r.r.Limit() }

// ready returns, for the loop, how many published requests wait from the
// consumer index on; a producer index more than the limit ahead marks
// the ring faulted (0 then, as ever after).
func (r *recvRing) ready() uint32 {
	if r.fault.Load() {
		return 0
	}
	n := r.r.Prod() - r.cons
	if n > r.r.Limit() {
		r.fault.Store(true)
		return 0
	}
	return n
}

// load copies the request at the consumer index into w (its SGL into
// w's storage, which holds maxSGE): the one read of the slot. It
// reports false, marking the ring faulted, for an SGE count beyond the
// queue's.
func (r *recvRing) load(w *recvWQE) bool {
	e := r.r.At(r.cons)
	var hd sring.RecvWQE
	hd = *e
	ns := hd.NumSGE
	if ns > r.maxSGE || int(ns) > r.r.MaxSGEs() {
		r.fault.Store(true)
		return false
	}
	w.wrid = hd.WRID
	w.sgl = w.sgl[:ns]
	copy(w.sgl, r.r.SGEs(r.cons, int(ns)))
	w.length = 0
	for i := range w.sgl {
		w.length += uint64(w.sgl[i].Length)
	}
	return true
}

// release gives the slot at the consumer index back to the poster.
func (r *recvRing) release() {
	r.cons++
	r.r.SetCons(r.cons)
}

// wridAt returns the WRID of the request at the consumer index (a flush).
func (r *recvRing) wridAt() uint64 { return r.r.At(r.cons).WRID }

// drop releases every request published, taking none (a reset).
func (r *recvRing) drop() {
	if n := r.ready(); n != 0 {
		r.cons += n
		r.r.SetCons(r.cons)
	}
}

// attach puts ring g in place of the queue's own ring: the queue is
// empty (a QP in RESET, an SRQ just made) and g was just initialized.
func (r *recvRing) attach(g *sring.Ring[sring.RecvWQE]) error {
	if g.Limit() == 0 || g.MaxSGEs() < int(r.maxSGE) {
		return ErrTooManySGE
	}
	if r.ready() != 0 || g.Prod() != g.Cons() {
		return ErrQueueFull
	}
	r.r, r.cons, r.ext = g, g.Cons(), true
	r.fault.Store(false)
	return nil
}

// post validates wr and publishes it: the in-process poster's side.
func (r *recvRing) post(wr *verbs.RecvWR) error {
	if uint32(len(wr.SGL)) > r.maxSGE {
		return ErrTooManySGE
	}
	var total uint64
	for i := range wr.SGL {
		total += uint64(wr.SGL[i].Length)
	}
	if total > MaxMsgSize {
		return ErrMsgTooBig
	}
	e := r.r.Next()
	if e == nil {
		return ErrQueueFull
	}
	p := r.r.Prod()
	*e = sring.RecvWQE{WRID: wr.WRID, NumSGE: uint32(len(wr.SGL)), Length: uint32(total)}
	copy(r.r.SGEs(p, len(wr.SGL)), wr.SGL)
	r.r.Publish()
	return nil
}

// SRQ is a shared receive queue: receive work requests that any QP
// attached to it may consume. Like a QP's own receive queue it is filled by
// the application and drained by the device loop.
type SRQ struct {
	rq recvRing
	// limit is the armed limit (ibv_modify_srq srq_limit); 0 when not
	// armed. When a QP takes a request and fewer than limit remain, the
	// limit event fires once and the limit is disarmed.
	limit atomic.Uint32
	// Context is free for the device's use.
	Context any

	// An XRC SRQ's domain, number, protection domain and completion
	// queue (zero for an SRQ of QPs).
	xrcd   *XRCD
	num    uint32
	pd     *mr.PD
	cq     CQ
	closed atomic.Bool // Close
}

// Close marks an XRC SRQ destroyed: targets that served it stop.
func (s *SRQ) Close() { s.closed.Store(true) }

// XRCD is an XRC domain: the XRC_RECV QPs of a domain deliver messages to
// the XRC SRQs of the same domain, which the messages name.
type XRCD struct {
	// Context is free for the device's use.
	Context any
}

// NewXRCSRQ returns an XRC SRQ of domain d with number num: an XRC_RECV
// QP of d takes receive requests from it for the messages that name num,
// checks their memory operations against pd and completes their receives
// on cq.
func NewXRCSRQ(maxWR, maxSGE uint32, d *XRCD, num uint32, pd *mr.PD, cq CQ) *SRQ {
	s := NewSRQ(maxWR, maxSGE)
	s.xrcd, s.num, s.pd, s.cq = d, num, pd, cq
	return s
}

// Num returns an XRC SRQ's number (ibv_get_srq_num).
func (s *SRQ) Num() uint32 { return s.num }

// XRCD returns an XRC SRQ's domain, or nil for an SRQ of QPs.
func (s *SRQ) XRCD() *XRCD { return s.xrcd }

// NewSRQ returns a shared receive queue holding up to maxWR requests of up
// to maxSGE elements each.
func NewSRQ(maxWR, maxSGE uint32) *SRQ {
	s := new(SRQ)
	s.rq.initRecv(maxWR, maxSGE)
	return s
}

// PostRecv posts a receive work request. Calls must be serialized by the
// caller; they may run concurrently with the loop that consumes the queue.
func (s *SRQ) PostRecv(wr *verbs.RecvWR) error { return s.rq.post(wr) }

// Arm sets the limit: when fewer than limit requests remain the limit event
// fires (ibv_modify_srq with IBV_SRQ_LIMIT). 0 disarms it.
func (s *SRQ) Arm(limit uint32) { s.limit.Store(limit) }

// Limit returns the armed limit, 0 if none.
func (s *SRQ) Limit() uint32 { return s.limit.Load() }

// Len returns the number of posted receive requests not yet consumed.
func (s *SRQ) Len() uint32 { return s.rq.count() }

// MaxWR returns the capacity of the queue.
func (s *SRQ) MaxWR() uint32 { return s.rq.limit() }

// NewRing makes process-local storage for maxWR requests of the SRQ's
// shape, for ResizeTo. It reads nothing that changes after the SRQ is
// made, so the caller needs no lock.
func (s *SRQ) NewRing(maxWR uint32) *sring.Ring[sring.RecvWQE] {
	var n recvRing
	n.initRecv(maxWR, s.rq.maxSGE)
	return n.r
}

// ResizeTo moves the queue to ring g, freshly initialized (the memory a
// daemon shares with its client), copying the requests posted and not
// yet taken into it, as Resize does. A faulted ring fails with
// ErrRingFault.
func (s *SRQ) ResizeTo(g *sring.Ring[sring.RecvWQE]) error {
	n := s.rq.ready()
	if s.rq.fault.Load() {
		return ErrRingFault
	}
	if g.MaxSGEs() < int(s.rq.maxSGE) || !s.rq.r.CopyTo(g, s.rq.cons, n) {
		return ErrQueueFull
	}
	s.rq.r, s.rq.cons = g, g.Cons()
	return nil
}

// AttachRing makes ring g, freshly initialized and empty, the SRQ's
// queue in place of its own: the memory a daemon shares with its client,
// from which the loop then takes requests where the client wrote them.
// The SRQ must be empty; the caller keeps the loop away.
func (s *SRQ) AttachRing(g *sring.Ring[sring.RecvWQE]) error { return s.rq.attach(g) }

// RingFault reports whether the SRQ's ring broke the rules (a producer
// index beyond the limit, an entry with more SGEs than the queue takes):
// nothing is taken from it any more.
func (s *SRQ) RingFault() bool { return s.rq.fault.Load() }

// take removes the oldest request into dst, copying its SGL into dst's
// own storage, reporting whether there was one and whether the limit
// event should fire; a faulted ring reports fault. Called by the loop
// only.
func (s *SRQ) take(dst *recvWQE) (ok, limitEvent, fault bool) {
	if s.rq.ready() == 0 || !s.rq.load(dst) {
		return false, false, s.rq.fault.Load()
	}
	s.rq.release()
	if l := s.limit.Load(); l != 0 && s.rq.count() < l {
		if s.limit.CompareAndSwap(l, 0) {
			return true, true, false
		}
	}
	return true, false, false
}

// QueueBytes returns the memory the QP's work queues hold: the execution
// state and private copies beside the send ring, and the rings the QP
// allocated itself (not those attached: AttachSendRing, AttachRecvRing,
// which are their owner's to count). It is what a QP of these
// capabilities costs beyond its fixed state, for callers that budget
// memory (the daemon).
func (q *QP) QueueBytes() int {
	n := len(q.sq.exec)*int(unsafe.Sizeof(sendWQE{})) + len(q.sq.priv) +
		(len(q.sq.ahs)+len(q.sq.postAH))*int(unsafe.Sizeof(verbs.AH{}))
	if !q.sq.attached {
		n += len(q.sq.r.Memory())
	}
	if q.rq.r != nil && !q.rq.ext {
		n += len(q.rq.r.Memory())
	}
	return n
}

// QueueBytes returns the memory the SRQ's ring holds when the SRQ
// allocated it itself (not one attached: AttachRing, ResizeRing).
func (s *SRQ) QueueBytes() int {
	if s.rq.ext {
		return 0
	}
	return len(s.rq.r.Memory())
}
