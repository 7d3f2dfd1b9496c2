// Package ring holds the queues that cross from the application to the
// device and back: single-producer single-consumer rings of fixed-size,
// pointer-free entries laid over a []byte, so that the memory can be a
// shared mapping read by another process or another language.
//
// A ring's memory is a 192-byte header followed by Size slots of Stride
// bytes each:
//
//	offset   0  magic, version, kind, size, limit, stride   (cache line 0)
//	offset  64  producer index                               (cache line 1)
//	offset 128  consumer index                               (cache line 2)
//	offset 192  slot 0, slot 1, ... slot Size-1
//
// The indices are free-running 32-bit counters; slot i lives at
// i & (Size-1), and at most Limit slots are in use at once. The producer
// fills the slot at prod and publishes it by storing prod+1 (a release); the
// consumer reads the slot at cons after loading prod (an acquire) and
// gives it back by storing cons+1. Each side keeps a private copy of the
// other side's index and reloads it only when the copy says the ring is
// full (producer) or empty (consumer), so in steady state the two cache
// lines are not bounced on every entry. sroce_ring.h describes the
// layout for C and is the source: Header, the entries and the constants
// are generated from it (header_gen.go; the tests fail when it is stale
// and compare every offset with the C compiler's).
//
// The other side of a ring may be another process that does not follow
// the protocol. A side that cannot trust the other (the daemon) copies
// what it reads out of the ring before it checks and uses it: Load,
// LoadTail and LoadSGEs copy an entry, its inline bytes, its SGEs, and
// the producer keeps its own index (Produced) instead of reading back the
// one in shared memory.
//
// Go's sync/atomic operations are sequentially consistent, which includes
// the acquire and release ordering the protocol needs; the C side uses
// __atomic_load_n with __ATOMIC_ACQUIRE and __atomic_store_n with
// __ATOMIC_RELEASE.
package ring

import (
	"errors"
	"math/bits"
	"sync/atomic"
	"unsafe"

	"github.com/sroce/sroce/mr"
)

// Errors from Init and Attach.
var (
	ErrSize      = errors.New("ring: memory too small for the ring")
	ErrAlign     = errors.New("ring: memory not aligned to 64 bytes")
	ErrHeader    = errors.New("ring: bad ring header")
	ErrEntrySize = errors.New("ring: stride too small for the entry type")
)

// Entry is the set of entry types a ring may hold: plain fixed-size
// structs without Go pointers, each with a C twin in sroce_ring.h.
type Entry interface {
	CQE | SendWQE | RecvWQE
}

// Ring is one side's handle on ring memory. A Ring is used by one
// producer and one consumer at a time (callers serialize each side); the
// handle holds no state the other process needs.
type Ring[T Entry] struct {
	hdr    *Header
	slots  unsafe.Pointer
	mask   uint32
	limit  uint32
	stride uintptr
	mem    []byte

	_ [CacheLine]byte
	// Producer side.
	prod     uint32 // the producer index, as this side last published it
	consSeen uint32 // last consumer index the producer loaded
	_        [CacheLine - 8]byte
	// Consumer side.
	prodSeen uint32 // last producer index the consumer loaded
	_        [CacheLine - 4]byte
}

// Slots returns the number of slots of a ring that holds up to limit
// entries: limit rounded up to a power of two.
func Slots(limit uint32) uint32 {
	if limit <= 1 {
		return 1
	}
	return 1 << bits.Len32(limit-1)
}

// Stride returns the slot size for entries of type T followed by extra
// bytes (a receive or send WQE's SGEs or inline data), rounded up to 16.
func Stride[T Entry](extra int) uint32 {
	var t T
	return uint32((int(unsafe.Sizeof(t)) + extra + 15) &^ 15)
}

// Bytes returns the memory a ring of limit entries of stride bytes needs.
func Bytes(limit, stride uint32) int {
	return HeaderSize + int(Slots(limit))*int(stride)
}

// Alloc returns process-local ring memory of n bytes aligned to a cache
// line. It holds no pointers, so the garbage collector does not scan it.
func Alloc(n int) []byte {
	b := make([]byte, n+CacheLine)
	off := int(-uintptr(unsafe.Pointer(unsafe.SliceData(b))) & (CacheLine - 1))
	return b[off : off+n : off+n]
}

// New allocates process-local memory for a ring of limit entries of
// stride bytes and initializes it.
func New[T Entry](kind Kind, limit, stride uint32) (*Ring[T], error) {
	return Init[T](Alloc(Bytes(limit, stride)), kind, limit, stride)
}

// Init writes a fresh header into mem (both indices zero) and returns a
// handle on it. mem must be 64-byte aligned and at least Bytes(limit,
// stride) long.
func Init[T Entry](mem []byte, kind Kind, limit, stride uint32) (*Ring[T], error) {
	var t T
	if limit == 0 || uintptr(stride) < unsafe.Sizeof(t) || stride%16 != 0 {
		return nil, ErrEntrySize
	}
	if len(mem) < Bytes(limit, stride) {
		return nil, ErrSize
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))&(CacheLine-1) != 0 {
		return nil, ErrAlign
	}
	h := (*Header)(unsafe.Pointer(unsafe.SliceData(mem)))
	h.Prod.Store(0)
	h.Cons.Store(0)
	h.Kind, h.Size, h.Limit, h.Stride = kind, Slots(limit), limit, stride
	h.Version = Version
	atomic.StoreUint32(&h.Magic, Magic) // last: the header is complete
	// The handle is made from the arguments, not read back from mem:
	// memory shared already could have changed meanwhile.
	size := Slots(limit)
	return &Ring[T]{hdr: h, slots: unsafe.Pointer(&mem[HeaderSize]), mask: size - 1, limit: limit,
		stride: uintptr(stride), mem: mem[:HeaderSize+int(size)*int(stride)]}, nil
}

// Attach returns a handle on ring memory that Init (here or in another
// process) has set up, checking the header against kind and the memory's
// length.
func Attach[T Entry](mem []byte, kind Kind) (*Ring[T], error) {
	if len(mem) < HeaderSize {
		return nil, ErrSize
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(mem)))&(CacheLine-1) != 0 {
		return nil, ErrAlign
	}
	h := (*Header)(unsafe.Pointer(unsafe.SliceData(mem)))
	var t T
	switch {
	case atomic.LoadUint32(&h.Magic) != Magic || h.Version != Version || h.Kind != kind:
		return nil, ErrHeader
	case h.Size == 0 || h.Size&(h.Size-1) != 0 || h.Limit == 0 || h.Limit > h.Size:
		return nil, ErrHeader
	case uintptr(h.Stride) < unsafe.Sizeof(t) || h.Stride%16 != 0:
		return nil, ErrEntrySize
	case len(mem) < HeaderSize+int(h.Size)*int(h.Stride):
		return nil, ErrSize
	}
	p := h.Prod.Load()
	return &Ring[T]{
		hdr: h, slots: unsafe.Pointer(&mem[HeaderSize]), mask: h.Size - 1, limit: h.Limit,
		stride: uintptr(h.Stride), mem: mem,
		prod: p, consSeen: h.Cons.Load(), prodSeen: p,
	}, nil
}

// Memory returns the ring's memory, header included.
func (r *Ring[T]) Memory() []byte { return r.mem }

// Header returns the ring header.
func (r *Ring[T]) Header() *Header { return r.hdr }

// Limit returns the most entries the ring holds at once.
func (r *Ring[T]) Limit() uint32 { return r.limit }

// Stride returns the size of a slot in bytes.
func (r *Ring[T]) Stride() uint32 { return uint32(r.stride) }

// At returns the slot of index i (taken modulo the ring size).
func (r *Ring[T]) At(i uint32) *T {
	return (*T)(unsafe.Add(r.slots, uintptr(i&r.mask)*r.stride))
}

// Load copies the entry of slot i into dst: one read of the slot, which
// the caller then checks and uses in its own memory, whatever the other
// side writes into the slot meanwhile.
func (r *Ring[T]) Load(i uint32, dst *T) {
	*dst = *r.At(i)
}

// TailLen returns the size of a slot's tail: the bytes that follow its
// entry.
func (r *Ring[T]) TailLen() int {
	var t T
	return int(r.stride - unsafe.Sizeof(t))
}

// LoadTail copies the first len(dst) bytes of slot i's tail into dst and
// returns how many it copied: at most TailLen.
func (r *Ring[T]) LoadTail(i uint32, dst []byte) int {
	return copy(dst, r.Tail(i))
}

// LoadSGEs copies the first len(dst) SGEs of slot i's tail into dst and
// returns how many it copied: at most MaxSGEs.
func (r *Ring[T]) LoadSGEs(i uint32, dst []mr.SGE) int {
	return copy(dst, r.SGEs(i, min(len(dst), r.MaxSGEs())))
}

// Tail returns the bytes of slot i that follow its entry: the room for
// SGEs or inline data a stride larger than the entry leaves.
func (r *Ring[T]) Tail(i uint32) []byte {
	var t T
	p := unsafe.Add(r.slots, uintptr(i&r.mask)*r.stride+unsafe.Sizeof(t))
	return unsafe.Slice((*byte)(p), r.stride-unsafe.Sizeof(t))
}

// SGEs returns the first n SGEs stored in slot i's tail. The caller has
// checked that n SGEs fit.
func (r *Ring[T]) SGEs(i uint32, n int) []mr.SGE {
	var t T
	p := unsafe.Add(r.slots, uintptr(i&r.mask)*r.stride+unsafe.Sizeof(t))
	return unsafe.Slice((*mr.SGE)(p), n)
}

// MaxSGEs returns how many SGEs fit in a slot's tail.
func (r *Ring[T]) MaxSGEs() int {
	var t T
	return int((r.stride - unsafe.Sizeof(t)) / unsafe.Sizeof(mr.SGE{}))
}

// Len returns the number of entries published and not yet released. Any
// goroutine may call it; the answer may be stale.
func (r *Ring[T]) Len() uint32 { return r.hdr.Prod.Load() - r.hdr.Cons.Load() }

// --- producer ---------------------------------------------------------------

// Prod returns the producer index in the ring's memory: the slot the
// producer fills next, as the consumer sees it.
func (r *Ring[T]) Prod() uint32 { return r.hdr.Prod.Load() }

// Produced returns the producer index as the producer keeps it: what it
// published through this handle (or found at Attach), whatever the
// consumer writes over the one in shared memory.
func (r *Ring[T]) Produced() uint32 { return r.prod }

// Full reports, for the producer, whether no slot is free.
func (r *Ring[T]) Full() bool {
	p := r.prod
	if p-r.consSeen < r.limit {
		return false
	}
	r.consSeen = r.hdr.Cons.Load()
	return p-r.consSeen >= r.limit
}

// Next returns the slot the producer fills next, or nil if the ring is
// full. The entry becomes visible to the consumer with Publish.
func (r *Ring[T]) Next() *T {
	if r.Full() {
		return nil
	}
	return r.At(r.prod)
}

// Publish hands the slot Next returned to the consumer.
func (r *Ring[T]) Publish() {
	r.prod++
	r.hdr.Prod.Store(r.prod)
}

// Push copies e into the next slot and publishes it; it reports false if
// the ring is full.
func (r *Ring[T]) Push(e *T) bool {
	s := r.Next()
	if s == nil {
		return false
	}
	*s = *e
	r.Publish()
	return true
}

// --- consumer ---------------------------------------------------------------

// Cons returns the consumer index: the oldest slot not yet released.
func (r *Ring[T]) Cons() uint32 { return r.hdr.Cons.Load() }

// Ready returns, for the consumer, how many published entries wait from
// the consumer index on.
func (r *Ring[T]) Ready() uint32 {
	c := r.hdr.Cons.Load()
	if n := r.prodSeen - c; n != 0 && n <= r.hdr.Size {
		return n
	}
	r.prodSeen = r.hdr.Prod.Load()
	return r.prodSeen - c
}

// Front returns the oldest published entry, or nil if there is none.
func (r *Ring[T]) Front() *T {
	if r.Ready() == 0 {
		return nil
	}
	return r.At(r.hdr.Cons.Load())
}

// Release gives the n oldest entries back to the producer.
func (r *Ring[T]) Release(n uint32) { r.hdr.Cons.Store(r.hdr.Cons.Load() + n) }

// SetCons sets the consumer index to i, releasing every entry before it.
// A consumer that works through entries in more than one pass (a send
// queue's requester and completer) keeps its own indices and releases
// with SetCons.
func (r *Ring[T]) SetCons(i uint32) { r.hdr.Cons.Store(i) }

// --- moving entries ---------------------------------------------------------

// slot returns the bytes of slot i, its tail included.
func (r *Ring[T]) slot(i uint32) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(r.slots, uintptr(i&r.mask)*r.stride)), r.stride)
}

// CopyTo copies the n entries from index from on, oldest first and with
// their tails, into the slots dst's producer fills next, and publishes
// them there; r's indices are left alone. It is how a queue is resized:
// the caller keeps both of r's sides and dst's producer away meanwhile,
// and has checked that the n entries are published ones. It reports false,
// copying nothing, if dst lacks room for n entries or its slots are
// smaller than r's. The slots are copied as bytes, uninterpreted: dst's
// consumer reads them as it reads any entry.
func (r *Ring[T]) CopyTo(dst *Ring[T], from, n uint32) bool {
	p := dst.prod
	if used := p - dst.hdr.Cons.Load(); dst.stride < r.stride || used > dst.limit || n > dst.limit-used {
		return false
	}
	for k := uint32(0); k < n; k++ {
		copy(dst.slot(p+k), r.slot(from+k))
	}
	dst.prod = p + n
	dst.hdr.Prod.Store(dst.prod)
	return true
}
