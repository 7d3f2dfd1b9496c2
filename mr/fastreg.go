package mr

import "sync/atomic"

// FastMR is a fast-registration MR (ib_alloc_mr with IB_MR_TYPE_MEM_REG): a
// key whose memory and address are set by Map (ib_map_mr_sg) and become
// valid, with a new key and access flags, by a REG_MR work request; a
// LOCAL_INV work request or a peer's SEND with invalidate revokes them. It
// starts free: its key names nothing until the first REG_MR.
type FastMR struct {
	pd     *PD
	slot   uint32
	maxLen uint64
	key    atomic.Uint32 // key of the current registration, or of the last one

	// Guarded by the table lock.
	cur    *MR // the published registration, nil while free
	dead   bool
	fresh  freshKeys
	region Region // the mapping the next REG_MR registers
	mem    []byte
	iova   uint64
}

// AllocMR allocates a fast-registration MR in pd that can map up to maxLen
// bytes (ib_alloc_mr). Its key gets a key byte from crypto/rand. It fails
// with ErrInvalid if maxLen is 0 or the PD was deallocated, and with
// ErrNoResources if the table is full.
func (pd *PD) AllocMR(maxLen uint64) (*FastMR, error) {
	if maxLen == 0 {
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
	f := &FastMR{pd: pd, slot: s, maxLen: maxLen}
	f.key.Store(t.nextKey(s))
	t.owners[s] = f
	pd.nmr++
	t.active++
	return f, nil
}

// PD returns the MR's protection domain.
func (f *FastMR) PD() *PD { return f.pd }

// MaxLen returns the largest length a registration may map.
func (f *FastMR) MaxLen() uint64 { return f.maxLen }

// LKey returns the MR's key, as the local key: the key of the current
// registration, or of the last one while the MR is free.
func (f *FastMR) LKey() uint32 { return f.key.Load() }

// RKey returns the MR's key, as the remote key; it equals LKey.
func (f *FastMR) RKey() uint32 { return f.key.Load() }

// NewKey returns a key for the next REG_MR: the MR's index bits and a key
// byte from crypto/rand that differs from the current key's and from the
// one NewKey returned last. Using it instead of incrementing the key byte
// (IncKey, ib_inc_rkey) keeps the next key unpredictable to peers that saw
// the current one.
func (f *FastMR) NewKey() uint32 {
	t := f.pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	return f.fresh.next(t, f.slot)
}

// Registered reports whether the MR holds a valid registration, and if so
// its virtual address, length and access flags.
func (f *FastMR) Registered() (iova, length uint64, access Access, ok bool) {
	t := f.pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if f.cur == nil {
		return 0, 0, 0, false
	}
	return f.cur.iova, uint64(len(f.cur.mem)), f.cur.access, true
}

// Map sets the memory the next REG_MR registers: r, with its first byte at
// virtual address iova (ib_map_mr_sg). A registration already valid is not
// changed. It fails with ErrInvalid if r is nil or empty, longer than
// MaxLen, or does not fit below 2^64 at iova, or if the MR was freed.
func (f *FastMR) Map(r Region, iova uint64) error {
	if r == nil {
		return ErrInvalid
	}
	mem := r.Bytes()
	if len(mem) == 0 || uint64(len(mem)) > f.maxLen || uint64(len(mem))-1 > ^iova {
		return ErrInvalid
	}
	t := f.pd.t
	t.mu.Lock()
	defer t.mu.Unlock()
	if f.dead {
		return ErrInvalid
	}
	f.region, f.mem, f.iova = r, mem, iova
	return nil
}

// IncKey returns key with its key byte incremented, wrapping within the
// byte (ibv_inc_rkey, ib_inc_rkey): the usual choice of the key for a
// REG_MR or a window binding.
func IncKey(key uint32) uint32 { return key&^0xff | (key+1)&0xff }

// Dealloc frees the MR (ib_dereg_mr). A valid registration ends: when
// Dealloc returns the key is refused and no data movement through it is in
// progress. It fails with ErrWindowsBound while memory windows are bound to
// the registration, and with ErrInvalid if the MR was already freed.
func (f *FastMR) Dealloc() error {
	t := f.pd.t
	t.mu.Lock()
	if f.dead {
		t.mu.Unlock()
		return ErrInvalid
	}
	if f.cur != nil && f.cur.nmw > 0 {
		t.mu.Unlock()
		return ErrWindowsBound
	}
	f.dead = true
	old := f.unregister()
	delete(t.owners, f.slot)
	t.freeSlot(f.slot)
	f.pd.nmr--
	t.active--
	t.mu.Unlock()
	if old != nil {
		old.drain()
	}
	return nil
}

// unregister unpublishes the current registration and marks it dead; the
// caller drains it once it has dropped the table lock. Called with the
// table lock held.
func (f *FastMR) unregister() *MR {
	old := f.cur
	if old == nil {
		return nil
	}
	f.pd.t.publish(f.slot, nil)
	f.cur = nil
	old.refs.Add(deadBit)
	return old
}

// RegFast registers a fast-registration MR as a REG_MR work request does,
// for a QP whose view of its PD is pd; the device's requester calls it when
// it reaches the work request. key becomes the MR's lkey and rkey; its
// index bits name the MR (ErrInvalid if they name none), its key byte is
// chosen by the consumer. The MR registers the memory Map gave it, with
// the flags in access. As with rdma_rxe, the MR must be free, that is
// invalidated since its last registration (ErrNotFree), and belong to the
// QP's PD (ErrPD). In addition key must differ from the MR's current key
// (ErrInvalid), so that an rkey revoked by the last invalidation is not
// accepted again, the MR must have been mapped (ErrInvalid), and access
// must be valid as for RegMRIOVA (ErrInvalid).
func (pd *PD) RegFast(key uint32, access Access) error {
	t := pd.t
	if !access.valid() {
		return ErrInvalid
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.owners[t.slotOf(key)].(*FastMR)
	if !ok || f.dead || f.mem == nil {
		return ErrInvalid
	}
	if f.pd != pd.root {
		return ErrPD
	}
	if f.cur != nil {
		return ErrNotFree
	}
	if key == f.key.Load() || key == 0 {
		return ErrInvalid
	}
	n := &MR{pd: f.pd, key: key, access: access, iova: f.iova, mem: f.mem, slot: f.slot,
		region: f.region, kind: kindFast}
	t.publish(f.slot, n)
	f.cur = n
	f.key.Store(key)
	t.setKey(f.slot, key)
	return nil
}

// invalidate is Invalidate for a fast-registration MR, with the table lock
// held. It returns the registration to drain.
func (f *FastMR) invalidate(pd *PD, key uint32, remote bool) (*MR, error) {
	if key != f.key.Load() {
		return nil, ErrBadKey
	}
	if f.pd != pd.root {
		return nil, ErrPD
	}
	cur := f.cur
	if cur == nil {
		return nil, nil
	}
	if remote && cur.access&accessRemote == 0 {
		return nil, ErrNotInvalidatable
	}
	if cur.nmw > 0 {
		return nil, ErrWindowsBound
	}
	return f.unregister(), nil
}
