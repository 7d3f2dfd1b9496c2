package qp

import (
	"testing"

	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// TestCwndLossSignals: a PSN sequence NAK halves the window, a retransmit
// timeout drops it to CwndMin, an RNR NAK leaves it; each reduction is
// counted, and the packet that fills a reduced window asks for an ACK.
func TestCwndLossSignals(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	if a.q.Cwnd() != CwndInit {
		t.Fatalf("initial window %d", a.q.Cwnd())
	}
	write := func(id uint64, n int) {
		t.Helper()
		if err := a.q.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.sge(0, n)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	// One packet of 32 lost: the responder NAKs the gap once.
	write(1, 32<<10)
	req := pump(a, 0)
	if len(req) != 32 {
		t.Fatalf("%d packets sent", len(req))
	}
	deliver(t, b, 0, req[0])
	deliver(t, b, 0, req[2:]...)
	deliver(t, a, 0, pump(b, 0)...)
	if a.cnt[verbs.CntRcvdSeqErr] != 1 || a.cnt[verbs.CntCwndReductions] != 1 || a.q.Cwnd() != CwndInit/2 {
		t.Fatalf("after a sequence NAK: seq_err %d, reductions %d, window %d",
			a.cnt[verbs.CntRcvdSeqErr], a.cnt[verbs.CntCwndReductions], a.q.Cwnd())
	}
	again := pump(a, 0)
	if len(again) != 31 {
		t.Fatalf("%d packets resent", len(again))
	}
	deliver(t, b, 0, again...)
	deliver(t, a, 0, pump(b, 0)...)
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("completions %+v", a.cq.wcs)
	}

	// Everything of the next WRITE lost: the timer fires.
	write(2, 32<<10)
	if lost := pump(a, 0); len(lost) != 32 {
		t.Fatalf("%d packets sent", len(lost))
	}
	dl, _ := a.q.NextDeadline()
	a.q.OnTimer(dl)
	if a.cnt[verbs.CntTimeouts] != 1 || a.cnt[verbs.CntCwndReductions] != 2 || a.q.Cwnd() != CwndMin {
		t.Fatalf("after a timeout: timeouts %d, reductions %d, window %d",
			a.cnt[verbs.CntTimeouts], a.cnt[verbs.CntCwndReductions], a.q.Cwnd())
	}
	req = pump(a, dl)
	if len(req) != CwndMin || a.cnt[verbs.CntCwndLimited] == 0 {
		t.Fatalf("%d packets sent in a window of %d (cwnd_limited %d)", len(req), CwndMin, a.cnt[verbs.CntCwndLimited])
	}
	if p := parse(t, req[len(req)-1]); !p.BTH().AckReq() {
		t.Fatal("the packet that fills the window does not ask for an ACK")
	}
	// Clean ACKs: slow start back toward half the old window.
	for len(a.cq.wcs) < 2 {
		deliver(t, b, dl, req...)
		deliver(t, a, dl, pump(b, dl)...)
		req = pump(a, dl)
		if len(req) == 0 && len(a.cq.wcs) < 2 {
			t.Fatal("stalled")
		}
	}
	// The ACKs of what was sent before the reduction end the loss; the
	// next clean ACKs slow-start the window back toward half the old one.
	write(5, 32<<10)
	for len(a.cq.wcs) < 3 {
		req = pump(a, dl)
		if len(req) == 0 {
			t.Fatal("stalled")
		}
		deliver(t, b, dl, req...)
		deliver(t, a, dl, pump(b, dl)...)
	}
	if a.q.Cwnd() <= CwndMin || a.q.Cwnd() > CwndInit/4 {
		t.Fatalf("window %d after clean ACKs, want in (%d, %d]", a.q.Cwnd(), CwndMin, CwndInit/4)
	}

	// An RNR NAK is no loss.
	w := a.q.Cwnd()
	a.q.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 8)}})
	deliver(t, b, dl, pump(a, dl)...)
	deliver(t, a, dl, pump(b, dl)...)
	if a.cnt[verbs.CntRcvdRNRErr] == 0 || a.cnt[verbs.CntCwndReductions] != 2 || a.q.Cwnd() != w {
		t.Fatalf("after an RNR NAK: rnr_err %d, reductions %d, window %d (was %d)",
			a.cnt[verbs.CntRcvdRNRErr], a.cnt[verbs.CntCwndReductions], a.q.Cwnd(), w)
	}
}

// TestCwndReadBound: READ requests count their response packets against
// the window; a READ that does not fit waits, one larger than the window
// goes alone.
func TestCwndReadBound(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	a.q.req.cw.cwnd = 20 // as after losses
	a.q.req.cw.ssthresh = 20
	read := func(id uint64, n int) {
		t.Helper()
		if err := a.q.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.sge(0, n)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	read(1, 8<<10)  // 8 responses
	read(2, 8<<10)  // 8 more: 16
	read(3, 8<<10)  // 24 > 20: waits
	read(4, 32<<10) // larger than the window: alone
	req := pump(a, 0)
	if len(req) != 2 {
		t.Fatalf("%d READ requests sent, want 2", len(req))
	}
	deliver(t, b, 0, req...)
	deliver(t, a, 0, pump(b, 0)...)
	req = pump(a, 0) // READ 3 fits now; READ 4 waits for it
	if len(req) != 1 || len(a.cq.wcs) != 2 {
		t.Fatalf("%d READ requests sent after two completed (%d completions)", len(req), len(a.cq.wcs))
	}
	deliver(t, b, 0, req...)
	deliver(t, a, 0, pump(b, 0)...)
	req = pump(a, 0)
	if len(req) != 1 || parse(t, req[0]).RETH().DMALen() != 32<<10 {
		t.Fatalf("%d READ requests sent for the large READ", len(req))
	}
	deliver(t, b, 0, req...)
	deliver(t, a, 0, pump(b, 0)...)
	if len(a.cq.wcs) != 4 {
		t.Fatalf("%d completions", len(a.cq.wcs))
	}
}

// TestLateAckAfterGoBack: after a timeout the requester goes back and a
// reduced window lets only a few packets out again; an ACK the responder
// sent before the go-back, for a PSN further on, must move the requester
// past it (it used to wait for the next timeout with nothing to send, and
// so again after every timeout).
func TestLateAckAfterGoBack(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	a.q.SetCwnd(true)
	a.q.req.cw.cwnd = 12 // reduced by earlier losses: it asks for ACKs mid-message
	if err := a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{a.sge(0, 20<<10)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	req := pump(a, 0)
	if len(req) != 12 {
		t.Fatalf("%d packets sent into a window of 12", len(req))
	}
	first := parse(t, req[0]).BTH().PSN()
	// The responder takes the first 11 packets; its first ACK (asked for
	// in the middle of the message) is late, and the rest is lost.
	deliver(t, b, 0, req[:11]...)
	acks := pump(b, 0)
	if len(acks) == 0 {
		t.Fatal("no ACK")
	}
	acks = acks[:1]
	dl, ok := a.q.NextDeadline()
	if !ok {
		t.Fatal("no retransmit timer")
	}
	a.q.OnTimer(dl)
	again := pump(a, dl)
	if len(again) == 0 || len(again) >= 20 || parse(t, again[0]).BTH().PSN() != first {
		t.Fatalf("after the timeout: %d packets from PSN %v (window %d)", len(again), parse(t, again[0]).BTH().PSN(), a.q.Cwnd())
	}
	ackPSN := parse(t, acks[len(acks)-1]).BTH().PSN()
	if ackPSN.Diff(first) < int32(len(again)) {
		t.Fatalf("the ACK (PSN %v) lies within what went out again; the test needs it further on", ackPSN)
	}
	deliver(t, a, dl, acks...)
	next := pump(a, dl)
	if len(next) == 0 {
		t.Fatalf("nothing sent after the late ACK for PSN %v (window %d)", ackPSN, a.q.Cwnd())
	}
	if got := parse(t, next[0]).BTH().PSN(); got != ackPSN.Next() {
		t.Errorf("after the late ACK for PSN %v the requester sent PSN %v, want %v", ackPSN, got, ackPSN.Next())
	}
}

// TestCwndFullWindowReads: a full window adds no limit to the fixed one.
// As with rdma_rxe (whose bound is 128), a READ goes out while its first
// PSN is within MaxUnackedPSNs of the oldest outstanding one, so
// MaxUnackedPSNs/64+1 64-packet READs are in flight at once (a window
// that counted every response packet let one fewer go), and the next
// waits until responses have moved the oldest PSN on.
func TestCwndFullWindowReads(t *testing.T) {
	a := newEnd(t, verbs.QPTypeRC, 20, "10.0.0.1")
	b := newEnd(t, verbs.QPTypeRC, 30, "10.0.0.2")
	fit := MaxUnackedPSNs/64 + 1
	connectRd(t, a, b, 100, 500, uint8(fit+1), uint8(fit+1)) // max_rd_atomic is not the limit here
	connectRd(t, b, a, 500, 100, uint8(fit+1), uint8(fit+1))
	for id := uint64(1); id <= uint64(fit+1); id++ {
		if err := a.q.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
			SGL: []mr.SGE{a.sge(0, 64<<10)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
	}
	req := pump(a, 0)
	if len(req) != fit || a.cnt[verbs.CntCwndLimited] != 0 {
		t.Fatalf("%d READ requests sent with a full window (cwnd_limited %d), want %d",
			len(req), a.cnt[verbs.CntCwndLimited], fit)
	}
	deliver(t, b, 0, req[0])
	resp := pump(b, 0)
	if len(resp) != 64 {
		t.Fatalf("%d responses to the first READ", len(resp))
	}
	deliver(t, a, 0, resp...)
	if req = pump(a, 0); len(req) != 1 || len(a.cq.wcs) != 1 {
		t.Fatalf("%d READ requests sent after the first completed (%d completions)", len(req), len(a.cq.wcs))
	}
}

// TestUnackedBytesBound: what an RC requester keeps outstanding is bounded
// in PSNs (MaxUnackedPSNs) and in bytes (MaxUnackedBytes): at a path MTU of
// 1024 it sends 513 packets without an ACK, at 4096 only 129, as rdma_rxe's
// 128 PSNs (512 KiB). Unbounded in bytes, 512 PSNs of 4 KiB waited in the
// path's queues as long as a short retransmit timeout.
func TestUnackedBytesBound(t *testing.T) {
	for _, c := range []struct {
		mtu  verbs.MTU
		want int
	}{{verbs.MTU1024, MaxUnackedPSNs + 1}, {verbs.MTU2048, 256 + 1}, {verbs.MTU4096, 128 + 1}} {
		a, b := pair(t, c.mtu)
		a.q.SetCwnd(false)
		for id := uint64(1); id <= 12; id++ {
			if err := a.q.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WROpRDMAWrite,
				SGL: []mr.SGE{a.sge(0, 64<<10)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
				t.Fatal(err)
			}
		}
		if got := len(pump(a, 0)); got != c.want {
			t.Errorf("path MTU %d: %d packets sent without an ACK, want %d", c.mtu.Bytes(), got, c.want)
		}
	}
}
