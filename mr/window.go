// Memory windows and fast-registration MRs: keys whose registration is
// changed by work requests rather than by calls of the application. The
// application allocates, maps and frees them (AllocMW, MW.Dealloc, AllocMR,
// FastMR.Map, FastMR.Dealloc) on its own goroutine; the engine's loop
// goroutine binds, registers and invalidates them (BindMW, RegFast,
// Invalidate) when a QP's requester executes a BIND_MW, REG_MR or LOCAL_INV
// work request or its responder receives a SEND with invalidate. All of it
// takes the table lock; lookups on the data path see a binding or
// registration as one more immutable *MR published in the key's slot, so
// they stay lock-free.

package mr

import "sync/atomic"

// MWType is the type of a memory window (enum ibv_mw_type).
type MWType uint8

// Memory window types.
const (
	// MWType1 windows are bound with the bind verb (ibv_bind_mw), which
	// the device executes as a BIND_MW work request, and unbound by a
	// zero-length bind. They cannot be invalidated.
	MWType1 MWType = 1
	// MWType2 windows are bound by BIND_MW work requests to the QP that
	// posts them (IBTA type 2B) and unbound by invalidation: LOCAL_INV
	// or a peer's SEND with invalidate.
	MWType2 MWType = 2
)

// MW is a memory window (struct ibv_mw): a key that, while bound, grants
// remote access to a range of an MR.
type MW struct {
	pd   *PD
	typ  MWType
	slot uint32
	key  atomic.Uint32 // key of the current binding, or of the last one

	// Guarded by the table lock.
	cur   *MR // the published binding, nil while unbound
	dead  bool
	fresh freshKeys
}

// MWBind describes a window binding (struct ibv_mw_bind_info): Length
// bytes at virtual address Addr of the MR whose local key is LKey,
// reachable by peers with the remote rights in Access. It holds no
// pointers, so that work requests carrying it can be copied into a send
// queue without allocating.
type MWBind struct {
	LKey   uint32
	Addr   uint64
	Length uint64
	Access Access
}

// freshKeys remembers the last key byte handed out by NewKey, so that
// consecutive calls never return the same key even before the first has
// been used.
type freshKeys struct {
	last  uint8
	valid bool
}

// next returns a fresh key for slot s that differs from the slot's current
// key and from the previous key next returned. Called with the table lock
// held.
func (f *freshKeys) next(t *Table, s uint32) uint32 {
	for {
		k := t.freshKey(s)
		if !f.valid || uint8(k) != f.last {
			f.last, f.valid = uint8(k), true
			return k
		}
	}
}

// AllocMW allocates a memory window of type typ in pd (ibv_alloc_mw). Its
// key gets a key byte from crypto/rand; it grants nothing until bound. It
// fails with ErrInvalid for an unknown type or a deallocated PD, and with
// ErrNoResources if the table is full.
func (pd *PD) AllocMW(typ MWType) (*MW, error) {
	if typ != MWType1 && typ != MWType2 {
		return nil, ErrInvalid
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
	w := &MW{pd: pd, typ: typ, slot: s}
	w.key.Store(t.nextKey(s))
	t.owners[s] = w
	pd.nmr++
	t.active++
	return w, nil
}

// Type returns the window's type.
func (w *MW) Type() MWType { return w.typ }

// PD returns the window's protection domain.
func (w *MW) PD() *PD { return w.pd }

// RKey returns the window's key: the key of its current binding, or of its
// last one while it is unbound.
func (w *MW) RKey() uint32 { return w.key.Load() }

// NewKey returns a key for the window's next binding: the window's index
// bits and a key byte from crypto/rand that differs from the current key's
// and from the one NewKey returned last. A type 2 binder may use it instead
// of incrementing the key byte, which makes the next key predictable.
func (w *MW) NewKey() uint32 {
	t := w.pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	return w.fresh.next(t, w.slot)
}

// Bound reports whether the window is bound, and if so to what range and
// with which rights.
func (w *MW) Bound() (addr, length uint64, access Access, ok bool) {
	t := w.pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if w.cur == nil {
		return 0, 0, 0, false
	}
	return w.cur.iova, uint64(len(w.cur.mem)), w.cur.access, true
}

// Dealloc frees the window (ibv_dealloc_mw). Its binding, if any, ends:
// when Dealloc returns the key is refused and no data movement through it
// is in progress. It fails with ErrInvalid if the window was already
// deallocated.
func (w *MW) Dealloc() error {
	t := w.pd.t
	t.mu.Lock()
	if w.dead {
		t.mu.Unlock()
		return ErrInvalid
	}
	w.dead = true
	old := w.unbind()
	delete(t.owners, w.slot)
	t.freeSlot(w.slot)
	w.pd.nmr--
	t.active--
	t.mu.Unlock()
	t.release(old)
	return nil
}

// unbind unpublishes the window's binding and marks it dead. The caller
// passes the result to release once it has dropped the table lock. Called
// with the table lock held.
func (w *MW) unbind() *MR {
	old := w.cur
	if old == nil {
		return nil
	}
	w.pd.t.publish(w.slot, nil)
	w.cur = nil
	old.refs.Add(deadBit)
	return old
}

// release waits until no data movement uses old, an unpublished binding,
// and then lets its MR be deregistered again. Called without the lock.
func (t *Table) release(old *MR) {
	if old == nil {
		return
	}
	old.drain()
	t.mu.Lock()
	old.parent.nmw--
	t.mu.Unlock()
}

// BindMW binds a window as a BIND_MW work request does, for a QP whose view
// of its PD is pd; the device's requester calls it when it reaches the work
// request. rkey is the window's new key: its index bits name the window
// (ErrInvalid if they name none) and its key byte, chosen by the binder, is
// the new key byte. The checks are those of the IBTA and rdma_rxe:
//
//   - the window, the MR and the QP belong to one PD (ErrPD);
//   - a type 2 window is not bound already (ErrNotFree) and the binding
//     has a nonzero length (ErrInvalid); a zero-length binding of a type 1
//     window unbinds it;
//   - the MR was registered with AccessMWBind (ErrAccess), and has
//     AccessLocalWrite if the window grants remote write or atomic access
//     (C10-74, ErrAccess);
//   - the range lies inside the MR (ErrBounds);
//   - Access holds only access flags a window can grant (ErrInvalid);
//   - the new key differs from the window's current key (ErrInvalid), so
//     that no key revoked by an invalidation or a rebinding is accepted by
//     the new binding.
//
// A type 2 binding is reachable only through pd, the binding QP's view.
// When BindMW returns, a previous binding of a type 1 window is refused
// and no data movement through it is in progress.
func (pd *PD) BindMW(rkey uint32, b *MWBind) error {
	t := pd.t
	if b.Access&^(AccessLocalWrite|accessRemote) != 0 {
		return ErrInvalid
	}
	t.mu.Lock()
	w, ok := t.owners[t.slotOf(rkey)].(*MW)
	if !ok {
		t.mu.Unlock()
		return ErrInvalid
	}
	old, err := pd.bind(w, b, rkey)
	t.mu.Unlock()
	t.release(old)
	return err
}

// bind is BindMW with the table lock held. It returns the binding it
// replaced, for release.
func (pd *PD) bind(w *MW, b *MWBind, rkey uint32) (*MR, error) {
	t := pd.t
	if w.dead {
		return nil, ErrInvalid
	}
	if w.pd != pd.root {
		return nil, ErrPD
	}
	if w.typ == MWType2 {
		if w.cur != nil {
			return nil, ErrNotFree
		}
		if b.Length == 0 {
			return nil, ErrInvalid
		}
	}
	cur := w.key.Load()
	key := rkey
	if key == cur || key == 0 {
		return nil, ErrInvalid
	}
	var n *MR
	if b.Length > 0 {
		m, err := pd.get(b.LKey, 0, false)
		if err != nil {
			return nil, err
		}
		if !m.Valid() {
			return nil, ErrBadKey
		}
		if m.access&AccessMWBind == 0 {
			return nil, ErrAccess
		}
		if b.Access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && m.access&AccessLocalWrite == 0 {
			return nil, ErrAccess
		}
		off, ok := m.offset(b.Addr, b.Length)
		if !ok {
			return nil, ErrBounds
		}
		n = &MR{pd: w.pd, key: key, access: b.Access, iova: b.Addr, mem: m.mem[off : off+b.Length : off+b.Length],
			slot: w.slot, region: m.region, kind: kindMW1, parent: m}
		if w.typ == MWType2 {
			n.kind, n.qp = kindMW2, pd
		}
		m.nmw++
	}
	old := w.unbind()
	if n != nil {
		t.publish(w.slot, n)
		w.cur = n
	}
	w.key.Store(key)
	t.setKey(w.slot, key)
	return old, nil
}

// Invalidate invalidates key for a QP whose view of its PD is pd: as a
// LOCAL_INV work request (remote false) or a received SEND with invalidate
// (remote true) does. Only fast-registration MRs and type 2 memory windows
// can be invalidated, as with the IBTA and rdma_rxe:
//
//   - an MR registered with RegMR, or a type 1 window, is refused with
//     ErrNotInvalidatable and stays as it was;
//   - a fast-registration MR must be of pd's PD (ErrPD), must not have
//     windows bound (ErrWindowsBound) and, for a remote invalidation, must
//     have been registered with remote access (ErrNotInvalidatable): a
//     peer cannot revoke what it was never granted. Invalidating one that
//     is already free succeeds, as with rdma_rxe;
//   - a type 2 window must be bound under key (ErrBadKey), be of pd's PD
//     (ErrPD) and, for a remote invalidation, have been bound by the QP
//     that receives the SEND (ErrBadKey).
//
// A key that names nothing fails with ErrBadKey. When Invalidate returns,
// the key is refused and no data movement through it is in progress.
func (pd *PD) Invalidate(key uint32, remote bool) error {
	t := pd.t
	s := t.slotOf(key)
	t.mu.Lock()
	var old *MR
	var err error
	switch o := t.owners[s].(type) {
	case *FastMR:
		old, err = o.invalidate(pd, key, remote)
	case *MW:
		old, err = o.invalidate(pd, key, remote)
	default:
		err = ErrBadKey
		if m := t.occupant(s); m != nil && m.key == key {
			err = ErrNotInvalidatable
		}
	}
	t.mu.Unlock()
	if old != nil {
		if old.kind == kindFast {
			old.drain()
		} else {
			t.release(old)
		}
	}
	return err
}

// occupant returns the MR published in slot s, or nil.
func (t *Table) occupant(s uint32) *MR {
	c := t.chunks[s>>chunkShift&(numChunks-1)].Load()
	if c == nil {
		return nil
	}
	return c.mrs[s&chunkMask].Load()
}

// invalidate is Invalidate for a window, with the table lock held.
func (w *MW) invalidate(pd *PD, key uint32, remote bool) (*MR, error) {
	if w.typ == MWType1 {
		return nil, ErrNotInvalidatable
	}
	cur := w.cur
	if cur == nil || cur.key != key {
		return nil, ErrBadKey
	}
	if w.pd != pd.root {
		return nil, ErrPD
	}
	if remote && cur.qp != pd {
		return nil, ErrBadKey
	}
	return w.unbind(), nil
}
