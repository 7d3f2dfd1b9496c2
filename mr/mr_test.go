package mr

import (
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// newTestTable returns a table with a seeded random source.
func newTestTable(tb testing.TB, max int) *Table {
	tb.Helper()
	return NewTable(Options{Rand: rand.NewPCG(1, 2), MaxMR: max})
}

// alignedBuf returns an n-byte slice whose first byte is 8-byte aligned.
func alignedBuf(n int) []byte {
	w := make([]uint64, (n+7)/8)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), n)[:n:n]
}

func mustReg(tb testing.TB, pd *PD, buf []byte, iova uint64, access Access) *MR {
	tb.Helper()
	m, err := pd.RegMRIOVA(Slice(buf), iova, access)
	if err != nil {
		tb.Fatalf("RegMRIOVA(len %d, iova %#x, %v): %v", len(buf), iova, access, err)
	}
	return m
}

func TestAccessString(t *testing.T) {
	for _, tc := range []struct {
		a    Access
		want string
	}{
		{0, "0"},
		{AccessLocalWrite, "LOCAL_WRITE"},
		{AccessLocalWrite | AccessRemoteRead, "LOCAL_WRITE|REMOTE_READ"},
		{accessAll, "LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC|MW_BIND|ON_DEMAND"},
		{AccessRemoteRead | 0x30, "REMOTE_READ|MW_BIND|0x20"},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("Access(%#x).String() = %q, want %q", uint32(tc.a), got, tc.want)
		}
	}
}

func TestRegValidation(t *testing.T) {
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	dead := tab.AllocPD()
	if err := dead.Dealloc(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)

	// Every combination of the four flags: valid unless remote write or
	// remote atomic comes without local write.
	for a := Access(0); a <= accessAll; a++ {
		if a&^accessAll != 0 {
			continue
		}
		m, err := pd.RegMR(Slice(buf), a)
		wantOK := a&(AccessRemoteWrite|AccessRemoteAtomic) == 0 || a&AccessLocalWrite != 0
		if wantOK != (err == nil) {
			t.Errorf("RegMR(%v) error %v, want ok=%v", a, err, wantOK)
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("RegMR(%v) error %v, want ErrInvalid", a, err)
			}
			continue
		}
		if m.Access() != a {
			t.Errorf("Access() = %v, want %v", m.Access(), a)
		}
		if err := m.Dereg(); err != nil {
			t.Fatal(err)
		}
	}

	if _, err := pd.RegMR(nil, 0); err != ErrInvalid {
		t.Errorf("RegMR(nil) = %v, want ErrInvalid", err)
	}
	if _, err := pd.RegMRIOVA(nil, 0, 0); err != ErrInvalid {
		t.Errorf("RegMRIOVA(nil) = %v, want ErrInvalid", err)
	}
	for _, tc := range []struct {
		name   string
		pd     *PD
		buf    []byte
		iova   uint64
		access Access
		want   error
	}{
		{"unknown access bit", pd, buf, 0x1000, AccessLocalWrite | 1<<5, ErrInvalid},
		{"nil region", pd, nil, 0x1000, 0, ErrInvalid},
		{"empty region", pd, buf[:0], 0x1000, 0, ErrInvalid},
		{"iova wraps", pd, buf, math.MaxUint64 - 4094, 0, ErrInvalid},
		{"iova max", pd, buf, math.MaxUint64, 0, ErrInvalid},
		{"iova ends at 2^64", pd, buf, math.MaxUint64 - 4095, 0, nil},
		{"iova zero", pd, buf, 0, 0, nil},
		{"one byte at top", pd, buf[:1], math.MaxUint64, 0, nil},
		{"deallocated pd", dead, buf, 0x1000, 0, ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := tc.pd.RegMRIOVA(Slice(tc.buf), tc.iova, tc.access)
			if !errors.Is(err, tc.want) {
				t.Fatalf("RegMRIOVA error %v, want %v", err, tc.want)
			}
			if err == nil {
				if m.IOVA() != tc.iova || m.Len() != uint64(len(tc.buf)) {
					t.Errorf("MR at %#x+%d, want %#x+%d", m.IOVA(), m.Len(), tc.iova, len(tc.buf))
				}
				m.Dereg()
			}
		})
	}
	if n := tab.NumMR(); n != 0 {
		t.Errorf("NumMR() = %d after deregistering everything", n)
	}
}

func TestDefaultIOVA(t *testing.T) {
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	buf := make([]byte, 64)
	m, err := pd.RegMR(Slice(buf), AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if m.IOVA() != AddrOf(buf) {
		t.Fatalf("IOVA() = %#x, want address of the slice %#x", m.IOVA(), AddrOf(buf))
	}
	if m.PD() != pd || m.Region().Bytes() == nil || pd.Table() != tab {
		t.Fatal("accessors do not return the registration's values")
	}
	// An SGE built from the address of a sub-slice names those bytes.
	copy(buf[10:], "hello")
	got := make([]byte, 5)
	if _, err := pd.Gather([]SGE{{Addr: AddrOf(buf[10:]), Length: 5, LKey: m.LKey()}}, 0, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != "hello" {
		t.Fatalf("Gather = %q", got)
	}
	if err := pd.ReadRemote(m.RKey(), AddrOf(buf[10:]), got); err != nil || string(got) != "hello" {
		t.Fatalf("ReadRemote = %q, %v", got, err)
	}
}

// fixture is a set of MRs covering every access combination the error tests
// need.
type fixture struct {
	tab      *Table
	pdA, pdB *PD
	all      *MR // LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC at 0x10000
	none     *MR // no access flags
	lw       *MR // LOCAL_WRITE
	rr       *MR // REMOTE_READ
	rw       *MR // LOCAL_WRITE|REMOTE_WRITE
	ra       *MR // LOCAL_WRITE|REMOTE_ATOMIC
	top      *MR // all flags, last byte at 2^64-1
	other    *MR // all flags, in pdB
	rereged  uint32
	deregged uint32
}

const (
	fixIOVA = 0x10000
	fixLen  = 4096
	topIOVA = math.MaxUint64 - fixLen + 1
)

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{tab: newTestTable(t, 0)}
	f.pdA, f.pdB = f.tab.AllocPD(), f.tab.AllocPD()
	reg := func(pd *PD, iova uint64, a Access) *MR {
		return mustReg(t, pd, alignedBuf(fixLen), iova, a)
	}
	f.all = reg(f.pdA, fixIOVA, accessAll)
	f.none = reg(f.pdA, fixIOVA, 0)
	f.lw = reg(f.pdA, fixIOVA, AccessLocalWrite)
	f.rr = reg(f.pdA, fixIOVA, AccessRemoteRead)
	f.rw = reg(f.pdA, fixIOVA, AccessLocalWrite|AccessRemoteWrite)
	f.ra = reg(f.pdA, fixIOVA, AccessLocalWrite|AccessRemoteAtomic)
	f.top = reg(f.pdA, topIOVA, accessAll)
	f.other = reg(f.pdB, fixIOVA, accessAll)

	old := reg(f.pdA, fixIOVA, accessAll)
	f.rereged = old.RKey()
	if _, err := old.Rereg(0, nil, nil, 0, 0); err != nil {
		t.Fatal(err)
	}
	gone := reg(f.pdA, fixIOVA, accessAll)
	f.deregged = gone.RKey()
	if err := gone.Dereg(); err != nil {
		t.Fatal(err)
	}
	return f
}

func TestRemoteChecks(t *testing.T) {
	f := newFixture(t)
	pd := f.pdA
	end := uint64(fixIOVA + fixLen)
	type tc struct {
		name   string
		rkey   uint32
		va     uint64
		length uint64
		access Access
		want   error
	}
	cases := []tc{
		{"ok read", f.all.RKey(), fixIOVA, fixLen, AccessRemoteRead, nil},
		{"ok write", f.rw.RKey(), fixIOVA + 8, 16, AccessRemoteWrite, nil},
		{"ok several flags", f.all.RKey(), fixIOVA, 8, AccessRemoteRead | AccessRemoteWrite, nil},
		{"key zero", 0, fixIOVA, 8, AccessRemoteRead, ErrBadKey},
		{"unregistered key", f.all.RKey() ^ 0x5a5a5a00, fixIOVA, 8, AccessRemoteRead, ErrBadKey},
		{"wrong key byte", f.all.RKey() ^ 0x01, fixIOVA, 8, AccessRemoteRead, ErrBadKey},
		{"stale after rereg", f.rereged, fixIOVA, 8, AccessRemoteRead, ErrBadKey},
		{"stale after dereg", f.deregged, fixIOVA, 8, AccessRemoteRead, ErrBadKey},
		{"other pd", f.other.RKey(), fixIOVA, 8, AccessRemoteRead, ErrPD},
		{"no remote access", f.none.RKey(), fixIOVA, 8, 0, ErrAccess},
		{"local write only", f.lw.RKey(), fixIOVA, 8, 0, ErrAccess},
		{"missing remote read", f.rw.RKey(), fixIOVA, 8, AccessRemoteRead, ErrAccess},
		{"missing remote write", f.rr.RKey(), fixIOVA, 8, AccessRemoteWrite, ErrAccess},
		{"missing remote atomic", f.rw.RKey(), fixIOVA, 8, AccessRemoteAtomic, ErrAccess},
		{"missing local write", f.rr.RKey(), fixIOVA, 8, AccessLocalWrite, ErrAccess},
		{"one flag of two", f.rr.RKey(), fixIOVA, 8, AccessRemoteRead | AccessRemoteWrite, ErrAccess},
		{"below start", f.all.RKey(), fixIOVA - 1, 8, AccessRemoteRead, ErrBounds},
		{"far below start", f.all.RKey(), 0, 8, AccessRemoteRead, ErrBounds},
		{"straddles end", f.all.RKey(), end - 4, 8, AccessRemoteRead, ErrBounds},
		{"at end", f.all.RKey(), end, 1, AccessRemoteRead, ErrBounds},
		{"after end", f.all.RKey(), end + 100, 1, AccessRemoteRead, ErrBounds},
		{"longer than mr", f.all.RKey(), fixIOVA, fixLen + 1, AccessRemoteRead, ErrBounds},
		{"length 2^64-1", f.all.RKey(), fixIOVA, math.MaxUint64, AccessRemoteRead, ErrBounds},
		{"va+len wraps to inside", f.all.RKey(), fixIOVA + 8, math.MaxUint64 - 7, AccessRemoteRead, ErrBounds},
		{"va at 2^64-1 wraps", f.all.RKey(), math.MaxUint64, 2, AccessRemoteRead, ErrBounds},
		{"top whole", f.top.RKey(), topIOVA, fixLen, AccessRemoteRead, nil},
		{"top last byte", f.top.RKey(), math.MaxUint64, 1, AccessRemoteRead, nil},
		{"top past 2^64", f.top.RKey(), math.MaxUint64, 2, AccessRemoteRead, ErrBounds},
		{"top longer than mr", f.top.RKey(), topIOVA, fixLen + 1, AccessRemoteRead, ErrBounds},
		{"top below start", f.top.RKey(), topIOVA - 1, 1, AccessRemoteRead, ErrBounds},
		// Zero-length accesses are not checked at all (IBTA C9-88).
		{"zero length bad key", 0xdeadbeef, 0, 0, AccessRemoteRead, nil},
		{"zero length no access", f.none.RKey(), fixIOVA, 0, AccessRemoteWrite, nil},
		{"zero length out of bounds", f.all.RKey(), math.MaxUint64, 0, AccessRemoteRead, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := pd.CheckRemote(c.rkey, c.va, c.length, c.access); err != c.want {
				t.Errorf("CheckRemote = %v, want %v", err, c.want)
			}
			if c.length > 64 {
				return
			}
			buf := make([]byte, c.length)
			if c.access == AccessRemoteRead || c.access == 0 && c.want != nil {
				if err := pd.ReadRemote(c.rkey, c.va, buf); err != c.want {
					t.Errorf("ReadRemote = %v, want %v", err, c.want)
				}
			}
			if c.access == AccessRemoteWrite || c.access == 0 && c.want != nil {
				if err := pd.WriteRemote(c.rkey, c.va, buf); err != c.want {
					t.Errorf("WriteRemote = %v, want %v", err, c.want)
				}
			}
		})
	}
}

func TestLocalChecks(t *testing.T) {
	f := newFixture(t)
	pd := f.pdA
	for _, c := range []struct {
		name   string
		lkey   uint32
		va     uint64
		length uint64
		access Access
		want   error
	}{
		{"ok read", f.none.LKey(), fixIOVA, fixLen, 0, nil},
		{"ok write", f.lw.LKey(), fixIOVA, fixLen, AccessLocalWrite, nil},
		{"ok write via remote write", f.rw.LKey(), fixIOVA, 8, AccessLocalWrite, nil},
		{"missing local write", f.none.LKey(), fixIOVA, 8, AccessLocalWrite, ErrAccess},
		{"missing local write remote read", f.rr.LKey(), fixIOVA, 8, AccessLocalWrite, ErrAccess},
		{"bad key", 0x12345678, fixIOVA, 8, 0, ErrBadKey},
		{"stale after rereg", f.rereged, fixIOVA, 8, 0, ErrBadKey},
		{"stale after dereg", f.deregged, fixIOVA, 8, 0, ErrBadKey},
		{"other pd", f.other.LKey(), fixIOVA, 8, 0, ErrPD},
		{"below start", f.lw.LKey(), fixIOVA - 1, 2, 0, ErrBounds},
		{"past end", f.lw.LKey(), fixIOVA + fixLen - 1, 2, 0, ErrBounds},
		{"wraps", f.top.LKey(), math.MaxUint64 - 1, 3, 0, ErrBounds},
		{"zero length bad key", 0, 0, 0, AccessLocalWrite, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			if err := pd.CheckLocal(c.lkey, c.va, c.length, c.access); err != c.want {
				t.Errorf("CheckLocal = %v, want %v", err, c.want)
			}
			if c.length == 0 || c.length > 64 {
				return
			}
			sgl := []SGE{{Addr: c.va, Length: uint32(c.length), LKey: c.lkey}}
			buf := make([]byte, c.length)
			if c.access == 0 {
				if _, err := pd.Gather(sgl, 0, buf); err != c.want {
					t.Errorf("Gather = %v, want %v", err, c.want)
				}
			}
			want := c.want
			if want == nil && c.access&AccessLocalWrite == 0 && mustLookup(t, pd, c.lkey).Access()&AccessLocalWrite == 0 {
				want = ErrAccess
			}
			if _, err := pd.Scatter(sgl, 0, buf); err != want {
				t.Errorf("Scatter = %v, want %v", err, want)
			}
		})
	}
}

func TestAtomicErrors(t *testing.T) {
	f := newFixture(t)
	pd := f.pdA
	// An MR whose IOVA is 8-byte aligned but whose memory is not.
	skew := mustReg(t, pd, alignedBuf(64)[1:], 0x8000, accessAll)
	end := uint64(fixIOVA + fixLen)
	for _, c := range []struct {
		name string
		rkey uint32
		va   uint64
		want error
	}{
		{"ok", f.all.RKey(), fixIOVA, nil},
		{"ok atomic only", f.ra.RKey(), end - 8, nil},
		{"ok top", f.top.RKey(), math.MaxUint64 - 7, nil},
		{"bad key", 0x1234, fixIOVA, ErrBadKey},
		{"stale after rereg", f.rereged, fixIOVA, ErrBadKey},
		{"stale after dereg", f.deregged, fixIOVA, ErrBadKey},
		{"other pd", f.other.RKey(), fixIOVA, ErrPD},
		{"no atomic access", f.rw.RKey(), fixIOVA, ErrAccess},
		{"no access", f.none.RKey(), fixIOVA, ErrAccess},
		{"misaligned 1", f.all.RKey(), fixIOVA + 1, ErrAlignment},
		{"misaligned 4", f.all.RKey(), fixIOVA + 4, ErrAlignment},
		{"misaligned 7", f.all.RKey(), fixIOVA + 7, ErrAlignment},
		{"misaligned past end", f.all.RKey(), end - 4, ErrAlignment},
		{"at end", f.all.RKey(), end, ErrBounds},
		{"below start", f.all.RKey(), fixIOVA - 8, ErrBounds},
		{"top wraps", f.top.RKey(), math.MaxUint64 - 3, ErrAlignment},
		{"misaligned memory", skew.RKey(), 0x8000, ErrAlignment},
	} {
		t.Run(c.name, func(t *testing.T) {
			if _, err := pd.FetchAdd(c.rkey, c.va, 1); err != c.want {
				t.Errorf("FetchAdd = %v, want %v", err, c.want)
			}
			if _, err := pd.CompareSwap(c.rkey, c.va, 0, 1); err != c.want {
				t.Errorf("CompareSwap = %v, want %v", err, c.want)
			}
		})
	}
}

func TestAtomicSemantics(t *testing.T) {
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	buf := alignedBuf(16)
	m := mustReg(t, pd, buf, 0x1000, accessAll)
	binary.NativeEndian.PutUint64(buf[8:], 40)

	old, err := pd.FetchAdd(m.RKey(), 0x1008, 2)
	if err != nil || old != 40 {
		t.Fatalf("FetchAdd = %d, %v; want 40", old, err)
	}
	if v := binary.NativeEndian.Uint64(buf[8:]); v != 42 {
		t.Fatalf("word = %d after FetchAdd, want 42 in host byte order", v)
	}
	old, err = pd.FetchAdd(m.RKey(), 0x1008, math.MaxUint64) // adds -1, wrapping
	if err != nil || old != 42 || binary.NativeEndian.Uint64(buf[8:]) != 41 {
		t.Fatalf("FetchAdd(-1) = %d, %v; word %d", old, err, binary.NativeEndian.Uint64(buf[8:]))
	}
	old, err = pd.CompareSwap(m.RKey(), 0x1008, 7, 100)
	if err != nil || old != 41 || binary.NativeEndian.Uint64(buf[8:]) != 41 {
		t.Fatalf("failed CompareSwap = %d, %v; word %d, want unchanged 41", old, err, binary.NativeEndian.Uint64(buf[8:]))
	}
	old, err = m.CompareSwap(0x1008, 41, 100)
	if err != nil || old != 41 || binary.NativeEndian.Uint64(buf[8:]) != 100 {
		t.Fatalf("CompareSwap = %d, %v; word %d, want 100", old, err, binary.NativeEndian.Uint64(buf[8:]))
	}
	if binary.NativeEndian.Uint64(buf) != 0 {
		t.Fatal("neighbouring word modified")
	}
}

func TestHeldMRAfterDereg(t *testing.T) {
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	buf := alignedBuf(64)
	m := mustReg(t, pd, buf, 0x1000, accessAll)
	held, err := pd.LookupRKey(m.RKey(), AccessRemoteWrite)
	if err != nil || held != m {
		t.Fatalf("LookupRKey = %p, %v", held, err)
	}
	if err := held.Write(0x1000, []byte{1}); err != nil || !held.Valid() {
		t.Fatalf("Write before Dereg: %v", err)
	}
	if err := m.Dereg(); err != nil {
		t.Fatal(err)
	}
	if held.Valid() {
		t.Error("Valid() after Dereg")
	}
	p := make([]byte, 8)
	for name, err := range map[string]error{
		"Check":       held.Check(0x1000, 8),
		"Read":        held.Read(0x1000, p),
		"Write":       held.Write(0x1000, p),
		"Write OOB":   held.Write(0x5000, p),
		"CompareSwap": second(held.CompareSwap(0x1000, 0, 1)),
		"FetchAdd":    second(held.FetchAdd(0x1000, 1)),
		"Dereg":       held.Dereg(),
		"Rereg":       second(held.Rereg(0, nil, nil, 0, 0)),
	} {
		if err != ErrDeregistered {
			t.Errorf("%s after Dereg = %v, want ErrDeregistered", name, err)
		}
	}
	if _, err := pd.LookupRKey(m.RKey(), 0); err != ErrBadKey {
		t.Errorf("LookupRKey after Dereg = %v, want ErrBadKey", err)
	}
	if _, err := pd.LookupLKey(m.LKey(), 0); err != ErrBadKey {
		t.Errorf("LookupLKey after Dereg = %v, want ErrBadKey", err)
	}
	if buf[0] != 1 || buf[1] != 0 {
		t.Error("memory written after Dereg")
	}
	// Zero-length operations touch nothing and succeed.
	if err := held.Write(0x1000, nil); err != nil {
		t.Errorf("zero-length Write = %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestMRMethodErrors(t *testing.T) {
	f := newFixture(t)
	p := make([]byte, 8)
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"read ok", f.none.Read(fixIOVA, p), nil},
		{"read oob", f.none.Read(fixIOVA+fixLen-4, p), ErrBounds},
		{"write no local write", f.rr.Write(fixIOVA, p), ErrAccess},
		{"write ok", f.lw.Write(fixIOVA, p), nil},
		{"write oob", f.lw.Write(fixIOVA-1, p), ErrBounds},
		{"check ok", f.none.Check(fixIOVA, fixLen), nil},
		{"check oob", f.none.Check(fixIOVA, fixLen+1), ErrBounds},
		{"check zero", f.none.Check(0, 0), nil},
		{"fetchadd no atomic", second(f.rw.FetchAdd(fixIOVA, 1)), ErrAccess},
		{"cas no atomic", second(f.lw.CompareSwap(fixIOVA, 0, 1)), ErrAccess},
		{"cas misaligned", second(f.ra.CompareSwap(fixIOVA+2, 0, 1)), ErrAlignment},
		{"fetchadd oob", second(f.ra.FetchAdd(fixIOVA+fixLen, 1)), ErrBounds},
	} {
		if c.err != c.want {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	for _, c := range []struct {
		name   string
		key    uint32
		access Access
		want   error
		remote bool
	}{
		{"lkey ok", f.none.LKey(), 0, nil, false},
		{"lkey needs write", f.none.LKey(), AccessLocalWrite, ErrAccess, false},
		{"lkey other pd", f.other.LKey(), 0, ErrPD, false},
		{"rkey no remote", f.lw.RKey(), 0, ErrAccess, true},
		{"rkey ok any remote", f.rr.RKey(), 0, nil, true},
		{"rkey other pd", f.other.RKey(), AccessRemoteRead, ErrPD, true},
	} {
		var err error
		if c.remote {
			_, err = f.pdA.LookupRKey(c.key, c.access)
		} else {
			_, err = f.pdA.LookupLKey(c.key, c.access)
		}
		if err != c.want {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

func TestRereg(t *testing.T) {
	tab := newTestTable(t, 0)
	pdA, pdB := tab.AllocPD(), tab.AllocPD()
	buf := alignedBuf(64)
	m := mustReg(t, pdA, buf, 0x1000, AccessLocalWrite)

	// Flags 0: new key, same slot, another key byte.
	n, err := m.Rereg(0, nil, nil, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n.LKey()>>8 != m.LKey()>>8 || n.LKey() == m.LKey() {
		t.Errorf("rereg key %#08x after %#08x: want same index, another key byte", n.LKey(), m.LKey())
	}
	if m.Valid() || !n.Valid() {
		t.Fatal("old MR valid or new MR invalid after Rereg")
	}
	if _, err := pdA.LookupLKey(m.LKey(), 0); err != ErrBadKey {
		t.Errorf("old key after Rereg: %v", err)
	}
	if got, err := pdA.LookupLKey(n.LKey(), 0); got != n || err != nil {
		t.Errorf("new key after Rereg: %p, %v", got, err)
	}
	if n.IOVA() != 0x1000 || n.Access() != AccessLocalWrite || n.PD() != pdA {
		t.Error("Rereg(0) changed attributes")
	}

	// Failures leave the MR untouched.
	for _, c := range []struct {
		name  string
		flags ReregFlags
		pd    *PD
		r     Region
		iova  uint64
		a     Access
	}{
		{"unknown flag", 8, nil, nil, 0, 0},
		{"remote write without local", ReregChangeAccess, nil, nil, 0, AccessRemoteWrite},
		{"nil region", ReregChangeTranslation, nil, nil, 0, 0},
		{"empty region", ReregChangeTranslation, nil, Slice{}, 0, 0},
		{"iova wraps", ReregChangeTranslation, nil, Slice(buf), math.MaxUint64, 0},
		{"nil pd", ReregChangePD, nil, nil, 0, 0},
		{"pd of other table", ReregChangePD, newTestTable(t, 0).AllocPD(), nil, 0, 0},
	} {
		if _, err := n.Rereg(c.flags, c.pd, c.r, c.iova, c.a); err != ErrInvalid {
			t.Errorf("Rereg %s = %v, want ErrInvalid", c.name, err)
		}
		if !n.Valid() {
			t.Fatalf("Rereg %s invalidated the MR", c.name)
		}
	}

	// Change everything.
	buf2 := alignedBuf(128)
	o, err := n.Rereg(ReregChangeTranslation|ReregChangePD|ReregChangeAccess, pdB, Slice(buf2), 0x9000, accessAll)
	if err != nil {
		t.Fatal(err)
	}
	if o.PD() != pdB || o.IOVA() != 0x9000 || o.Len() != 128 || o.Access() != accessAll {
		t.Errorf("Rereg attributes: pd %p iova %#x len %d access %v", o.PD(), o.IOVA(), o.Len(), o.Access())
	}
	if err := pdB.WriteRemote(o.RKey(), 0x9000+120, []byte("12345678")); err != nil {
		t.Fatal(err)
	}
	if string(buf2[120:]) != "12345678" {
		t.Error("WriteRemote after Rereg did not reach the new memory")
	}
	if _, err := pdA.LookupLKey(o.LKey(), 0); err != ErrPD {
		t.Errorf("old PD lookup after ChangePD = %v, want ErrPD", err)
	}
	if err := pdA.Dealloc(); err != nil {
		t.Errorf("Dealloc of the PD the MR left: %v", err)
	}
	if err := pdB.Dealloc(); err != ErrBusy {
		t.Errorf("Dealloc of the PD the MR moved to: %v, want ErrBusy", err)
	}
	if _, err := o.Rereg(ReregChangePD, pdA, nil, 0, 0); err != ErrInvalid {
		t.Errorf("Rereg to a deallocated PD = %v, want ErrInvalid", err)
	}
	if err := o.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := pdB.Dealloc(); err != nil {
		t.Error(err)
	}
}

func TestDealloc(t *testing.T) {
	tab := newTestTable(t, 0)
	pd := tab.AllocPD()
	m := mustReg(t, pd, make([]byte, 8), 0, 0)
	m2 := mustReg(t, pd, make([]byte, 8), 0, 0)
	if err := pd.Dealloc(); err != ErrBusy {
		t.Fatalf("Dealloc with MRs = %v, want ErrBusy", err)
	}
	m.Dereg()
	if err := pd.Dealloc(); err != ErrBusy {
		t.Fatalf("Dealloc with one MR = %v, want ErrBusy", err)
	}
	m2.Dereg()
	if err := pd.Dealloc(); err != nil {
		t.Fatalf("Dealloc = %v", err)
	}
	if err := pd.Dealloc(); err != ErrInvalid {
		t.Fatalf("second Dealloc = %v, want ErrInvalid", err)
	}
	if _, err := pd.RegMR(Slice(make([]byte, 8)), 0); err != ErrInvalid {
		t.Fatalf("RegMR on deallocated PD = %v, want ErrInvalid", err)
	}
}

func TestTableFull(t *testing.T) {
	tab := newTestTable(t, 3)
	pd := tab.AllocPD()
	var ms []*MR
	for range 3 {
		ms = append(ms, mustReg(t, pd, make([]byte, 8), 0, 0))
	}
	if _, err := pd.RegMR(Slice(make([]byte, 8)), 0); err != ErrNoResources {
		t.Fatalf("RegMR on full table = %v, want ErrNoResources", err)
	}
	old := ms[1].LKey()
	ms[1].Dereg()
	m := mustReg(t, pd, make([]byte, 8), 0, 0)
	if m.LKey() == old {
		t.Fatal("reused slot issued the stale key again")
	}
	if m.LKey()>>8 != old>>8 {
		t.Fatalf("full table did not reuse the freed slot: %#08x after %#08x", m.LKey(), old)
	}
	if _, err := pd.LookupLKey(old, 0); err != ErrBadKey {
		t.Fatalf("stale key = %v", err)
	}
}

func mustLookup(t *testing.T, pd *PD, lkey uint32) *MR {
	t.Helper()
	m, err := pd.LookupLKey(lkey, 0)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestReregKeepKey re-registers with the key kept: the new registration
// answers to the old key with its new memory, access and PD; the old *MR
// is dead; failures leave the MR as it was.
func TestReregKeepKey(t *testing.T) {
	tab := newTestTable(t, 0)
	pdA, pdB := tab.AllocPD(), tab.AllocPD()
	m := mustReg(t, pdA, alignedBuf(64), 0x1000, AccessLocalWrite)
	if _, err := m.ReregKeepKey(ReregChangeAccess, nil, nil, 0, AccessRemoteWrite); err != ErrInvalid || !m.Valid() {
		t.Fatalf("remote write without local write: %v, valid %v", err, m.Valid())
	}
	buf2 := alignedBuf(128)
	n, err := m.ReregKeepKey(ReregChangeTranslation|ReregChangePD|ReregChangeAccess, pdB, Slice(buf2), 0x9000,
		AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	if n.LKey() != m.LKey() || n.RKey() != m.RKey() {
		t.Errorf("keys %#x/%#x after ReregKeepKey of %#x", n.LKey(), n.RKey(), m.LKey())
	}
	if m.Valid() || !n.Valid() {
		t.Fatal("old MR valid or new MR invalid after ReregKeepKey")
	}
	if got, err := pdB.LookupRKey(m.RKey(), AccessRemoteWrite); got != n || err != nil {
		t.Fatalf("the kept key in the new PD: %p, %v", got, err)
	}
	if _, err := pdA.LookupLKey(m.LKey(), 0); err == nil {
		t.Error("the kept key still answers in the old PD")
	}
	if err := n.Write(0x9000+100, []byte{7}); err != nil || buf2[100] != 7 {
		t.Errorf("write through the new translation: %v", err)
	}
}
