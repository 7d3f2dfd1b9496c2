package roce_test

import (
	"errors"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// expectWC waits for k completions on n and checks their statuses in order.
func (b *testbed) expectWC(n *node, want ...verbs.WCStatus) []verbs.WC {
	b.T.Helper()
	w := b.WaitWCs(n, len(want))
	if len(w) != len(want) {
		b.T.Fatalf("got %d completions, want %d: %+v", len(w), len(want), w)
	}
	for i := range want {
		if w[i].Status != want[i] {
			b.T.Fatalf("completion %d: status %q, want %q (%+v)", i, w[i].Status, want[i], w[i])
		}
	}
	return w
}

// settle runs the simulation until nothing is left to happen.
func (b *testbed) settle() {
	b.Sim.RunFor(10 * time.Second)
	for _, n := range b.Nodes {
		n.Poll()
	}
}

func TestRemoteAccessErrors(t *testing.T) {
	cases := []struct {
		name   string
		access mr.Access // of the target MR
		op     verbs.WROpcode
		rkey   func(m *roce.MR) uint32
		off    int
		n      int
		want   verbs.WCStatus
	}{
		{"bad rkey", 0, verbs.WROpRDMAWrite, func(m *roce.MR) uint32 { return m.RKey() ^ 0x100 }, 0, 64, verbs.WCRemAccessErr},
		{"stale rkey", 0, verbs.WROpRDMARead, func(m *roce.MR) uint32 { return m.RKey() + 1 }, 0, 64, verbs.WCRemAccessErr},
		{"no remote write", mr.AccessLocalWrite | mr.AccessRemoteRead, verbs.WROpRDMAWrite, (*roce.MR).RKey, 0, 64, verbs.WCRemAccessErr},
		{"no remote read", mr.AccessLocalWrite | mr.AccessRemoteWrite, verbs.WROpRDMARead, (*roce.MR).RKey, 0, 64, verbs.WCRemAccessErr},
		{"no remote atomic", mr.AccessLocalWrite | mr.AccessRemoteWrite, verbs.WROpAtomicFetchAdd, (*roce.MR).RKey, 0, 8, verbs.WCRemAccessErr},
		{"write out of bounds", 0, verbs.WROpRDMAWrite, (*roce.MR).RKey, 4000, 200, verbs.WCRemAccessErr},
		{"read before the region", 0, verbs.WROpRDMARead, (*roce.MR).RKey, -8, 16, verbs.WCRemAccessErr},
		{"atomic out of bounds", 0, verbs.WROpAtomicCmpSwp, (*roce.MR).RKey, 4096, 8, verbs.WCRemAccessErr},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			b := newBed(t, bedOpts{})
			qa, qb := b.PairQPs(rcOpts{})
			a, c := b.Nodes[0], b.Nodes[1]
			lm, _ := a.Reg(t, 4096, 0, 1)
			rm, rbuf := c.Reg(t, 4096, tc.access, 2)
			before := append([]byte(nil), rbuf...)
			wr := verbs.SendWR{WRID: 1, Opcode: tc.op, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, tc.n)},
				RemoteAddr: uint64(int64(rm.Addr()) + int64(tc.off)), RKey: tc.rkey(rm), CompareAdd: 1}
			if err := qa.PostSend(&wr); err != nil {
				t.Fatal(err)
			}
			// A second request behind it is flushed.
			wr2 := wr
			wr2.WRID = 2
			wr2.Opcode, wr2.RKey, wr2.RemoteAddr = verbs.WROpRDMAWrite, rm.RKey(), rm.Addr()
			if err := qa.PostSend(&wr2); err != nil {
				t.Fatal(err)
			}
			w := b.expectWC(a, tc.want, verbs.WCWRFlushErr)
			if w[0].WRID != 1 || w[1].WRID != 2 {
				t.Fatalf("completions %+v", w)
			}
			b.settle()
			if qa.State() != verbs.QPStateErr || qb.State() != verbs.QPStateErr {
				t.Fatalf("states %v %v, want both ERR", qa.State(), qb.State())
			}
			if string(before) != string(rbuf) {
				t.Fatal("the target memory changed")
			}
			if c.Dev.Counter(verbs.CntNAKSent) != 1 {
				t.Fatalf("nak_sent %d", c.Dev.Counter(verbs.CntNAKSent))
			}
		})
	}
}

func TestQPAccessFlagsRefused(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, qb := b.PairQPs(rcOpts{NoAccess: true})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	if err := qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
		SGL: []mr.SGE{lm.SGE(0, 64)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}); err != nil {
		t.Fatal(err)
	}
	b.expectWC(a, verbs.WCRemInvReqErr)
	b.settle()
	if qb.State() != verbs.QPStateErr {
		t.Fatalf("responder state %v", qb.State())
	}
}

func TestAtomicAlignmentAndPostErrors(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, _ := b.PairQPs(rcOpts{MaxSGE: 2, MaxInline: 16, MaxWR: 2})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	big := mr.SGE{Addr: lm.Addr(), Length: 1 << 31, LKey: lm.LKey()}
	for _, tc := range []struct {
		name string
		wr   verbs.SendWR
		err  error
	}{
		{"misaligned atomic", verbs.SendWR{Opcode: verbs.WROpAtomicFetchAdd, SGL: []mr.SGE{lm.SGE(0, 8)}, RemoteAddr: rm.Addr() + 4, RKey: rm.RKey()}, qp.ErrAtomicWR},
		{"atomic of 4 bytes", verbs.SendWR{Opcode: verbs.WROpAtomicFetchAdd, SGL: []mr.SGE{lm.SGE(0, 4)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}, qp.ErrAtomicWR},
		{"too many SGEs", verbs.SendWR{Opcode: verbs.WROpSend, SGL: []mr.SGE{lm.SGE(0, 1), lm.SGE(1, 1), lm.SGE(2, 1)}}, qp.ErrTooManySGE},
		{"message too long", verbs.SendWR{Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{big, lm.SGE(0, 1)}}, qp.ErrMsgTooBig},
		// 2 SGEs give the QP 32 bytes of inline room, as on rdma_rxe.
		{"inline too long", verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: make([]byte, 33)}, qp.ErrInlineTooBig},
		{"inline bad lkey", verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Inline, SGL: []mr.SGE{{Addr: lm.Addr(), Length: 8, LKey: 12345}}}, qp.ErrInlineGather},
		{"UD opcode on RC", verbs.SendWR{Opcode: verbs.WROpcode(10)}, qp.ErrOpcode},
	} {
		if err := qa.PostSend(&tc.wr); !errors.Is(err, tc.err) {
			t.Errorf("%s: error %v, want %v", tc.name, err, tc.err)
		}
	}
	// The queue holds two requests.
	ok := verbs.SendWR{Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{lm.SGE(0, 8)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}
	qa.PostSend(&ok)
	qa.PostSend(&ok)
	if err := qa.PostSend(&ok); !errors.Is(err, qp.ErrQueueFull) {
		t.Fatalf("third post: %v", err)
	}
	b.settle()
	// A QP that is not in RTS refuses sends; one in RESET refuses receives.
	q, _ := a.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: a.SCQ, RecvCQ: a.RCQ, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	if err := q.PostSend(&ok); !errors.Is(err, qp.ErrPostState) {
		t.Fatalf("post send in RESET: %v", err)
	}
	if err := q.PostRecv(&verbs.RecvWR{}); !errors.Is(err, qp.ErrPostState) {
		t.Fatalf("post recv in RESET: %v", err)
	}
	// UC refuses READ; UD needs an address handle.
	uc := b.CreateQP(a, rcOpts{QPType: verbs.QPTypeUC, MaxWR: 4, MaxSGE: 1}, nil)
	ud := b.CreateQP(a, rcOpts{QPType: verbs.QPTypeUD, MaxWR: 4, MaxSGE: 1}, nil)
	b.Connect(uc, a, 99, c, rcOpts{QPType: verbs.QPTypeUC, MTU: verbs.MTU1024}, 0, 0)
	toRTSUD(t, ud, 0x1234)
	if err := uc.PostSend(&verbs.SendWR{Opcode: verbs.WROpRDMARead}); !errors.Is(err, qp.ErrOpcode) {
		t.Fatalf("READ on UC: %v", err)
	}
	if err := ud.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend}); !errors.Is(err, qp.ErrNoAH) {
		t.Fatalf("UD without AH: %v", err)
	}
	if err := ud.PostSend(&verbs.SendWR{Opcode: verbs.WROpRDMAWrite}); !errors.Is(err, qp.ErrOpcode) {
		t.Fatalf("WRITE on UD: %v", err)
	}
}

func TestBadLKeyCompletesWithProtectionError(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, qb := b.PairQPs(rcOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	write := func(id uint64, sge mr.SGE) {
		if err := qa.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{sge}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	write(1, lm.SGE(0, 100))
	write(2, mr.SGE{Addr: lm.Addr(), Length: 100, LKey: lm.LKey() ^ 0x55})
	write(3, lm.SGE(0, 100))
	w := b.expectWC(a, verbs.WCSuccess, verbs.WCLocProtErr, verbs.WCWRFlushErr)
	if w[0].WRID != 1 || w[1].WRID != 2 || w[2].WRID != 3 {
		t.Fatalf("%+v", w)
	}
	if qa.State() != verbs.QPStateErr {
		t.Fatalf("state %v", qa.State())
	}
	// Out of the local region's bounds, and a receive buffer without
	// local write access, fail the same way.
	b2 := newBed(t, bedOpts{})
	qa2, qb2 := b2.PairQPs(rcOpts{})
	a2, c2 := b2.Nodes[0], b2.Nodes[1]
	lm2, _ := a2.Reg(t, 4096, 0, 1)
	ro, _ := c2.Reg(t, 4096, mr.AccessRemoteRead, 2)
	if err := qb2.PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{ro.SGE(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if err := qa2.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm2.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	b2.expectWC(a2, verbs.WCRemOpErr)
	b2.expectWC(c2, verbs.WCLocProtErr)
	_ = qb
}

func TestRNRRetry(t *testing.T) {
	t.Run("limited", func(t *testing.T) {
		b := newBed(t, bedOpts{})
		qa, qb := b.PairQPs(rcOpts{RNR: 2, MinRNR: 1})
		a, c := b.Nodes[0], b.Nodes[1]
		lm, _ := a.Reg(t, 4096, 0, 1)
		qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 100)}})
		qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 100)}})
		b.expectWC(a, verbs.WCRNRRetryExcErr, verbs.WCWRFlushErr)
		if got := a.Dev.Counter(verbs.CntRcvdRNRErr); got != 3 {
			t.Fatalf("rcvd_rnr_err %d, want 3 (the first try and two retries)", got)
		}
		if got := c.Dev.Counter(verbs.CntSendRNRErr); got < 3 {
			t.Fatalf("send_rnr_err %d", got)
		}
		if a.Dev.Counter(verbs.CntRetryRNRExceededErr) != 1 {
			t.Fatal("retry_rnr_exceeded_err not counted")
		}
		b.settle()
		if qa.State() != verbs.QPStateErr || qb.State() != verbs.QPStateRTS {
			t.Fatalf("states %v %v", qa.State(), qb.State())
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		b := newBed(t, bedOpts{})
		qa, qb := b.PairQPs(rcOpts{RNR: 7, MinRNR: 14}) // 1.28 ms
		a, c := b.Nodes[0], b.Nodes[1]
		lm, _ := a.Reg(t, 4096, 0, 1)
		rm, rbuf := c.Reg(t, 4096, 0, 2)
		qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 3000)}})
		// Nobody posts a receive for a while: the requester keeps waiting.
		b.Sim.RunFor(50 * time.Millisecond)
		if n := a.Poll(); n != 0 {
			t.Fatalf("completed early: %+v", a.WCs)
		}
		rnr := a.Dev.Counter(verbs.CntRcvdRNRErr)
		if rnr < 30 {
			t.Fatalf("only %d RNR NAKs in 50 ms with a 1.28 ms timer", rnr)
		}
		qb.PostRecv(&verbs.RecvWR{WRID: 5, SGL: []mr.SGE{rm.SGE(0, 4096)}})
		b.expectWC(a, verbs.WCSuccess)
		w := b.expectWC(c, verbs.WCSuccess)
		if w[0].ByteLen != 3000 || string(rbuf[:3000]) != string(lm.Buf()[:3000]) {
			t.Fatal("data")
		}
	})
}

func TestRetryExceeded(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, _ := b.PairQPs(rcOpts{Retry: 3, Timeout: 10})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	b.Router.SetImpairments(memlink.Impairments{Loss: 1})
	start := b.Clock.Now()
	qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 3000)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{lm.SGE(0, 30)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	b.expectWC(a, verbs.WCRetryExcErr, verbs.WCWRFlushErr)
	el := b.Clock.Now().Sub(start)
	rto := 4096 * time.Nanosecond << 10
	if el < 4*rto || el > 5*rto {
		t.Fatalf("gave up after %v, want 4 timeouts of %v", el, rto)
	}
	if a.Dev.Counter(verbs.CntRetryExceededErr) != 1 || a.Dev.Counter(verbs.CntTimeouts) != 4 || a.Dev.Counter(verbs.CntCompleterRetryErr) != 3 {
		t.Fatalf("counters %v", a.Dev.Counters())
	}
	// The four packets, and three retransmissions of them.
	if got := a.Dev.Counter(verbs.CntSentPkts); got != 4+3*4 {
		t.Fatalf("sent_pkts %d", got)
	}
}

func TestRetryCount7IsInfinite(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, _ := b.PairQPs(rcOpts{Retry: 7, Timeout: 4})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	b.Router.SetImpairments(memlink.Impairments{Loss: 1})
	qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 100)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	b.Sim.RunFor(100 * time.Millisecond)
	if a.Poll() != 0 || a.Dev.Counter(verbs.CntTimeouts) < 1000 {
		t.Fatalf("wcs %+v timeouts %d", a.WCs, a.Dev.Counter(verbs.CntTimeouts))
	}
	b.Router.SetImpairments(memlink.Impairments{})
	b.expectWC(a, verbs.WCSuccess)
}

func TestIllegalTransitions(t *testing.T) {
	b := newBed(t, bedOpts{})
	a := b.Nodes[0]
	q := b.CreateQP(a, rcOpts{MaxWR: 4, MaxSGE: 1, QPType: verbs.QPTypeRC}, nil)
	var me *qp.ModifyError
	check := func(name string, attr verbs.QPAttr, mask verbs.QPAttrMask, want string) {
		t.Helper()
		err := q.Modify(&attr, mask)
		if !errors.As(err, &me) {
			t.Fatalf("%s: error %v", name, err)
		}
		t.Logf("%s: %v", name, err)
		switch want {
		case "missing":
			if me.Missing == 0 {
				t.Fatalf("%s: %v", name, err)
			}
		case "extra":
			if me.Extra == 0 {
				t.Fatalf("%s: %v", name, err)
			}
		default:
			if me.Reason == "" {
				t.Fatalf("%s: %v", name, err)
			}
		}
	}
	check("RESET->RTR", verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState, "illegal")
	check("RESET->ERR", verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState, "illegal")
	check("RESET->INIT without port", verbs.QPAttr{State: verbs.QPStateInit}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrAccessFlags, "missing")
	check("RESET->INIT with Q_Key on RC", verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags|verbs.AttrQKey, "extra")
	check("RESET->INIT port 2", verbs.QPAttr{State: verbs.QPStateInit, PortNum: 2},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags, "value")
	check("current state mismatch", verbs.QPAttr{State: verbs.QPStateInit, CurState: verbs.QPStateRTS, PortNum: 1},
		verbs.AttrState|verbs.AttrCurState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags, "value")
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags); err != nil {
		t.Fatal(err)
	}
	check("INIT->RTS", verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState|verbs.AttrSQPSN, "illegal")
	check("INIT->RTR without MIN_RNR_TIMER", verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, AH: a.AHTo(b.Nodes[1])},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic, "missing")
	rtr := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	check("path MTU above the port", verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: 6, AH: a.AHTo(b.Nodes[1])}, rtr, "value")
	check("bad SGID index", verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, AH: verbs.AHAttr{DGID: b.Nodes[1].GID, SGIDIndex: 3}}, rtr, "value")
	check("IPv6 to IPv4", verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, AH: verbs.AHAttr{DGID: bth.GID{0xfd, 15: 1}}}, rtr, "value")
	check("max_dest_rd_atomic 200", verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, AH: a.AHTo(b.Nodes[1]), MaxDestRdAtomic: 200}, rtr, "value")
	// PSNs and the destination QP number beyond 24 bits are taken by
	// their low 24 bits, as rdma_rxe takes them.
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, AH: a.AHTo(b.Nodes[1]), DestQPN: 1<<24 | 99, RQPSN: 1<<31 | 7, MaxDestRdAtomic: 4, MinRNRTimer: 12}, rtr); err != nil {
		t.Fatal(err)
	}
	if got, _ := q.Query(); got.RQPSN != 7 || got.DestQPN != 99 {
		t.Fatalf("RQ PSN 0x80000007 and destination QPN 0x1000063 kept as %#x and %#x, want 7 and 99", got.RQPSN, got.DestQPN)
	}
	rts := verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
	check("RTR->RTS retry_cnt 8", verbs.QPAttr{State: verbs.QPStateRTS, RetryCnt: 8}, rts, "value")
	check("RTR->RTS timeout 32", verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 32}, rts, "value")
	check("RTR->RTS without timeout", verbs.QPAttr{State: verbs.QPStateRTS}, rts&^verbs.AttrTimeout, "missing")
	check("RTR->RTR", verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState, "illegal")
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}, rts); err != nil {
		t.Fatal(err)
	}
	check("RTS->RTS with path MTU", verbs.QPAttr{PathMTU: verbs.MTU512}, verbs.AttrPathMTU, "extra")
	check("RTS->SQE", verbs.QPAttr{State: verbs.QPStateSQE}, verbs.AttrState, "illegal")
	check("RTS->INIT", verbs.QPAttr{State: verbs.QPStateInit}, verbs.AttrState, "illegal")
	if err := q.Modify(&verbs.QPAttr{MinRNRTimer: 3}, verbs.AttrMinRNRTimer); err != nil {
		t.Fatalf("RTS->RTS min_rnr_timer: %v", err)
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	check("ERR->RTS", verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState, "illegal")
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	attr, _ := q.Query()
	if attr.State != verbs.QPStateReset {
		t.Fatalf("state %v", attr.State)
	}
}

func TestCQOverflow(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	small, _ := a.Dev.CreateCQ(2, nil)
	o := rcOpts{}
	o.Defaults()
	q, _ := a.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: small, RecvCQ: a.RCQ, Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	p := b.CreateQP(c, o, nil)
	b.Connect(q, a, p.QPN(), c, o, 0, 0)
	b.Connect(p, c, q.QPN(), a, o, 0, 0)
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	for i := 1; i <= 4; i++ {
		q.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 10)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	}
	b.settle()
	var wcs [8]verbs.WC
	n := small.Poll(wcs[:])
	if n != 2 || wcs[0].WRID != 1 || wcs[1].WRID != 2 || !small.Overflowed() {
		t.Fatalf("polled %d %+v overflowed %v", n, wcs[:n], small.Overflowed())
	}
	ev, ok := a.Dev.PollAsyncEvent()
	if !ok || ev.Type != verbs.EventCQErr || ev.CQ != small {
		t.Fatalf("event %+v %v", ev, ok)
	}
	if q.State() != verbs.QPStateErr || a.Dev.Counter(verbs.CntCQOverflow) == 0 {
		t.Fatalf("state %v counters %v", q.State(), a.Dev.Counters())
	}
	if err := small.Destroy(); !errors.Is(err, roce.ErrBusy) {
		t.Fatalf("destroying a CQ in use: %v", err)
	}
}

func TestFlushAfterError(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, qb := b.PairQPs(rcOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	for i := 1; i <= 3; i++ {
		qb.PostRecv(&verbs.RecvWR{WRID: uint64(100 + i), SGL: []mr.SGE{rm.SGE(0, 100)}})
		qa.PostRecv(&verbs.RecvWR{WRID: uint64(200 + i), SGL: []mr.SGE{lm.SGE(0, 100)}})
	}
	// Unsignaled requests complete (with an error) when flushed.
	for i := 1; i <= 3; i++ {
		qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{lm.SGE(0, 10)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	}
	if err := qa.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	w := b.expectWC(a, verbs.WCWRFlushErr, verbs.WCWRFlushErr, verbs.WCWRFlushErr, verbs.WCWRFlushErr, verbs.WCWRFlushErr, verbs.WCWRFlushErr)
	sends, recvs := 0, 0
	for _, x := range w {
		if x.Opcode == verbs.WCRecv {
			recvs++
		} else {
			sends++
		}
	}
	if sends != 3 || recvs != 3 {
		t.Fatalf("%+v", w)
	}
	// Posting to a QP in the error state is allowed and flushes at once.
	if err := qa.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WROpSend}); err != nil {
		t.Fatal(err)
	}
	if err := qa.PostRecv(&verbs.RecvWR{WRID: 10}); err != nil {
		t.Fatal(err)
	}
	w = b.expectWC(a, verbs.WCWRFlushErr, verbs.WCWRFlushErr)
	if w[0].WRID+w[1].WRID != 19 {
		t.Fatalf("%+v", w)
	}
	// RESET and back to RTS: the QP works again.
	qa.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.AttrState)
	qb.Modify(&verbs.QPAttr{State: verbs.QPStateReset}, verbs.AttrState)
	o := rcOpts{}
	o.Defaults()
	b.Connect(qa, a, qb.QPN(), c, o, 5, 6)
	b.Connect(qb, c, qa.QPN(), a, o, 6, 5)
	qa.PostSend(&verbs.SendWR{WRID: 11, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 10)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	b.expectWC(a, verbs.WCSuccess)
}

func TestDestroyWithWorkOutstanding(t *testing.T) {
	b := newBed(t, bedOpts{Imp: memlink.Impairments{Delay: 10 * time.Microsecond}})
	qa, qb := b.PairQPs(rcOpts{Timeout: 8, Retry: 2})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 1<<20, 0, 1)
	rm, _ := c.Reg(t, 1<<20, 0, 2)
	for i := 0; i < 8; i++ {
		qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 1<<20)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
		qb.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{rm.SGE(0, 1<<20)}, RemoteAddr: lm.Addr(), RKey: lm.RKey()})
	}
	b.Sim.RunFor(100 * time.Microsecond)
	if err := qb.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := qb.Destroy(); !errors.Is(err, roce.ErrDestroyed) {
		t.Fatalf("second destroy: %v", err)
	}
	if err := qb.PostSend(&verbs.SendWR{}); !errors.Is(err, roce.ErrDestroyed) {
		t.Fatalf("post to a destroyed QP: %v", err)
	}
	// The deregistration of memory under way is safe too.
	if err := lm.Dereg(); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if c.Dev.Counter(verbs.CntUnknownQPN) == 0 {
		t.Fatal("no packets dropped for the destroyed QP")
	}
	// qa fails: its peer is gone (retries exhausted) or its memory is.
	for _, w := range a.WCs {
		if w.Status == verbs.WCSuccess && w.WRID > 1 {
			t.Fatalf("completion %+v", w)
		}
	}
	if qa.State() != verbs.QPStateErr {
		t.Fatalf("state %v", qa.State())
	}
	if err := a.PD.Dealloc(); !errors.Is(err, roce.ErrBusy) {
		t.Fatalf("dealloc of a PD with a QP: %v", err)
	}
	if err := qa.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := a.PD.Dealloc(); err != nil {
		t.Fatalf("dealloc of an empty PD: %v", err)
	}
}

// toRTSUD brings a UD QP to RTS.
func toRTSUD(t testing.TB, q *roce.QP, qkey uint32) {
	t.Helper()
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, QKey: qkey}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: 0x123}, verbs.AttrState|verbs.AttrSQPSN); err != nil {
		t.Fatal(err)
	}
}
