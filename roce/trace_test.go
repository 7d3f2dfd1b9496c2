package roce_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/qp"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// drain takes every buffered event of s.
func drain(s *roce.Subscription) []roce.TraceEvent {
	var evs []roce.TraceEvent
	for {
		ev, ok := s.Poll()
		if !ok {
			return evs
		}
		evs = append(evs, ev)
	}
}

// frameOp decodes a traced frame's opcode and PSN.
func frameOp(t *testing.T, ev *roce.TraceEvent) (bth.Opcode, bth.PSN) {
	t.Helper()
	var p bth.Packet
	if err := p.Parse(ev.Frame); err != nil {
		t.Fatalf("traced %v frame does not parse: %v", ev.Kind, err)
	}
	if len(ev.Frame) != ev.FrameLen {
		t.Fatalf("traced frame cut to %d of %d bytes with the default snap length", len(ev.Frame), ev.FrameLen)
	}
	return p.Opcode, p.BTH().PSN()
}

// index returns the position of the first event after from that matches.
func index(evs []roce.TraceEvent, from int, match func(*roce.TraceEvent) bool) int {
	for i := max(from, 0); i < len(evs); i++ {
		if match(&evs[i]) {
			return i
		}
	}
	return -1
}

// TestTraceWrite follows a 3-packet RDMA WRITE in the requester's trace:
// the QP's states, the post, the three packets, the timer, the ACK and
// the completion, in that order.
func TestTraceWrite(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	sub, err := a.Dev.Subscribe(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	qa, _ := b.PairQPs(rcOpts{})
	lm, _ := a.Reg(t, 3000, 0, 1)
	rm, _ := c.Reg(t, 3000, 0, 2)
	if err := qa.PostSend(&verbs.SendWR{WRID: 77, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{lm.SGE(0, 3000)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}); err != nil {
		t.Fatal(err)
	}
	wcs := b.WaitWCs(a, 1)
	if wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("WRITE completed with %v", wcs[0].Status)
	}
	b.Sim.RunFor(time.Millisecond)
	evs := drain(sub)

	var states []verbs.QPState
	for _, ev := range evs {
		if ev.Kind == roce.TraceQPState && ev.QPN == qa.QPN() {
			states = append(states, ev.ToState)
		}
	}
	if want := []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS}; len(states) != 3 ||
		states[0] != want[0] || states[1] != want[1] || states[2] != want[2] {
		t.Errorf("QP states traced: %v, want %v", states, want)
	}
	post := index(evs, 0, func(e *roce.TraceEvent) bool { return e.Kind == roce.TracePostSend })
	if post < 0 {
		t.Fatalf("no post in the trace: %v", kinds(evs))
	}
	if p := evs[post]; p.WRID != 77 || p.WROpcode != verbs.WROpRDMAWrite || p.Length != 3000 || p.QPN != qa.QPN() {
		t.Errorf("post event %+v, want wr_id 77, RDMA_WRITE, 3000 bytes, QP %v", p, qa.QPN())
	}
	at := post
	var psns []bth.PSN
	for _, want := range []bth.Opcode{bth.RCWriteFirst, bth.RCWriteMiddle, bth.RCWriteLast} {
		i := index(evs, at+1, func(e *roce.TraceEvent) bool { return e.Kind == roce.TraceTx })
		if i < 0 {
			t.Fatalf("missing %v after event %d: %v", want, at, kinds(evs))
		}
		op, psn := frameOp(t, &evs[i])
		if op != want || evs[i].Dropped {
			t.Fatalf("event %d: sent %v (dropped %v), want %v", i, op, evs[i].Dropped, want)
		}
		psns = append(psns, psn)
		at = i
	}
	if psns[1] != psns[0].Next() || psns[2] != psns[1].Next() {
		t.Errorf("PSNs %v are not consecutive", psns)
	}
	armed := index(evs, post, func(e *roce.TraceEvent) bool {
		return e.Kind == roce.TraceTimerArmed && e.Timer == qp.TimerRetransmit
	})
	if armed < 0 || evs[armed].Deadline <= evs[armed].Time {
		t.Errorf("no retransmit timer armed for a deadline after the post: %v", kinds(evs))
	}
	ack := index(evs, at+1, func(e *roce.TraceEvent) bool {
		if e.Kind != roce.TraceRx {
			return false
		}
		op, psn := frameOp(t, e)
		return op == bth.RCAcknowledge && psn == psns[2]
	})
	if ack < 0 {
		t.Fatalf("no ACK of PSN %v received after the last packet: %v", psns[2], kinds(evs))
	}
	comp := index(evs, ack+1, func(e *roce.TraceEvent) bool { return e.Kind == roce.TraceCompletion })
	if comp < 0 {
		t.Fatalf("no completion after the ACK: %v", kinds(evs))
	}
	if w := evs[comp]; w.WRID != 77 || w.WCOpcode != verbs.WCRDMAWrite || w.Status != verbs.WCSuccess {
		t.Errorf("completion %+v, want wr_id 77 RDMA_WRITE success", w)
	}
	if index(evs, ack+1, func(e *roce.TraceEvent) bool { return e.Kind == roce.TraceTimerStopped }) < 0 {
		t.Errorf("the retransmit timer was not stopped once everything was acknowledged: %v", kinds(evs))
	}
	for i := 1; i < len(evs); i++ {
		if evs[i].Time < evs[i-1].Time {
			t.Errorf("event %d (%v) is earlier than event %d (%v)", i, evs[i].Kind, i-1, evs[i-1].Kind)
		}
	}
	if sub.Dropped() != 0 {
		t.Errorf("%d events dropped from a subscription read in time", sub.Dropped())
	}
}

// kinds lists the kinds of evs, for failure messages.
func kinds(evs []roce.TraceEvent) []string {
	var k []string
	for _, e := range evs {
		k = append(k, e.Kind.String())
	}
	return k
}

// TestTraceTimeoutRetransmit loses the responder's ACK (its impairment
// drops everything) and follows the requester's retransmit timer firing
// and the packet sent again.
func TestTraceTimeoutRetransmit(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	qa, _ := b.PairQPs(rcOpts{Timeout: 10})
	subA, err := a.Dev.Subscribe(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer subA.Close()
	subC, err := c.Dev.Subscribe(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer subC.Close()
	if err := c.Dev.SetImpairment(roce.Impairment{Loss: 100, Seed: 1}); err != nil {
		t.Fatal(err)
	}
	lm, _ := a.Reg(t, 64, 0, 1)
	rm, _ := c.Reg(t, 64, 0, 2)
	if err := qa.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{lm.SGE(0, 64)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}); err != nil {
		t.Fatal(err)
	}
	// Until the first timeout: the ACK is lost, the timer fires.
	b.RunLimit(func() bool { return a.Dev.Counter(verbs.CntTimeouts) > 0 }, 10*time.Second)
	if err := c.Dev.SetImpairment(roce.Impairment{}); err != nil {
		t.Fatal(err)
	}
	wcs := b.WaitWCs(a, 1)
	if wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("WRITE completed with %v", wcs[0].Status)
	}
	evs := drain(subA)
	first := index(evs, 0, func(e *roce.TraceEvent) bool { return e.Kind == roce.TraceTx })
	fired := index(evs, first, func(e *roce.TraceEvent) bool {
		return e.Kind == roce.TraceTimerFired && e.Timer == qp.TimerRetransmit
	})
	retr := index(evs, fired, func(e *roce.TraceEvent) bool { return e.Kind == roce.TraceRetransmit })
	again := index(evs, retr, func(e *roce.TraceEvent) bool { return e.Kind == roce.TraceTx })
	if first < 0 || fired < 0 || retr < 0 || again < 0 {
		t.Fatalf("want tx, retransmit timer fired, retransmit, tx again; got %v", kinds(evs))
	}
	_, psn0 := frameOp(t, &evs[first])
	_, psn1 := frameOp(t, &evs[again])
	if r := evs[retr]; r.Reason != qp.RetryTimeout || r.PSN != psn0 || psn1 != psn0 {
		t.Errorf("retransmit %v from PSN %v, then PSN %v sent; want timeout from %v", r.Reason, r.PSN, psn1, psn0)
	}
	if c.Dev.Impaired() == 0 {
		t.Error("the impairment dropped nothing")
	}
	lostACK := index(drain(subC), 0, func(e *roce.TraceEvent) bool { return e.Kind == roce.TraceTx && e.Dropped })
	if lostACK < 0 {
		t.Error("the responder's trace shows no dropped frame")
	}
}

// TestTraceSlowSubscriber fills a small subscription nobody reads: the
// engine goes on at the same pace (the virtual time the burst takes is
// the same as without it), the drops are counted and reported in place.
func TestTraceSlowSubscriber(t *testing.T) {
	burst := func(sub bool) (time.Duration, *roce.Subscription) {
		b := newBed(t, bedOpts{Seed: 3})
		a, c := b.Nodes[0], b.Nodes[1]
		var s *roce.Subscription
		if sub {
			var err error
			if s, err = a.Dev.Subscribe(&roce.TraceOptions{Events: 16}); err != nil {
				t.Fatal(err)
			}
		}
		qa, _ := b.PairQPs(rcOpts{})
		lm, _ := a.Reg(t, 4096, 0, 1)
		rm, _ := c.Reg(t, 4096, 0, 2)
		start := b.Clock.Now()
		wrs := make([]verbs.SendWR, 200)
		for i := range wrs {
			wrs[i] = verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
				SGL: []mr.SGE{lm.SGE(0, 4096)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}
		}
		if n, err := qa.PostSendList(wrs); err != nil {
			t.Fatalf("posted %d: %v", n, err)
		}
		b.WaitWCs(a, len(wrs))
		return b.Clock.Now().Sub(start), s
	}
	plain, _ := burst(false)
	slow, s := burst(true)
	defer s.Close()
	if slow != plain {
		t.Errorf("the burst took %v of virtual time with a stuck subscriber, %v without", slow, plain)
	}
	if s.Dropped() == 0 {
		t.Fatal("a 16-event subscription nobody read dropped nothing")
	}
	evs := drain(s)
	if len(evs) != 17 || evs[16].Kind != roce.TraceLost {
		t.Fatalf("got %d events (%v), want the 16 buffered and a lost mark", len(evs), kinds(evs))
	}
	s.Close()
	if evs[16].Lost != s.Dropped() {
		t.Errorf("lost mark says %d, Dropped says %d", evs[16].Lost, s.Dropped())
	}
	if _, err := s.Next(context.Background()); !errors.Is(err, roce.ErrTraceClosed) {
		t.Errorf("Next after Close: %v, want ErrTraceClosed", err)
	}
}

// TestTraceDetachAnyTime closes subscriptions from other goroutines while
// the engine runs, and closes the device under a waiting subscriber.
func TestTraceDetachAnyTime(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	qa, _ := b.PairQPs(rcOpts{})
	lm, _ := a.Reg(t, 4096, 0, 1)
	rm, _ := c.Reg(t, 4096, 0, 2)
	var wg sync.WaitGroup
	var subs []*roce.Subscription
	for i := 0; i < 4; i++ {
		s, err := a.Dev.Subscribe(&roce.TraceOptions{Events: 8, SnapLen: 64})
		if err != nil {
			t.Fatal(err)
		}
		subs = append(subs, s)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each reader leaves after a few events, or when the main
			// goroutine closes its subscription first.
			for k := 0; k < 3+i*5; k++ {
				ev, err := s.Next(context.Background())
				if errors.Is(err, roce.ErrTraceClosed) {
					return
				}
				if err != nil {
					t.Errorf("Next: %v", err)
					return
				}
				if len(ev.Frame) > 64 {
					t.Errorf("frame of %d bytes with snap length 64", len(ev.Frame))
				}
			}
			s.Close()
		}()
	}
	for i := 0; i < 50; i++ {
		if err := qa.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{lm.SGE(0, 4096)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}); err != nil {
			t.Fatal(err)
		}
		b.WaitWCs(a, 1)
		if i == 25 {
			subs[0].Close() // detached while the engine runs
		}
	}
	for _, s := range subs {
		s.Close()
	}
	wg.Wait()

	s, err := c.Dev.Subscribe(nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Next(context.Background()); err != nil {
				done <- err
				return
			}
		}
	}()
	c.Dev.Close()
	select {
	case err := <-done:
		if !errors.Is(err, roce.ErrTraceClosed) || !s.DeviceClosed() {
			t.Errorf("after the device closed: %v (device closed %v), want ErrTraceClosed", err, s.DeviceClosed())
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a subscriber waiting in Next did not return within 5s of its device closing")
	}
	if _, err := c.Dev.Subscribe(nil); !errors.Is(err, roce.ErrClosed) {
		t.Errorf("Subscribe on a closed device: %v", err)
	}
}

// TestTraceRNR sends to a responder with no receive posted: the trace
// shows the RNR NAK's wait (the RNR timer armed and fired) and the retry
// for it, then the completion once a receive is there.
func TestTraceRNR(t *testing.T) {
	b := newBed(t, bedOpts{})
	a, c := b.Nodes[0], b.Nodes[1]
	qa, qc := b.PairQPs(rcOpts{MinRNR: 5})
	sub, err := a.Dev.Subscribe(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	lm, _ := a.Reg(t, 64, 0, 1)
	rm, _ := c.Reg(t, 64, 0, 2)
	if err := qa.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WROpSend, Flags: verbs.Signaled,
		SGL: []mr.SGE{lm.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	b.RunLimit(func() bool { return a.Dev.Counter(verbs.CntRcvdRNRErr) > 0 }, 10*time.Second)
	if err := qc.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{rm.SGE(0, 64)}}); err != nil {
		t.Fatal(err)
	}
	if wcs := b.WaitWCs(a, 1); wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("SEND completed with %v", wcs[0].Status)
	}
	evs := drain(sub)
	armed := index(evs, 0, func(e *roce.TraceEvent) bool {
		return e.Kind == roce.TraceTimerArmed && e.Timer == qp.TimerRNR
	})
	retry := index(evs, armed, func(e *roce.TraceEvent) bool {
		return e.Kind == roce.TraceRetransmit && e.Reason == qp.RetryRNR
	})
	fired := index(evs, retry, func(e *roce.TraceEvent) bool {
		return e.Kind == roce.TraceTimerFired && e.Timer == qp.TimerRNR
	})
	again := index(evs, fired, func(e *roce.TraceEvent) bool { return e.Kind == roce.TraceTx })
	comp := index(evs, again, func(e *roce.TraceEvent) bool {
		return e.Kind == roce.TraceCompletion && e.WRID == 9 && e.Status == verbs.WCSuccess
	})
	if armed < 0 || retry < 0 || fired < 0 || again < 0 || comp < 0 {
		t.Fatalf("want RNR timer armed, retry for RNR NAK, RNR timer fired, the SEND again, its completion; got %v", kinds(evs))
	}
	if d := evs[armed].Deadline.Sub(evs[armed].Time); d <= 0 {
		t.Errorf("the RNR timer was armed for %v", d)
	}
}
