package mr

import "testing"

// benchSetup registers 1000 MRs and returns the PD and the middle one.
func benchSetup(b *testing.B) (*PD, *MR) {
	tab := NewTable(Options{})
	pd := tab.AllocPD()
	var mid *MR
	for i := range 1000 {
		m := mustReg(b, pd, alignedBuf(64<<10), 0x100000, accessAll)
		if i == 500 {
			mid = m
		}
	}
	return pd, mid
}

// BenchmarkCheckRemote is the per-packet check of an RDMA WRITE: key lookup,
// PD, access flags and bounds.
func BenchmarkCheckRemote(b *testing.B) {
	pd, m := benchSetup(b)
	rkey := m.RKey()
	b.ReportAllocs()
	for b.Loop() {
		if err := pd.CheckRemote(rkey, 0x100000+4096, 1024, AccessRemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookupRKey is the key lookup alone, with the PD and access
// checks, as done once per message by an engine that keeps the *MR.
func BenchmarkLookupRKey(b *testing.B) {
	pd, m := benchSetup(b)
	rkey := m.RKey()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pd.LookupRKey(rkey, AccessRemoteWrite); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckRemoteBadKey measures a failing lookup.
func BenchmarkCheckRemoteBadKey(b *testing.B) {
	pd, m := benchSetup(b)
	rkey := m.RKey() + 1
	b.ReportAllocs()
	for b.Loop() {
		if err := pd.CheckRemote(rkey, 0x100000, 8, AccessRemoteWrite); err != ErrBadKey {
			b.Fatal(err)
		}
	}
}

// BenchmarkCheckRemoteParallel runs the check from all Ps at once.
func BenchmarkCheckRemoteParallel(b *testing.B) {
	pd, m := benchSetup(b)
	rkey := m.RKey()
	b.ReportAllocs()
	b.RunParallel(func(p *testing.PB) {
		for p.Next() {
			if err := pd.CheckRemote(rkey, 0x100000+4096, 1024, AccessRemoteWrite); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkWriteRemote places a 1024-byte payload: lookup, checks, pin, copy.
func BenchmarkWriteRemote(b *testing.B) {
	pd, m := benchSetup(b)
	rkey := m.RKey()
	payload := make([]byte, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if err := pd.WriteRemote(rkey, 0x100000+4096, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHeldMRWrite writes through an *MR kept from an earlier lookup.
func BenchmarkHeldMRWrite(b *testing.B) {
	_, m := benchSetup(b)
	payload := make([]byte, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		if err := m.Write(0x100000+4096, payload); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkFetchAdd is an atomic request through an rkey.
func BenchmarkFetchAdd(b *testing.B) {
	pd, m := benchSetup(b)
	rkey := m.RKey()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pd.FetchAdd(rkey, 0x100000+64, 1); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompareSwap is an atomic request through an rkey.
func BenchmarkCompareSwap(b *testing.B) {
	pd, m := benchSetup(b)
	rkey := m.RKey()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := pd.CompareSwap(rkey, 0x100000+64, 0, 0); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGather builds a 1024-byte payload from a 4-SGE list.
func BenchmarkGather(b *testing.B) {
	pd, m := benchSetup(b)
	sgl := []SGE{
		{Addr: 0x100000, Length: 256, LKey: m.LKey()},
		{Addr: 0x100000 + 1024, Length: 256, LKey: m.LKey()},
		{Addr: 0x100000 + 2048, Length: 256, LKey: m.LKey()},
		{Addr: 0x100000 + 4096, Length: 256, LKey: m.LKey()},
	}
	dst := make([]byte, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(dst)))
	for b.Loop() {
		if _, err := pd.Gather(sgl, 0, dst); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScatter places a 1024-byte payload at offset 512 of a 4-SGE list.
func BenchmarkScatter(b *testing.B) {
	pd, m := benchSetup(b)
	sgl := []SGE{
		{Addr: 0x100000, Length: 512, LKey: m.LKey()},
		{Addr: 0x100000 + 1024, Length: 512, LKey: m.LKey()},
		{Addr: 0x100000 + 2048, Length: 512, LKey: m.LKey()},
		{Addr: 0x100000 + 4096, Length: 512, LKey: m.LKey()},
	}
	src := make([]byte, 1024)
	b.ReportAllocs()
	b.SetBytes(int64(len(src)))
	for b.Loop() {
		if _, err := pd.Scatter(sgl, 512, src); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRegDereg is the control path.
func BenchmarkRegDereg(b *testing.B) {
	pd, _ := benchSetup(b)
	r := Slice(make([]byte, 4096))
	b.ReportAllocs()
	for b.Loop() {
		m, err := pd.RegMR(r, AccessLocalWrite)
		if err != nil {
			b.Fatal(err)
		}
		m.Dereg()
	}
}
