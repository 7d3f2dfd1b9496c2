package cm

import (
	"testing"
	"time"

	"github.com/sroce/sroce/monotime"
)

// TestManagerHoldRTU: with HoldRTU the active side stops at REP_RCVD with
// CONNECT_RESPONSE; SendRTU establishes it, a resent REP is answered with
// the same RTU, and a consumer that never answers gets UNREACHABLE and a
// REJ (timeout, for the REP) goes to the peer.
func TestManagerHoldRTU(t *testing.T) {
	var now monotime.Time
	a, p := NewManager(Config{HoldRTU: true}), NewManager(Config{})
	p.Listen(svc)
	connectTo := func() (aid uint32, rep []Out) {
		aid, err := a.Connect(now, addrP, testREQ())
		if err != nil {
			t.Fatal(err)
		}
		out, _ := a.Take()
		deliver(t, now, p, addrA, out)
		_, pev := p.Take()
		if err := p.Accept(now, pev[0].ID, REP{LocalQPN: 0x22, StartingPSN: 200}); err != nil {
			t.Fatal(err)
		}
		rep, _ = p.Take()
		return aid, rep
	}
	aid, rep := connectTo()
	deliver(t, now, a, addrP, rep)
	out, ev := a.Take()
	if len(out) != 0 || !eqTypes(types(ev), EventConnectResponse) || ev[0].REP.LocalQPN != 0x22 {
		t.Fatalf("held REP: sent %v, events %v", attrs(t, out), types(ev))
	}
	if s, _ := a.State(aid); s != StateREPRcvd {
		t.Fatalf("state %v", s)
	}
	// A resent REP while the consumer decides is not answered.
	deliver(t, now, a, addrP, rep)
	if out, ev := a.Take(); len(out)+len(ev) != 0 {
		t.Fatalf("duplicate REP while held: %v %v", attrs(t, out), types(ev))
	}
	// Too much private data: an error, nothing sent, still held.
	if err := a.SendRTU(now, aid, make([]byte, RTUPrivateLen+1)); err == nil {
		t.Fatal("an RTU with too much private data accepted")
	}
	if out, ev := a.Take(); len(out)+len(ev) != 0 {
		t.Fatalf("a failed SendRTU queued %v %v", attrs(t, out), types(ev))
	}
	if s, _ := a.State(aid); s != StateREPRcvd {
		t.Fatalf("state %v after a failed SendRTU", s)
	}
	if err := a.SendRTU(now, aid, []byte("rtu")); err != nil {
		t.Fatal(err)
	}
	out, _ = a.Take()
	if !eqAttrs(attrs(t, out), AttrRTU) {
		t.Fatalf("SendRTU sent %v", attrs(t, out))
	}
	deliver(t, now, p, addrA, out)
	if _, pev := p.Take(); !eqTypes(types(pev), EventEstablished) {
		t.Fatalf("passive after RTU: %v", types(pev))
	}
	// The RTU was lost as far as the passive side knows: its REP again
	// gets the RTU again.
	deliver(t, now, a, addrP, rep)
	if out, _ := a.Take(); !eqAttrs(attrs(t, out), AttrRTU) {
		t.Fatalf("resent REP after RTU: %v", attrs(t, out))
	}
	if a.Counters().Established != 1 || a.Counters().DupsAnswered == 0 {
		t.Fatalf("counters %+v", a.Counters())
	}

	// A consumer that never answers.
	aid, rep = connectTo()
	deliver(t, now, a, addrP, rep)
	a.Take()
	d, ok := a.Deadline()
	if !ok || d.Sub(now) > 30*time.Minute {
		t.Fatalf("no bound on the held REP: %v %v", d, ok)
	}
	now = d
	a.Tick(now)
	out, ev = a.Take()
	if !eqAttrs(attrs(t, out), AttrREJ) || !eqTypes(types(ev), EventUnreachable) {
		t.Fatalf("held too long: sent %v, events %v", attrs(t, out), types(ev))
	}
	if _, msg := decode(t, out[0]); msg.(*REJ).MessageRejected != MsgREP || msg.(*REJ).Reason != RejTimeout {
		t.Fatalf("REJ %+v", msg)
	}
	if _, ok := a.State(aid); ok {
		t.Fatal("the connection is still held")
	}
	// RejectREP on a held REP.
	aid, rep = connectTo()
	deliver(t, now, a, addrP, rep)
	a.Take()
	if err := a.Reject(now, aid, RejConsumerDefined, []byte("no")); err != nil {
		t.Fatal(err)
	}
	out, _ = a.Take()
	deliver(t, now, p, addrA, out)
	if _, pev := p.Take(); !eqTypes(types(pev), EventRejected) || pev[0].REJ.MessageRejected != MsgREP {
		t.Fatalf("passive after REJ of its REP: %v", types(pev))
	}
}

// TestManagerSIDR: a SIDR_REQ for a listened service raises SIDR_REQUEST
// and SIDRReply answers it (and its resends); one for no listener gets
// "service ID not supported"; an unanswered request is resent, then
// UNREACHABLE.
func TestManagerSIDR(t *testing.T) {
	var now monotime.Time
	a, p := NewManager(Config{}), NewManager(Config{})
	udp := ServiceID(PortSpaceUDP, 7)
	p.Listen(udp)
	id, err := a.SIDRRequest(now, addrP, SIDRREQ{PKey: 0xffff, ServiceID: udp, PrivateData: []byte("x")}, 18, 3)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := a.Take()
	deliver(t, now, p, addrA, req)
	_, pev := p.Take()
	if !eqTypes(types(pev), EventSIDRRequest) || pev[0].SIDRREQ.ServiceID != udp {
		t.Fatalf("passive: %v", types(pev))
	}
	if err := p.SIDRReply(now, pev[0].ID, SIDRREP{Status: SIDRValid, QPN: 0x33, QKey: 0x01234567}); err != nil {
		t.Fatal(err)
	}
	rep, _ := p.Take()
	if p.Len() != 0 {
		t.Fatalf("passive holds %d exchanges after replying", p.Len())
	}
	// The request resent: the same reply, from the Dedup.
	deliver(t, now, p, addrA, req)
	if again, ev := p.Take(); !eqAttrs(attrs(t, again), AttrSIDRREP) || len(ev) != 0 {
		t.Fatalf("resent SIDR_REQ: %v %v", attrs(t, again), types(ev))
	}
	deliver(t, now, a, addrP, rep)
	_, aev := a.Take()
	if !eqTypes(types(aev), EventSIDRReply) || aev[0].ID != id || aev[0].SIDRREP.QPN != 0x33 || aev[0].SIDRREP.ServiceID != udp {
		t.Fatalf("active: %v %+v", types(aev), aev)
	}
	// No listener.
	a.SIDRRequest(now, addrP, SIDRREQ{ServiceID: ServiceID(PortSpaceUDP, 8)}, 18, 3)
	req, _ = a.Take()
	deliver(t, now, p, addrA, req)
	rep, _ = p.Take()
	deliver(t, now, a, addrP, rep)
	if _, aev := a.Take(); len(aev) != 1 || aev[0].SIDRREP.Status != SIDRServiceUnsupported {
		t.Fatalf("no listener: %+v", aev)
	}
	// Nobody answers.
	a.SIDRRequest(now, addrP, SIDRREQ{ServiceID: udp}, 10, 2)
	a.Take()
	sent := 0
	for i := 0; i < 10; i++ {
		d, ok := a.Deadline()
		if !ok {
			break
		}
		now = d
		a.Tick(now)
		out, ev := a.Take()
		sent += len(out)
		if len(ev) > 0 {
			if !eqTypes(types(ev), EventUnreachable) || sent != 2 {
				t.Fatalf("after %d resends: %v", sent, types(ev))
			}
			return
		}
	}
	t.Fatal("an unanswered SIDR_REQ never timed out")
}
