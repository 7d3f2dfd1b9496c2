package roce_test

import (
	"bytes"
	"testing"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// Memory windows and fast-registration MRs between two devices: node 0
// initiates, node 1 is the target, as in the storage protocols that use
// them (NVMe-oF, iSER, SMB Direct).

// fastReg allocates a fast-registration MR of size bytes on n, maps a fresh
// buffer into it and registers it with a REG_MR on q; it returns the MR, its
// memory and its key.
func (b *testbed) fastReg(n *node, q *roce.QP, size int, access mr.Access) (*mr.FastMR, []byte, uint32) {
	b.T.Helper()
	fr, err := n.PD.AllocMR(size)
	if err != nil {
		b.T.Fatal(err)
	}
	buf := make([]byte, size)
	return fr, buf, b.reRegister(n, q, fr, buf, access)
}

// reRegister maps buf into fr and registers it with a REG_MR on q under a
// new key, which it returns.
func (b *testbed) reRegister(n *node, q *roce.QP, fr *mr.FastMR, buf []byte, access mr.Access) uint32 {
	b.T.Helper()
	if err := fr.Map(mr.Slice(buf), mr.AddrOf(buf)); err != nil {
		b.T.Fatal(err)
	}
	key := fr.NewKey()
	if err := q.PostSend(&verbs.SendWR{WRID: 0xfa57, Opcode: verbs.WROpRegMR, Flags: verbs.Signaled, RKey: key, RegAccess: access}); err != nil {
		b.T.Fatal(err)
	}
	if w := b.expectWC(n, verbs.WCSuccess); w[0].Opcode != verbs.WCRegMR || w[0].WRID != 0xfa57 {
		b.T.Fatalf("REG_MR completion %+v", w[0])
	}
	return key
}

// bind2 binds the type 2 window w on q to [off, off+n) of m and returns the
// window's key.
func (b *testbed) bind2(nd *node, q *roce.QP, w *mr.MW, m *roce.MR, off, n int, access mr.Access) uint32 {
	b.T.Helper()
	key := w.NewKey()
	if err := q.PostSend(&verbs.SendWR{WRID: 0xb1d, Opcode: verbs.WROpBindMW, Flags: verbs.Signaled, RKey: key,
		Bind: mr.MWBind{LKey: m.LKey(), Addr: m.Addr() + uint64(off), Length: uint64(n), Access: access}}); err != nil {
		b.T.Fatal(err)
	}
	if wc := b.expectWC(nd, verbs.WCSuccess); wc[0].Opcode != verbs.WCBindMW {
		b.T.Fatalf("BIND_MW completion %+v", wc[0])
	}
	if w.RKey() != key {
		b.T.Fatalf("window key %#08x after binding %#08x", w.RKey(), key)
	}
	return key
}

// rdma posts a signaled READ or WRITE of n bytes between local offset loff
// of lm and remote address raddr under rkey, and returns its completion.
func (b *testbed) rdma(nd *node, q *roce.QP, op verbs.WROpcode, lm *roce.MR, loff, n int, raddr uint64, rkey uint32) verbs.WC {
	b.T.Helper()
	if err := q.PostSend(&verbs.SendWR{WRID: 77, Opcode: op, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(loff, n)},
		RemoteAddr: raddr, RKey: rkey}); err != nil {
		b.T.Fatal(err)
	}
	return b.WaitWCs(nd, 1)[0]
}

func TestFastRegStorageFlow(t *testing.T) {
	b := newBed(t, bedOpts{})
	qh, qt := b.PairQPs(rcOpts{})
	host, target := b.Nodes[0], b.Nodes[1]
	tm, tbuf := target.Reg(t, 16384, 0, 5)

	// The host registers an I/O buffer and advertises its rkey.
	fr, hbuf, k1 := b.fastReg(host, qh, 8192, mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteRead)
	addr := mr.AddrOf(hbuf)
	// The target moves the data with RDMA WRITE and READ.
	if wc := b.rdma(target, qt, verbs.WROpRDMAWrite, tm, 0, 8192, addr, k1); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE: %+v", wc)
	}
	if !bytes.Equal(hbuf, tbuf[:8192]) {
		t.Fatal("WRITE data differs")
	}
	if wc := b.rdma(target, qt, verbs.WROpRDMARead, tm, 8192, 4096, addr+4096, k1); wc.Status != verbs.WCSuccess {
		t.Fatalf("READ: %+v", wc)
	}
	if !bytes.Equal(tbuf[8192:12288], hbuf[4096:]) {
		t.Fatal("READ data differs")
	}
	// The target's response invalidates the rkey.
	hm, _ := host.Reg(t, 64, 0, 1)
	qh.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{hm.SGE(0, 64)}})
	qt.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSendWithInv, Flags: verbs.Signaled, SGL: []mr.SGE{tm.SGE(0, 16)}, InvalidateRKey: k1})
	b.expectWC(target, verbs.WCSuccess)
	rw := b.expectWC(host, verbs.WCSuccess)
	if rw[0].Flags&verbs.WCWithInv == 0 || rw[0].InvalidatedRKey != k1 {
		t.Fatalf("receive completion %+v", rw[0])
	}
	if _, _, _, ok := fr.Registered(); ok {
		t.Fatal("still registered after SEND with invalidate")
	}
	// The next I/O registers the MR again, under a new key.
	k2 := b.reRegister(host, qh, fr, hbuf, mr.AccessLocalWrite|mr.AccessRemoteWrite)
	if k2 == k1 || k2>>8 != k1>>8 {
		t.Fatalf("key %#08x after %#08x", k2, k1)
	}
	if wc := b.rdma(target, qt, verbs.WROpRDMAWrite, tm, 0, 64, addr, k2); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE with the new key: %+v", wc)
	}
	// The stale rkey is refused: a remote access error.
	if wc := b.rdma(target, qt, verbs.WROpRDMAWrite, tm, 0, 64, addr, k1); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("WRITE with the stale key: %+v", wc)
	}
	b.settle()
	if qh.State() != verbs.QPStateErr {
		t.Fatalf("host QP %v after a remote access error", qh.State())
	}
}

func TestWindowAccessEndToEnd(t *testing.T) {
	rw := mr.AccessRemoteWrite | mr.AccessRemoteRead
	for _, tc := range []struct {
		name string
		// run sets things up on the host (qh) and returns what the target
		// should try, and with which result.
		Run  func(b *testbed, qh *roce.QP, hm *roce.MR) (op verbs.WROpcode, raddr uint64, n int, rkey uint32)
		want verbs.WCStatus
	}{
		{"type 2, write inside", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType2)
			return verbs.WROpRDMAWrite, hm.Addr() + 1024, 1024, b.bind2(b.Nodes[0], qh, w, hm, 1024, 1024, rw)
		}, verbs.WCSuccess},
		{"type 2, read inside", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType2)
			return verbs.WROpRDMARead, hm.Addr() + 1500, 100, b.bind2(b.Nodes[0], qh, w, hm, 1024, 1024, rw)
		}, verbs.WCSuccess},
		{"type 2, atomic inside", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType2)
			return verbs.WROpAtomicFetchAdd, hm.Addr() + 1024, 8, b.bind2(b.Nodes[0], qh, w, hm, 1024, 8, mr.AccessRemoteAtomic)
		}, verbs.WCSuccess},
		{"type 2, write past the end", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType2)
			return verbs.WROpRDMAWrite, hm.Addr() + 1024, 1025, b.bind2(b.Nodes[0], qh, w, hm, 1024, 1024, rw)
		}, verbs.WCRemAccessErr},
		{"type 2, read before the start", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType2)
			return verbs.WROpRDMARead, hm.Addr() + 1020, 8, b.bind2(b.Nodes[0], qh, w, hm, 1024, 1024, rw)
		}, verbs.WCRemAccessErr},
		{"type 2, read through a write window", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType2)
			return verbs.WROpRDMARead, hm.Addr() + 1024, 8, b.bind2(b.Nodes[0], qh, w, hm, 1024, 1024, mr.AccessRemoteWrite)
		}, verbs.WCRemAccessErr},
		{"the MR's own rkey", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			return verbs.WROpRDMARead, hm.Addr(), 8, hm.RKey()
		}, verbs.WCRemAccessErr},
		{"type 2 after LOCAL_INV", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType2)
			k := b.bind2(b.Nodes[0], qh, w, hm, 0, 4096, rw)
			qh.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WROpLocalInv, Flags: verbs.Signaled, InvalidateRKey: k})
			if wc := b.expectWC(b.Nodes[0], verbs.WCSuccess); wc[0].Opcode != verbs.WCLocalInv {
				b.T.Fatalf("LOCAL_INV completion %+v", wc[0])
			}
			return verbs.WROpRDMARead, hm.Addr(), 8, k
		}, verbs.WCRemAccessErr},
		{"type 2 bound by another QP of the PD", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType2)
			other, _ := b.PairQPs(rcOpts{})
			return verbs.WROpRDMARead, hm.Addr(), 8, b.bind2(b.Nodes[0], other, w, hm, 0, 4096, rw)
		}, verbs.WCRemAccessErr},
		{"type 1, read inside", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			return verbs.WROpRDMARead, hm.Addr() + 64, 64, bind1(b, qh, hm, 64, 64, mr.AccessRemoteRead)
		}, verbs.WCSuccess},
		{"type 1, write through a read window", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			return verbs.WROpRDMAWrite, hm.Addr() + 64, 64, bind1(b, qh, hm, 64, 64, mr.AccessRemoteRead)
		}, verbs.WCRemAccessErr},
		{"type 1 after a zero-length bind", func(b *testbed, qh *roce.QP, hm *roce.MR) (verbs.WROpcode, uint64, int, uint32) {
			w := newMW(b, mr.MWType1)
			k, err := qh.BindMW(w, &roce.MWBindWR{WRID: 1, Flags: verbs.Signaled,
				Bind: mr.MWBind{LKey: hm.LKey(), Addr: hm.Addr(), Length: 64, Access: mr.AccessRemoteRead}})
			if err != nil {
				b.T.Fatal(err)
			}
			if _, err := qh.BindMW(w, &roce.MWBindWR{WRID: 2, Flags: verbs.Signaled}); err != nil {
				b.T.Fatal(err)
			}
			b.expectWC(b.Nodes[0], verbs.WCSuccess, verbs.WCSuccess)
			return verbs.WROpRDMARead, hm.Addr(), 8, k
		}, verbs.WCRemAccessErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t, bedOpts{})
			qh, qt := b.PairQPs(rcOpts{})
			host, target := b.Nodes[0], b.Nodes[1]
			// The host's MR has no remote rights: only windows open it.
			hm, hbuf := host.Reg(t, 4096, mr.AccessLocalWrite|mr.AccessMWBind, 1)
			tm, tbuf := target.Reg(t, 4096, 0, 2)
			op, raddr, n, rkey := tc.Run(b, qh, hm)
			before := append([]byte(nil), hbuf...)
			wc := b.rdma(target, qt, op, tm, 0, n, raddr, rkey)
			if wc.Status != tc.want {
				t.Fatalf("%v of %d bytes at %#x: %+v, want %v", op, n, raddr, wc, tc.want)
			}
			off := int(raddr - hm.Addr())
			switch {
			case tc.want != verbs.WCSuccess:
				if !bytes.Equal(hbuf, before) {
					t.Fatal("a refused access changed the host's memory")
				}
			case op == verbs.WROpRDMAWrite:
				if !bytes.Equal(hbuf[off:off+n], tbuf[:n]) || !bytes.Equal(hbuf[:off], before[:off]) || !bytes.Equal(hbuf[off+n:], before[off+n:]) {
					t.Fatal("WRITE through the window: wrong bytes")
				}
			case op == verbs.WROpRDMARead:
				if !bytes.Equal(tbuf[:n], hbuf[off:off+n]) {
					t.Fatal("READ through the window: wrong bytes")
				}
			}
		})
	}
}

func newMW(b *testbed, typ mr.MWType) *mr.MW {
	b.T.Helper()
	w, err := b.Nodes[0].PD.AllocMW(typ)
	if err != nil {
		b.T.Fatal(err)
	}
	return w
}

// bind1 binds a new type 1 window of node 0 with QP.BindMW and returns its
// key.
func bind1(b *testbed, q *roce.QP, m *roce.MR, off, n int, access mr.Access) uint32 {
	b.T.Helper()
	w := newMW(b, mr.MWType1)
	k, err := q.BindMW(w, &roce.MWBindWR{WRID: 3, Flags: verbs.Signaled,
		Bind: mr.MWBind{LKey: m.LKey(), Addr: m.Addr() + uint64(off), Length: uint64(n), Access: access}})
	if err != nil {
		b.T.Fatal(err)
	}
	if wc := b.expectWC(b.Nodes[0], verbs.WCSuccess); wc[0].Opcode != verbs.WCBindMW {
		b.T.Fatalf("bind completion %+v", wc[0])
	}
	if w.RKey() != k {
		b.T.Fatalf("window key %#08x, BindMW returned %#08x", w.RKey(), k)
	}
	return k
}

func TestBadBinds(t *testing.T) {
	rw := mr.AccessRemoteWrite | mr.AccessRemoteRead
	for _, tc := range []struct {
		name   string
		access mr.Access // of the MR
		mwPD   bool      // the window is of another PD
		off, n int
		wacc   mr.Access
	}{
		{"window of another PD", mr.AccessLocalWrite | mr.AccessMWBind, true, 0, 64, rw},
		{"past the MR", mr.AccessLocalWrite | mr.AccessMWBind, false, 4000, 100, rw},
		{"write rights over read-only memory", mr.AccessMWBind | mr.AccessRemoteRead, false, 0, 64, mr.AccessRemoteWrite},
		{"atomic rights over read-only memory", mr.AccessMWBind, false, 0, 64, mr.AccessRemoteAtomic},
		{"MR without MW_BIND", mr.AccessLocalWrite | mr.AccessRemoteRead, false, 0, 64, mr.AccessRemoteRead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t, bedOpts{})
			qh, _ := b.PairQPs(rcOpts{})
			host := b.Nodes[0]
			hm, _ := host.Reg(t, 4096, tc.access, 1)
			pd := host.PD
			if tc.mwPD {
				var err error
				if pd, err = host.Dev.AllocPD(); err != nil {
					t.Fatal(err)
				}
			}
			w, err := pd.AllocMW(mr.MWType2)
			if err != nil {
				t.Fatal(err)
			}
			key := w.RKey()
			qh.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpBindMW, Flags: verbs.Signaled, RKey: w.NewKey(),
				Bind: mr.MWBind{LKey: hm.LKey(), Addr: hm.Addr() + uint64(tc.off), Length: uint64(tc.n), Access: tc.wacc}})
			qh.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{hm.SGE(0, 8)}})
			wcs := b.expectWC(host, verbs.WCMWBindErr, verbs.WCWRFlushErr)
			if wcs[0].Opcode != verbs.WCBindMW || wcs[0].WRID != 1 {
				t.Fatalf("bind completion %+v", wcs[0])
			}
			if qh.State() != verbs.QPStateErr {
				t.Fatalf("QP %v after a failed bind", qh.State())
			}
			if _, _, _, ok := w.Bound(); ok || w.RKey() != key {
				t.Fatal("a failed bind changed the window")
			}
		})
	}
	// ibv_bind_mw is for type 1 windows only.
	b := newBed(t, bedOpts{})
	qh, _ := b.PairQPs(rcOpts{})
	w := newMW(b, mr.MWType2)
	if _, err := qh.BindMW(w, &roce.MWBindWR{}); err != roce.ErrInvalid {
		t.Fatalf("BindMW of a type 2 window: %v", err)
	}
}

func TestSendWithInvRefused(t *testing.T) {
	// A SEND with invalidate that names a key the peer may not revoke:
	// the MR or window stays as it was and usable by its owner. As with
	// rdma_rxe, the SEND is acknowledged and completes successfully at
	// the requester, the receive completes with REM_INV_REQ_ERR and the
	// receiving QP moves to the error state.
	for _, tc := range []struct {
		name string
		// setup returns the key to name, and a check that its owner can
		// still use it, through the second QP pair (qa2 on node 0, qc2 on
		// node 1).
		setup func(t *testing.T, b *testbed, qc, qc2 *roce.QP) (uint32, func(qa2 *roce.QP, lm *roce.MR))
	}{
		{"MR with every right", func(t *testing.T, b *testbed, qc, qc2 *roce.QP) (uint32, func(*roce.QP, *roce.MR)) {
			m, buf := b.Nodes[1].Reg(t, 64, 0, 3)
			return m.RKey(), func(qa2 *roce.QP, lm *roce.MR) {
				if wc := b.rdma(b.Nodes[0], qa2, verbs.WROpRDMAWrite, lm, 0, 64, m.Addr(), m.RKey()); wc.Status != verbs.WCSuccess {
					t.Fatalf("WRITE to the MR after the refused invalidation: %+v", wc)
				}
				if !bytes.Equal(buf, lm.Buf()[:64]) {
					t.Fatal("WRITE data differs")
				}
			}
		}},
		{"read-only MR", func(t *testing.T, b *testbed, qc, qc2 *roce.QP) (uint32, func(*roce.QP, *roce.MR)) {
			m, _ := b.Nodes[1].Reg(t, 64, mr.AccessRemoteRead, 3)
			return m.RKey(), func(qa2 *roce.QP, lm *roce.MR) {
				if wc := b.rdma(b.Nodes[0], qa2, verbs.WROpRDMARead, lm, 0, 64, m.Addr(), m.RKey()); wc.Status != verbs.WCSuccess {
					t.Fatalf("READ of the MR after the refused invalidation: %+v", wc)
				}
			}
		}},
		{"type 1 window", func(t *testing.T, b *testbed, qc, qc2 *roce.QP) (uint32, func(*roce.QP, *roce.MR)) {
			c := b.Nodes[1]
			m, _ := c.Reg(t, 64, mr.AccessLocalWrite|mr.AccessMWBind, 3)
			w, _ := c.PD.AllocMW(mr.MWType1)
			k, err := qc2.BindMW(w, &roce.MWBindWR{WRID: 9, Flags: verbs.Signaled,
				Bind: mr.MWBind{LKey: m.LKey(), Addr: m.Addr(), Length: 64, Access: mr.AccessRemoteRead}})
			if err != nil {
				t.Fatal(err)
			}
			b.expectWC(c, verbs.WCSuccess)
			return k, func(qa2 *roce.QP, lm *roce.MR) {
				if wc := b.rdma(b.Nodes[0], qa2, verbs.WROpRDMARead, lm, 0, 64, m.Addr(), k); wc.Status != verbs.WCSuccess {
					t.Fatalf("READ through the window after the refused invalidation: %+v", wc)
				}
			}
		}},
		{"type 2 window of another QP", func(t *testing.T, b *testbed, qc, qc2 *roce.QP) (uint32, func(*roce.QP, *roce.MR)) {
			c := b.Nodes[1]
			m, _ := c.Reg(t, 64, mr.AccessLocalWrite|mr.AccessMWBind, 3)
			w, _ := c.PD.AllocMW(mr.MWType2)
			k := b.bind2(c, qc2, w, m, 0, 64, mr.AccessRemoteRead)
			return k, func(qa2 *roce.QP, lm *roce.MR) {
				if wc := b.rdma(b.Nodes[0], qa2, verbs.WROpRDMARead, lm, 0, 64, m.Addr(), k); wc.Status != verbs.WCSuccess {
					t.Fatalf("READ through the window after the refused invalidation: %+v", wc)
				}
			}
		}},
		{"fast-registration MR without remote rights", func(t *testing.T, b *testbed, qc, qc2 *roce.QP) (uint32, func(*roce.QP, *roce.MR)) {
			c := b.Nodes[1]
			fr, _, k := b.fastReg(c, qc2, 64, mr.AccessLocalWrite)
			return k, func(*roce.QP, *roce.MR) {
				if _, _, _, ok := fr.Registered(); !ok {
					t.Fatal("fast-registration MR revoked")
				}
				qc2.PostSend(&verbs.SendWR{WRID: 10, Opcode: verbs.WROpLocalInv, Flags: verbs.Signaled, InvalidateRKey: k})
				b.expectWC(c, verbs.WCSuccess)
			}
		}},
		{"key naming nothing", func(t *testing.T, b *testbed, qc, qc2 *roce.QP) (uint32, func(*roce.QP, *roce.MR)) {
			return 0x12345678, func(*roce.QP, *roce.MR) {}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t, bedOpts{})
			qa, qc := b.PairQPs(rcOpts{})
			qa2, qc2 := b.PairQPs(rcOpts{})
			a, c := b.Nodes[0], b.Nodes[1]
			lm, _ := a.Reg(t, 4096, 0, 1)
			rm, _ := c.Reg(t, 64, 0, 2)
			key, stillUsable := tc.setup(t, b, qc, qc2)
			qc.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{rm.SGE(0, 64)}})
			qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSendWithInv, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 8)}, InvalidateRKey: key})
			b.expectWC(a, verbs.WCSuccess)
			if w := b.expectWC(c, verbs.WCRemInvReqErr); w[0].WRID != 1 || w[0].QPNum != qc.QPN() {
				t.Fatalf("receive completion %+v", w[0])
			}
			b.settle()
			if qc.State() != verbs.QPStateErr {
				t.Fatalf("receiving QP %v", qc.State())
			}
			stillUsable(qa2, lm)
		})
	}
}

func TestInvalidateByPeer(t *testing.T) {
	// A type 2 window and a fast-registration MR, each revoked by the
	// peer's SEND with invalidate on the QP they belong to.
	b := newBed(t, bedOpts{})
	qa, qc := b.PairQPs(rcOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 128, 0, 2)
	wm, _ := c.Reg(t, 4096, mr.AccessLocalWrite|mr.AccessMWBind, 3)
	w, _ := c.PD.AllocMW(mr.MWType2)
	wk := b.bind2(c, qc, w, wm, 0, 4096, mr.AccessRemoteWrite)
	_, fbuf, fk := b.fastReg(c, qc, 4096, mr.AccessLocalWrite|mr.AccessRemoteRead)
	for i, k := range []uint32{wk, fk} {
		qc.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{rm.SGE(0, 64)}})
		qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpSendWithInv, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 8)}, InvalidateRKey: k})
		b.expectWC(a, verbs.WCSuccess)
		if r := b.expectWC(c, verbs.WCSuccess); r[0].Flags&verbs.WCWithInv == 0 || r[0].InvalidatedRKey != k {
			t.Fatalf("receive completion %+v", r[0])
		}
	}
	if _, _, _, ok := w.Bound(); ok {
		t.Fatal("window still bound")
	}
	// The window can be bound again, under a new key; the old one stays
	// refused.
	wk2 := b.bind2(c, qc, w, wm, 0, 64, mr.AccessRemoteWrite)
	if wc := b.rdma(a, qa, verbs.WROpRDMAWrite, lm, 0, 64, wm.Addr(), wk2); wc.Status != verbs.WCSuccess {
		t.Fatalf("WRITE through the new binding: %+v", wc)
	}
	if wc := b.rdma(a, qa, verbs.WROpRDMARead, lm, 0, 64, mr.AddrOf(fbuf), fk); wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("READ with the revoked key: %+v", wc)
	}
}
