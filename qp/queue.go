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
	ErrXRCSRQ       = errors.New("qp: XRC send with a remote SRQ number of more than 24 bits")
	ErrAtomicWR     = errors.New("qp: atomic needs one 8-byte buffer and an 8-byte aligned remote address")
	ErrHasSRQ       = errors.New("qp: QP uses a shared receive queue")
	ErrInlineGather = errors.New("qp: inline data could not be gathered from the SGL")
	ErrRingFault    = errors.New("qp: the receive ring broke the rules (producer index or SGE count)")
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
	RemoteSRQN     uint32
	Opcode         verbs.WROpcode
}

// sendWQE is a send queue slot: a fixed-size plain value.
type sendWQE struct {
	// Written by the poster before publication.
	wr     sendWR
	length uint32
	start  uint64 // the poster's arena position before this request's storage
	off    uint32 // where the SGL or inline payload starts in arena gen
	gen    uint8  // the arena generation holding it
	nsge   uint8  // SGEs at off
	inline bool   // the payload is at off instead

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

// sendQueue is a QP's send ring with the storage of its requests' variable
// parts: the SGLs and inline payloads live in an arena, and for UD QPs the
// resolved address handles in one array indexed by slot.
//
// The arena holds only what the requests in the queue need, not max_send_wr
// times the largest request: the poster takes each request's bytes in post
// order and the loop gives them back by releasing slots in the same order,
// so the arena is a ring of bytes whose live part runs from the oldest
// unreleased slot's start to the poster's head. When a request does not fit,
// the poster makes an arena twice as large (a new generation) and posts
// there; older generations stay until their last request is released. The
// largest arena is bounded ((limit+2) times the largest request: room for
// every request the queue admits, the one gap left where the ring wraps,
// and the request being placed), so a post never fails for want of
// storage. Slots name their generation; the loop
// finds the arena through an atomic pointer, so the poster never waits for
// it and nothing is allocated once the arena has grown to what the QP's
// traffic needs.
type sendQueue struct {
	ring[sendWQE]
	ahs       []verbs.AH
	maxSGE    uint32
	maxInline uint32
	maxArena  uint64 // the largest arena (0: no variable parts)

	// The arenas by generation; the poster stores, the loop loads.
	arenas [arenaGens]atomic.Pointer[[]byte]
	// Poster state (under the poster's serialization).
	gen    uint8  // the generation posts go to
	oldest uint8  // the oldest generation not yet dropped
	head   uint64 // free-running position in arena gen
}

// arenaGens bounds the generations: each doubles the last, from
// arenaMinBytes, so 32 cover any bound.
const arenaGens = 32

// arenaMinBytes is the size of a QP's first arena.
const arenaMinBytes = 1024

// arenaAlign keeps every SGL in the arena aligned for mr.SGE.
const arenaAlign = 16

func (s *sendQueue) initSend(maxWR, maxSGE, maxInline uint32, ud bool) {
	s.init(maxWR)
	n := uint32(len(s.slots))
	s.maxSGE, s.maxInline = maxSGE, maxInline
	per := uint64(max(maxSGE*uint32(unsafe.Sizeof(mr.SGE{})), maxInline))
	per = (per + arenaAlign - 1) &^ (arenaAlign - 1)
	if per > 0 {
		s.maxArena = max((uint64(s.limit)+2)*per, arenaMinBytes)
	}
	if ud {
		s.ahs = make([]verbs.AH, n)
	}
}

// place takes n bytes of arena storage for the request in slot w, which
// the poster is filling (the slot at prod), and records where in w. Only
// the poster calls it.
func (s *sendQueue) place(w *sendWQE, n uint32) []byte {
	n = (n + arenaAlign - 1) &^ (arenaAlign - 1)
	w.start, w.gen, w.off = s.head, s.gen, 0
	if n == 0 {
		return nil
	}
	// The live part of the current arena starts at the oldest queued
	// request's start when that request is in this generation; if an
	// older generation still holds it, everything placed in this one is
	// live. A stale cons (the loop moves it on meanwhile) only makes
	// the live part look longer.
	cons, prod := s.cons.Load(), s.prod.Load()
	tail := s.head
	oldestLive := s.gen
	if cons != prod {
		o := s.at(cons)
		oldestLive = o.gen
		if o.gen == s.gen {
			tail = o.start
		} else {
			tail = 0
		}
	}
	for s.oldest != oldestLive {
		s.arenas[s.oldest%arenaGens].Store(nil)
		s.oldest++
	}
	a := s.arenas[s.gen%arenaGens].Load()
	if a != nil {
		size := uint64(len(*a))
		pos := s.head % size
		skip := uint64(0)
		if pos+uint64(n) > size {
			skip = size - pos
		}
		if s.head-tail+skip+uint64(n) <= size {
			w.start, w.off = s.head, uint32(pos+skip)
			if skip != 0 {
				w.off = 0
			}
			s.head += skip + uint64(n)
			return (*a)[w.off : w.off+n]
		}
	}
	// A new generation, twice the last (or the first), empty.
	size := uint64(arenaMinBytes)
	if a != nil {
		size = uint64(len(*a)) * 2
	}
	for size < uint64(n) {
		size *= 2
	}
	size = min(size, s.maxArena)
	b := make([]byte, size)
	if a != nil {
		s.gen++
	}
	s.arenas[s.gen%arenaGens].Store(&b)
	s.head = uint64(n)
	w.start, w.gen, w.off = 0, s.gen, 0
	if cons == prod {
		// Nothing queued: the older generations can go now.
		for s.oldest != s.gen {
			s.arenas[s.oldest%arenaGens].Store(nil)
			s.oldest++
		}
	}
	return b[:n]
}

// unplace gives back the storage place took for w, whose post failed.
func (s *sendQueue) unplace(w *sendWQE) {
	if w.gen == s.gen {
		s.head = w.start
	}
}

// storage returns the arena bytes of w's variable part.
func (s *sendQueue) storage(w *sendWQE, n uint32) []byte {
	a := s.arenas[w.gen%arenaGens].Load()
	return (*a)[w.off : w.off+n : w.off+n]
}

// sglOf returns the SGL of w.
func (s *sendQueue) sglOf(w *sendWQE) []mr.SGE {
	if w.nsge == 0 {
		return nil
	}
	b := s.storage(w, uint32(w.nsge)*uint32(unsafe.Sizeof(mr.SGE{})))
	return unsafe.Slice((*mr.SGE)(unsafe.Pointer(&b[0])), int(w.nsge))
}

// inlineOf returns the inline payload of w, or nil if it has none.
func (s *sendQueue) inlineOf(w *sendWQE) []byte {
	if !w.inline || w.length == 0 {
		return nil
	}
	return s.storage(w, w.length)
}

// arenaBytes returns the bytes the arenas hold now.
func (s *sendQueue) arenaBytes() int {
	n := 0
	for i := range s.arenas {
		if a := s.arenas[i].Load(); a != nil {
			n += len(*a)
		}
	}
	return n
}

// ahOf returns the destination of a UD send.
func (s *sendQueue) ahOf(w *sendWQE) *verbs.AH {
	// w is one of s.slots: its index is its distance from the first. (No
	// index is stored in the slots: writing one into each at creation
	// would make every slot of a large queue resident before any use.)
	i := (uintptr(unsafe.Pointer(w)) - uintptr(unsafe.Pointer(&s.slots[0]))) / unsafe.Sizeof(sendWQE{})
	return &s.ahs[i]
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
	r.r, r.cons = g, g.Cons()
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

// QueueBytes returns the most memory the QP's work queues can come to
// hold: the send queue's slots and address handles, the largest arena its
// requests' SGLs and inline payloads can need, and the receive ring when
// the QP has its own. It is what a QP of these capabilities may cost beyond
// its fixed state, for callers that budget memory (the daemon); the arena
// part is only as large as the QP's traffic has needed (ArenaBytes).
func (q *QP) QueueBytes() int {
	n := len(q.sq.slots)*int(unsafe.Sizeof(sendWQE{})) + len(q.sq.ahs)*int(unsafe.Sizeof(verbs.AH{})) +
		2*int(q.sq.maxArena) // every generation below the largest adds up to less than it
	if q.rq.r != nil {
		n += len(q.rq.r.Memory())
	}
	return n
}

// ArenaBytes returns the bytes the send queue's arenas hold now (the SGLs
// and inline payloads of the requests posted).
func (q *QP) ArenaBytes() int { return q.sq.arenaBytes() }

// QueueBytes returns the memory the SRQ's ring holds.
func (s *SRQ) QueueBytes() int { return len(s.rq.r.Memory()) }
