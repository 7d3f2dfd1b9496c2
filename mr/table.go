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
	// one is reused (while fresh slots remain). A stale key can only come
	// back once its slot has been occupied 256 more times; with this delay
	// that takes at least reuseDelay*256 deregistrations, unless the table
	// is full or the same MR is re-registered in place 256 times.
	reuseDelay = 256
)

// Options configures a [Table].
type Options struct {
	// Rand is the random source for key generation. If nil, a ChaCha8
	// generator seeded from crypto/rand is used. Tests inject a seeded
	// source for reproducible keys. The table calls it only while holding
	// its lock.
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
	active int // registered MRs
}

// chunk is a block of slots. mrs is read without locking by lookups; keys
// holds the last key byte issued for each slot and is guarded by Table.mu.
type chunk struct {
	mrs  [chunkSize]atomic.Pointer[MR]
	keys [chunkSize]uint8
}

// NewTable returns an empty table.
func NewTable(opts Options) *Table {
	t := &Table{rnd: opts.Rand, max: DefaultMaxMR}
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
	return &PD{t: t}
}

// NumMR returns the number of MRs currently registered in the table.
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

// nextKey advances the key byte of slot s and returns the slot's new key.
// Called with t.mu held.
func (t *Table) nextKey(s uint32) uint32 {
	c := t.chunks[s>>chunkShift].Load()
	idx := t.perm.forward(s) << (32 - indexBits)
	b := c.keys[s&chunkMask] + 1
	if idx|uint32(b) == 0 {
		b++
	}
	c.keys[s&chunkMask] = b
	return idx | uint32(b)
}

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
type PD struct {
	t    *Table
	nmr  int  // registered MRs, guarded by t.mu
	dead bool // deallocated, guarded by t.mu
}

// Table returns the table the PD was allocated from.
func (pd *PD) Table() *Table { return pd.t }

// Dealloc deallocates the PD (ibv_dealloc_pd). It fails with ErrBusy while
// MRs are registered in the PD, and with ErrInvalid if the PD was already
// deallocated.
func (pd *PD) Dealloc() error {
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
