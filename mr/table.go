package mr

import (
	crand "crypto/rand"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
)

const (
	indexBits = 24 // upper bits of a key: permuted slot number
	halfBits  = indexBits / 2
	halfMask  = 1<<halfBits - 1
	indexMask = 1<<indexBits - 1

	chunkShift = 12 // slots are allocated in chunks of 4096
	chunkSize  = 1 << chunkShift
	chunkMask  = chunkSize - 1
	numChunks  = 1 << (indexBits - chunkShift)

	// MaxMR is the largest number of MRs a table can hold: one per
	// 24-bit key index.
	MaxMR = 1 << indexBits
	// DefaultMaxMR is the number of MRs a table holds when
	// Options.MaxMR is zero.
	DefaultMaxMR = 1 << 20

	// reuseDelay is how many freed slots must be queued before the oldest
	// one is reused (while fresh slots remain). Every occupation of a slot
	// draws a new key byte, so a stale key comes back only if a later
	// occupation of its slot draws its byte again (probability 1/255 each
	// time); with this delay a slot is occupied again only after at least
	// reuseDelay other deregistrations, unless the table is full.
	reuseDelay = 256
)

// Options configures a [Table].
type Options struct {
	// Rand is the random source of the key permutation (the upper 24 bits
	// of keys). If nil, a ChaCha8 generator seeded from crypto/rand is
	// used. Tests inject a seeded source for reproducible key indices. Key
	// bytes (the low 8 bits) always come from crypto/rand. The table calls
	// it only while holding its lock.
	Rand rand.Source
	// MaxMR bounds the number of MRs registered at once. Zero means
	// DefaultMaxMR; values above MaxMR are clamped to MaxMR.
	MaxMR int
}

// Table holds the protection domains and memory regions of one device and
// resolves keys to MRs. All methods are safe for concurrent use.
type Table struct {
	perm   feistel
	chunks [numChunks]atomic.Pointer[chunk]

	mu     sync.Mutex // guards everything below and chunk.keys
	rnd    rand.Source
	max    uint32   // slot limit
	next   uint32   // first never-used slot
	free   []uint32 // freed slots; free[head:] is the queue, oldest first
	head   int
	active int // occupied slots: MRs, fast-registration MRs, memory windows
	// owners maps the slots of fast-registration MRs and memory windows
	// to their *FastMR or *MW, for invalidation by key.
	owners map[uint32]any
	kbuf   [64]byte // key bytes from crypto/rand; kbuf[:kleft] unused
	kleft  int
}

// chunk is a block of slots. mrs is read without locking by lookups; keys
// holds the last key byte issued for each slot and is guarded by Table.mu.
type chunk struct {
	mrs  [chunkSize]atomic.Pointer[MR]
	keys [chunkSize]uint8
}

// NewTable returns an empty table.
func NewTable(opts Options) *Table {
	t := &Table{rnd: opts.Rand, max: DefaultMaxMR, owners: make(map[uint32]any)}
	if t.rnd == nil {
		var seed [32]byte
		crand.Read(seed[:])
		t.rnd = rand.NewChaCha8(seed)
	}
	if opts.MaxMR > 0 {
		t.max = uint32(min(opts.MaxMR, MaxMR))
	}
	for i := range t.perm.k {
		t.perm.k[i] = t.rnd.Uint64()
	}
	return t
}

// AllocPD creates a protection domain (ibv_alloc_pd).
func (t *Table) AllocPD() *PD {
	pd := &PD{t: t}
	pd.root = pd
	return pd
}

// NumMR returns the number of key slots in use in the table: registered
// MRs, fast-registration MRs and memory windows.
func (t *Table) NumMR() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.active
}

// allocSlot reserves a slot. Called with t.mu held.
func (t *Table) allocSlot() (uint32, error) {
	if n := len(t.free) - t.head; n > reuseDelay || (n > 0 && t.next >= t.max) {
		s := t.free[t.head]
		t.head++
		if t.head == len(t.free) {
			t.free, t.head = t.free[:0], 0
		} else if t.head >= 1024 && 2*t.head >= len(t.free) {
			t.free, t.head = t.free[:copy(t.free, t.free[t.head:])], 0
		}
		return s, nil
	}
	if t.next >= t.max {
		return 0, ErrNoResources
	}
	s := t.next
	if t.chunks[s>>chunkShift].Load() == nil {
		c := new(chunk)
		for i := range c.keys {
			c.keys[i] = uint8(t.rnd.Uint64())
		}
		t.chunks[s>>chunkShift].Store(c)
	}
	t.next++
	return s, nil
}

// freeSlot queues a slot for reuse. Called with t.mu held, after the slot's
// pointer was cleared.
func (t *Table) freeSlot(s uint32) {
	t.free = append(t.free, s)
}

// keyByte returns a byte from crypto/rand, read in batches. Called with
// t.mu held.
func (t *Table) keyByte() uint8 {
	if t.kleft == 0 {
		crand.Read(t.kbuf[:])
		t.kleft = len(t.kbuf)
	}
	t.kleft--
	b := t.kbuf[t.kleft]
	t.kbuf[t.kleft] = 0
	return b
}

// nextKey gives slot s a new key and returns it: the slot's index bits and a
// key byte drawn from crypto/rand, uniformly among the 255 values that
// differ from the slot's previous key byte (one fewer for the slot whose
// index bits are 0, as key 0 is never issued). Called with t.mu held.
func (t *Table) nextKey(s uint32) uint32 {
	k := t.freshKey(s)
	t.setKey(s, k)
	return k
}

// freshKey returns a key that nextKey could issue for slot s, without
// issuing it. Called with t.mu held.
func (t *Table) freshKey(s uint32) uint32 {
	c := t.chunks[s>>chunkShift].Load()
	idx := t.index(s)
	prev := c.keys[s&chunkMask]
	for {
		if b := t.keyByte(); b != prev && idx|uint32(b) != 0 {
			return idx | uint32(b)
		}
	}
}

// setKey records key, chosen by a consumer for slot s, as the slot's
// current key. Called with t.mu held.
func (t *Table) setKey(s, key uint32) {
	t.chunks[s>>chunkShift].Load().keys[s&chunkMask] = uint8(key)
}

// index returns the upper 24 bits of slot s's keys.
func (t *Table) index(s uint32) uint32 { return t.perm.forward(s) << (32 - indexBits) }

// slotOf returns the slot that key names.
func (t *Table) slotOf(key uint32) uint32 { return t.perm.inverse(key >> (32 - indexBits)) }

// publish stores m (or nil) in slot s. Called with t.mu held.
func (t *Table) publish(s uint32, m *MR) {
	t.chunks[s>>chunkShift].Load().mrs[s&chunkMask].Store(m)
}

// feistel is a keyed permutation of 24-bit integers: a balanced Feistel
// network over two 12-bit halves with four rounds. It maps slot numbers to
// the upper bits of keys so that keys do not reveal allocation order.
type feistel struct {
	k [4]uint64
}

// round is the round function: a 64x64->128-bit multiply of the 12-bit half,
// mixed with the round key, by a fixed odd constant, folded by XOR of the
// product's halves; the top 12 bits are the result. The fold makes it
// nonlinear in both the integer and the bitwise sense.
func round(x uint32, k uint64) uint32 {
	hi, lo := bits.Mul64(uint64(x)^k, 0x9e3779b97f4a7c15)
	return uint32((hi ^ lo) >> (64 - halfBits))
}

// forward maps a slot number to a key index.
func (f *feistel) forward(x uint32) uint32 {
	l, r := (x>>halfBits)&halfMask, x&halfMask
	l ^= round(r, f.k[0])
	r ^= round(l, f.k[1])
	l ^= round(r, f.k[2])
	r ^= round(l, f.k[3])
	return l<<halfBits | r
}

// inverse maps a key index back to a slot number. It undoes the rounds of
// forward in reverse order.
func (f *feistel) inverse(x uint32) uint32 {
	l, r := (x>>halfBits)&halfMask, x&halfMask
	r ^= round(l, f.k[3])
	l ^= round(r, f.k[2])
	r ^= round(l, f.k[1])
	l ^= round(r, f.k[0])
	return l<<halfBits | r
}

// PD is a protection domain. MRs belong to exactly one PD, and an access
// through a PD succeeds only for MRs of that PD.
//
// A PD value is either the PD itself, as AllocPD returns it, or a view of
// it for one QP (ForQP). A view reaches the same MRs and passes the same
// checks; it also identifies its QP, which type 2 memory windows are bound
// to.
type PD struct {
	t    *Table
	root *PD  // the PD itself; a QP's view points to the PD it was made from
	nmr  int  // MRs, fast-registration MRs and windows, guarded by t.mu
	dead bool // deallocated, guarded by t.mu
}

// Table returns the table the PD was allocated from.
func (pd *PD) Table() *Table { return pd.t }

// ForQP returns a new view of pd for one QP. The device gives every QP its
// own view and makes all of the QP's accesses through it: a type 2 memory
// window bound by the QP can then be reached through that QP only
// (IBTA type 2B windows), while everything else behaves as with pd.
func (pd *PD) ForQP() *PD {
	return &PD{t: pd.t, root: pd.root}
}

// Dealloc deallocates the PD (ibv_dealloc_pd). It fails with ErrBusy while
// MRs, fast-registration MRs or memory windows are in the PD, and with
// ErrInvalid if the PD was already deallocated or pd is a QP's view.
func (pd *PD) Dealloc() error {
	if pd.root != pd {
		return ErrInvalid
	}
	t := pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if pd.dead {
		return ErrInvalid
	}
	if pd.nmr > 0 {
		return ErrBusy
	}
	pd.dead = true
	return nil
}
