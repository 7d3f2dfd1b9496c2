package cm

import (
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
)

var (
	addrA = Addr{GID: bth.GID{15: 1}, QPN: GSIQPN}
	addrP = Addr{GID: bth.GID{15: 2}, QPN: GSIQPN}
)

const svc = 0x0106000000004e20 // RDMA_PS_TCP, port 20000

func testREQ() REQ {
	return REQ{
		ServiceID: svc, LocalQPN: 0x11, StartingPSN: 100, RemoteCMResponseTimeout: 18,
		MaxCMRetries: 3, RetryCount: 7, RNRRetryCount: 7, PKey: 0xffff,
	}
}

// decode parses an Out's MAD, failing the test on error.
func decode(t *testing.T, o Out) (Header, Message) {
	t.Helper()
	h, msg, err := Unmarshal(o.MAD)
	if err != nil {
		t.Fatalf("manager sent a bad MAD: %v", err)
	}
	return h, msg
}

func attrs(t *testing.T, outs []Out) []AttrID {
	t.Helper()
	var a []AttrID
	for _, o := range outs {
		h, _ := decode(t, o)
		a = append(a, h.AttrID)
	}
	return a
}

func types(evs []Event) []EventType {
	var ts []EventType
	for _, e := range evs {
		ts = append(ts, e.Type)
	}
	return ts
}

func eqAttrs(a []AttrID, b ...AttrID) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func eqTypes(a []EventType, b ...EventType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// deliver hands every MAD in outs to dst as from src.
func deliver(t *testing.T, now monotime.Time, dst *Manager, from Addr, outs []Out) {
	t.Helper()
	for _, o := range outs {
		if err := dst.Receive(now, from, o.MAD); err != nil {
			t.Fatalf("receive %v: %v", attrs(t, []Out{o}), err)
		}
	}
}

// mad builds a CM MAD for msg.
func mad(t *testing.T, tid uint64, msg Message) []byte {
	t.Helper()
	b, err := Send(tid, msg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestManagerConnectDisconnect(t *testing.T) {
	var now monotime.Time
	a, p := NewManager(Config{}), NewManager(Config{})
	if err := p.Listen(svc); err != nil {
		t.Fatal(err)
	}
	aid, err := a.Connect(now, addrP, testREQ())
	if err != nil {
		t.Fatal(err)
	}
	out, _ := a.Take()
	if !eqAttrs(attrs(t, out), AttrREQ) || out[0].To != addrP {
		t.Fatalf("connect sent %v to %v, want one REQ to the peer", attrs(t, out), out)
	}
	deliver(t, now, p, addrA, out)
	pout, pev := p.Take()
	if len(pout) != 0 || !eqTypes(types(pev), EventConnectRequest) || pev[0].REQ.LocalQPN != 0x11 {
		t.Fatalf("passive after REQ: sent %v, events %v", attrs(t, pout), types(pev))
	}
	pid := pev[0].ID
	if s, _ := p.State(pid); s != StateREQRcvd || p.HalfOpen() != 1 {
		t.Fatalf("passive state %v, half-open %d", s, p.HalfOpen())
	}
	if err := p.Accept(now, pid, REP{LocalQPN: 0x22, StartingPSN: 200}); err != nil {
		t.Fatal(err)
	}
	pout, _ = p.Take()
	if !eqAttrs(attrs(t, pout), AttrREP) {
		t.Fatalf("accept sent %v", attrs(t, pout))
	}
	deliver(t, now, a, addrP, pout)
	out, aev := a.Take()
	if !eqAttrs(attrs(t, out), AttrRTU) || !eqTypes(types(aev), EventEstablished) || aev[0].REP.LocalQPN != 0x22 {
		t.Fatalf("active after REP: sent %v, events %v", attrs(t, out), types(aev))
	}
	deliver(t, now, p, addrA, out)
	_, pev = p.Take()
	if !eqTypes(types(pev), EventEstablished) || p.HalfOpen() != 0 {
		t.Fatalf("passive after RTU: events %v, half-open %d", types(pev), p.HalfOpen())
	}
	if _, ok := a.Deadline(); ok {
		t.Fatal("active has a timer running once established")
	}

	// The passive side disconnects.
	if err := p.Disconnect(now, pid); err != nil {
		t.Fatal(err)
	}
	pout, _ = p.Take()
	if _, msg := decode(t, pout[0]); msg.(*DREQ).RemoteQPN != 0x11 {
		t.Fatalf("DREQ names QP %v, want the active side's 0x11", msg.(*DREQ).RemoteQPN)
	}
	deliver(t, now, a, addrP, pout)
	out, aev = a.Take()
	if !eqAttrs(attrs(t, out), AttrDREP) || !eqTypes(types(aev), EventDisconnected) {
		t.Fatalf("active after DREQ: sent %v, events %v", attrs(t, out), types(aev))
	}
	deliver(t, now, p, addrA, out)
	_, pev = p.Take()
	if !eqTypes(types(pev), EventDisconnected) {
		t.Fatalf("passive after DREP: events %v", types(pev))
	}
	for _, m := range []*Manager{a, p} {
		id := aid
		if m == p {
			id = pid
		}
		if s, _ := m.State(id); s != StateTimeWait {
			t.Fatalf("state %v after disconnect, want TIMEWAIT", s)
		}
		d, ok := m.Deadline()
		if !ok || d != now.Add(2*TimeoutDuration(16)) {
			t.Fatalf("TIMEWAIT timer %v (running %v), want %v", d, ok, now.Add(2*TimeoutDuration(16)))
		}
		m.Tick(d.Add(-1))
		if _, ev := m.Take(); len(ev) != 0 {
			t.Fatalf("TIMEWAIT ended early: %v", types(ev))
		}
		m.Tick(d)
		if _, ev := m.Take(); !eqTypes(types(ev), EventTimeWaitExit) || m.Len() != 0 {
			t.Fatalf("after TIMEWAIT: events %v, %d connections left", types(ev), m.Len())
		}
	}
}

func TestManagerREQRetriesThenUnreachable(t *testing.T) {
	var now monotime.Time
	a := NewManager(Config{})
	req := testREQ()
	id, _ := a.Connect(now, addrP, req)
	a.Take()
	wait := ResponseWait(16, req.RemoteCMResponseTimeout)
	for i := 0; i < int(req.MaxCMRetries); i++ {
		d, ok := a.Deadline()
		if !ok || d != now.Add(wait) {
			t.Fatalf("resend %d: deadline %v, want %v", i, d, now.Add(wait))
		}
		a.Tick(d.Add(-1))
		if out, _ := a.Take(); len(out) != 0 {
			t.Fatalf("resent before the deadline")
		}
		now = d
		a.Tick(now)
		if out, _ := a.Take(); !eqAttrs(attrs(t, out), AttrREQ) {
			t.Fatalf("resend %d sent %v", i, attrs(t, out))
		}
	}
	now, _ = a.Deadline()
	a.Tick(now)
	out, ev := a.Take()
	if !eqAttrs(attrs(t, out), AttrREJ) || !eqTypes(types(ev), EventUnreachable) || ev[0].ID != id {
		t.Fatalf("after retries: sent %v, events %v", attrs(t, out), types(ev))
	}
	if _, msg := decode(t, out[0]); msg.(*REJ).Reason != RejTimeout {
		t.Fatalf("REJ reason %v", msg.(*REJ).Reason)
	}
	if a.Len() != 0 {
		t.Fatal("connection not freed after timeout")
	}
}

func TestManagerMRAExtendsWait(t *testing.T) {
	var now monotime.Time
	a := NewManager(Config{})
	id, _ := a.Connect(now, addrP, testREQ())
	a.Take()
	if err := a.Receive(now, addrP, mad(t, 1, &MRA{LocalCommID: 9, RemoteCommID: id, MessageMRAed: MsgREQ, ServiceTimeout: 24})); err != nil {
		t.Fatal(err)
	}
	if s, _ := a.State(id); s != StateMRAREQRcvd {
		t.Fatalf("state %v after MRA", s)
	}
	d, _ := a.Deadline()
	if want := now.Add(MRAWait(16, 24)); d != want {
		t.Fatalf("deadline %v after MRA, want %v", d, want)
	}
}

func TestManagerREJ(t *testing.T) {
	var now monotime.Time
	a := NewManager(Config{})
	id, _ := a.Connect(now, addrP, testREQ())
	a.Take()
	// A REJ from another port is not for this connection.
	if err := a.Receive(now, addrA, mad(t, 1, &REJ{RemoteCommID: id, Reason: RejConsumerDefined})); err == nil {
		t.Fatal("REJ from a stranger accepted")
	}
	if err := a.Receive(now, addrP, mad(t, 1, &REJ{RemoteCommID: id, Reason: RejConsumerDefined})); err != nil {
		t.Fatal(err)
	}
	_, ev := a.Take()
	if !eqTypes(types(ev), EventRejected) || ev[0].Reason != RejConsumerDefined || a.Len() != 0 {
		t.Fatalf("events %v, %d connections", types(ev), a.Len())
	}
}

func TestManagerNoListener(t *testing.T) {
	p := NewManager(Config{})
	req := testREQ()
	req.LocalCommID = 77
	if err := p.Receive(0, addrA, mad(t, 5, &req)); err != nil {
		t.Fatal(err)
	}
	out, ev := p.Take()
	if len(ev) != 0 || !eqAttrs(attrs(t, out), AttrREJ) || p.Len() != 0 {
		t.Fatalf("sent %v, events %v, %d connections", attrs(t, out), types(ev), p.Len())
	}
	h, msg := decode(t, out[0])
	rej := msg.(*REJ)
	if rej.Reason != RejInvalidServiceID || rej.RemoteCommID != 77 || h.TID != 5 || out[0].To != addrA {
		t.Fatalf("REJ %+v tid %d to %v", rej, h.TID, out[0].To)
	}
}

func TestManagerReject(t *testing.T) {
	p := NewManager(Config{})
	p.Listen(svc)
	req := testREQ()
	req.LocalCommID = 3
	p.Receive(0, addrA, mad(t, 5, &req))
	_, ev := p.Take()
	if err := p.Reject(0, ev[0].ID, RejConsumerDefined, []byte("no")); err != nil {
		t.Fatal(err)
	}
	out, _ := p.Take()
	_, msg := decode(t, out[0])
	if r := msg.(*REJ); r.Reason != RejConsumerDefined || r.RemoteCommID != 3 || p.Len() != 0 || p.HalfOpen() != 0 {
		t.Fatalf("REJ %+v, %d connections", r, p.Len())
	}
	// The REQ resent is answered with the same REJ.
	p.Receive(1, addrA, mad(t, 5, &req))
	out2, ev := p.Take()
	if len(out2) != 1 || string(out2[0].MAD) != string(out[0].MAD) || len(ev) != 0 {
		t.Fatalf("duplicate REQ after reject: sent %v, events %v", attrs(t, out2), types(ev))
	}
}

func TestManagerDuplicates(t *testing.T) {
	var now monotime.Time
	a, p := NewManager(Config{}), NewManager(Config{})
	p.Listen(svc)
	a.Connect(now, addrP, testREQ())
	reqOut, _ := a.Take()
	deliver(t, now, p, addrA, reqOut)
	// Duplicate REQ before the consumer decides: nothing sent, no second event.
	deliver(t, now, p, addrA, reqOut)
	out, ev := p.Take()
	if len(out) != 0 || len(ev) != 1 || p.Len() != 1 {
		t.Fatalf("duplicate REQ in REQ_RCVD: sent %v, events %v, %d connections", attrs(t, out), types(ev), p.Len())
	}
	p.Accept(now, ev[0].ID, REP{LocalQPN: 0x22})
	repOut, _ := p.Take()
	// Duplicate REQ while the REP is pending: the REP again.
	deliver(t, now, p, addrA, reqOut)
	out, ev = p.Take()
	if !eqAttrs(attrs(t, out), AttrREP) || string(out[0].MAD) != string(repOut[0].MAD) || len(ev) != 0 {
		t.Fatalf("duplicate REQ in REP_SENT: sent %v, events %v", attrs(t, out), types(ev))
	}
	// Duplicate REP: the RTU again, one ESTABLISHED only.
	deliver(t, now, a, addrP, repOut)
	rtuOut, ev := a.Take()
	deliver(t, now, a, addrP, repOut)
	out, ev2 := a.Take()
	if !eqAttrs(attrs(t, out), AttrRTU) || len(ev) != 1 || len(ev2) != 0 {
		t.Fatalf("duplicate REP: sent %v, events %v then %v", attrs(t, out), types(ev), types(ev2))
	}
	// Duplicate RTU: ignored.
	deliver(t, now, p, addrA, rtuOut)
	deliver(t, now, p, addrA, rtuOut)
	out, ev = p.Take()
	if len(out) != 0 || !eqTypes(types(ev), EventEstablished) {
		t.Fatalf("two RTUs: sent %v, events %v", attrs(t, out), types(ev))
	}
}

func TestManagerPeerVanishesAfterREP(t *testing.T) {
	var now monotime.Time
	p := NewManager(Config{MaxRetries: 2})
	p.Listen(svc)
	req := testREQ()
	req.LocalCommID = 8
	p.Receive(now, addrA, mad(t, 1, &req))
	_, ev := p.Take()
	id := ev[0].ID
	p.Accept(now, id, REP{})
	p.Take()
	var reps int
	for i := 0; i < 10; i++ {
		d, ok := p.Deadline()
		if !ok {
			t.Fatal("no timer while the REP is pending")
		}
		now = d
		p.Tick(now)
		out, ev := p.Take()
		if len(ev) > 0 {
			if !eqTypes(types(ev), EventUnreachable) || !eqAttrs(attrs(t, out), AttrREJ) {
				t.Fatalf("REP timeout: sent %v, events %v", attrs(t, out), types(ev))
			}
			break
		}
		if !eqAttrs(attrs(t, out), AttrREP) {
			t.Fatalf("REP resend sent %v", attrs(t, out))
		}
		reps++
	}
	if reps != 2 {
		t.Fatalf("REP resent %d times, want 2", reps)
	}
	if s, _ := p.State(id); s != StateTimeWait || p.HalfOpen() != 0 {
		t.Fatalf("state %v, half-open %d after REP timeout", s, p.HalfOpen())
	}
	now, _ = p.Deadline()
	p.Tick(now)
	if _, ev := p.Take(); !eqTypes(types(ev), EventTimeWaitExit) || p.Len() != 0 {
		t.Fatalf("after TIMEWAIT: %v, %d connections", types(ev), p.Len())
	}
}

func TestManagerDREQUnknown(t *testing.T) {
	p := NewManager(Config{})
	if err := p.Receive(0, addrA, mad(t, 9, &DREQ{LocalCommID: 4, RemoteCommID: 1234})); err != nil {
		t.Fatal(err)
	}
	out, ev := p.Take()
	if !eqAttrs(attrs(t, out), AttrDREP) || len(ev) != 0 {
		t.Fatalf("sent %v, events %v", attrs(t, out), types(ev))
	}
	h, msg := decode(t, out[0])
	if d := msg.(*DREP); d.RemoteCommID != 4 || d.LocalCommID != 1234 || h.TID != 9 {
		t.Fatalf("DREP %+v tid %d", d, h.TID)
	}
}

func TestManagerDREQTimeout(t *testing.T) {
	var now monotime.Time
	a, p := NewManager(Config{MaxRetries: 1}), NewManager(Config{})
	p.Listen(svc)
	id, _ := a.Connect(now, addrP, testREQ())
	o, _ := a.Take()
	deliver(t, now, p, addrA, o)
	_, ev := p.Take()
	p.Accept(now, ev[0].ID, REP{LocalQPN: 0x22})
	o, _ = p.Take()
	deliver(t, now, a, addrP, o)
	a.Take()
	a.Disconnect(now, id)
	if o, _ := a.Take(); len(o) != 1 {
		t.Fatalf("disconnect sent %d MADs", len(o))
	} else if _, msg := decode(t, o[0]); msg.(*DREQ).RemoteQPN != 0x22 {
		t.Fatalf("DREQ names QP %v, want the passive side's 0x22", msg.(*DREQ).RemoteQPN)
	}
	now, _ = a.Deadline()
	a.Tick(now)
	if o, _ := a.Take(); !eqAttrs(attrs(t, o), AttrDREQ) {
		t.Fatalf("DREQ resend sent %v", attrs(t, o))
	}
	now, _ = a.Deadline()
	a.Tick(now)
	if _, ev := a.Take(); !eqTypes(types(ev), EventDisconnected) {
		t.Fatalf("DREQ timeout events %v", types(ev))
	}
	if s, _ := a.State(id); s != StateTimeWait {
		t.Fatalf("state %v", s)
	}
}

func TestManagerHalfOpenBounded(t *testing.T) {
	const limit, n = 100, 3000
	var now monotime.Time
	p := NewManager(Config{MaxHalfOpen: limit, DedupCapacity: 500})
	p.Listen(svc)
	var rejs, reqs int
	for i := 0; i < n; i++ {
		req := testREQ()
		req.LocalCommID = uint32(i + 1)
		if err := p.Receive(now, Addr{GID: bth.GID{0: byte(i >> 8), 1: byte(i), 15: 9}, QPN: 1}, mad(t, uint64(i), &req)); err != nil {
			t.Fatal(err)
		}
		out, ev := p.Take()
		reqs += len(ev)
		for _, o := range out {
			_, msg := decode(t, o)
			if r, ok := msg.(*REJ); ok && r.Reason == RejNoResources {
				rejs++
			}
		}
		now = now.Add(time.Microsecond)
	}
	if p.dedup.Len() > 500 {
		t.Fatalf("duplicate detection holds %d keys, above its capacity 500", p.dedup.Len())
	}
	if reqs != limit || rejs != n-limit || p.Len() != limit || p.HalfOpen() != limit {
		t.Fatalf("%d requests, %d REJs, %d connections, %d half-open", reqs, rejs, p.Len(), p.HalfOpen())
	}
	// Nobody decides: all freed once the peers would have given up.
	for i := 0; i < 2*limit && p.Len() > 0; i++ {
		d, ok := p.Deadline()
		if !ok {
			break
		}
		now = d
		p.Tick(now)
		p.Take()
	}
	if p.Len() != 0 || p.HalfOpen() != 0 {
		t.Fatalf("%d connections, %d half-open left after the timeouts", p.Len(), p.HalfOpen())
	}
	if _, ok := p.Deadline(); ok {
		t.Fatal("a timer still runs with no connection")
	}
}

func TestManagerMalformed(t *testing.T) {
	p := NewManager(Config{})
	p.Listen(svc)
	req := testREQ()
	good := mad(t, 1, &req)
	short := good[:100]
	badVer := append([]byte(nil), good...)
	badVer[2] = 1
	badClass := append([]byte(nil), good...)
	badClass[1] = 0x04
	badAttr := append([]byte(nil), good...)
	badAttr[17] = 0x99
	get := append([]byte(nil), good...)
	get[3] = byte(MethodGet)
	for name, b := range map[string][]byte{"short": short, "class version": badVer, "class": badClass, "attribute": badAttr, "method": get} {
		if err := p.Receive(0, addrA, b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	out, ev := p.Take()
	if len(out) != 0 || len(ev) != 0 || p.Len() != 0 {
		t.Fatalf("malformed MADs: sent %v, events %v", attrs(t, out), types(ev))
	}
	// Messages for no connection are dropped with an error.
	for _, msg := range []Message{&REP{RemoteCommID: 5}, &RTU{RemoteCommID: 5}, &DREP{RemoteCommID: 5}, &MRA{RemoteCommID: 5}} {
		if err := p.Receive(0, addrA, mad(t, 1, msg)); err == nil {
			t.Errorf("%v for no connection accepted", msg.Attr())
		}
	}
}

func TestManagerStaleREQInTimeWait(t *testing.T) {
	var now monotime.Time
	p := NewManager(Config{})
	p.Listen(svc)
	req := testREQ()
	req.LocalCommID = 6
	p.Receive(now, addrA, mad(t, 1, &req))
	_, ev := p.Take()
	id := ev[0].ID
	p.Accept(now, id, REP{})
	p.Receive(now, addrA, mad(t, 1, &RTU{LocalCommID: 6, RemoteCommID: id}))
	p.Receive(now, addrA, mad(t, 2, &DREQ{LocalCommID: 6, RemoteCommID: id}))
	p.Take()
	if s, _ := p.State(id); s != StateTimeWait {
		t.Fatalf("state %v after DREQ", s)
	}
	// A duplicate DREQ is answered with the same DREP.
	p.Receive(now, addrA, mad(t, 2, &DREQ{LocalCommID: 6, RemoteCommID: id}))
	if out, ev := p.Take(); !eqAttrs(attrs(t, out), AttrDREP) || len(ev) != 0 {
		t.Fatalf("duplicate DREQ: sent %v, events %v", attrs(t, out), types(ev))
	}
	// A new REQ reusing the communication ID during TIMEWAIT is stale.
	p.Receive(now, addrA, mad(t, 3, &req))
	out, ev := p.Take()
	if len(ev) != 0 || !eqAttrs(attrs(t, out), AttrREJ) {
		t.Fatalf("REQ in TIMEWAIT: sent %v, events %v", attrs(t, out), types(ev))
	}
	if _, msg := decode(t, out[0]); msg.(*REJ).Reason != RejStaleConn {
		t.Fatalf("REJ reason %v", msg.(*REJ).Reason)
	}
}

func TestManagerRejectTooMuchPrivateData(t *testing.T) {
	p := NewManager(Config{})
	p.Listen(svc)
	req := testREQ()
	p.Receive(0, addrA, mad(t, 1, &req))
	_, ev := p.Take()
	if err := p.Reject(0, ev[0].ID, RejConsumerDefined, make([]byte, REJPrivateLen+1)); err == nil {
		t.Fatal("REJ with too much private data accepted")
	}
	if s, ok := p.State(ev[0].ID); !ok || s != StateREQRcvd {
		t.Fatalf("state %v after a failed reject", s)
	}
	if out, _ := p.Take(); len(out) != 0 || p.Counters().REJSent != 0 {
		t.Fatalf("a failed reject queued %d MADs, counted %d REJs", len(out), p.Counters().REJSent)
	}
}

// connected returns two managers with an established connection and its
// IDs on each side.
func connected(t *testing.T, now monotime.Time) (a, p *Manager, aid, pid uint32) {
	t.Helper()
	a, p = NewManager(Config{}), NewManager(Config{})
	if err := p.Listen(svc); err != nil {
		t.Fatal(err)
	}
	if err := p.Listen(svc); err == nil {
		t.Fatal("second Listen on the same service ID accepted")
	}
	aid, _ = a.Connect(now, addrP, testREQ())
	o, _ := a.Take()
	deliver(t, now, p, addrA, o)
	_, ev := p.Take()
	pid = ev[0].ID
	p.Accept(now, pid, REP{LocalQPN: 0x22})
	o, _ = p.Take()
	deliver(t, now, a, addrP, o)
	o, _ = a.Take()
	deliver(t, now, p, addrA, o)
	p.Take()
	if s, _ := p.State(pid); s != StateEstablished {
		t.Fatalf("passive state %v", s)
	}
	return a, p, aid, pid
}

func TestManagerSimultaneousDisconnect(t *testing.T) {
	var now monotime.Time
	a, p, aid, pid := connected(t, now)
	a.Disconnect(now, aid)
	p.Disconnect(now, pid)
	ao, _ := a.Take()
	po, _ := p.Take()
	deliver(t, now, a, addrP, po)
	deliver(t, now, p, addrA, ao)
	ao, aev := a.Take()
	po, pev := p.Take()
	if !eqTypes(types(aev), EventDisconnected) || !eqTypes(types(pev), EventDisconnected) ||
		!eqAttrs(attrs(t, ao), AttrDREP) || !eqAttrs(attrs(t, po), AttrDREP) {
		t.Fatalf("crossing DREQs: active %v %v, passive %v %v", attrs(t, ao), types(aev), attrs(t, po), types(pev))
	}
	// The DREPs crossing too change nothing more.
	deliver(t, now, a, addrP, po)
	deliver(t, now, p, addrA, ao)
	if _, ev := a.Take(); len(ev) != 0 {
		t.Fatalf("late DREP raised %v", types(ev))
	}
	if s, _ := a.State(aid); s != StateTimeWait {
		t.Fatalf("state %v", s)
	}
}

func TestManagerMRAForREP(t *testing.T) {
	var now monotime.Time
	p := NewManager(Config{})
	p.Listen(svc)
	req := testREQ()
	req.LocalCommID = 4
	p.Receive(now, addrA, mad(t, 1, &req))
	_, ev := p.Take()
	id := ev[0].ID
	p.Accept(now, id, REP{})
	p.Take()
	if err := p.Receive(now, addrA, mad(t, 1, &MRA{LocalCommID: 4, RemoteCommID: id, MessageMRAed: MsgREP, ServiceTimeout: 25})); err != nil {
		t.Fatal(err)
	}
	d, _ := p.Deadline()
	if s, _ := p.State(id); s != StateMRAREPRcvd || d != now.Add(MRAWait(16, 25)) {
		t.Fatalf("after MRA: state %v, deadline %v", s, d)
	}
	// The RTU still completes the connection.
	p.Receive(now, addrA, mad(t, 1, &RTU{LocalCommID: 4, RemoteCommID: id}))
	if _, ev := p.Take(); !eqTypes(types(ev), EventEstablished) {
		t.Fatalf("RTU after MRA: events %v", types(ev))
	}
}

func TestManagerWrongRemoteCommID(t *testing.T) {
	var now monotime.Time
	a, p, aid, pid := connected(t, now)
	// The right local ID but another peer connection's ID: not this connection.
	if err := p.Receive(now, addrA, mad(t, 7, &DREP{LocalCommID: aid + 100, RemoteCommID: pid})); err == nil {
		t.Fatal("DREP with a wrong sender comm ID accepted")
	}
	if err := a.Receive(now, addrP, mad(t, 7, &REJ{LocalCommID: pid + 100, RemoteCommID: aid, Reason: RejConsumerDefined})); err == nil {
		t.Fatal("REJ with a wrong sender comm ID accepted")
	}
	if s, _ := a.State(aid); s != StateEstablished {
		t.Fatalf("state %v after a stray REJ", s)
	}
}
