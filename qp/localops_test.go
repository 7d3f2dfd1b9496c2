package qp

import (
	"net/netip"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// These tests drive two RC QPs by hand in virtual time, as qp_test.go does,
// with an Env whose Invalidate is the memory table's: BIND_MW, REG_MR and
// LOCAL_INV on the requester, SEND with invalidate on the responder.

type loCQ struct{ wcs []verbs.WC }

func (c *loCQ) Push(wc verbs.WC, solicited bool) bool { c.wcs = append(c.wcs, wc); return true }

// loSide is one RC QP with a PD of its own table, an MR with every right
// (for data) and an MR that windows can be bound to.
type loSide struct {
	q    *QP
	env  *fakeEnv
	cq   *loCQ
	pd   *mr.PD // the PD
	view *mr.PD // the QP's view of it
	cnt  verbs.Counters
	mem  []byte
	mr   *mr.MR
	wmem []byte
	wmr  *mr.MR // LOCAL_WRITE|MW_BIND: reachable remotely only through windows
}

func newLoSide(t *testing.T, qpn bth.QPN, ip string) *loSide {
	t.Helper()
	s := &loSide{env: &fakeEnv{addr: netip.MustParseAddr(ip), invalidate: true}, cq: &loCQ{}}
	s.pd = mr.NewTable(mr.Options{}).AllocPD()
	s.view = s.pd.ForQP()
	s.mem, s.wmem = make([]byte, 1<<16), make([]byte, 1<<12)
	var err error
	if s.mr, err = s.pd.RegMR(mr.Slice(s.mem), mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteRead|mr.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	if s.wmr, err = s.pd.RegMR(mr.Slice(s.wmem), mr.AccessLocalWrite|mr.AccessMWBind); err != nil {
		t.Fatal(err)
	}
	s.q = New(&Config{QPN: qpn, Type: verbs.QPTypeRC, PD: s.view, SendCQ: s.cq, RecvCQ: s.cq, PortMTU: verbs.MTU4096,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2}, Env: s.env, Counters: &s.cnt})
	return s
}

func (s *loSide) sge(off, n int) mr.SGE {
	return mr.SGE{Addr: s.mr.IOVA() + uint64(off), Length: uint32(n), LKey: s.mr.LKey()}
}

func (s *loSide) post(t *testing.T, wr verbs.SendWR) {
	t.Helper()
	if err := s.q.PostSend(&wr); err != nil {
		t.Fatalf("post %v: %v", wr.Opcode, err)
	}
}

func (s *loSide) pump(now monotime.Time) [][]byte {
	s.q.Pump(now, 1000)
	f := s.env.sent
	s.env.sent = nil
	return f
}

func (s *loSide) deliver(t *testing.T, now monotime.Time, frames [][]byte) {
	t.Helper()
	for _, f := range frames {
		p, err := bth.Parse(f)
		if err != nil || !p.VerifyICRC() {
			t.Fatalf("bad frame: %v", err)
		}
		s.q.Receive(now, p)
	}
}

func (s *loSide) takeWCs() []verbs.WC {
	w := s.cq.wcs
	s.cq.wcs = nil
	return w
}

func loConnect(t *testing.T, a, b *loSide) {
	t.Helper()
	for _, st := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: b.q.QPN(), RQPSN: 500, MaxDestRdAtomic: 4, MinRNRTimer: 3,
			AH: verbs.AHAttr{DGID: bth.GIDFromAddr(b.env.addr)}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 500, Timeout: 10, RetryCnt: 3, RNRRetry: 2, MaxRdAtomic: 4},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	} {
		if err := a.q.Modify(&st.attr, st.mask); err != nil {
			t.Fatal(err)
		}
	}
}

func loPair(t *testing.T) (*loSide, *loSide) {
	a := newLoSide(t, 40, "10.0.0.1")
	b := newLoSide(t, 50, "10.0.0.2")
	loConnect(t, a, b)
	loConnect(t, b, a)
	return a, b
}

// exchange runs the two QPs against each other until neither sends.
func exchange(t *testing.T, a, b *loSide, now monotime.Time) {
	t.Helper()
	for range 100 {
		fa, fb := a.pump(now), b.pump(now)
		if len(fa) == 0 && len(fb) == 0 {
			return
		}
		b.deliver(t, now, fa)
		a.deliver(t, now, fb)
	}
	t.Fatal("the QPs never went quiet")
}

func wcSummary(wcs []verbs.WC) []verbs.WCOpcode {
	var ops []verbs.WCOpcode
	for _, w := range wcs {
		ops = append(ops, w.Opcode)
	}
	return ops
}

func TestLocalOpsCompleteInOrder(t *testing.T) {
	a, b := loPair(t)
	fr, err := a.pd.AllocMR(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := fr.Map(mr.Slice(a.mem[:4096]), 0x7000); err != nil {
		t.Fatal(err)
	}
	w, err := a.pd.AllocMW(mr.MWType2)
	if err != nil {
		t.Fatal(err)
	}
	b.q.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{b.sge(0, 64)}})
	frKey, wKey := fr.NewKey(), w.NewKey()
	a.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 64)}})
	a.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WROpRegMR, Flags: verbs.Signaled, RKey: frKey, RegAccess: mr.AccessLocalWrite | mr.AccessRemoteRead})
	a.post(t, verbs.SendWR{WRID: 3, Opcode: verbs.WROpBindMW, Flags: verbs.Signaled, RKey: wKey,
		Bind: mr.MWBind{LKey: a.wmr.LKey(), Addr: a.wmr.IOVA(), Length: 64, Access: mr.AccessRemoteWrite}})
	a.post(t, verbs.SendWR{WRID: 4, Opcode: verbs.WROpLocalInv, InvalidateRKey: frKey}) // unsignaled
	a.post(t, verbs.SendWR{WRID: 5, Opcode: verbs.WROpLocalInv, Flags: verbs.Signaled, InvalidateRKey: wKey})
	a.post(t, verbs.SendWR{WRID: 6, Opcode: verbs.WROpRegMR, Flags: verbs.Signaled, RKey: mr.IncKey(frKey), RegAccess: mr.AccessRemoteRead})

	// The requester executes the local operations as soon as it reaches
	// them, without waiting for the SEND's ACK, but nothing completes
	// before the SEND does.
	req := a.pump(0)
	if len(req) != 1 {
		t.Fatalf("%d packets", len(req))
	}
	b.deliver(t, 0, req)
	if _, _, _, ok := fr.Registered(); !ok {
		t.Fatal("REG_MR not executed")
	}
	if fr.RKey() != mr.IncKey(frKey) {
		t.Fatalf("key %#08x after the second REG_MR", fr.RKey())
	}
	if _, _, _, ok := w.Bound(); ok {
		t.Fatal("window still bound after LOCAL_INV")
	}
	if wcs := a.takeWCs(); len(wcs) != 0 {
		t.Fatalf("completions before the SEND was acknowledged: %+v", wcs)
	}
	exchange(t, a, b, 0)
	wcs := a.takeWCs()
	want := []verbs.WCOpcode{verbs.WCSend, verbs.WCRegMR, verbs.WCBindMW, verbs.WCLocalInv, verbs.WCRegMR}
	if len(wcs) != len(want) {
		t.Fatalf("completions %v, want %v", wcSummary(wcs), want)
	}
	for i, wc := range wcs {
		if wc.Opcode != want[i] || wc.Status != verbs.WCSuccess || wc.ByteLen != 0 && i > 0 {
			t.Fatalf("completion %d: %+v, want %v", i, wc, want[i])
		}
	}
	if wcs[3].WRID != 5 {
		t.Fatalf("unsignaled LOCAL_INV completed: %+v", wcs)
	}
}

func TestLocalOpFence(t *testing.T) {
	a, b := loPair(t)
	w, _ := a.pd.AllocMW(mr.MWType2)
	key := w.NewKey()
	a.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WROpBindMW, Flags: verbs.Signaled, RKey: key,
		Bind: mr.MWBind{LKey: a.wmr.LKey(), Addr: a.wmr.IOVA(), Length: 64, Access: mr.AccessRemoteRead}})
	// A READ is outstanding when a fenced LOCAL_INV comes: the window stays
	// bound until the READ has completed.
	a.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 64)},
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	a.post(t, verbs.SendWR{WRID: 3, Opcode: verbs.WROpLocalInv, Flags: verbs.Signaled | verbs.Fence, InvalidateRKey: key})
	req := a.pump(0)
	if len(req) != 1 {
		t.Fatalf("%d packets", len(req))
	}
	if _, _, _, ok := w.Bound(); !ok {
		t.Fatal("fenced LOCAL_INV executed before the READ completed")
	}
	b.deliver(t, 0, req)
	a.deliver(t, 0, b.pump(0))
	a.pump(0)
	if _, _, _, ok := w.Bound(); ok {
		t.Fatal("fenced LOCAL_INV not executed after the READ completed")
	}
	if ops := wcSummary(a.takeWCs()); len(ops) != 3 || ops[0] != verbs.WCBindMW || ops[1] != verbs.WCRDMARead || ops[2] != verbs.WCLocalInv {
		t.Fatalf("completions %v", ops)
	}
}

func TestLocalOpFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		wr   func(a *loSide, fr *mr.FastMR, w *mr.MW) verbs.SendWR
		want verbs.WCStatus
	}{
		{"REG_MR of a registered MR", func(a *loSide, fr *mr.FastMR, w *mr.MW) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WROpRegMR, RKey: mr.IncKey(fr.RKey()), RegAccess: mr.AccessRemoteRead}
		}, verbs.WCLocQPOpErr},
		{"LOCAL_INV of an MR from RegMR", func(a *loSide, fr *mr.FastMR, w *mr.MW) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WROpLocalInv, InvalidateRKey: a.mr.RKey()}
		}, verbs.WCLocQPOpErr},
		{"BIND_MW past the MR", func(a *loSide, fr *mr.FastMR, w *mr.MW) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WROpBindMW, RKey: w.NewKey(),
				Bind: mr.MWBind{LKey: a.wmr.LKey(), Addr: a.wmr.IOVA() + 1, Length: a.wmr.Len(), Access: mr.AccessRemoteRead}}
		}, verbs.WCMWBindErr},
		{"BIND_MW on an MR without MW_BIND", func(a *loSide, fr *mr.FastMR, w *mr.MW) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WROpBindMW, RKey: w.NewKey(),
				Bind: mr.MWBind{LKey: a.mr.LKey(), Addr: a.mr.IOVA(), Length: 8, Access: mr.AccessRemoteRead}}
		}, verbs.WCMWBindErr},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := loPair(t)
			fr, _ := a.pd.AllocMR(4096)
			fr.Map(mr.Slice(a.mem[:64]), 0x9000)
			if err := a.view.RegFast(fr.NewKey(), mr.AccessRemoteRead); err != nil {
				t.Fatal(err)
			}
			w, _ := a.pd.AllocMW(mr.MWType2)
			wr := tc.wr(a, fr, w)
			wr.WRID = 1
			a.post(t, wr)
			a.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, SGL: []mr.SGE{a.sge(0, 8)}})
			if n := len(a.pump(0)); n != 0 {
				t.Fatalf("%d packets sent after a failed local operation", n)
			}
			wcs := a.takeWCs()
			if len(wcs) != 2 || wcs[0].Status != tc.want || wcs[0].Opcode != wr.Opcode.WCOpcode() || wcs[1].Status != verbs.WCWRFlushErr {
				t.Fatalf("completions %+v", wcs)
			}
			if a.q.State() != verbs.QPStateErr {
				t.Fatalf("QP %v after a failed local operation", a.q.State())
			}
		})
	}
	// Local operations carry no data.
	a, _ := loPair(t)
	if err := a.q.PostSend(&verbs.SendWR{Opcode: verbs.WROpLocalInv, SGL: []mr.SGE{a.sge(0, 8)}}); err != ErrLocalWR {
		t.Fatalf("LOCAL_INV with an SGL: %v", err)
	}
}

func TestGoBackSkipsLocalOp(t *testing.T) {
	// WRITE, REG_MR, WRITE: every packet is lost, the retransmission
	// resends both WRITEs with their PSNs and does not run the REG_MR
	// again (a second run would fail: the MR is registered).
	a, b := loPair(t)
	fr, _ := a.pd.AllocMR(64)
	fr.Map(mr.Slice(a.mem[:64]), 0x9000)
	a.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 2048)},
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	a.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WROpRegMR, Flags: verbs.Signaled, RKey: fr.NewKey(), RegAccess: mr.AccessRemoteRead})
	a.post(t, verbs.SendWR{WRID: 3, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 1024)},
		RemoteAddr: b.mr.IOVA() + 4096, RKey: b.mr.RKey()})
	first := a.pump(0)
	if len(first) != 3 {
		t.Fatalf("%d packets", len(first))
	}
	dl, ok := a.q.NextDeadline()
	if !ok {
		t.Fatal("no retransmit timer")
	}
	a.q.OnTimer(dl)
	again := a.pump(dl)
	if len(again) != 3 {
		t.Fatalf("%d packets retransmitted", len(again))
	}
	for i := range first {
		p0, p1 := parse(t, first[i]), parse(t, again[i])
		if p0.BTH().PSN() != p1.BTH().PSN() || p0.Opcode != p1.Opcode {
			t.Fatalf("packet %d: %v psn %d, retransmitted as %v psn %d", i, p0.Opcode, p0.BTH().PSN(), p1.Opcode, p1.BTH().PSN())
		}
	}
	b.deliver(t, dl, again)
	a.deliver(t, dl, b.pump(dl))
	a.pump(dl)
	wcs := a.takeWCs()
	if ops := wcSummary(wcs); len(ops) != 3 || ops[0] != verbs.WCRDMAWrite || ops[1] != verbs.WCRegMR || ops[2] != verbs.WCRDMAWrite {
		t.Fatalf("completions %+v", wcs)
	}
	for _, wc := range wcs {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("completions %+v", wcs)
		}
	}
}

func TestSendWithInvalidate(t *testing.T) {
	t.Run("fast-registration MR", func(t *testing.T) {
		a, b := loPair(t)
		fr, _ := b.pd.AllocMR(4096)
		fr.Map(mr.Slice(b.mem[:4096]), 0x5000)
		key := fr.NewKey()
		if err := b.view.RegFast(key, mr.AccessLocalWrite|mr.AccessRemoteWrite); err != nil {
			t.Fatal(err)
		}
		b.q.PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{b.sge(8192, 64)}})
		a.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 16)}, RemoteAddr: 0x5000, RKey: key})
		a.post(t, verbs.SendWR{WRID: 2, Opcode: verbs.WROpSendWithInv, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 16)}, InvalidateRKey: key})
		exchange(t, a, b, 0)
		if wcs := a.takeWCs(); len(wcs) != 2 || wcs[0].Status != verbs.WCSuccess || wcs[1].Status != verbs.WCSuccess {
			t.Fatalf("requester completions %+v", wcs)
		}
		wcs := b.takeWCs()
		if len(wcs) != 1 || wcs[0].Status != verbs.WCSuccess || wcs[0].Flags&verbs.WCWithInv == 0 || wcs[0].InvalidatedRKey != key {
			t.Fatalf("responder completions %+v", wcs)
		}
		if _, _, _, ok := fr.Registered(); ok {
			t.Fatal("still registered")
		}
		// The revoked key: a remote access error.
		a.post(t, verbs.SendWR{WRID: 3, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 16)}, RemoteAddr: 0x5000, RKey: key})
		exchange(t, a, b, 0)
		if wcs := a.takeWCs(); len(wcs) != 1 || wcs[0].Status != verbs.WCRemAccessErr {
			t.Fatalf("WRITE with the revoked key: %+v", wcs)
		}
	})
	t.Run("MR from RegMR", func(t *testing.T) {
		// rdma_rxe's class J: the SEND is acknowledged (no NAK), the
		// receive fails with REM_INV_REQ_ERR, the responder's QP goes to
		// error, and the MR is not touched.
		a, b := loPair(t)
		b.q.PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{b.sge(8192, 64)}})
		b.q.PostRecv(&verbs.RecvWR{WRID: 10, SGL: []mr.SGE{b.sge(8192, 64)}})
		a.post(t, verbs.SendWR{WRID: 1, Opcode: verbs.WROpSendWithInv, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 16)}, InvalidateRKey: b.mr.RKey()})
		b.deliver(t, 0, a.pump(0))
		resp := b.pump(0)
		if len(resp) != 1 {
			t.Fatalf("%d responses", len(resp))
		}
		p := parse(t, resp[0])
		if p.Opcode != bth.RCAcknowledge || !p.AETH().Syndrome().IsACK() || p.BTH().PSN() != 500 || p.AETH().MSN() != 0 {
			t.Fatalf("response %v syndrome %v psn %d msn %d", p.Opcode, p.AETH().Syndrome(), p.BTH().PSN(), p.AETH().MSN())
		}
		a.deliver(t, 0, resp)
		a.pump(0)
		if wcs := a.takeWCs(); len(wcs) != 1 || wcs[0].Status != verbs.WCSuccess {
			t.Fatalf("requester completions %+v", wcs)
		}
		wcs := b.takeWCs()
		if len(wcs) != 2 || wcs[0].WRID != 9 || wcs[0].Status != verbs.WCRemInvReqErr || wcs[1].Status != verbs.WCWRFlushErr {
			t.Fatalf("responder completions %+v", wcs)
		}
		if b.q.State() != verbs.QPStateErr {
			t.Fatalf("responder %v", b.q.State())
		}
		if !b.mr.Valid() {
			t.Fatal("MR deregistered")
		}
		if err := b.view.CheckRemote(b.mr.RKey(), b.mr.IOVA(), 8, mr.AccessRemoteWrite); err != nil {
			t.Fatalf("MR after the refused invalidation: %v", err)
		}
	})
}
