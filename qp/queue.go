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
// inline data into storage owned by the slot, so nothing is allocated.

package qp

import (
	"errors"
	"math/bits"
	"sync/atomic"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
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

// sendWQE is a send queue slot.
type sendWQE struct {
	// Written by the poster before publication.
	wr     verbs.SendWR // SGL and InlineData point into sgl and inline; AH is nil
	sgl    []mr.SGE
	inline []byte
	ah     verbs.AH // UD: the destination
	length uint32

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

// recvWQE is a receive queue slot.
type recvWQE struct {
	wrid   uint64
	sgl    []mr.SGE
	length uint64
}

type recvRing struct {
	ring[recvWQE]
	maxSGE uint32
}

func (r *recvRing) initRecv(maxWR, maxSGE uint32) {
	r.init(maxWR)
	r.maxSGE = maxSGE
	for i := range r.slots {
		r.slots[i].sgl = make([]mr.SGE, 0, maxSGE)
	}
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
	if r.full() {
		return ErrQueueFull
	}
	p := r.prod.Load()
	s := r.at(p)
	s.wrid = wr.WRID
	s.sgl = append(s.sgl[:0], wr.SGL...)
	s.length = total
	r.prod.Store(p + 1)
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
func (s *SRQ) MaxWR() uint32 { return s.rq.limit }

// take removes the oldest request into dst, reporting whether there was
// one and whether the limit event should fire. Called by the loop only.
func (s *SRQ) take(dst *recvWQE) (ok, limitEvent bool) {
	c := s.rq.cons.Load()
	if c == s.rq.prod.Load() {
		return false, false
	}
	src := s.rq.at(c)
	dst.wrid = src.wrid
	dst.sgl = append(dst.sgl[:0], src.sgl...)
	dst.length = src.length
	s.rq.cons.Store(c + 1)
	if l := s.limit.Load(); l != 0 && s.rq.count() < l {
		if s.limit.CompareAndSwap(l, 0) {
			return true, true
		}
	}
	return true, false
}
