package mr

import (
	"errors"
	"math"
	"sync"
	"testing"
)

// winFixture is a PD with an MR that windows may be bound to, and two QP
// views of the PD.
type winFixture struct {
	tab      *Table
	pd       *PD
	qa, qb   *PD // views of pd for two QPs
	buf      []byte
	m        *MR // 4096 bytes at 0x10000, LOCAL_WRITE|MW_BIND
	ro       *MR // 64 bytes at 0x20000, MW_BIND only (read-only memory)
	noBind   *MR // 64 bytes at 0x30000, all rights but MW_BIND
	otherPD  *PD
	otherMR  *MR // in otherPD, with MW_BIND
	otherBuf []byte
}

func newWinFixture(t *testing.T) *winFixture {
	t.Helper()
	f := &winFixture{tab: newTestTable(t, 0)}
	f.pd = f.tab.AllocPD()
	f.qa, f.qb = f.pd.ForQP(), f.pd.ForQP()
	f.buf = alignedBuf(4096)
	f.m = mustReg(t, f.pd, f.buf, 0x10000, AccessLocalWrite|AccessMWBind)
	f.ro = mustReg(t, f.pd, alignedBuf(64), 0x20000, AccessMWBind)
	f.noBind = mustReg(t, f.pd, alignedBuf(64), 0x30000, accessAll&^AccessMWBind)
	f.otherPD = f.tab.AllocPD()
	f.otherBuf = alignedBuf(64)
	f.otherMR = mustReg(t, f.otherPD, f.otherBuf, 0x40000, AccessLocalWrite|AccessMWBind)
	return f
}

func (f *winFixture) mw(t *testing.T, typ MWType) *MW {
	t.Helper()
	w, err := f.pd.AllocMW(typ)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestBindMWChecks(t *testing.T) {
	f := newWinFixture(t)
	rw := AccessRemoteRead | AccessRemoteWrite
	for _, tc := range []struct {
		name string
		typ  MWType
		view *PD
		b    MWBind // MW filled in
		want error
	}{
		{"type 1 ok", MWType1, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 4096, Access: rw}, nil},
		{"type 2 ok", MWType2, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0x10100, Length: 1, Access: AccessRemoteAtomic}, nil},
		{"local write ignored", MWType2, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: AccessLocalWrite | AccessRemoteRead}, nil},
		{"QP of another PD", MWType2, f.otherPD.ForQP(), MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: rw}, ErrPD},
		{"QP of another PD, type 1", MWType1, f.otherPD, MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: rw}, ErrPD},
		{"MR of another PD", MWType2, f.qa, MWBind{LKey: f.otherMR.LKey(), Addr: 0x40000, Length: 8, Access: rw}, ErrPD},
		{"past the MR's end", MWType2, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0x10001, Length: 4096, Access: rw}, ErrBounds},
		{"before the MR", MWType1, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0xffff, Length: 2, Access: rw}, ErrBounds},
		{"wrapping range", MWType2, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0x10008, Length: math.MaxUint64, Access: rw}, ErrBounds},
		{"write window on read-only MR", MWType2, f.qa, MWBind{LKey: f.ro.LKey(), Addr: 0x20000, Length: 8, Access: AccessRemoteWrite}, ErrAccess},
		{"atomic window on read-only MR", MWType1, f.qa, MWBind{LKey: f.ro.LKey(), Addr: 0x20000, Length: 8, Access: AccessRemoteAtomic}, ErrAccess},
		{"read window on read-only MR", MWType2, f.qa, MWBind{LKey: f.ro.LKey(), Addr: 0x20000, Length: 8, Access: AccessRemoteRead}, nil},
		{"MR without MW_BIND", MWType2, f.qa, MWBind{LKey: f.noBind.LKey(), Addr: 0x30000, Length: 8, Access: AccessRemoteRead}, ErrAccess},
		{"MR without MW_BIND, type 1", MWType1, f.qa, MWBind{LKey: f.noBind.LKey(), Addr: 0x30000, Length: 8, Access: AccessRemoteRead}, ErrAccess},
		{"bad lkey", MWType2, f.qa, MWBind{LKey: f.m.LKey() ^ 0x55, Addr: 0x10000, Length: 8, Access: rw}, ErrBadKey},
		{"MW_BIND right in window", MWType2, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: AccessMWBind}, ErrInvalid},
		{"unknown right", MWType1, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: 1 << 9}, ErrInvalid},
		{"type 2 zero length", MWType2, f.qa, MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 0, Access: rw}, ErrInvalid},
		{"type 1 zero length", MWType1, f.qa, MWBind{Length: 0}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := f.mw(t, tc.typ)
			defer w.Dealloc()
			b := tc.b
			before := w.RKey()
			err := tc.view.BindMW(IncKey(before), &b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("BindMW: %v, want %v", err, tc.want)
			}
			_, _, _, bound := w.Bound()
			if err != nil {
				if w.RKey() != before || bound {
					t.Fatalf("failed bind changed the window: key %#08x -> %#08x, bound %v", before, w.RKey(), bound)
				}
				return
			}
			if w.RKey() != IncKey(before) || bound != (b.Length > 0) {
				t.Fatalf("key %#08x after %#08x, bound %v", w.RKey(), before, bound)
			}
		})
	}
}

func TestBindMWKeys(t *testing.T) {
	f := newWinFixture(t)
	w := f.mw(t, MWType2)
	b := MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: AccessRemoteRead}
	// The index bits of the new key name the window; the binder chooses
	// the key byte.
	k := w.RKey()
	if err := f.qa.BindMW(f.m.LKey()+1, &b); err != ErrInvalid {
		t.Fatalf("bind naming an MR instead of a window: %v", err)
	}
	if err := f.qa.BindMW(k&^0xff|(k+7)&0xff, &b); err != nil {
		t.Fatal(err)
	}
	if w.RKey() != k&^0xff|(k+7)&0xff {
		t.Fatalf("key %#08x after binding with byte %#02x", w.RKey(), (k+7)&0xff)
	}
	// A type 2 window must be invalidated before it is bound again, and
	// not with the key it had.
	if err := f.qa.BindMW(IncKey(w.RKey()), &b); err != ErrNotFree {
		t.Fatalf("bind of a bound type 2 window: %v", err)
	}
	if err := f.qa.Invalidate(w.RKey(), false); err != nil {
		t.Fatal(err)
	}
	if err := f.qa.BindMW(w.RKey(), &b); err != ErrInvalid {
		t.Fatalf("bind with the revoked key: %v", err)
	}
	// Deallocated windows cannot be bound.
	if err := w.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := f.qa.BindMW(w.NewKey(), &b); err != ErrInvalid {
		t.Fatalf("bind of a deallocated window: %v", err)
	}
	if err := w.Dealloc(); err != ErrInvalid {
		t.Fatalf("second Dealloc: %v", err)
	}
}

func TestWindowAccess(t *testing.T) {
	f := newWinFixture(t)
	for i := range f.buf {
		f.buf[i] = byte(i)
	}
	w1, w2 := f.mw(t, MWType1), f.mw(t, MWType2)
	// w1: read-only, 0x10100..0x10200; w2: write and atomic, 0x10800..0x10900.
	if err := f.qa.BindMW(w1.NewKey(), &MWBind{LKey: f.m.LKey(), Addr: 0x10100, Length: 0x100, Access: AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	if err := f.qa.BindMW(w2.NewKey(), &MWBind{LKey: f.m.LKey(), Addr: 0x10800, Length: 0x100, Access: AccessRemoteWrite | AccessRemoteAtomic}); err != nil {
		t.Fatal(err)
	}
	k1, k2 := w1.RKey(), w2.RKey()

	// In bounds, with the rights granted.
	dst := make([]byte, 16)
	if err := f.qa.ReadRemote(k1, 0x101f0, dst); err != nil || dst[0] != 0xf0 || dst[15] != 0xff {
		t.Fatalf("read through window: %v %x", err, dst)
	}
	if err := f.qb.ReadRemote(k1, 0x10100, dst); err != nil {
		t.Fatalf("type 1 window through another QP of the PD: %v", err)
	}
	if err := f.qa.WriteRemote(k2, 0x10808, []byte{1, 2, 3}); err != nil || f.buf[0x808] != 1 {
		t.Fatalf("write through window: %v", err)
	}
	if _, err := f.qa.FetchAdd(k2, 0x108f8, 1); err != nil {
		t.Fatalf("atomic through window: %v", err)
	}
	// Out of the window, though inside the MR.
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"read before window", f.qa.ReadRemote(k1, 0x100ff, dst[:1])},
		{"read past window", f.qa.ReadRemote(k1, 0x101f1, dst)},
		{"check past window", f.qa.CheckRemote(k1, 0x10100, 0x101, AccessRemoteRead)},
		{"write past window", f.qa.WriteRemote(k2, 0x108ff, []byte{1, 2})},
		{"atomic past window", func() error { _, err := f.qa.FetchAdd(k2, 0x10900, 1); return err }()},
	} {
		if tc.err != ErrBounds {
			t.Errorf("%s: %v, want ErrBounds", tc.name, tc.err)
		}
	}
	// Rights the window does not grant, though the MR's memory is
	// writable.
	if err := f.qa.WriteRemote(k1, 0x10100, []byte{1}); err != ErrAccess {
		t.Errorf("write through read window: %v", err)
	}
	if err := f.qa.ReadRemote(k2, 0x10800, dst); err != ErrAccess {
		t.Errorf("read through write window: %v", err)
	}
	// A type 2 window is reached only through the QP that bound it.
	if err := f.qb.WriteRemote(k2, 0x10800, []byte{1}); err != ErrBadKey {
		t.Errorf("type 2 window through another QP: %v", err)
	}
	if err := f.pd.WriteRemote(k2, 0x10800, []byte{1}); err != ErrBadKey {
		t.Errorf("type 2 window through the PD: %v", err)
	}
	// Window keys are not local keys.
	if _, err := f.qa.Gather([]SGE{{Addr: 0x10100, Length: 8, LKey: k1}}, 0, dst[:8]); err != ErrBadKey {
		t.Errorf("window key as lkey: %v", err)
	}
	// The MR has no remote rights of its own.
	if err := f.qa.ReadRemote(f.m.RKey(), 0x10100, dst); err != ErrAccess {
		t.Errorf("read through the MR's own key: %v", err)
	}
	// Another PD.
	if err := f.otherPD.ReadRemote(k1, 0x10100, dst); err != ErrPD {
		t.Errorf("window through another PD: %v", err)
	}

	// Type 1: a rebinding revokes the old key, a zero-length bind unbinds.
	if err := f.qa.BindMW(w1.NewKey(), &MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	if err := f.qa.ReadRemote(k1, 0x10100, dst); err != ErrBadKey {
		t.Errorf("old key after rebinding: %v", err)
	}
	if err := f.qa.ReadRemote(w1.RKey(), 0x10000, dst[:8]); err != nil {
		t.Errorf("new key after rebinding: %v", err)
	}
	k1 = w1.RKey()
	if err := f.qa.BindMW(w1.NewKey(), &MWBind{}); err != nil {
		t.Fatal(err)
	}
	if err := f.qa.ReadRemote(k1, 0x10000, dst[:8]); err != ErrBadKey {
		t.Errorf("key after zero-length bind: %v", err)
	}
	if err := f.qa.ReadRemote(w1.RKey(), 0x10000, dst[:8]); err != ErrBadKey {
		t.Errorf("unbound window's new key: %v", err)
	}
}

func TestInvalidate(t *testing.T) {
	f := newWinFixture(t)
	rw := AccessRemoteRead | AccessRemoteWrite
	dst := make([]byte, 8)

	// An MR from RegMR cannot be invalidated, read-only or not, locally or
	// remotely, and stays usable.
	full := mustReg(t, f.pd, alignedBuf(64), 0x50000, accessAll)
	ro := mustReg(t, f.pd, alignedBuf(64), 0x60000, AccessRemoteRead)
	for _, m := range []*MR{full, ro, f.m} {
		for _, remote := range []bool{true, false} {
			if err := f.qa.Invalidate(m.RKey(), remote); err != ErrNotInvalidatable {
				t.Fatalf("invalidate MR %v (remote %v): %v", m.Access(), remote, err)
			}
		}
		if !m.Valid() {
			t.Fatal("MR deregistered by a refused invalidation")
		}
	}
	if err := f.qa.ReadRemote(ro.RKey(), 0x60000, dst); err != nil {
		t.Fatalf("read-only MR after refused invalidation: %v", err)
	}
	if err := f.qa.Invalidate(0x12345678, true); err != ErrBadKey {
		t.Fatalf("invalidate a key naming nothing: %v", err)
	}

	// Type 1 windows cannot be invalidated.
	w1 := f.mw(t, MWType1)
	if err := f.qa.BindMW(w1.NewKey(), &MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: rw}); err != nil {
		t.Fatal(err)
	}
	for _, remote := range []bool{true, false} {
		if err := f.qa.Invalidate(w1.RKey(), remote); err != ErrNotInvalidatable {
			t.Fatalf("invalidate type 1 window (remote %v): %v", remote, err)
		}
	}
	if err := f.qa.ReadRemote(w1.RKey(), 0x10000, dst); err != nil {
		t.Fatalf("type 1 window after refused invalidation: %v", err)
	}

	// Type 2 windows: remotely only through the QP that bound them,
	// locally through any QP of the PD.
	w2 := f.mw(t, MWType2)
	bind := func() uint32 {
		t.Helper()
		if err := f.qa.BindMW(w2.NewKey(), &MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 8, Access: rw}); err != nil {
			t.Fatal(err)
		}
		return w2.RKey()
	}
	k := bind()
	if err := f.qb.Invalidate(k, true); err != ErrBadKey {
		t.Fatalf("remote invalidation through another QP: %v", err)
	}
	if err := f.otherPD.ForQP().Invalidate(k, false); err != ErrPD {
		t.Fatalf("local invalidation in another PD: %v", err)
	}
	if err := f.qa.Invalidate(k^1, true); err != ErrBadKey {
		t.Fatalf("invalidation with a wrong key byte: %v", err)
	}
	if err := f.qa.Invalidate(k, true); err != nil {
		t.Fatal(err)
	}
	if err := f.qa.ReadRemote(k, 0x10000, dst); err != ErrBadKey {
		t.Fatalf("read after invalidation: %v", err)
	}
	if err := f.qa.Invalidate(k, true); err != ErrBadKey {
		t.Fatalf("second invalidation: %v", err)
	}
	k = bind()
	if err := f.qb.Invalidate(k, false); err != nil {
		t.Fatalf("local invalidation through another QP of the PD: %v", err)
	}

	// The MR cannot go while windows are bound to it.
	if err := f.m.Dereg(); err != ErrWindowsBound {
		t.Fatalf("Dereg with a window bound: %v", err)
	}
	if _, err := f.m.Rereg(0, nil, nil, 0, 0); err != ErrWindowsBound {
		t.Fatalf("Rereg with a window bound: %v", err)
	}
	if err := f.pd.Dealloc(); err != ErrBusy {
		t.Fatalf("PD Dealloc: %v", err)
	}
	if err := f.qa.BindMW(w1.NewKey(), &MWBind{}); err != nil {
		t.Fatal(err)
	}
	if err := f.m.Dereg(); err != nil {
		t.Fatalf("Dereg after the last window was unbound: %v", err)
	}
}

func TestFastMR(t *testing.T) {
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	qa, qb := pd.ForQP(), pd.ForQP()
	buf := alignedBuf(4096)
	fr, err := pd.AllocMR(4096)
	if err != nil {
		t.Fatal(err)
	}
	dst := make([]byte, 8)
	if err := qa.ReadRemote(fr.RKey(), 0x1000, dst); err != ErrBadKey {
		t.Fatalf("free MR's key: %v", err)
	}
	good := AccessLocalWrite | AccessRemoteRead | AccessRemoteWrite | AccessMWBind
	if err := qa.RegFast(IncKey(fr.LKey()), good); err != ErrInvalid {
		t.Errorf("REG_MR before Map: %v", err)
	}
	for _, tc := range []struct {
		name string
		r    Region
		iova uint64
	}{
		{"longer than allocated", Slice(alignedBuf(4097)), 0x1000},
		{"empty", Slice(nil), 0x1000},
		{"nil", nil, 0x1000},
		{"wraps", Slice(buf), math.MaxUint64 - 10},
	} {
		if err := fr.Map(tc.r, tc.iova); err != ErrInvalid {
			t.Errorf("Map %s: %v", tc.name, err)
		}
	}
	if err := fr.Map(Slice(buf), 0x1000); err != nil {
		t.Fatal(err)
	}
	other := tab.AllocPD()
	for _, tc := range []struct {
		name   string
		key    uint32
		access Access
		want   error
	}{
		{"another index", fr.LKey() ^ 0x100, good, ErrInvalid},
		{"the current key", fr.LKey(), good, ErrInvalid},
		{"remote write without local write", IncKey(fr.LKey()), AccessRemoteWrite, ErrInvalid},
		{"unknown access bit", IncKey(fr.LKey()), 1 << 9, ErrInvalid},
	} {
		if err := qa.RegFast(tc.key, tc.access); err != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := other.ForQP().RegFast(IncKey(fr.LKey()), good); err != ErrPD {
		t.Errorf("REG_MR by a QP of another PD: %v", err)
	}
	k1 := IncKey(fr.LKey())
	if err := qa.RegFast(k1, good); err != nil {
		t.Fatal(err)
	}
	if fr.LKey() != k1 || fr.RKey() != k1 {
		t.Fatalf("keys %#08x %#08x after REG_MR with %#08x", fr.LKey(), fr.RKey(), k1)
	}
	if iova, n, acc, ok := fr.Registered(); !ok || iova != 0x1000 || n != 4096 || acc != good {
		t.Fatalf("Registered: %#x %d %v %v", iova, n, acc, ok)
	}
	if err := qb.WriteRemote(k1, 0x1ff8, []byte{9}); err != nil || buf[0xff8] != 9 {
		t.Fatalf("write through registered MR: %v", err)
	}
	if _, err := qb.Gather([]SGE{{Addr: 0x1000, Length: 8, LKey: k1}}, 0, dst); err != nil {
		t.Fatalf("local use: %v", err)
	}
	if err := qa.RegFast(IncKey(k1), good); err != ErrNotFree {
		t.Fatalf("REG_MR of a registered MR: %v", err)
	}
	// A window on the registration keeps it from being invalidated.
	w, _ := pd.AllocMW(MWType2)
	if err := qa.BindMW(w.NewKey(), &MWBind{LKey: k1, Addr: 0x1000, Length: 16, Access: AccessRemoteRead}); err != nil {
		t.Fatal(err)
	}
	if err := qa.Invalidate(k1, false); err != ErrWindowsBound {
		t.Fatalf("invalidate with a window bound: %v", err)
	}
	if err := fr.Dealloc(); err != ErrWindowsBound {
		t.Fatalf("Dealloc with a window bound: %v", err)
	}
	if err := qa.Invalidate(w.RKey(), false); err != nil {
		t.Fatal(err)
	}
	// Remote invalidation by any QP of the PD; the key is refused after.
	if err := qb.Invalidate(k1, true); err != nil {
		t.Fatal(err)
	}
	if err := qa.ReadRemote(k1, 0x1000, dst); err != ErrBadKey {
		t.Fatalf("stale key after invalidation: %v", err)
	}
	if err := qa.Invalidate(k1, true); err != nil {
		t.Fatalf("invalidating a free MR with its last key: %v", err)
	}
	// Registered again with a new key: the stale key stays refused.
	k2 := fr.NewKey()
	if k2 == k1 || k2>>8 != k1>>8 {
		t.Fatalf("NewKey %#08x after %#08x", k2, k1)
	}
	if err := fr.Map(Slice(buf[:64]), 0x9000); err != nil {
		t.Fatal(err)
	}
	if err := qa.RegFast(k2, AccessLocalWrite); err != nil {
		t.Fatal(err)
	}
	if err := qa.ReadRemote(k1, 0x1000, dst); err != ErrBadKey {
		t.Fatalf("stale key after re-registration: %v", err)
	}
	// Registered without remote access: a peer cannot invalidate it.
	if err := qa.Invalidate(k2, true); err != ErrNotInvalidatable {
		t.Fatalf("remote invalidation of a local-only registration: %v", err)
	}
	if err := qa.Invalidate(k2, false); err != nil {
		t.Fatalf("local invalidation: %v", err)
	}
	if err := pd.Dealloc(); err != ErrBusy {
		t.Fatalf("PD Dealloc: %v", err)
	}
	if err := fr.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := w.Dealloc(); err != nil {
		t.Fatal(err)
	}
	if err := pd.Dealloc(); err != nil {
		t.Fatalf("PD Dealloc after freeing everything: %v", err)
	}
	if err := pd.ForQP().Dealloc(); err != ErrInvalid {
		t.Fatalf("Dealloc of a view: %v", err)
	}
}

func TestWindowDeallocDuringAccess(t *testing.T) {
	// Reads through a window race with its deallocation: each read either
	// succeeds or fails with ErrBadKey, and none succeeds after Dealloc
	// returned.
	f := newWinFixture(t)
	for round := 0; round < 50; round++ {
		w := f.mw(t, MWType1)
		if err := f.qa.BindMW(w.NewKey(), &MWBind{LKey: f.m.LKey(), Addr: 0x10000, Length: 4096, Access: AccessRemoteRead}); err != nil {
			t.Fatal(err)
		}
		key := w.RKey()
		var done sync.WaitGroup
		var after bool
		var mu sync.Mutex
		done.Add(1)
		go func() {
			defer done.Done()
			dst := make([]byte, 4096)
			for {
				mu.Lock()
				gone := after
				mu.Unlock()
				err := f.qa.ReadRemote(key, 0x10000, dst)
				if gone && err == nil {
					t.Error("read through a deallocated window")
					return
				}
				if err != nil {
					if err != ErrBadKey {
						t.Errorf("read: %v", err)
					}
					return
				}
			}
		}()
		if err := w.Dealloc(); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		after = true
		mu.Unlock()
		done.Wait()
	}
	if err := f.m.Dereg(); err != nil {
		t.Fatalf("Dereg after the windows went: %v", err)
	}
}
