package qp

import (
	"bytes"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	sring "github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/verbs"
)

// ringPair is pair with a's send queue a ring the test writes as another
// process (the daemon's client) would: the QP's own queue type, attached.
func ringPair(t *testing.T, mtu verbs.MTU, resolve AHResolver) (a, b *end, g *sring.Ring[sring.SendWQE]) {
	t.Helper()
	a = newEnd(t, verbs.QPTypeRC, 20, "10.0.0.1")
	b = newEnd(t, verbs.QPTypeRC, 30, "10.0.0.2")
	var err error
	// The caps of newEnd: 64 WRs, 2 SGEs, 64 bytes of inline data.
	g, err = sring.New[sring.SendWQE](sring.KindSend, 64, sring.Stride[sring.SendWQE](64))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.q.AttachSendRing(g, resolve); err != nil {
		t.Fatalf("attaching a send ring: %v", err)
	}
	connect(t, a, b, mtu, 100, 500)
	connect(t, b, a, mtu, 500, 100)
	return a, b, g
}

// TestSendRingReadOnce: the engine reads a send WQE from the ring once,
// when it takes it. A client that rewrites the slot after the engine took
// it (the opcode, the remote address, the SGE, the inline bytes) changes
// nothing: the retransmission after a loss sends what was read first.
func TestSendRingReadOnce(t *testing.T) {
	a, b, g := ringPair(t, verbs.MTU256, nil)
	for i := range a.mem[:1024] {
		a.mem[i] = byte(i * 7)
	}
	// A WRITE of 1 KiB (4 packets) to b's offset 0.
	e := g.Next()
	*e = sring.SendWQE{WRID: 1, Opcode: uint8(verbs.WROpRDMAWrite), Flags: uint32(verbs.Signaled), NumSGE: 1,
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey(), Length: 1024}
	g.SGEs(g.Produced(), 1)[0] = a.sge(0, 1024)
	g.Publish()
	// An inline SEND behind it.
	e = g.Next()
	*e = sring.SendWQE{WRID: 2, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Signaled | verbs.Inline), InlineLen: 8, Length: 8}
	copy(g.Tail(g.Produced()), "original")
	g.Publish()
	b.q.PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{b.sge(4096, 64)}})

	now := monotime.Time(0).Add(5 * time.Millisecond)
	if sent := pump(a, now); len(sent) != 5 {
		t.Fatalf("%d packets sent, want 5 (4 WRITE, 1 SEND)", len(sent)) // all lost
	}
	// The client rewrites both slots now.
	w := g.At(0)
	w.Opcode, w.RemoteAddr, w.NumSGE = uint8(verbs.WROpRDMARead), b.mr.IOVA()+2048, 2
	g.SGEs(0, 2)[0] = a.sge(2048, 64)
	w = g.At(1)
	w.InlineLen = 3
	copy(g.Tail(1), "REWRITTEN")

	dl, ok := a.q.NextDeadline()
	if !ok {
		t.Fatal("no retransmission timer after the packets went out")
	}
	a.q.OnTimer(dl)
	again := pump(a, dl)
	// Everything goes through now; the requester may send what is left
	// after the first ACKs (a reduced window).
	for round := 0; round < 20 && len(again) > 0; round++ {
		deliver(t, b, dl, again...)
		deliver(t, a, dl, pump(b, dl)...)
		again = pump(a, dl)
	}
	if a.cnt[verbs.CntRetransmitPkts] != 5 {
		t.Fatalf("%d packets retransmitted, want 5", a.cnt[verbs.CntRetransmitPkts])
	}
	if len(a.cq.wcs) != 2 || a.cq.wcs[0].Status != verbs.WCSuccess || a.cq.wcs[0].Opcode != verbs.WCRDMAWrite ||
		a.cq.wcs[0].ByteLen != 1024 || a.cq.wcs[1].Status != verbs.WCSuccess || a.cq.wcs[1].ByteLen != 8 {
		t.Fatalf("sender's completions %+v, want a WRITE of 1024 and a SEND of 8 bytes", a.cq.wcs)
	}
	if !bytes.Equal(b.mem[:1024], a.mem[:1024]) {
		t.Fatal("the retransmitted WRITE did not carry the data the WQE named when it was taken")
	}
	for _, x := range b.mem[2048 : 2048+64] {
		if x != 0 {
			t.Fatal("the rewritten remote address received data")
		}
	}
	if len(b.cq.wcs) != 1 || b.cq.wcs[0].ByteLen != 8 || string(b.mem[4096:4104]) != "original" {
		t.Fatalf("receiver got %+v %q, want the 8 bytes \"original\"", b.cq.wcs, b.mem[4096:4104])
	}
	// The slots went back to the poster when the requests completed.
	if g.Cons() != 2 || a.q.SendQueueLen() != 0 {
		t.Fatalf("ring consumer %d, queue length %d after both completed", g.Cons(), a.q.SendQueueLen())
	}
}

// TestSendRingCorrupt: a send ring that breaks the rules (a producer
// index far beyond the limit, an entry with more SGEs than the QP takes,
// inline bytes beyond the slot) is not read: the QP raises EventQPFatal
// and SendRingFault says so, and nothing of it is sent.
func TestSendRingCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(g *sring.Ring[sring.SendWQE])
	}{
		{"producer far ahead", func(g *sring.Ring[sring.SendWQE]) { g.Header().Prod.Store(g.Cons() + g.Limit() + 1000) }},
		{"NumSGE huge", func(g *sring.Ring[sring.SendWQE]) {
			*g.Next() = sring.SendWQE{WRID: 1, Opcode: uint8(verbs.WROpSend), NumSGE: 200}
			g.Publish()
		}},
		{"inline beyond the tail", func(g *sring.Ring[sring.SendWQE]) {
			*g.Next() = sring.SendWQE{WRID: 1, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Inline), InlineLen: 60000}
			g.Publish()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _, g := ringPair(t, verbs.MTU1024, nil)
			tc.corrupt(g)
			a.q.HasWork()
			if sent := pump(a, 0); len(sent) != 0 {
				t.Fatalf("%d packets sent from a corrupt ring", len(sent))
			}
			if !a.q.SendRingFault() {
				t.Fatal("the corrupt ring is not reported (SendRingFault)")
			}
			n := 0
			for _, ev := range a.env.evs {
				if ev == verbs.EventQPFatal {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("%d EventQPFatal raised, want 1 (events %v)", n, a.env.evs)
			}
		})
	}
}

// TestSendRingRefusedWQE: a well-formed WQE the QP cannot execute (an
// opcode of another QP type, a misaligned atomic, a UD address handle the
// resolver does not know) completes in order with IBV_WC_LOC_QP_OP_ERR,
// after the requests before it, and moves the QP to the error state, as
// on rdma_rxe; the requests after it are flushed.
func TestSendRingRefusedWQE(t *testing.T) {
	a, b, g := ringPair(t, verbs.MTU1024, nil)
	post := func(e sring.SendWQE, sge *mr.SGE) {
		s := g.Next()
		*s = e
		if sge != nil {
			s.NumSGE = 1
			g.SGEs(g.Produced(), 1)[0] = *sge
		}
		g.Publish()
	}
	good := a.sge(0, 8)
	post(sring.SendWQE{WRID: 1, Opcode: uint8(verbs.WROpRDMAWrite), Flags: uint32(verbs.Signaled), RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}, &good)
	post(sring.SendWQE{WRID: 2, Opcode: uint8(verbs.WROpAtomicFetchAdd), Flags: uint32(verbs.Signaled), RemoteAddr: b.mr.IOVA() + 4, RKey: b.mr.RKey()}, &good)
	post(sring.SendWQE{WRID: 3, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Signaled)}, &good)
	deliver(t, b, 0, pump(a, 0)...)
	deliver(t, a, 0, pump(b, 0)...)
	pump(a, 0)
	want := []struct {
		wrid   uint64
		status verbs.WCStatus
	}{{1, verbs.WCSuccess}, {2, verbs.WCLocQPOpErr}, {3, verbs.WCWRFlushErr}}
	if len(a.cq.wcs) != len(want) {
		t.Fatalf("completions %+v, want %v", a.cq.wcs, want)
	}
	for i, w := range want {
		if a.cq.wcs[i].WRID != w.wrid || a.cq.wcs[i].Status != w.status {
			t.Fatalf("completion %d: %+v, want WRID %d status %v", i, a.cq.wcs[i], w.wrid, w.status)
		}
	}
	if a.q.State() != verbs.QPStateErr || a.q.SendRingFault() {
		t.Fatalf("state %v, fault %v: want the error state, no ring fault", a.q.State(), a.q.SendRingFault())
	}

	// UD: an address handle the resolver does not know.
	u := newEnd(t, verbs.QPTypeUD, 40, "10.0.0.3")
	ug, _ := sring.New[sring.SendWQE](sring.KindSend, 64, sring.Stride[sring.SendWQE](64))
	known := &verbs.AH{}
	if err := u.q.AttachSendRing(ug, func(h uint32) *verbs.AH {
		if h == 5 {
			return known
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := u.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, AH: known}); err != ErrPostState {
		t.Fatalf("in-process PostSend on an attached ring: %v, want ErrPostState", err)
	}
	for _, st := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		attr := verbs.QPAttr{State: st, PortNum: 1, QKey: 7}
		mask := verbs.AttrState
		if st == verbs.QPStateInit {
			mask |= verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrQKey
		}
		if st == verbs.QPStateRTS {
			mask |= verbs.AttrSQPSN
		}
		if err := u.q.Modify(&attr, mask); err != nil {
			t.Fatalf("UD QP to %v: %v", st, err)
		}
	}
	s := ug.Next()
	*s = sring.SendWQE{WRID: 7, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Signaled), AH: 6}
	ug.Publish()
	u.q.HasWork()
	if sent := pump(u, 0); len(sent) != 0 {
		t.Fatalf("%d packets sent for an unknown address handle", len(sent))
	}
	if len(u.cq.wcs) != 1 || u.cq.wcs[0].WRID != 7 || u.cq.wcs[0].Status != verbs.WCLocQPOpErr {
		t.Fatalf("completions %+v, want WRID 7 with LOC_QP_OP_ERR", u.cq.wcs)
	}
}

// TestSendQueueFullAtMaxSendWR: the in-process poster writes into the
// same ring; the ring full is the queue full, at max_send_wr, as on rxe.
func TestSendQueueFullAtMaxSendWR(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	for i := 0; i < 64; i++ {
		if err := a.q.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{a.sge(0, 8)},
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
			t.Fatalf("post %d of 64: %v", i, err)
		}
	}
	if err := a.q.PostSend(&verbs.SendWR{WRID: 64, Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{a.sge(0, 8)},
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != ErrQueueFull {
		t.Fatalf("post 65 of max_send_wr 64: %v, want ErrQueueFull", err)
	}
	if a.q.SendQueueLen() != 64 {
		t.Fatalf("queue length %d, want 64", a.q.SendQueueLen())
	}
}

// tracingEnv is a fakeEnv that records the QP's trace events.
type tracingEnv struct {
	*fakeEnv
	evs []Trace
}

func (e *tracingEnv) QPTrace(q *QP, t *Trace) { e.evs = append(e.evs, *t) }

// TestSendRingTracesTakenRequests: a request another process posted on
// an attached ring is reported to the tracer when the loop takes it, with
// what the loop read (the in-process poster reports its own posts).
func TestSendRingTracesTakenRequests(t *testing.T) {
	var on atomic.Bool
	on.Store(true)
	te := &tracingEnv{fakeEnv: &fakeEnv{addr: netip.MustParseAddr("10.0.0.1")}}
	q := New(&Config{QPN: 20, Type: verbs.QPTypeRC, PD: mr.NewTable(mr.Options{}).AllocPD(), SendCQ: &fakeCQ{}, RecvCQ: &fakeCQ{},
		PortMTU: verbs.MTU1024, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: 16},
		Env: te, Tracing: &on})
	g, _ := sring.New[sring.SendWQE](sring.KindSend, 4, sring.Stride[sring.SendWQE](16))
	if err := q.AttachSendRing(g, nil); err != nil {
		t.Fatal(err)
	}
	*g.Next() = sring.SendWQE{WRID: 77, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Inline), InlineLen: 5}
	g.Publish()
	q.HasWork()
	n := 0
	for _, ev := range te.evs {
		if ev.Kind == TracePosted {
			n++
			if ev.WRID != 77 || ev.Opcode != verbs.WROpSend || ev.Length != 5 {
				t.Errorf("traced %+v, want WRID 77, SEND, 5 bytes", ev)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d TracePosted events, want 1: %+v", n, te.evs)
	}
}

// QueueBytes counts the rings a QP allocated itself and not those
// attached, which their owner counts (the daemon charges the shared
// memory): attaching a send ring and a receive ring takes each ring's
// memory out of the figure, and the engine's state beside them stays.
func TestQueueBytesLeavesAttachedRingsOut(t *testing.T) {
	a := newEnd(t, verbs.QPTypeRC, 20, "10.0.0.1")
	own := a.q.QueueBytes()
	sq, rq := len(a.q.sq.r.Memory()), len(a.q.rq.r.Memory())
	g, err := sring.New[sring.SendWQE](sring.KindSend, 64, sring.Stride[sring.SendWQE](64))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.q.AttachSendRing(g, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := a.q.QueueBytes(), own-sq; got != want {
		t.Errorf("with a send ring attached: %d bytes, want %d (%d less its own ring of %d)", got, want, own, sq)
	}
	r, err := sring.New[sring.RecvWQE](sring.KindRecv, 64, sring.Stride[sring.RecvWQE](2*16))
	if err != nil {
		t.Fatal(err)
	}
	if err := a.q.AttachRecvRing(r); err != nil {
		t.Fatal(err)
	}
	if got, want := a.q.QueueBytes(), own-sq-rq; got != want || got <= 0 {
		t.Errorf("with both rings attached: %d bytes, want %d (the engine's state only)", got, want)
	}
}
