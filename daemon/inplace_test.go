package daemon_test

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/ring"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// TestCorruptRecvRingInPlace: the engine takes a client's receives from
// its ring where the client wrote them. A ring whose producer index runs
// far ahead of its limit, or whose entry claims more SGEs than the queue
// takes, is not trusted: the engine takes nothing from it, and the daemon
// disconnects that client, while the daemon and its other clients go on.
func TestCorruptRecvRingInPlace(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	sendRecv(t, a, b, "before")
	for _, tc := range []struct {
		name    string
		corrupt func(rq *ring.Ring[ring.RecvWQE])
	}{
		{"producer far ahead", func(rq *ring.Ring[ring.RecvWQE]) {
			rq.Header().Prod.Store(rq.Cons() + rq.Limit() + 1000)
		}},
		{"NumSGE huge", func(rq *ring.Ring[ring.RecvWQE]) {
			e := rq.Next()
			*e = ring.RecvWQE{WRID: 9, NumSGE: 1 << 30, Length: 64}
			rq.Publish()
		}},
	} {
		corruptRing(t, r, a, b, tc.name, "receive", func(h, p *endpoint) {
			// A good receive first: the ring in place serves it.
			sendRecv(t, p, h, "in place")
			tc.corrupt(h.qp.RecvRing())
			h.qp.Ring()
			// A SEND to h makes the engine take a receive from the ring.
			p.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled | verbs.Inline, InlineData: []byte("to a corrupt ring")})
		})
	}
}

// corruptRing runs one case of a corrupt ring: a client (h) connected to
// another (p) makes its ring corrupt (corrupt), and is disconnected with
// the log saying which ring; a and b, clients of the same daemon, go on.
func corruptRing(t *testing.T, r *rig, a, b *endpoint, name, which string, corrupt func(h, p *endpoint)) {
	t.Run(name, func(t *testing.T) {
		var h *endpoint
		victim := newClientID(t, r, func() { h = newEndpoint(t, r, "sroce_mem0", false) })
		p := newEndpoint(t, r, "sroce_mem1", false)
		connect(t, h, p.qp.QPN(), r.gids[1])
		connect(t, p, h.qp.QPN(), r.gids[0])
		corrupt(h, p)
		waitGone(t, r, victim, "the client with a corrupt "+which+" ring to be disconnected")
		if !strings.Contains(r.logText(), which+" ring is corrupt") {
			t.Errorf("the disconnection does not say why:\n%s", r.logText())
		}
		sendRecv(t, a, b, "after "+name)
		sendRecv(t, b, a, "both ways after "+name)
		p.x.Close()
	})
}

// TestRecvRingInPlaceNoRNR: a receive the client wrote into its ring
// before the message came is taken by the engine, never answered with an
// RNR NAK, even while the daemon's bridge sleeps and no doorbell rang.
func TestRecvRingInPlaceNoRNR(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	for i := 0; i < 50; i++ {
		// Written into the ring, no doorbell: the engine reads the
		// ring's producer index itself.
		rq := b.qp.RecvRing()
		e := rq.Next()
		if e == nil {
			t.Fatal("b's receive ring is full")
		}
		*e = ring.RecvWQE{WRID: uint64(100 + i), NumSGE: 1, Length: 64}
		rq.SGEs(rq.Prod(), 1)[0] = mr.SGE{Addr: b.buf.Addr(0), Length: 64, LKey: b.mr.LKey()}
		rq.Publish()
		msg := "no rnr " + string(rune('a'+i%26))
		a.qp.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: []byte(msg)})
		wc := wait(t, b, "the receive of "+msg)
		if wc.Status != verbs.WCSuccess || wc.WRID != uint64(100+i) || string(b.buf.Buf[:len(msg)]) != msg {
			t.Fatalf("receive %d: %+v, %q", i, wc, b.buf.Buf[:len(msg)])
		}
	}
	for i, d := range r.devs {
		if n := d.Counters()["send_rnr_err"] + d.Counters()["rcvd_rnr_err"]; n != 0 {
			t.Errorf("device %d: %d RNR NAKs for receives posted before the messages", i, n)
		}
	}
}

// TestCorruptSendRingInPlace: the engine executes a client's sends from
// its ring where the client wrote them. A ring whose producer index runs
// far ahead of its limit, or whose entry claims more SGEs than the QP
// takes or more inline bytes than its slot holds, is not trusted: the
// engine takes nothing from it, and the daemon disconnects that client,
// while the daemon and its other clients go on.
func TestCorruptSendRingInPlace(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	sendRecv(t, a, b, "before")
	for _, tc := range []struct {
		name    string
		corrupt func(sq *ring.Ring[ring.SendWQE])
	}{
		{"producer far ahead", func(sq *ring.Ring[ring.SendWQE]) {
			sq.Header().Prod.Store(sq.Cons() + sq.Limit() + 1000)
		}},
		{"NumSGE huge", func(sq *ring.Ring[ring.SendWQE]) {
			e := sq.Next()
			*e = ring.SendWQE{WRID: 9, Opcode: uint8(verbs.WROpSend), NumSGE: 250, Length: 64}
			sq.Publish()
		}},
		{"inline beyond the tail", func(sq *ring.Ring[ring.SendWQE]) {
			e := sq.Next()
			*e = ring.SendWQE{WRID: 9, Opcode: uint8(verbs.WROpSend), Flags: uint32(verbs.Inline), InlineLen: 60000, Length: 60000}
			sq.Publish()
		}},
	} {
		corruptRing(t, r, a, b, tc.name, "send", func(h, p *endpoint) {
			sendRecv(t, h, p, "in place")
			tc.corrupt(h.qp.SendRing())
			h.qp.Ring()
		})
	}
}

// TestSendRingReadOnceThroughDaemon: the engine reads a client's send WQE
// from its ring once, when it takes it. The client rewrites the slot
// after the engine sent the request (its SGE now names other bytes, a
// shorter length) while every frame is lost; the retransmission after the
// loss ends carries what the WQE said when it was taken.
func TestSendRingReadOnceThroughDaemon(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a, b := pair(t, r, false)
	const n = 4096 // four packets of MTU 1024
	for i := range a.buf.Buf[:n] {
		a.buf.Buf[i] = byte(i*7 + 1)
	}
	for i := range a.buf.Buf[n : 2*n] {
		a.buf.Buf[n+i] = 0xee
	}
	b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{{Addr: b.buf.Addr(0), Length: 2 * n, LKey: b.mr.LKey()}}})
	r.router.SetImpairments(memlink.Impairments{Loss: 1})
	lost := r.router.Stats().Lost
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WROpSend, Flags: verbs.Signaled,
		SGL: []mr.SGE{{Addr: a.buf.Addr(0), Length: n, LKey: a.mr.LKey()}}}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for r.router.Stats().Lost < lost+4 {
		if time.Now().After(deadline) {
			t.Fatalf("the engine did not send the request within 10 s (%d frames lost)", r.router.Stats().Lost-lost)
		}
		time.Sleep(time.Millisecond)
	}
	sq := a.qp.SendRing()
	i := sq.Produced() - 1
	sq.SGEs(i, 1)[0] = mr.SGE{Addr: a.buf.Addr(n), Length: n / 2, LKey: a.mr.LKey()}
	sq.At(i).Length = n / 2
	r.router.SetImpairments(memlink.Impairments{})
	if wc := wait(t, b, "the retransmitted SEND"); wc.Status != verbs.WCSuccess || wc.ByteLen != n {
		t.Fatalf("receive %+v, want %d bytes", wc, n)
	}
	if !bytes.Equal(b.buf.Buf[:n], a.buf.Buf[:n]) {
		t.Fatal("the retransmission did not carry the bytes the WQE named when the engine took it")
	}
	if wc := wait(t, a, "the SEND's completion"); wc.Status != verbs.WCSuccess || wc.WRID != 5 {
		t.Fatalf("send completion %+v", wc)
	}
}
