// Memory regions. Registration, re-registration and deregistration run on
// the application's goroutine under the table lock; the methods of a held *MR
// (Check, Read, Write, CompareSwap, FetchAdd) run on the engine's loop
// goroutine without locks, pinning the MR around each access so that Dereg
// can wait for them. The memory belongs to the application; an MR only
// borrows it between registration and Dereg.

package mr

import (
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
)

// Region is memory that can be registered as an MR. Bytes is called once, at
// registration; the slice it returns must stay valid, and must not be
// unmapped or reused for anything else, until the MR is deregistered (Dereg
// or Rereg with ReregChangeTranslation has returned). Implementations may
// wrap Go memory ([Slice]) or memory shared with another process, such as a
// memfd mapping.
type Region interface {
	Bytes() []byte
}

// Slice is a [Region] over a Go byte slice.
type Slice []byte

// Bytes returns s.
func (s Slice) Bytes() []byte { return s }

// AddrOf returns the virtual address of the first byte of b (0 for a nil
// slice). It is the default IOVA of a registration, and what applications put
// in SGE.Addr to name a byte of such an MR.
func AddrOf(b []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b))))
}

// MR is one registration of a memory region. Its fields never change: Rereg
// returns a new *MR and invalidates the old one, and Dereg invalidates it.
// Methods that touch memory re-validate the MR on every call, so an engine
// may keep an *MR obtained from a lookup and call them per packet; after
// invalidation they fail with ErrDeregistered.
type MR struct {
	// refs counts the pins held by in-flight data movement, plus deadBit
	// once the MR has been invalidated.
	refs atomic.Int64

	pd     *PD // the PD itself, never a QP's view
	key    uint32
	access Access
	iova   uint64
	mem    []byte // mem[0] is at iova
	slot   uint32
	region Region
	kind   kind

	// Memory window bindings only: the MR the window is bound to, and for
	// type 2 windows the view of the QP that bound it.
	parent *MR
	qp     *PD

	nmw int // windows bound to this registration, guarded by the table lock
}

// kind says what registered a key: RegMR, a REG_MR work request, or a
// memory window binding.
type kind uint8

const (
	kindMR   kind = iota // PD.RegMR, PD.RegMRIOVA, MR.Rereg
	kindFast             // a registration of a fast-registration MR
	kindMW1              // a binding of a type 1 memory window
	kindMW2              // a binding of a type 2 memory window
)

// window reports whether k is a memory window binding.
func (k kind) window() bool { return k >= kindMW1 }

const deadBit = 1 << 48

// RegMR registers r with the IOVA set to the address of its first byte
// (ibv_reg_mr). Errors are those of RegMRIOVA.
func (pd *PD) RegMR(r Region, access Access) (*MR, error) {
	if r == nil {
		return nil, ErrInvalid
	}
	return pd.RegMRIOVA(r, AddrOf(r.Bytes()), access)
}

// RegMRIOVA registers r so that its first byte is at virtual address iova
// (ibv_reg_mr_iova). It fails with ErrInvalid if the access set has unknown
// bits or has AccessRemoteWrite or AccessRemoteAtomic without
// AccessLocalWrite (as ibv_reg_mr returns EINVAL), if r is nil or empty, if
// [iova, iova+len) does not fit below 2^64, or if the PD was deallocated; and
// with ErrNoResources if the table is full.
func (pd *PD) RegMRIOVA(r Region, iova uint64, access Access) (*MR, error) {
	if r == nil {
		return nil, ErrInvalid
	}
	mem := r.Bytes()
	if err := checkReg(mem, iova, access); err != nil {
		return nil, err
	}
	pd = pd.root
	t := pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if pd.dead {
		return nil, ErrInvalid
	}
	s, err := t.allocSlot()
	if err != nil {
		return nil, err
	}
	m := &MR{
		pd:     pd,
		key:    t.nextKey(s),
		access: access,
		iova:   iova,
		mem:    mem,
		slot:   s,
		region: r,
	}
	t.publish(s, m)
	pd.nmr++
	t.active++
	return m, nil
}

// checkReg validates registration arguments.
func checkReg(mem []byte, iova uint64, access Access) error {
	if !access.valid() || len(mem) == 0 || uint64(len(mem))-1 > ^iova {
		return ErrInvalid
	}
	return nil
}

// Dereg deregisters the MR (ibv_dereg_mr). When it returns, no lookup by the
// MR's key succeeds, methods on m fail with ErrDeregistered, and data
// movement that was in progress on m has finished, so the memory may be
// reused. It fails with ErrDeregistered if m is no longer registered, with
// ErrWindowsBound while memory windows are bound to it, and with ErrInvalid
// for registrations made by a REG_MR work request or a window binding
// (they end with FastMR.Dealloc and MW.Dealloc).
func (m *MR) Dereg() error {
	t := m.pd.t
	if m.kind != kindMR {
		return ErrInvalid
	}
	t.mu.Lock()
	if m.refs.Load()&deadBit != 0 {
		t.mu.Unlock()
		return ErrDeregistered
	}
	if m.nmw > 0 {
		t.mu.Unlock()
		return ErrWindowsBound
	}
	t.publish(m.slot, nil)
	m.refs.Add(deadBit)
	t.freeSlot(m.slot)
	m.pd.nmr--
	t.active--
	t.mu.Unlock()
	m.drain()
	return nil
}

// Rereg re-registers the MR (ibv_rereg_mr) and returns the new registration,
// which keeps the slot and therefore the upper 24 bits of the key, and gets
// a new key byte from crypto/rand, never the one it had. flags selects what changes: with
// ReregChangeTranslation, the memory becomes r at virtual address iova (use
// AddrOf(r.Bytes()) for the default); with ReregChangePD, the PD becomes pd;
// with ReregChangeAccess, the access flags become access. Arguments not
// selected are ignored. Flags 0 only issues a new key.
//
// On success m is invalidated as by Dereg: when Rereg returns, the old key is
// refused and no data movement on m is in progress. On failure m is
// unchanged. Errors are those of RegMRIOVA, ErrDeregistered if m is no
// longer registered, and ErrWindowsBound while memory windows are bound to
// m. Only MRs registered with RegMR or RegMRIOVA can be re-registered.
func (m *MR) Rereg(flags ReregFlags, pd *PD, r Region, iova uint64, access Access) (*MR, error) {
	return m.rereg(flags, pd, r, iova, access, false)
}

// ReregKeepKey is Rereg except that the new registration keeps m's key,
// as rdma_rxe's ibv_rereg_mr does: holders of the key (peers with the
// rkey, work requests naming the lkey) reach the new registration from
// the moment ReregKeepKey returns. Data movement on m still ends before
// it returns, and lookups that found m before fail with ErrDeregistered.
func (m *MR) ReregKeepKey(flags ReregFlags, pd *PD, r Region, iova uint64, access Access) (*MR, error) {
	return m.rereg(flags, pd, r, iova, access, true)
}

func (m *MR) rereg(flags ReregFlags, pd *PD, r Region, iova uint64, access Access, keepKey bool) (*MR, error) {
	t := m.pd.t
	if flags&^reregAll != 0 || m.kind != kindMR {
		return nil, ErrInvalid
	}
	n := &MR{pd: m.pd, access: m.access, iova: m.iova, mem: m.mem, slot: m.slot, region: m.region}
	if flags&ReregChangeTranslation != 0 {
		if r == nil {
			return nil, ErrInvalid
		}
		n.region, n.mem, n.iova = r, r.Bytes(), iova
	}
	if flags&ReregChangePD != 0 {
		if pd == nil || pd.t != t {
			return nil, ErrInvalid
		}
		n.pd = pd.root
	}
	if flags&ReregChangeAccess != 0 {
		n.access = access
	}
	if err := checkReg(n.mem, n.iova, n.access); err != nil {
		return nil, err
	}

	t.mu.Lock()
	if m.refs.Load()&deadBit != 0 {
		t.mu.Unlock()
		return nil, ErrDeregistered
	}
	if n.pd.dead {
		t.mu.Unlock()
		return nil, ErrInvalid
	}
	if m.nmw > 0 {
		t.mu.Unlock()
		return nil, ErrWindowsBound
	}
	n.key = m.key
	if !keepKey {
		n.key = t.nextKey(n.slot)
	}
	t.publish(n.slot, n)
	m.refs.Add(deadBit)
	m.pd.nmr--
	n.pd.nmr++
	t.mu.Unlock()
	m.drain()
	return n, nil
}

// drain waits until no pin is held on m. Pins are held only while copying at
// most one packet's worth of data, so the wait is short.
func (m *MR) drain() {
	for i := 0; m.refs.Load() != deadBit; i++ {
		if i < 64 {
			runtime.Gosched()
		} else {
			time.Sleep(10 * time.Microsecond)
		}
	}
}

// pin prevents m from being invalidated until unpin. It fails if m has been
// invalidated.
func (m *MR) pin() bool {
	if m.refs.Add(1)&deadBit != 0 {
		m.refs.Add(-1)
		return false
	}
	return true
}

func (m *MR) unpin() { m.refs.Add(-1) }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.key }

// RKey returns the remote key. It equals the local key; remote lookups by it
// succeed only if the MR has a remote access flag.
func (m *MR) RKey() uint32 { return m.key }

// PD returns the protection domain of the MR.
func (m *MR) PD() *PD { return m.pd }

// Access returns the access flags of the MR.
func (m *MR) Access() Access { return m.access }

// IOVA returns the virtual address of the first byte of the MR.
func (m *MR) IOVA() uint64 { return m.iova }

// Len returns the length of the MR in bytes.
func (m *MR) Len() uint64 { return uint64(len(m.mem)) }

// Region returns the registered memory.
func (m *MR) Region() Region { return m.region }

// Valid reports whether m is still registered. The answer may be stale by
// the time it is used; the data movement methods re-validate atomically.
func (m *MR) Valid() bool { return m.refs.Load()&deadBit == 0 }

// offset returns the offset into m.mem of the n-byte range at va, or false
// if the range is not inside the MR. It does not overflow.
func (m *MR) offset(va, n uint64) (uint64, bool) {
	size := uint64(len(m.mem))
	if va < m.iova {
		return 0, false
	}
	off := va - m.iova
	if off > size || n > size-off {
		return 0, false
	}
	return off, true
}

// Check reports whether m is registered and [va, va+n) lies inside it.
// Zero-length ranges always pass.
func (m *MR) Check(va, n uint64) error {
	if n == 0 {
		return nil
	}
	if !m.Valid() {
		return ErrDeregistered
	}
	if _, ok := m.offset(va, n); !ok {
		return ErrBounds
	}
	return nil
}

// Read copies len(dst) bytes at virtual address va out of the MR. Reading
// needs no access flag; remote read permission is checked by LookupRKey or
// ReadRemote.
func (m *MR) Read(va uint64, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	off, ok := m.offset(va, uint64(len(dst)))
	if !ok {
		return m.boundsErr()
	}
	if !m.pin() {
		return ErrDeregistered
	}
	_, err := memCopy(dst, m.mem[off:])
	m.unpin()
	return err
}

// Write copies src into the MR at virtual address va. It needs
// AccessLocalWrite, which every writable registration has; remote write
// permission is checked by LookupRKey or WriteRemote.
func (m *MR) Write(va uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	if m.access&AccessLocalWrite == 0 {
		return ErrAccess
	}
	off, ok := m.offset(va, uint64(len(src)))
	if !ok {
		return m.boundsErr()
	}
	if !m.pin() {
		return ErrDeregistered
	}
	_, err := memCopy(m.mem[off:], src)
	m.unpin()
	return err
}

// boundsErr returns the error for a failed bounds check, preferring
// ErrDeregistered so that a dead MR always reports as such.
func (m *MR) boundsErr() error {
	if !m.Valid() {
		return ErrDeregistered
	}
	return ErrBounds
}

// word returns the 64-bit word at va after checking access, alignment and
// bounds. The caller pins m.
func (m *MR) word(va uint64) (*uint64, error) {
	if m.access&AccessRemoteAtomic == 0 {
		return nil, ErrAccess
	}
	if va&7 != 0 {
		return nil, ErrAlignment
	}
	off, ok := m.offset(va, 8)
	if !ok {
		return nil, m.boundsErr()
	}
	p := unsafe.Pointer(&m.mem[off])
	if uintptr(p)&7 != 0 {
		// The IOVA is aligned but the backing memory is not: the MR was
		// registered with an IOVA of different alignment.
		return nil, ErrAlignment
	}
	return (*uint64)(p), nil
}

// CompareSwap atomically replaces the 64-bit word at va with swap if it
// equals compare, and returns the original value (IBTA CmpSwap). The word is
// in host byte order and va must be 8-byte aligned. It needs
// AccessRemoteAtomic.
func (m *MR) CompareSwap(va, compare, swap uint64) (uint64, error) {
	p, err := m.word(va)
	if err != nil {
		return 0, err
	}
	if !m.pin() {
		return 0, ErrDeregistered
	}
	old, err := memAtomic(func() uint64 { return compareSwap(p, compare, swap) })
	m.unpin()
	return old, err
}

// FetchAdd atomically adds add to the 64-bit word at va and returns the
// original value (IBTA FetchAdd). The word is in host byte order and va must
// be 8-byte aligned. It needs AccessRemoteAtomic.
func (m *MR) FetchAdd(va, add uint64) (uint64, error) {
	p, err := m.word(va)
	if err != nil {
		return 0, err
	}
	if !m.pin() {
		return 0, ErrDeregistered
	}
	old, err := memAtomic(func() uint64 { return atomic.AddUint64(p, add) - add })
	m.unpin()
	return old, err
}

func compareSwap(p *uint64, compare, swap uint64) uint64 {
	for {
		old := atomic.LoadUint64(p)
		if old != compare {
			return old
		}
		if atomic.CompareAndSwapUint64(p, old, swap) {
			return old
		}
	}
}
