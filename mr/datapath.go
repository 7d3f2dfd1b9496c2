// Data path. The engine's loop goroutine (qp/ requester, responder and
// completer, driven by roce/) calls these functions on every packet with the
// PD of the QP it is serving: Gather to build request payloads from send SGEs,
// Scatter to place received SEND and READ response data into receive or
// local SGEs, CheckRemote/WriteRemote/ReadRemote for RDMA WRITE and READ
// requests, CompareSwap/FetchAdd for atomic requests and AtomicWrite for
// ATOMIC_WRITE. The application
// owns the memory and registers it from its own goroutine; this package owns
// the keys. Nothing here allocates or blocks: lookups are lock-free and every
// copy pins its MR so that Dereg can wait for it.

package mr

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// SGE is a scatter/gather element (struct ibv_sge): Length bytes at virtual
// address Addr in the MR with local key LKey.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// get returns the MR of pd registered under key, checking that it has every
// flag in need and, for remote accesses, at least one remote flag. A memory
// window's binding is found for remote accesses only, and a type 2 window's
// only through the view of the QP that bound it. It takes no lock. This is
// the hot path of every check, so the inverse key permutation
// (feistel.inverse) is written out here to keep it to one call.
func (pd *PD) get(key uint32, need Access, remote bool) (*MR, error) {
	t := pd.t
	k := &t.perm.k
	l, r := key>>(32-halfBits)&halfMask, key>>(32-indexBits)&halfMask
	r ^= round(l, k[3])
	l ^= round(r, k[2])
	r ^= round(l, k[1])
	l ^= round(r, k[0])
	s := l<<halfBits | r
	c := t.chunks[s>>chunkShift&(numChunks-1)].Load()
	if c == nil {
		return nil, ErrBadKey
	}
	m := c.mrs[s&chunkMask].Load()
	if m == nil || m.key != key {
		return nil, ErrBadKey
	}
	if m.pd != pd.root {
		return nil, ErrPD
	}
	if m.kind.window() && (!remote || m.qp != nil && m.qp != pd) {
		return nil, ErrBadKey
	}
	if m.access&need != need || remote && m.access&accessRemote == 0 {
		return nil, ErrAccess
	}
	return m, nil
}

// LookupLKey returns the MR of pd registered under lkey, checking that it
// has every flag in access (AccessLocalWrite when the engine will write into
// the memory; 0 to read it).
func (pd *PD) LookupLKey(lkey uint32, access Access) (*MR, error) {
	return pd.get(lkey, access, false)
}

// LookupRKey returns the MR of pd registered under rkey for a remote access
// needing every flag in access. As in verbs, an MR registered without any
// remote access flag cannot be found by its rkey: the lookup fails with
// ErrAccess.
func (pd *PD) LookupRKey(rkey uint32, access Access) (*MR, error) {
	return pd.get(rkey, access, true)
}

// CheckLocal checks a local access of length bytes at va through lkey:
// key, PD, the flags in access, and bounds. Zero-length accesses always pass.
func (pd *PD) CheckLocal(lkey uint32, va, length uint64, access Access) error {
	return pd.check(lkey, va, length, access, false)
}

// CheckRemote checks a remote access of length bytes at va through rkey:
// key, PD, the remote flags in access, and bounds. The responder calls it
// with the RETH's DMA length on the first packet of an RDMA WRITE or READ.
// Zero-length accesses always pass (IBTA C9-88).
func (pd *PD) CheckRemote(rkey uint32, va, length uint64, access Access) error {
	return pd.check(rkey, va, length, access, true)
}

// check is CheckLocal (remote false) and CheckRemote (remote true).
func (pd *PD) check(key uint32, va, length uint64, access Access, remote bool) error {
	if length == 0 {
		return nil
	}
	m, err := pd.get(key, access, remote)
	if err != nil {
		return err
	}
	if _, ok := m.offset(va, length); !ok {
		return ErrBounds
	}
	return nil
}

// CheckSGEs checks every SGE of a list and returns the total length. With
// AccessLocalWrite in access it checks that the engine may write into all of
// them (receive buffers, READ and atomic response targets). SGEs of length
// zero are not checked.
func (pd *PD) CheckSGEs(sgl []SGE, access Access) (uint64, error) {
	var total uint64
	for i := range sgl {
		s := &sgl[i]
		if s.Length == 0 {
			continue
		}
		if err := pd.CheckLocal(s.LKey, s.Addr, uint64(s.Length), access); err != nil {
			return 0, err
		}
		total += uint64(s.Length)
	}
	return total, nil
}

// sge resolves an SGE for a copy: the MR, checked against access, and the
// offset of the SGE's first byte in the MR's memory. The whole SGE must lie
// inside the MR, whichever part of it is being copied.
func (pd *PD) sge(s *SGE, access Access) (*MR, uint64, error) {
	m, err := pd.get(s.LKey, access, false)
	if err != nil {
		return nil, 0, err
	}
	off, ok := m.offset(s.Addr, uint64(s.Length))
	if !ok {
		return nil, 0, ErrBounds
	}
	return m, off, nil
}

// Gather copies into dst the bytes at offset off of the message described by
// sgl, and returns how many were copied. It fails with ErrLength if the
// message ends before dst is full, and with the check errors of the first SGE
// that fails; dst then holds the bytes copied so far. Only SGEs the range
// touches are checked, each one over its whole length.
func (pd *PD) Gather(sgl []SGE, off uint64, dst []byte) (int, error) {
	n := 0
	for i := range sgl {
		if n == len(dst) {
			return n, nil
		}
		s := &sgl[i]
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		m, base, err := pd.sge(s, 0)
		if err != nil {
			return n, err
		}
		if !m.pin() {
			return n, ErrBadKey
		}
		c, err := memCopy(dst[n:], m.mem[base+off:base+l])
		m.unpin()
		n += c
		if err != nil {
			return n, err
		}
		off = 0
	}
	if n < len(dst) {
		return n, ErrLength
	}
	return n, nil
}

// Scatter copies src into the message described by sgl at offset off, and
// returns how many bytes were copied. Every SGE written needs
// AccessLocalWrite. It fails with ErrLength if the SGE list ends before src
// is placed (IBV_WC_LOC_LEN_ERR), and with the check errors of the first SGE
// that fails; as in verbs the destination contents are then undefined.
func (pd *PD) Scatter(sgl []SGE, off uint64, src []byte) (int, error) {
	n := 0
	for i := range sgl {
		if n == len(src) {
			return n, nil
		}
		s := &sgl[i]
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		m, base, err := pd.sge(s, AccessLocalWrite)
		if err != nil {
			return n, err
		}
		if !m.pin() {
			return n, ErrBadKey
		}
		c, err := memCopy(m.mem[base+off:base+l], src[n:])
		m.unpin()
		n += c
		if err != nil {
			return n, err
		}
		off = 0
	}
	if n < len(src) {
		return n, ErrLength
	}
	return n, nil
}

// remote resolves a remote access of n > 0 bytes at va.
func (pd *PD) remote(rkey uint32, va, n uint64, access Access) (*MR, uint64, error) {
	m, err := pd.get(rkey, access, true)
	if err != nil {
		return nil, 0, err
	}
	off, ok := m.offset(va, n)
	if !ok {
		return nil, 0, ErrBounds
	}
	return m, off, nil
}

// ReadRemote serves an RDMA READ: it copies len(dst) bytes at va through
// rkey into dst, after checking the key, PD, AccessRemoteRead and bounds.
func (pd *PD) ReadRemote(rkey uint32, va uint64, dst []byte) error {
	if len(dst) == 0 {
		return nil
	}
	m, off, err := pd.remote(rkey, va, uint64(len(dst)), AccessRemoteRead)
	if err != nil {
		return err
	}
	if !m.pin() {
		return ErrBadKey
	}
	_, err = memCopy(dst, m.mem[off:])
	m.unpin()
	return err
}

// WriteRemote serves an RDMA WRITE: it copies src to va through rkey, after
// checking the key, PD, AccessRemoteWrite and bounds.
func (pd *PD) WriteRemote(rkey uint32, va uint64, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	m, off, err := pd.remote(rkey, va, uint64(len(src)), AccessRemoteWrite)
	if err != nil {
		return err
	}
	if !m.pin() {
		return ErrBadKey
	}
	_, err = memCopy(m.mem[off:], src)
	m.unpin()
	return err
}

// AtomicWrite serves an ATOMIC_WRITE: it stores the 8 bytes of v at va
// through rkey with one aligned 64-bit store, so that no reader sees part
// of it, after checking the key, PD, AccessRemoteWrite and bounds. va (and
// the memory behind it) must be 8-byte aligned (ErrAlignment).
func (pd *PD) AtomicWrite(rkey uint32, va uint64, v []byte) error {
	if va&7 != 0 || len(v) != 8 {
		return ErrAlignment
	}
	m, off, err := pd.remote(rkey, va, 8, AccessRemoteWrite)
	if err != nil {
		return err
	}
	if !m.pin() {
		return ErrBadKey
	}
	p := unsafe.Pointer(&m.mem[off])
	if uintptr(p)&7 != 0 {
		// The IOVA is aligned but the backing memory is not.
		m.unpin()
		return ErrAlignment
	}
	atomic.StoreUint64((*uint64)(p), binary.NativeEndian.Uint64(v))
	m.unpin()
	return nil
}

// atomicMR resolves the MR of an atomic request through rkey.
func (pd *PD) atomicMR(rkey uint32) (*MR, error) {
	return pd.get(rkey, AccessRemoteAtomic, true)
}

// CompareSwap serves an atomic CmpSwap request at va through rkey (see
// [MR.CompareSwap]). A key made stale concurrently fails with ErrBadKey.
func (pd *PD) CompareSwap(rkey uint32, va, compare, swap uint64) (uint64, error) {
	m, err := pd.atomicMR(rkey)
	if err != nil {
		return 0, err
	}
	old, err := m.CompareSwap(va, compare, swap)
	if err == ErrDeregistered {
		err = ErrBadKey
	}
	return old, err
}

// FetchAdd serves an atomic FetchAdd request at va through rkey (see
// [MR.FetchAdd]). A key made stale concurrently fails with ErrBadKey.
func (pd *PD) FetchAdd(rkey uint32, va, add uint64) (uint64, error) {
	m, err := pd.atomicMR(rkey)
	if err != nil {
		return 0, err
	}
	old, err := m.FetchAdd(va, add)
	if err == ErrDeregistered {
		err = ErrBadKey
	}
	return old, err
}
