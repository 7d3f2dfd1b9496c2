package daemon

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/verbs"
)

// TestDoorbellNamesTheQP: the bridge serves the rings whose doorbell bit
// is set and no others; bits that name no object (0, a number never
// given out, the last bit of the page) are cleared and counted, and the
// objects the client has are served all the same.
func TestDoorbellNamesTheQP(t *testing.T) {
	r := newRingRig(t)
	defer r.fc.close()
	c := r.fc.c
	b := c.br
	bells := &b.page.Bells
	ring1 := func(n uint32) { atomic.OrUint64(&bells[n/64], 1<<(n%64)) }
	q := r.qps[0]
	post := func() {
		e := ring.SendWQE{WRID: 7, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Inline), InlineLen: 2}
		b := unsafe.Slice((*byte)(unsafe.Pointer(&e)), unsafe.Sizeof(e))
		fill(q.sq, append(append([]byte(nil), b...), 'h', 'i'))
	}

	if _, err := b.pass(true); err != nil { // the doorbells the set-up rang
		t.Fatal(err)
	}
	post()
	ring1(r.qps[1].t.bell) // another QP's doorbell
	if _, err := b.pass(false); err != nil {
		t.Fatal(err)
	}
	if q.sqSeen != 0 {
		t.Fatalf("a WQE of a QP whose doorbell did not ring was taken (the bridge rang the engine up to %d)", q.sqSeen)
	}
	ring1(q.t.bell)
	if _, err := b.pass(false); err != nil {
		t.Fatal(err)
	}
	if q.sqSeen != 1 {
		t.Fatalf("the WQE of the QP whose doorbell rang was not taken (the bridge rang the engine up to %d)", q.sqSeen)
	}

	// Stray bits: number 0, one never given out, the last of the page.
	for _, n := range []uint32{0, 5000, ctl.CtxBells - 1} {
		ring1(n)
	}
	post()
	ring1(q.t.bell)
	if _, err := b.pass(true); err != nil {
		t.Fatalf("stray doorbells ended the connection: %v", err)
	}
	if got := b.strays.Load(); got != 3 {
		t.Errorf("%d stray doorbells counted, want 3", got)
	}
	if q.sqSeen != 2 {
		t.Errorf("with stray doorbells beside it, the QP's WQE was not taken (the bridge rang the engine up to %d)", q.sqSeen)
	}
	for i := range bells {
		if v := atomic.LoadUint64(&bells[i]); v != 0 {
			t.Errorf("doorbell word %d left as %#x after a full pass", i, v)
		}
	}

	// A destroyed QP's number names nothing; a new QP takes it again.
	dead := r.qps[2].t.bell
	r.fc.call(t, ctl.OpDestroyQP, ctl.Bytes(&ctl.Handle{Handle: r.qps[2].handle}))
	ring1(dead)
	if _, err := b.pass(false); err != nil {
		t.Fatal(err)
	}
	if got := b.strays.Load(); got != 4 {
		t.Errorf("the doorbell of a destroyed QP: %d strays counted, want 4", got)
	}
	qcap := ctl.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 2, MaxRecvSGE: 2}
	in := ctl.CreateQP{PD: 1, SendCQ: 3, RecvCQ: 3, QPType: uint8(verbs.QPTypeRC), Cap: qcap}
	out, _ := ctl.Get[ctl.QP](r.fc.call(t, ctl.OpCreateQP, ctl.Bytes(&in)))
	if out.Bell != dead {
		t.Errorf("a new QP got doorbell %d, want the freed %d", out.Bell, dead)
	}
}

// TestSendWQEReadOnce: the daemon reads a send WQE out of the client's
// ring once, when it takes it; a client that rewrites the slot afterwards
// (another WRID, longer inline data) changes nothing of what is completed
// or received. (The slot is rewritten once the SEND has gone out, so what
// is received here shows only that nothing is sent again from the slot;
// TestSendRingReadOnceThroughDaemon retransmits under loss.)
func TestSendWQEReadOnce(t *testing.T) {
	r := newRingRig(t)
	defer r.fc.close()
	c := r.fc.c
	b := c.br
	if _, err := b.pass(true); err != nil { // the doorbells the set-up rang
		t.Fatal(err)
	}
	lkey := c.mrs[2].mr.LKey()
	addr := c.mrs[2].mr.Addr()
	// A receive on the SRQ of qps[1], qps[0]'s peer.
	rq := r.srq.rq
	e := rq.Next()
	*e = ring.RecvWQE{WRID: 50, NumSGE: 1, Length: 64}
	rq.SGEs(rq.Prod(), 1)[0] = mr.SGE{Addr: addr, Length: 64, LKey: lkey}
	rq.Publish()

	sq := r.qps[0].sq
	slot := sq.At(sq.Prod())
	*slot = ring.SendWQE{WRID: 7, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Inline | verbs.Signaled), InlineLen: 2}
	copy(sq.Tail(sq.Prod()), "hi")
	sq.Header().Prod.Add(1)
	_, psn0, _ := r.qps[0].qp.Outstanding()
	atomic.OrUint64(&b.page.Bells[r.qps[0].t.bell/64], 1<<(r.qps[0].t.bell%64))
	if _, err := b.pass(false); err != nil {
		t.Fatal(err)
	}
	// Once the engine has taken the WQE (its SEND went out: the pass ran
	// the engine's step, or the engine's loop did when the pass could
	// not), the client rewrites the slot it posted.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Microsecond) {
		if _, psn, _ := r.qps[0].qp.Outstanding(); psn != psn0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("within 5 s of the doorbell, the engine did not send the posted SEND")
		}
	}
	slot.WRID, slot.InlineLen = 99, 5
	copy(sq.Tail(sq.Prod()-1), "HELLO")
	c.dev.dev.Device().Flush()

	cq, err := ring.Attach[ring.CQE](r.cq.mem.mem[cqRingOffset:], ring.KindCQ)
	if err != nil {
		t.Fatal(err)
	}
	got := map[uint64]ring.CQE{}
	deadline := time.Now().Add(5 * time.Second)
	for len(got) < 2 && time.Now().Before(deadline) {
		if f := cq.Front(); f != nil {
			got[f.WRID] = *f
			cq.Release(1)
			continue
		}
		time.Sleep(100 * time.Microsecond)
	}
	if len(got) < 2 {
		t.Fatalf("within 5 s, %d of the 2 completions (the SEND's and its receive's) came: %+v", len(got), got)
	}
	if s, ok := got[7]; !ok || s.Status != uint8(verbs.WCSuccess) {
		t.Errorf("the SEND's completion: %+v (all: %+v); want WRID 7 as posted, not the rewritten 99", s, got)
	}
	if rc, ok := got[50]; !ok || rc.ByteLen != 2 {
		t.Errorf("the receive's completion: %+v; want the 2 bytes posted, not the 5 rewritten", rc)
	}
	if m := c.mrs[2].mem.Bytes(); string(m[:2]) != "hi" || m[2] == 'L' {
		t.Errorf("the receive buffer holds %q, want \"hi\" as posted", m[:5])
	}
}
