package qp

import (
	"bytes"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// These tests replay situations in which a peer that follows rdma_rxe's
// rules would go wrong because of what sroce sends, or in which sroce gave
// up where rxe carries on. Each failed on the code before its fix.

// readSpans collects the PSN spans of the READ requests in frames, for a
// path MTU of mtu bytes.
func readSpans(t *testing.T, frames [][]byte, mtu uint32) [][2]bth.PSN {
	var spans [][2]bth.PSN
	for _, f := range frames {
		p := parse(t, f)
		if p.Opcode != bth.RCReadRequest {
			continue
		}
		n := max((p.RETH().DMALen()+mtu-1)/mtu, 1)
		spans = append(spans, [2]bth.PSN{p.BTH().PSN(), p.BTH().PSN().Add(n - 1)})
	}
	return spans
}

// checkNoACKInRead fails if a plain ACK among frames names a PSN inside
// a READ request's span: rxe's completer takes an ACK naming a pending
// READ's last PSN as the READ's completion, with no data placed, and one
// naming a PSN inside it as progress past part of it.
func checkNoACKInRead(t *testing.T, spans [][2]bth.PSN, frames [][]byte) {
	t.Helper()
	for _, f := range frames {
		p := parse(t, f)
		if p.Opcode != bth.RCAcknowledge || !p.AETH().Syndrome().IsACK() {
			continue
		}
		psn := p.BTH().PSN()
		for _, s := range spans {
			if psn.Diff(s[0]) >= 0 && psn.Diff(s[1]) <= 0 {
				t.Fatalf("ACK with PSN %v names the READ request spanning %v-%v: an rxe requester completes that READ with no data", psn, s[0], s[1])
			}
		}
	}
}

// F1: a duplicate SEND followed by a READ is re-acknowledged with the
// SEND's PSN, not the READ's.
func TestDuplicateSendAckNeverNamesRead(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	for i := range b.mem[4096:8192] {
		b.mem[4096+i] = byte(i * 7)
	}
	b.q.PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{b.sge(0, 100)}})
	a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 10)}})
	a.q.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(4096, 1000)},
		RemoteAddr: b.mr.IOVA() + 4096, RKey: b.mr.RKey()})
	req := pump(a, 0)
	if got := opcodes(t, req); len(got) != 2 || got[1] != bth.RCReadRequest || parse(t, req[1]).BTH().PSN() != 101 {
		t.Fatalf("requests %v", got)
	}
	spans := readSpans(t, req, 1024)
	deliver(t, b, 0, req...)
	lost := pump(b, 0) // the ACK of the SEND and the READ response are lost
	checkNoACKInRead(t, spans, lost)
	dl, _ := a.q.NextDeadline()
	a.q.OnTimer(dl)
	again := pump(a, dl)
	if len(again) != 2 {
		t.Fatalf("%d packets resent", len(again))
	}
	spans = append(spans, readSpans(t, again, 1024)...)
	deliver(t, b, dl, again...)
	resp := pump(b, dl)
	checkNoACKInRead(t, spans, resp)
	var ack *bth.Packet
	for _, f := range resp {
		if p := parse(t, f); p.Opcode == bth.RCAcknowledge {
			ack = p
		}
	}
	if ack == nil || ack.BTH().PSN() != 100 {
		t.Fatalf("duplicate SEND not re-acknowledged with its own PSN 100: %v", opcodes(t, resp))
	}
	deliver(t, a, dl, resp...)
	if len(a.cq.wcs) != 2 || a.cq.wcs[0].Status != verbs.WCSuccess || a.cq.wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("%+v", a.cq.wcs)
	}
	if !bytes.Equal(a.mem[4096:5096], b.mem[4096:5096]) {
		t.Fatal("READ data not placed")
	}
}

// F2: an RNR NAK that implicitly acknowledges an earlier request restores
// the RNR retry budget, as every acknowledgement that makes progress does.
func TestImpliedAckRestoresRNRBudget(t *testing.T) {
	a, b := pair(t, verbs.MTU1024) // rnr_retry 2, min_rnr_timer 3 (30 us)
	a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 10)}})
	now := monotime.Time(0)
	// Two RNR NAKs for the first SEND spend the budget.
	for i := 0; i < 2; i++ {
		deliver(t, b, now, pump(a, now)...)
		deliver(t, a, now, pump(b, now)...)
		now, _ = a.q.NextDeadline()
		a.q.OnTimer(now)
	}
	// Now it is taken, and its ACK is lost.
	b.q.PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{b.sge(0, 100)}})
	deliver(t, b, now, pump(a, now)...)
	pump(b, now)
	// The second SEND meets an empty receive queue: its RNR NAK implies
	// the first SEND's ACK.
	a.q.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 10)}})
	deliver(t, b, now, pump(a, now)...)
	nak := pump(b, now)
	if p := parse(t, nak[0]); !p.AETH().Syndrome().IsRNR() || p.BTH().PSN() != 101 {
		t.Fatalf("%v psn %v", p.AETH().Syndrome(), p.BTH().PSN())
	}
	deliver(t, a, now, nak...)
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].WRID != 1 || a.cq.wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("first SEND: %+v", a.cq.wcs)
	}
	if a.q.State() != verbs.QPStateRTS {
		t.Fatalf("the implied ACK left no RNR budget: QP %v, completions %+v", a.q.State(), a.cq.wcs)
	}
	now, _ = a.q.NextDeadline()
	a.q.OnTimer(now)
	b.q.PostRecv(&verbs.RecvWR{WRID: 10, SGL: []mr.SGE{b.sge(0, 100)}})
	deliver(t, b, now, pump(a, now)...)
	deliver(t, a, now, pump(b, now)...)
	if len(a.cq.wcs) != 2 || a.cq.wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("%+v", a.cq.wcs)
	}
}

// F2: a sequence NAK that implicitly acknowledges earlier requests
// restores the transport retry budget.
func TestImpliedAckRestoresRetryBudget(t *testing.T) {
	a, b := pair(t, verbs.MTU1024) // retry_cnt 3
	wr := func(id uint64) *verbs.SendWR {
		return &verbs.SendWR{WRID: id, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 10)},
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}
	}
	a.q.PostSend(wr(1))
	first := pump(a, 0)
	// Three timeouts: everything lost, the budget is spent.
	now := monotime.Time(0)
	for i := 0; i < 3; i++ {
		now, _ = a.q.NextDeadline()
		a.q.OnTimer(now)
		first = pump(a, now)
	}
	if a.q.req.retryLeft != 0 {
		t.Fatalf("retry budget %d after three timeouts", a.q.req.retryLeft)
	}
	// The last copy arrives, its ACK is lost; the next WRITE's first
	// packet is lost too, so its second brings a sequence NAK that
	// implies the first WRITE's ACK.
	deliver(t, b, now, first...)
	pump(b, now)
	a.q.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 2048)},
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	two := pump(a, now)
	deliver(t, b, now, two[1])
	nak := pump(b, now)
	if p := parse(t, nak[0]); p.AETH().Syndrome().Value() != bth.NAKPSNSeqError || p.BTH().PSN() != 101 {
		t.Fatalf("%v psn %v", p.AETH().Syndrome(), p.BTH().PSN())
	}
	deliver(t, a, now, nak...)
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("first WRITE: %+v", a.cq.wcs)
	}
	if a.q.State() != verbs.QPStateRTS {
		t.Fatalf("the implied ACK left no retry budget: QP %v, completions %+v", a.q.State(), a.cq.wcs)
	}
	deliver(t, b, now, pump(a, now)...)
	deliver(t, a, now, pump(b, now)...)
	if len(a.cq.wcs) != 2 || a.cq.wcs[1].Status != verbs.WCSuccess {
		t.Fatalf("%+v", a.cq.wcs)
	}
}

// connectRd connects a to b with the given READ/atomic limits.
func connectRd(t *testing.T, a, b *end, sq, rq bth.PSN, maxRd, maxDestRd uint8) {
	t.Helper()
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: b.q.QPN(), RQPSN: rq, MaxDestRdAtomic: maxDestRd, MinRNRTimer: 3,
			AH: verbs.AHAttr{DGID: bth.GIDFromAddr(b.env.addr)}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: sq, Timeout: 10, RetryCnt: 3, RNRRetry: 2, MaxRdAtomic: maxRd},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	} {
		if err := a.q.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// F3: with max_dest_rd_atomic 3, the responder keeps four READ
// resources, because an rxe requester set to 3 keeps four READs
// outstanding; the duplicate of the oldest must still be answered.
func TestReadResourcesRoundedUp(t *testing.T) {
	a := newEnd(t, verbs.QPTypeRC, 20, "10.0.0.1")
	b := newEnd(t, verbs.QPTypeRC, 30, "10.0.0.2")
	connectRd(t, a, b, 100, 500, 4, 4) // the rxe requester: 3 rounded up to 4
	connectRd(t, b, a, 500, 100, 3, 3)
	for i := 0; i < 4; i++ {
		a.q.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.sge(i*1000, 1000)}, RemoteAddr: b.mr.IOVA() + uint64(i*1000), RKey: b.mr.RKey()})
	}
	req := pump(a, 0)
	if len(req) != 4 {
		t.Fatalf("%d READ requests", len(req))
	}
	deliver(t, b, 0, req...)
	if got := len(pump(b, 0)); got != 4 || b.q.State() != verbs.QPStateRTS {
		t.Fatalf("%d responses for four outstanding READs, QP %v", got, b.q.State())
	}
	// All responses lost; the oldest READ comes again.
	deliver(t, b, 0, req[0])
	if got := pump(b, 0); len(got) != 1 || parse(t, got[0]).Opcode != bth.RCReadResponseOnly {
		t.Fatalf("duplicate of the oldest READ answered with %v (dup_no_resource %d)", opcodes(t, got), b.cnt[verbs.CntDupNoResource])
	}
}

// Amplification: a requester that ignores max_dest_rd_atomic gets the
// invalid request NAK for the first READ beyond it, not every READ served.
func TestReadsBeyondResourcesRefused(t *testing.T) {
	a := newEnd(t, verbs.QPTypeRC, 20, "10.0.0.1")
	b := newEnd(t, verbs.QPTypeRC, 30, "10.0.0.2")
	connectRd(t, a, b, 100, 500, 64, 64) // a hostile requester
	connectRd(t, b, a, 500, 100, 1, 1)
	for i := 0; i < 64; i++ {
		a.q.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.sge(0, 1024)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	}
	req := pump(a, 0)
	if len(req) != 64 {
		t.Fatalf("%d READ requests", len(req))
	}
	deliver(t, b, 0, req...)
	resp := pump(b, 0)
	var data, naks int
	for _, f := range resp {
		p := parse(t, f)
		data += p.PayLen
		if p.Opcode == bth.RCAcknowledge && p.AETH().Syndrome() == bth.NAKSyndrome(bth.NAKInvalidRequest) {
			naks++
			if p.BTH().PSN() != 101 {
				t.Errorf("NAK for PSN %v, want the second READ's 101", p.BTH().PSN())
			}
		}
	}
	if data > 1024 || naks != 1 || b.q.State() != verbs.QPStateErr || b.cnt[verbs.CntRdAtomicExceeded] != 1 {
		t.Fatalf("%d bytes served for 64 READs with max_dest_rd_atomic 1, %d NAKs, QP %v", data, naks, b.q.State())
	}
}

// A READ longer than its MR is refused, not served up to the MR's end.
func TestReadPastMRRefused(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 8192)},
		RemoteAddr: b.mr.IOVA() + uint64(len(b.mem)) - 4096, RKey: b.mr.RKey()})
	deliver(t, b, 0, pump(a, 0)...)
	resp := pump(b, 0)
	if len(resp) != 1 || parse(t, resp[0]).AETH().Syndrome() != bth.NAKSyndrome(bth.NAKRemoteAccessError) {
		t.Fatalf("%v", opcodes(t, resp))
	}
}

// F4: one READ of 2^31 bytes at path MTU 256 spans 2^23 PSNs, half the
// PSN space; the requester must still see it outstanding, arm its timer
// and take its responses.
func TestReadSpanningHalfThePSNSpace(t *testing.T) {
	if testing.Short() {
		t.Skip("maps 4 GiB of address space")
	}
	a, b := pair(t, verbs.MTU256)
	const size = 1 << 31
	reg := func(e *end) *mr.MR {
		m, err := e.pd.RegMR(mr.Slice(make([]byte, size)), mr.AccessLocalWrite|mr.AccessRemoteRead)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	am, bm := reg(a), reg(b)
	if err := a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
		SGL: []mr.SGE{{Addr: am.IOVA(), Length: size, LKey: am.LKey()}}, RemoteAddr: bm.IOVA(), RKey: bm.RKey()}); err != nil {
		t.Fatal(err)
	}
	req := pump(a, 0)
	if len(req) != 1 {
		t.Fatalf("%d requests", len(req))
	}
	if n, _, _ := a.q.Outstanding(); n != 1<<23 {
		t.Fatalf("%d PSNs outstanding, want 2^23", n)
	}
	if _, ok := a.q.NextDeadline(); !ok {
		t.Fatal("no retransmit timer armed for the READ")
	}
	deliver(t, b, 0, req...)
	b.q.Pump(0, 300)
	resp := b.env.take()
	deliver(t, a, 0, resp...)
	if a.cnt[verbs.CntBadResponse] != 0 || a.q.sq.at(a.q.req.compIdx).rdDone != 300*256 {
		t.Fatalf("bad_response %d, %d bytes placed", a.cnt[verbs.CntBadResponse], a.q.sq.at(a.q.req.compIdx).rdDone)
	}
	if _, ok := a.q.NextDeadline(); !ok {
		t.Fatal("no retransmit timer armed after progress")
	}
}

// F5: a UD send whose Q_Key has the high bit set uses the QP's own Q_Key
// (IBTA C10-15).
func TestControlledQKey(t *testing.T) {
	a := newEnd(t, verbs.QPTypeUD, 40, "10.0.0.3")
	for _, s := range []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: 0x1234}, verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey},
		{verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 7}, verbs.AttrState | verbs.AttrSQPSN},
	} {
		if err := a.q.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
	var ah verbs.AH
	if err := a.env.ResolveAH(&verbs.AHAttr{DGID: bth.GIDFromAddr(a.env.addr)}, &ah); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ wr, want uint32 }{{0x11111111, 0x11111111}, {0x80000000, 0x1234}, {0xdeadbeef, 0x1234}} {
		if err := a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, SGL: []mr.SGE{a.sge(0, 8)}, AH: &ah,
			RemoteQPN: 41, RemoteQKey: c.wr}); err != nil {
			t.Fatal(err)
		}
		f := pump(a, 0)
		if len(f) != 1 {
			t.Fatalf("%d packets", len(f))
		}
		if got := parse(t, f[0]).DETH().QKey(); got != c.want {
			t.Errorf("work request Q_Key %#x sent as %#x, want %#x", c.wr, got, c.want)
		}
	}
}
