// Work queues: the handoff between application goroutines, which post work
// requests, and the device loop goroutine, which executes them.
//
// A queue is a ring of preallocated slots with two atomic indices. The
// poster owns the slots in [prod, cons+size): it fills one and publishes it
// by advancing prod. The loop owns the slots in [cons, prod): it reads the
// request, keeps its execution state in the same slot, and releases it by
// advancing cons once the work request has completed. Posters must be
// serialized by the caller (the device holds a mutex per queue); the loop
// never waits for a poster. Posting copies the scatter/gather list and
// inline data into storage owned by the queue, so nothing is allocated,
// and no slot holds a Go pointer. The receive queues are rings of package
// ring (the layout a client process will share); the send queue's slots
// still carry the loop's execution state beside the request.

package qp

import (
	"errors"
	"math/bits"
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
	ErrAtomicWR     = errors.New("qp: atomic needs one 8-byte buffer and an 8-byte aligned remote address")
	ErrHasSRQ       = errors.New("qp: QP uses a shared receive queue")
	ErrInlineGather = errors.New("qp: inline data could not be gathered from the SGL")
)

// MaxMsgSize is the largest message a work request may carry, as with
// rdma_rxe (max_msg_sz).
const MaxMsgSize = 1 << 31

// ring is a single-producer single-consumer ring of slots.
type ring[T any] struct {
	slots []T
	mask  uint32
	limit uint32        // capacity as requested (<= len(slots))
	prod  atomic.Uint32 // next slot the producer fills
	cons  atomic.Uint32 // oldest slot the consumer has not released
}

func (r *ring[T]) init(n uint32) {
	size := uint32(1)
	if n > 1 {
		size = 1 << bits.Len32(n-1)
	}
	r.slots = make([]T, size)
	r.mask = size - 1
	r.limit = n
}

func (r *ring[T]) at(i uint32) *T { return &r.slots[i&r.mask] }

// full reports, for the producer, whether no slot is free.
func (r *ring[T]) full() bool { return r.prod.Load()-r.cons.Load() >= r.limit }

// count returns the number of published, unreleased slots.
func (r *ring[T]) count() uint32 { return r.prod.Load() - r.cons.Load() }

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
	Opcode         verbs.WROpcode
}

// sendWQE is a send queue slot: a fixed-size plain value.
type sendWQE struct {
	// Written by the poster before publication.
	wr     sendWR
	length uint32
	idx    uint32 // the slot's position in the ring, fixed at creation
	nsge   uint8  // SGEs in the slot's part of sendQueue.sgl
	inline bool   // the payload is in the slot's part of sendQueue.inline

	// Execution state, owned by the loop.
	state    wqeState
	status   verbs.WCStatus
	started  bool    // PSNs assigned
	hasRd    bool    // holds one of the QP's max_rd_atomic credits
	firstPSN bth.PSN // first PSN of the message (READ: of its responses)
	lastPSN  bth.PSN
	sent     uint32 // payload bytes sent in the current pass (READ: offset requested)
	rdDone   uint32 // READ response bytes placed
	atomic   uint64 // atomic original value, for tests and debugging
}

// sendQueue is a QP's send ring and the storage of its slots' variable
// parts, each one allocation for the whole queue: the SGLs (maxSGE
// elements per slot), the inline payloads (maxInline bytes per slot) and,
// for UD QPs only, the resolved address handles.
type sendQueue struct {
	ring[sendWQE]
	sgl       []mr.SGE
	inlineBuf []byte
	ahs       []verbs.AH
	maxSGE    uint32
	maxInline uint32
}

func (s *sendQueue) initSend(maxWR, maxSGE, maxInline uint32, ud bool) {
	s.init(maxWR)
	n := uint32(len(s.slots))
	for i := range s.slots {
		s.slots[i].idx = uint32(i)
	}
	s.maxSGE, s.maxInline = maxSGE, maxInline
	if maxSGE > 0 {
		s.sgl = make([]mr.SGE, n*maxSGE)
	}
	if maxInline > 0 {
		s.inlineBuf = make([]byte, n*maxInline)
	}
	if ud {
		s.ahs = make([]verbs.AH, n)
	}
}

// sglOf returns the SGL of w.
func (s *sendQueue) sglOf(w *sendWQE) []mr.SGE {
	i := w.idx * s.maxSGE
	return s.sgl[i : i+uint32(w.nsge) : i+uint32(w.nsge)]
}

// inlineOf returns the inline payload of w, or nil if it has none.
func (s *sendQueue) inlineOf(w *sendWQE) []byte {
	if !w.inline {
		return nil
	}
	i := w.idx * s.maxInline
	return s.inlineBuf[i : i+w.length : i+w.length]
}

// ahOf returns the destination of a UD send.
func (s *sendQueue) ahOf(w *sendWQE) *verbs.AH { return &s.ahs[w.idx] }

// recvWQE is the receive request the responder works on: a view of a
// receive queue slot, or of a copy taken from an SRQ.
type recvWQE struct {
	wrid   uint64
	sgl    []mr.SGE
	length uint64
}

// recvRing is a receive queue: a ring of plain entries (package ring's
// RecvWQE, the layout of sroce_ring.h) with each slot's SGL stored in the
// slot itself.
type recvRing struct {
	r      *sring.Ring[sring.RecvWQE]
	maxSGE uint32
}

func (r *recvRing) initRecv(maxWR, maxSGE uint32) {
	rg, err := sring.New[sring.RecvWQE](sring.KindRecv, maxWR, sring.Stride[sring.RecvWQE](int(maxSGE)*16))
	if err != nil {
		panic(err) // maxWR >= 1 and the stride is computed: cannot happen
	}
	r.r, r.maxSGE = rg, maxSGE
}

func (r *recvRing) count() uint32 { return r.r.Len() }
func (r *recvRing) limit() uint32 { return r.r.Limit() }

// view fills w with the request in slot i.
func (r *recvRing) view(i uint32, w *recvWQE) {
	e := r.r.At(i)
	w.wrid, w.length = e.WRID, uint64(e.Length)
	w.sgl = r.r.SGEs(i, int(e.NumSGE))
}

// post validates wr and publishes it.
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

	refill atomic.Pointer[func()] // SetRecvRefill
}

// SetRecvRefill sets f, which a QP of the SRQ calls on the loop when a
// message needs a receive request and the SRQ is empty (QP.SetRecvRefill
// says more). nil removes it.
func (s *SRQ) SetRecvRefill(f func()) {
	if f == nil {
		s.refill.Store(nil)
		return
	}
	s.refill.Store(&f)
}

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

// SRQRing is storage for an SRQ's requests, made by NewRing without any
// lock and put in place by Resize.
type SRQRing struct{ rq recvRing }

// NewRing makes storage for maxWR requests of the SRQ's shape. It reads
// nothing that changes after the SRQ is made, so the caller needs no lock.
func (s *SRQ) NewRing(maxWR uint32) *SRQRing {
	n := &SRQRing{}
	n.rq.initRecv(maxWR, s.rq.maxSGE)
	return n
}

// Resize moves the queue to r, keeping the requests posted and not yet
// taken, in order (ibv_modify_srq with IBV_SRQ_MAX_WR). It fails with
// ErrQueueFull if more requests wait than r holds. The caller keeps both
// the poster and the loop away meanwhile.
func (s *SRQ) Resize(r *SRQRing) error {
	if !s.rq.r.CopyTo(r.rq.r, s.rq.r.Cons(), s.rq.r.Len()) {
		return ErrQueueFull
	}
	s.rq = r.rq
	return nil
}

// take removes the oldest request into dst, copying its SGL into dst's
// own storage, reporting whether there was one and whether the limit
// event should fire. Called by the loop only.
func (s *SRQ) take(dst *recvWQE) (ok, limitEvent bool) {
	if s.rq.r.Ready() == 0 {
		return false, false
	}
	c := s.rq.r.Cons()
	var src recvWQE
	s.rq.view(c, &src)
	dst.wrid, dst.length = src.wrid, src.length
	dst.sgl = append(dst.sgl[:0], src.sgl...)
	s.rq.r.Release(1)
	if l := s.limit.Load(); l != 0 && s.rq.count() < l {
		if s.limit.CompareAndSwap(l, 0) {
			return true, true
		}
	}
	return true, false
}

// QueueBytes returns the memory the QP's work queues hold: the send queue's
// slots with their SGL, inline and address-handle storage, and the receive
// ring when the QP has its own. It is what a QP of these capabilities costs
// beyond its fixed state, for callers that budget memory (the daemon).
func (q *QP) QueueBytes() int {
	n := len(q.sq.slots)*int(unsafe.Sizeof(sendWQE{})) + len(q.sq.sgl)*int(unsafe.Sizeof(mr.SGE{})) +
		len(q.sq.inlineBuf) + len(q.sq.ahs)*int(unsafe.Sizeof(verbs.AH{}))
	if q.rq.r != nil {
		n += len(q.rq.r.Memory())
	}
	return n
}

// QueueBytes returns the memory the SRQ's ring holds.
func (s *SRQ) QueueBytes() int { return len(s.rq.r.Memory()) }
