package roce_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// TestXRC: an XRC_SEND QP on one device sends to two XRC SRQs of a domain
// on the other through one XRC_RECV QP, in virtual time over the simulated
// link: each message lands in the SRQ it names and completes on that SRQ's
// CQ; the domain, its SRQs and QP are torn down in the order verbs needs.
func TestXRC(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	o := rcOpts{}
	o.Defaults()
	qa, err := a.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeXRCSend, SendCQ: a.SCQ,
		Cap: verbs.QPCap{MaxSendWR: 16, MaxSendSGE: 1}})
	if err != nil {
		t.Fatal(err)
	}
	x, err := c.Dev.AllocXRCD()
	if err != nil {
		t.Fatal(err)
	}
	cq2, err := c.Dev.CreateCQ(64, nil)
	if err != nil {
		t.Fatal(err)
	}
	s1, err := c.PD.CreateXRCSRQ(x, c.RCQ, 16, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := c.PD.CreateXRCSRQ(x, cq2, 16, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if s1.Num() == 0 || s1.Num() == s2.Num() {
		t.Fatalf("SRQ numbers %d and %d", s1.Num(), s2.Num())
	}
	qb, err := x.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeXRCRecv})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PD.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeXRCRecv, SendCQ: c.SCQ, RecvCQ: c.RCQ}); !errors.Is(err, roce.ErrInvalid) {
		t.Errorf("an XRC_RECV QP without a domain: %v", err)
	}
	b.Connect(qa, a, qb.QPN(), c, o, o.PSNA, o.PSNB)
	b.Connect(qb, c, qa.QPN(), a, o, o.PSNB, o.PSNA)

	src, sbuf := a.Reg(t, 8192, 0, 1)
	dst, dbuf := c.Reg(t, 8192, 0, 0)
	for i, s := range []*roce.SRQ{s1, s2} {
		if err := s.PostRecv(&verbs.RecvWR{WRID: uint64(100 + i), SGL: []mr.SGE{{Addr: dst.Addr() + uint64(4096*i), Length: 4096, LKey: dst.LKey()}}}); err != nil {
			t.Fatal(err)
		}
	}
	// 3000 bytes (three packets at MTU 1024) to SRQ 2, then 100 to SRQ 1.
	for i, m := range []struct {
		srq *roce.SRQ
		off int
		n   int
	}{{s2, 0, 3000}, {s1, 4096, 100}} {
		if err := qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpSend, Flags: verbs.Signaled,
			SGL: []mr.SGE{{Addr: src.Addr() + uint64(m.off), Length: uint32(m.n), LKey: src.LKey()}}, RemoteSRQN: m.srq.Num()}); err != nil {
			t.Fatal(err)
		}
	}
	var got2 []verbs.WC
	b.Run(func() bool {
		var tmp [4]verbs.WC
		got2 = append(got2, tmp[:cq2.Poll(tmp[:])]...)
		return len(a.WCs) == 2 && len(c.WCs) == 1 && len(got2) == 1
	})
	for _, wc := range a.WCs {
		if wc.Status != verbs.WCSuccess {
			t.Fatalf("initiator: %+v", a.WCs)
		}
	}
	if w := got2[0]; w.WRID != 101 || w.ByteLen != 3000 || w.QPNum != qb.QPN() || !bytes.Equal(dbuf[4096:4096+3000], sbuf[:3000]) {
		t.Fatalf("SRQ 2's CQ: %+v", w)
	}
	if w := c.WCs[0]; w.WRID != 100 || w.ByteLen != 100 || !bytes.Equal(dbuf[:100], sbuf[4096:4196]) {
		t.Fatalf("SRQ 1's CQ: %+v", w)
	}

	if err := x.Dealloc(); !errors.Is(err, roce.ErrBusy) {
		t.Errorf("closing a domain in use: %v", err)
	}
	if err := cq2.Destroy(); !errors.Is(err, roce.ErrBusy) {
		t.Errorf("destroying an XRC SRQ's CQ: %v", err)
	}
	for _, f := range []func() error{qb.Destroy, s1.Destroy, s2.Destroy, x.Dealloc, cq2.Destroy} {
		if err := f(); err != nil {
			t.Fatal(err)
		}
	}
}
