package roce_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

func TestPSNWraparound(t *testing.T) {
	for _, loss := range []float64{0, 0.05} {
		t.Run(fmt.Sprintf("loss=%v", loss), func(t *testing.T) {
			b := newBed(t, bedOpts{Seed: 7, Imp: memlink.Impairments{Loss: loss, Reorder: loss, Duplicate: loss}})
			qa, qb := b.PairQPs(rcOpts{MTU: verbs.MTU256, PSNA: bth.PSNMask - 20, PSNB: bth.PSNMask - 3, Timeout: 6})
			a, c := b.Nodes[0], b.Nodes[1]
			lm, lbuf := a.Reg(t, 1<<18, 0, 1)
			rm, rbuf := c.Reg(t, 1<<18, 0, 2)
			n := 64 << 10
			qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, n)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
			qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(n, n)}, RemoteAddr: rm.Addr() + uint64(n), RKey: rm.RKey()})
			qa.PostRecv(&verbs.RecvWR{WRID: 4, SGL: []mr.SGE{lm.SGE(3*n, 4096)}})
			qb.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{rm.SGE(3*n, 3000)}})
			qa.PostSend(&verbs.SendWR{WRID: 6, Opcode: verbs.WROpAtomicFetchAdd, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(8, 8)}, RemoteAddr: rm.Addr() + 8, RKey: rm.RKey(), CompareAdd: 1})
			b.Run(func() bool { return len(a.WCs) == 4 && len(c.WCs) == 1 })
			for _, w := range append(a.WCs, c.WCs...) {
				if w.Status != verbs.WCSuccess {
					t.Fatalf("%+v", w)
				}
			}
			if !bytes.Equal(lbuf[16:n], rbuf[16:n]) || !bytes.Equal(lbuf[n:2*n], rbuf[n:2*n]) || !bytes.Equal(lbuf[3*n:3*n+3000], rbuf[3*n:3*n+3000]) {
				t.Fatal("data differs")
			}
			aa, _ := qa.Query()
			ba, _ := qb.Query()
			if aa.SQPSN > 1000 || ba.RQPSN != aa.SQPSN || ba.SQPSN > 1000 || aa.RQPSN != ba.SQPSN {
				t.Fatalf("PSNs did not wrap: %v %v %v %v", aa.SQPSN, ba.RQPSN, ba.SQPSN, aa.RQPSN)
			}
		})
	}
}

// udBed makes a UD QP on each of two nodes.
func udBed(t *testing.T, ipv6 bool) (*testbed, *roce.QP, *roce.QP) {
	b := newBed(t, bedOpts{IPv6: ipv6, LinkMTU: 1500})
	o := rcOpts{QPType: verbs.QPTypeUD, MaxWR: 16, MaxSGE: 2}
	qa := b.CreateQP(b.Nodes[0], o, nil)
	qb := b.CreateQP(b.Nodes[1], o, nil)
	toRTSUD(t, qa, 0x11111111)
	toRTSUD(t, qb, 0x11111111)
	return b, qa, qb
}

func TestUDSendGRH(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", v6), func(t *testing.T) {
			b, qa, qb := udBed(t, v6)
			a, c := b.Nodes[0], b.Nodes[1]
			ah, err := a.PD.CreateAH(&verbs.AHAttr{DGID: c.GID, DMAC: c.MAC, HopLimit: 64, TrafficClass: 0})
			if err != nil {
				t.Fatal(err)
			}
			lm, lbuf := a.Reg(t, 4096, 0, 1)
			rm, rbuf := c.Reg(t, 4096, 0, 2)
			qb.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{rm.SGE(0, 40), rm.SGE(100, 2000)}})
			qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSendWithImm, Flags: verbs.Signaled, Imm: 0xabcdef01,
				SGL: []mr.SGE{lm.SGE(0, 1000)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x11111111})
			b.expectWC(a, verbs.WCSuccess)
			w := b.expectWC(c, verbs.WCSuccess)[0]
			if w.ByteLen != 1040 || w.Flags != verbs.WCGRH|verbs.WCWithImm || w.Imm != 0xabcdef01 || w.SrcQP != qa.QPN() || w.Opcode != verbs.WCRecv {
				t.Fatalf("%+v", w)
			}
			// sl says where the destination address is in the GRH space (UCX's ud_verbs reads it).
			if want := map[bool]uint8{false: verbs.WCSLRoCEv2IPv4, true: verbs.WCSLRoCEv2IPv6}[v6]; w.SL != want {
				t.Fatalf("sl %#x, want %#x", w.SL, want)
			}
			if !bytes.Equal(rbuf[100:1100], lbuf[:1000]) {
				t.Fatal("payload differs")
			}
			g := rbuf[:40]
			if v6 {
				if g[0]>>4 != 6 || g[6] != 17 || !bytes.Equal(g[8:24], a.GID[:]) || !bytes.Equal(g[24:40], c.GID[:]) {
					t.Fatalf("GRH %x", g)
				}
			} else {
				if !bytes.Equal(g[:20], make([]byte, 20)) || g[20] != 0x45 || g[29] != 17 ||
					!bytes.Equal(g[32:36], a.GID[12:]) || !bytes.Equal(g[36:40], c.GID[12:]) {
					t.Fatalf("GRH space %x", g)
				}
			}

			// Wrong Q_Key: dropped and counted.
			qb.PostRecv(&verbs.RecvWR{WRID: 3, SGL: []mr.SGE{rm.SGE(0, 2048)}})
			qa.PostSend(&verbs.SendWR{WRID: 4, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 10)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x22})
			b.expectWC(a, verbs.WCSuccess)
			b.settle()
			if len(c.WCs) != 0 || c.Dev.Counter(verbs.CntBadQKey) != 1 {
				t.Fatalf("wcs %+v bad_qkey %d", c.WCs, c.Dev.Counter(verbs.CntBadQKey))
			}
			// Longer than the port MTU (1024 on a 1500-byte link): not sent,
			// completed successfully (IBTA C10-93.1.1).
			sent := a.Dev.Counter(verbs.CntSentPkts)
			qa.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 1025)}, AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x11111111})
			b.expectWC(a, verbs.WCSuccess)
			if a.Dev.Counter(verbs.CntSentPkts) != sent {
				t.Fatal("an oversized UD message was sent")
			}
			// A receive buffer without room for GRH and payload: the message
			// is dropped and the buffer waits for the next one.
			qb2 := b.CreateQP(c, rcOpts{QPType: verbs.QPTypeUD, MaxWR: 4, MaxSGE: 1}, nil)
			toRTSUD(t, qb2, 7)
			qb2.PostRecv(&verbs.RecvWR{WRID: 6, SGL: []mr.SGE{rm.SGE(0, 100)}})
			qa.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WROpSend, SGL: []mr.SGE{lm.SGE(0, 61)}, AH: ah, RemoteQPN: qb2.QPN(), RemoteQKey: 7})
			qa.PostSend(&verbs.SendWR{WRID: 8, Opcode: verbs.WROpSend, SGL: []mr.SGE{lm.SGE(0, 60)}, AH: ah, RemoteQPN: qb2.QPN(), RemoteQKey: 7})
			w = b.expectWC(c, verbs.WCSuccess)[0]
			if w.WRID != 6 || w.ByteLen != 100 || c.Dev.Counter(verbs.CntRecvDropped) != 1 {
				t.Fatalf("%+v dropped %d", w, c.Dev.Counter(verbs.CntRecvDropped))
			}
		})
	}
}

func TestGSIQKey(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	mk := func(n *node) *roce.QP {
		q, err := n.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeGSI, SendCQ: n.SCQ, RecvCQ: n.RCQ, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if q.QPN() != 1 {
			t.Fatalf("GSI QPN %v", q.QPN())
		}
		if err := q.Modify(&verbs.QPAttr{State: verbs.QPStateInit, QKey: 5}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrQKey); err != nil {
			t.Fatal(err)
		}
		q.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState)
		q.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState|verbs.AttrSQPSN)
		return q
	}
	qa, qb := mk(a), mk(c)
	if _, err := a.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeGSI, SendCQ: a.SCQ, RecvCQ: a.RCQ}); !errors.Is(err, roce.ErrBusy) {
		t.Fatalf("second GSI QP: %v", err)
	}
	attr, _ := qa.Query()
	if attr.QKey != verbs.GSIQKey {
		t.Fatalf("GSI Q_Key %#x", attr.QKey)
	}
	ah, _ := a.PD.CreateAH(&verbs.AHAttr{DGID: c.GID, DMAC: c.MAC})
	lm, _ := a.Reg(t, 256, 0, 1)
	rm, _ := c.Reg(t, 256, 0, 2)
	qb.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{rm.SGE(0, 256)}})
	// Whatever the request says, QP1 sends with the GSI Q_Key.
	qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 100)}, AH: ah, RemoteQPN: 1, RemoteQKey: 99})
	b.expectWC(a, verbs.WCSuccess)
	w := b.expectWC(c, verbs.WCSuccess)[0]
	if w.SrcQP != 1 || w.ByteLen != 140 {
		t.Fatalf("%+v", w)
	}
}

func TestUCDropsDamagedMessages(t *testing.T) {
	b := newBed(t, bedOpts{Seed: 11, Imp: memlink.Impairments{Loss: 0.1}})
	o := rcOpts{QPType: verbs.QPTypeUC, MTU: verbs.MTU256, MaxWR: 512, MaxSGE: 1}
	qa, qb := b.PairQPs(o)
	a, c := b.Nodes[0], b.Nodes[1]
	const msgs, size = 300, 1000 // four packets each
	lm, lbuf := a.Reg(t, msgs*size, 0, 1)
	rm, rbuf := c.Reg(t, msgs*size, 0, 2)
	for i := range lbuf {
		lbuf[i] = byte(i / size)
	}
	clear(rbuf)
	for i := 0; i < msgs; i++ {
		qb.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{rm.SGE(i*size, size)}})
	}
	for i := 0; i < msgs; i++ {
		qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(i*size, size)}})
	}
	b.settle()
	if len(a.WCs) != msgs {
		t.Fatalf("%d send completions", len(a.WCs))
	}
	got := len(c.WCs)
	if got == 0 || got == msgs {
		t.Fatalf("%d of %d messages arrived at 10%% loss", got, msgs)
	}
	// Receives are used in order; each holds one whole message.
	for k, w := range c.WCs {
		if w.Status != verbs.WCSuccess || w.WRID != uint64(k) || w.ByteLen != size {
			t.Fatalf("%+v", w)
		}
		m := rbuf[k*size : (k+1)*size]
		for _, x := range m {
			if x != m[0] {
				t.Fatalf("receive %d holds parts of different messages", k)
			}
		}
	}
	t.Logf("%d of %d UC messages delivered, recv_dropped %d", got, msgs, c.Dev.Counter(verbs.CntRecvDropped))
	// UC RDMA WRITE with immediate works on a clean link.
	b.Router.SetImpairments(memlink.Impairments{})
	c.WCs = nil
	qb.PostRecv(&verbs.RecvWR{WRID: 999})
	qa.PostSend(&verbs.SendWR{WRID: 1000, Opcode: verbs.WROpRDMAWriteWithImm, Imm: 42, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 3000)}, RemoteAddr: rm.Addr() + 7, RKey: rm.RKey()})
	b.Run(func() bool {
		for _, w := range c.WCs {
			if w.Opcode == verbs.WCRecvRDMAWithImm {
				return true
			}
		}
		return false
	})
	if !bytes.Equal(rbuf[7:3007], lbuf[:3000]) {
		t.Fatal("UC write data differs")
	}
}

func TestSRQLimitEvent(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	srq, err := c.PD.CreateSRQ(16, 2, 0)
	if err != nil {
		t.Fatal(err)
	}
	rm, rbuf := c.Reg(t, 16*256, 0, 2)
	for i := 0; i < 8; i++ {
		if err := srq.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{rm.SGE(i*256, 256)}}); err != nil {
			t.Fatal(err)
		}
	}
	srq.Arm(5)
	o := rcOpts{}
	o.Defaults()
	var reqs, resps []*roce.QP
	for i := 0; i < 2; i++ {
		q := b.CreateQP(a, o, nil)
		p := b.CreateQP(c, o, srq)
		b.Connect(q, a, p.QPN(), c, o, 0, 0)
		b.Connect(p, c, q.QPN(), a, o, 0, 0)
		reqs, resps = append(reqs, q), append(resps, p)
	}
	if err := resps[0].PostRecv(&verbs.RecvWR{}); !errors.Is(err, qp.ErrHasSRQ) {
		t.Fatalf("post to a QP with an SRQ: %v", err)
	}
	lm, lbuf := a.Reg(t, 256, 0, 1)
	for i := 0; i < 6; i++ {
		reqs[i%2].PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 100+i)}})
		b.expectWC(a, verbs.WCSuccess)
		w := b.expectWC(c, verbs.WCSuccess)[0]
		if w.WRID != uint64(i) || w.QPNum != resps[i%2].QPN() || w.ByteLen != uint32(100+i) {
			t.Fatalf("%+v", w)
		}
		if !bytes.Equal(rbuf[i*256:i*256+100], lbuf[:100]) {
			t.Fatal("data")
		}
		ev, ok := c.Dev.PollAsyncEvent()
		// 8 posted; after the 4th receive 4 are left, fewer than 5.
		if i == 3 {
			if !ok || ev.Type != verbs.EventSRQLimitReached || ev.SRQ != srq {
				t.Fatalf("after %d receives: event %+v %v", i+1, ev, ok)
			}
		} else if ok {
			t.Fatalf("after %d receives: unexpected event %+v", i+1, ev)
		}
	}
	if max, limit, posted := srq.Query(); max != 16 || limit != 0 || posted != 2 {
		t.Fatalf("query %d %d %d", max, limit, posted)
	}
	if err := srq.Destroy(); !errors.Is(err, roce.ErrBusy) {
		t.Fatalf("destroy SRQ in use: %v", err)
	}
}

func TestFenceWaitsForRead(t *testing.T) {
	for _, fence := range []bool{false, true} {
		b := newBed(t, bedOpts{Imp: memlink.Impairments{Delay: 10 * time.Microsecond}})
		qa, _ := b.PairQPs(rcOpts{})
		a, c := b.Nodes[0], b.Nodes[1]
		lm, _ := a.Reg(t, 1<<16, 0, 1)
		rm, _ := c.Reg(t, 1<<16, 0, 2)
		var flags verbs.SendFlags = verbs.Signaled
		if fence {
			flags |= verbs.Fence
		}
		qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 1<<15)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
		qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, Flags: flags, SGL: []mr.SGE{lm.SGE(1<<15, 8)}, RemoteAddr: rm.Addr() + 1<<15, RKey: rm.RKey()})
		var readDone, writeDone monotime.Time
		b.Run(func() bool {
			for _, w := range a.WCs {
				if w.WRID == 1 && readDone == 0 {
					readDone = b.Clock.Now()
				}
				if w.WRID == 2 && writeDone == 0 {
					writeDone = b.Clock.Now()
				}
			}
			return writeDone != 0
		})
		// A fenced WRITE starts only after the READ completed: one more
		// round trip.
		if fence && writeDone.Sub(readDone) < 20*time.Microsecond {
			t.Fatalf("fenced write completed %v after the read", writeDone.Sub(readDone))
		}
		if !fence && writeDone.Sub(readDone) > 5*time.Microsecond {
			t.Fatalf("unfenced write completed %v after the read", writeDone.Sub(readDone))
		}
	}
}

func TestSQDDrain(t *testing.T) {
	b := newBed(t, bedOpts{Imp: memlink.Impairments{Delay: 5 * time.Microsecond}})
	qa, _ := b.PairQPs(rcOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 1<<16, 0, 1)
	rm, _ := c.Reg(t, 1<<16, 0, 2)
	wr := verbs.SendWR{Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 1<<16)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}
	wr.WRID = 1
	qa.PostSend(&wr)
	b.Sim.RunFor(2 * time.Microsecond)
	if err := qa.Modify(&verbs.QPAttr{State: verbs.QPStateSQD, EnSQDAsyncNotify: true}, verbs.AttrState|verbs.AttrEnSQDAsyncNotify); err != nil {
		t.Fatal(err)
	}
	wr.WRID = 2
	qa.PostSend(&wr) // waits in the queue while draining
	b.Run(func() bool { return len(a.WCs) == 1 })
	b.settle()
	ev, ok := a.Dev.PollAsyncEvent()
	if !ok || ev.Type != verbs.EventSQDrained || ev.QP != qa {
		t.Fatalf("event %+v %v", ev, ok)
	}
	if len(a.WCs) != 1 || a.WCs[0].WRID != 1 {
		t.Fatalf("%+v", a.WCs)
	}
	attr, _ := qa.Query()
	if attr.State != verbs.QPStateSQD || attr.SQDraining {
		t.Fatalf("%v draining %v", attr.State, attr.SQDraining)
	}
	if err := qa.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	b.Run(func() bool { return len(a.WCs) == 2 })
}

func TestSolicitedNotify(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	ch := c.Dev.CreateCompChannel()
	rcq, _ := c.Dev.CreateCQ(16, ch)
	o := rcOpts{}
	o.Defaults()
	qa := b.CreateQP(a, o, nil)
	qb, _ := c.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: c.SCQ, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	b.Connect(qa, a, qb.QPN(), c, o, 0, 0)
	b.Connect(qb, c, qa.QPN(), a, o, 0, 0)
	lm, _ := a.Reg(t, 64, 0, 1)
	rm, _ := c.Reg(t, 64, 0, 2)
	for i := 0; i < 3; i++ {
		qb.PostRecv(&verbs.RecvWR{WRID: uint64(i), SGL: []mr.SGE{rm.SGE(0, 64)}})
	}
	if err := rcq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	qa.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, SGL: []mr.SGE{lm.SGE(0, 8)}})
	b.settle()
	if _, err := ch.GetEvent(ctx); err == nil {
		t.Fatal("event for an unsolicited message")
	}
	qa.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Solicited, SGL: []mr.SGE{lm.SGE(0, 8)}})
	b.settle()
	got, err := ch.GetEvent(context.Background())
	if err != nil || got != rcq {
		t.Fatalf("%v %v", got, err)
	}
	ch.AckEvents(got, 1)
	var wcs [4]verbs.WC
	if n := rcq.Poll(wcs[:]); n != 2 {
		t.Fatalf("%d completions", n)
	}
}

func TestMaxRdAtomicLimit(t *testing.T) {
	b := newBed(t, bedOpts{Imp: memlink.Impairments{Delay: 5 * time.Microsecond}})
	qa, _ := b.PairQPs(rcOpts{RdAtomic: 2})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 1<<16, 0, 1)
	rm, _ := c.Reg(t, 1<<16, 0, 2)
	inflight, maxInflight := 0, 0
	b.SetTap(func(from *memlink.Port, f []byte) {
		p, err := bth.Parse(f)
		if err != nil {
			return
		}
		switch p.Opcode {
		case bth.RCReadRequest, bth.RCFetchAdd:
			inflight++
			maxInflight = max(maxInflight, inflight)
		case bth.RCReadResponseLast, bth.RCReadResponseOnly, bth.RCAtomicAcknowledge:
			inflight--
		}
	})
	for i := 0; i < 10; i++ {
		op := verbs.WROpRDMARead
		n := 4096
		if i%3 == 0 {
			op, n = verbs.WROpAtomicFetchAdd, 8
		}
		qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: op, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(i*4096, n)}, RemoteAddr: rm.Addr() + uint64(i*4096), RKey: rm.RKey(), CompareAdd: 1})
	}
	b.Run(func() bool { return len(a.WCs) == 10 })
	if maxInflight != 2 {
		t.Fatalf("%d READs and atomics in flight, max_rd_atomic 2", maxInflight)
	}
}

func TestInvalidatedKeyRefused(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, qb := b.PairQPs(rcOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 64, 0, 1)
	rm, _ := c.Reg(t, 64, 0, 2)
	target, _, key := b.fastReg(c, qb, 64, allAccess)
	qb.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{rm.SGE(0, 64)}})
	qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSendWithInv, InvalidateRKey: key, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 8)}})
	b.expectWC(a, verbs.WCSuccess)
	if _, _, _, ok := target.Registered(); ok {
		t.Fatal("not invalidated")
	}
	qa.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 8)}, RemoteAddr: 0, RKey: key})
	b.expectWC(a, verbs.WCRemAccessErr)
	if err := target.Dealloc(); err != nil {
		t.Fatalf("dealloc of an invalidated MR: %v", err)
	}
	// An rkey that names nothing cannot be invalidated: as with rdma_rxe
	// the SEND is acknowledged, and the receiver's request fails.
	b2 := newBed(t, bedOpts{})
	qa2, qb2 := b2.PairQPs(rcOpts{})
	lm2, _ := b2.Nodes[0].Reg(t, 64, 0, 1)
	rm2, _ := b2.Nodes[1].Reg(t, 64, 0, 2)
	qb2.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{rm2.SGE(0, 64)}})
	qa2.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSendWithInv, InvalidateRKey: 0x12345678, Flags: verbs.Signaled, SGL: []mr.SGE{lm2.SGE(0, 8)}})
	b2.expectWC(b2.Nodes[0], verbs.WCSuccess)
	b2.expectWC(b2.Nodes[1], verbs.WCRemInvReqErr)
}

func TestDeregDuringRead(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, qb := b.PairQPs(rcOpts{MTU: verbs.MTU256})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 1<<20, 0, 1)
	rm, _ := c.Reg(t, 1<<20, 0, 2)
	qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 1<<20)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	// Drive the devices by hand: the request goes out, the responder
	// serves the first part of the READ (one step sends at most 1024
	// packets of the 4096), and then the memory goes away.
	now := b.Clock.Now()
	a.Dev.Step(now)
	c.Dev.Step(now)
	if err := rm.Dereg(); err != nil {
		t.Fatal(err)
	}
	b.expectWC(a, verbs.WCRemAccessErr)
	b.settle()
	if qb.State() != verbs.QPStateErr {
		t.Fatalf("responder %v", qb.State())
	}
}

// TestWireFormat checks what goes on the wire against rdma_rxe's habits.
func TestWireFormat(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, qb := b.PairQPs(rcOpts{MTU: verbs.MTU256, PSNA: 1000})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, _ := a.Reg(t, 1<<16, 0, 1)
	rm, _ := c.Reg(t, 1<<16, 0, 2)
	var reqs, acks []*bth.Packet
	var fail string
	b.SetTap(func(from *memlink.Port, f []byte) {
		p, err := bth.Parse(append([]byte(nil), f...))
		if err != nil {
			fail = err.Error()
			return
		}
		ip := p.Frame[p.L3:]
		if !p.VerifyICRC() || binary.BigEndian.Uint16(ip[6:])&0x4000 == 0 || binary.BigEndian.Uint16(ip[4:]) == 0 ||
			ip[8] != 64 || binary.BigEndian.Uint16(p.Frame[p.L4+6:]) != 0 || p.BTH().PKey() != 0xffff {
			fail = "bad IP/UDP/BTH fields"
		}
		src := qa.QPN()
		if from == c.Port {
			src = qb.QPN()
		}
		if p.SrcPort() != roce.UDPSourcePort(src) {
			fail = "UDP source port"
		}
		if p.Info().Request {
			reqs = append(reqs, p)
		} else {
			acks = append(acks, p)
		}
	})
	qa.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{lm.SGE(0, 200*256)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()})
	b.expectWC(a, verbs.WCSuccess)
	if fail != "" {
		t.Fatal(fail)
	}
	if len(reqs) != 200 {
		t.Fatalf("%d requests", len(reqs))
	}
	var ackReq []int
	for i, p := range reqs {
		if p.BTH().PSN() != bth.PSN(1000+i) {
			t.Fatalf("packet %d PSN %v", i, p.BTH().PSN())
		}
		if p.BTH().AckReq() {
			ackReq = append(ackReq, i)
		}
	}
	// AckReq after 65 packets without it, and on the last.
	if fmt.Sprint(ackReq) != "[65 131 197 199]" {
		t.Fatalf("AckReq on packets %v", ackReq)
	}
	for _, p := range acks {
		if p.Opcode != bth.RCAcknowledge || p.AETH().Syndrome() != bth.SyndromeACKUnlimited || p.AETH().MSN() > 1 {
			t.Fatalf("ACK %v %v msn %v", p.Opcode, p.AETH().Syndrome(), p.AETH().MSN())
		}
	}
	if last := acks[len(acks)-1]; last.BTH().PSN() != 1199 || last.AETH().MSN() != 1 {
		t.Fatalf("last ACK psn %v msn %v", last.BTH().PSN(), last.AETH().MSN())
	}
}

// TestUDSendQueueError: a UD send that cannot be gathered moves the QP to
// SQE; requests posted there are flushed; SQE->RTS resumes sending while
// receives go on working throughout.
func TestUDSendQueueError(t *testing.T) {
	b, qa, qb := udBed(t, false)
	a, c := b.Nodes[0], b.Nodes[1]
	ah, _ := a.PD.CreateAH(&verbs.AHAttr{DGID: c.GID, DMAC: c.MAC})
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	send := func(id uint64, sge mr.SGE) {
		t.Helper()
		if err := qa.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{sge},
			AH: ah, RemoteQPN: qb.QPN(), RemoteQKey: 0x11111111}); err != nil {
			t.Fatal(err)
		}
	}
	send(1, mr.SGE{Addr: lm.Addr(), Length: 10, LKey: 0xbad})
	send(2, lm.SGE(0, 10))
	b.expectWC(a, verbs.WCLocProtErr, verbs.WCWRFlushErr)
	if qa.State() != verbs.QPStateSQE {
		t.Fatalf("state %v", qa.State())
	}
	send(3, lm.SGE(0, 10))
	b.expectWC(a, verbs.WCWRFlushErr)
	// Receives still work in SQE.
	qa.PostRecv(&verbs.RecvWR{WRID: 4, SGL: []mr.SGE{lm.SGE(0, 100)}})
	ahB, _ := c.PD.CreateAH(&verbs.AHAttr{DGID: a.GID, DMAC: a.MAC})
	qb.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WROpSend, SGL: []mr.SGE{rm.SGE(0, 20)}, AH: ahB, RemoteQPN: qa.QPN(), RemoteQKey: 0x11111111})
	b.expectWC(a, verbs.WCSuccess)
	if err := qa.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState); err != nil {
		t.Fatal(err)
	}
	qb.PostRecv(&verbs.RecvWR{WRID: 6, SGL: []mr.SGE{rm.SGE(0, 100)}})
	send(7, lm.SGE(0, 10))
	b.expectWC(a, verbs.WCSuccess)
	b.expectWC(c, verbs.WCSuccess)
}

// TestSendPosted: what was posted goes out when SendPosted runs, even if
// the QP is destroyed right after and no step of the engine ran between
// (the daemon's destroy of a QP whose program posted unsignaled sends).
func TestSendPosted(t *testing.T) {
	b := newBed(t, bedOpts{})
	qa, _ := b.PairQPs(rcOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	lm, lbuf := a.Reg(t, 4096, 0, 1)
	rm, rbuf := c.Reg(t, 4096, 0, 2)
	for i := 0; i < 3; i++ {
		if err := qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{lm.SGE(i*1024, 1024)},
			RemoteAddr: rm.Addr() + uint64(i*1024), RKey: rm.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	sent := b.Router.Stats().Sent
	qa.SendPosted()
	if n := b.Router.Stats().Sent - sent; n != 3 {
		t.Fatalf("SendPosted put %d frames on the link, want the 3 WRITEs", n)
	}
	if err := qa.Destroy(); err != nil {
		t.Fatal(err)
	}
	b.settle()
	if !bytes.Equal(rbuf[:3072], lbuf[:3072]) {
		t.Fatal("the WRITEs posted before SendPosted and Destroy did not arrive")
	}
}
