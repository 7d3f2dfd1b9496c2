package qp

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/monotime"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// These tests drive QPs directly, without a device: a fake Env turns
// packets into frames on a list, and the test decides which frames reach
// the peer, in what order, and when.

type fakeEnv struct {
	addr netip.Addr
	buf  []byte
	hl   int
	sent [][]byte
	free [][]byte
	evs  []verbs.EventType
	// invalidate makes Invalidate the memory table's; otherwise it
	// refuses every key.
	invalidate bool
}

func (e *fakeEnv) Frame(ah *verbs.AH, n int) []byte {
	e.hl = ah.Encap.Len()
	if k := len(e.free); k > 0 && cap(e.free[k-1]) >= e.hl+n {
		e.buf = e.free[k-1][:e.hl+n]
		e.free = e.free[:k-1]
	} else {
		e.buf = make([]byte, e.hl+n, 4200)
	}
	return e.buf[e.hl:]
}

// recycle makes the frames sent so far reusable.
func (e *fakeEnv) recycle() {
	e.free = append(e.free, e.sent...)
	e.sent = e.sent[:0]
}

func (e *fakeEnv) Send(ah *verbs.AH, src bth.QPN, pkt []byte) {
	enc := ah.Encap
	l3, err := enc.Encode(e.buf, len(pkt))
	if err != nil {
		panic(err)
	}
	bth.PutICRC(e.buf[l3:e.hl+len(pkt)], enc.IPv6())
	e.sent = append(e.sent, e.buf)
}

func (e *fakeEnv) ResolveAH(attr *verbs.AHAttr, ah *verbs.AH) error {
	*ah = verbs.AH{Attr: *attr, SGID: bth.GIDFromAddr(e.addr)}
	ah.Encap = bth.Encap{DstMAC: attr.DMAC, Src: e.addr, Dst: attr.DGID.Addr(), TTL: 64, DF: true, ID: 1, SrcPort: 0xc000}
	return nil
}

func (e *fakeEnv) Invalidate(pd *mr.PD, rkey uint32) error {
	if e.invalidate {
		return pd.Invalidate(rkey, true)
	}
	return mr.ErrBadKey
}
func (e *fakeEnv) Event(t verbs.EventType, q *QP, srq *SRQ) { e.evs = append(e.evs, t) }
func (e *fakeEnv) take() [][]byte                           { s := e.sent; e.sent = nil; return s }

type fakeCQ struct {
	wcs []verbs.WC
	max int
}

func (c *fakeCQ) Push(wc verbs.WC, solicited bool) bool {
	if c.max > 0 && len(c.wcs) == c.max {
		return false
	}
	c.wcs = append(c.wcs, wc)
	return true
}

// end is one side of a QP pair.
type end struct {
	q   *QP
	env *fakeEnv
	cq  *fakeCQ
	pd  *mr.PD
	cnt verbs.Counters
	mem []byte
	mr  *mr.MR
}

func newEnd(t *testing.T, typ verbs.QPType, qpn bth.QPN, ip string) *end {
	e := &end{env: &fakeEnv{addr: netip.MustParseAddr(ip)}, cq: &fakeCQ{}}
	e.pd = mr.NewTable(mr.Options{}).AllocPD()
	e.mem = make([]byte, 1<<16)
	m, err := e.pd.RegMR(mr.Slice(e.mem), mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteRead|mr.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	e.mr = m
	e.q = New(&Config{QPN: qpn, Type: typ, PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, PortMTU: verbs.MTU4096,
		Cap: verbs.QPCap{MaxSendWR: 64, MaxRecvWR: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64},
		Env: e.env, Counters: &e.cnt})
	return e
}

func (e *end) sge(off, n int) mr.SGE {
	return mr.SGE{Addr: e.mr.IOVA() + uint64(off), Length: uint32(n), LKey: e.mr.LKey()}
}

func connect(t *testing.T, a, b *end, mtu verbs.MTU, sq, rq bth.PSN) {
	t.Helper()
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite | mr.AccessRemoteRead | mr.AccessRemoteAtomic},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: mtu, DestQPN: b.q.QPN(), RQPSN: rq, MaxDestRdAtomic: 4, MinRNRTimer: 3,
			AH: verbs.AHAttr{DGID: bth.GIDFromAddr(b.env.addr)}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, SQPSN: sq, Timeout: 10, RetryCnt: 3, RNRRetry: 2, MaxRdAtomic: 4},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := a.q.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

func pair(t *testing.T, mtu verbs.MTU) (*end, *end) {
	a := newEnd(t, verbs.QPTypeRC, 20, "10.0.0.1")
	b := newEnd(t, verbs.QPTypeRC, 30, "10.0.0.2")
	connect(t, a, b, mtu, 100, 500)
	connect(t, b, a, mtu, 500, 100)
	return a, b
}

// deliver hands frames to e.
func deliver(t *testing.T, e *end, now monotime.Time, frames ...[]byte) {
	t.Helper()
	for _, f := range frames {
		p, err := bth.Parse(f)
		if err != nil || !p.VerifyICRC() {
			t.Fatalf("bad frame: %v", err)
		}
		e.q.Receive(now, p)
	}
}

func pump(e *end, now monotime.Time) [][]byte {
	e.q.Pump(now, 1000)
	return e.env.take()
}

func opcodes(t *testing.T, frames [][]byte) []bth.Opcode {
	var ops []bth.Opcode
	for _, f := range frames {
		p, _ := bth.Parse(f)
		ops = append(ops, p.Opcode)
	}
	return ops
}

func parse(t *testing.T, f []byte) *bth.Packet {
	p, err := bth.Parse(f)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestGoBackNAfterLoss(t *testing.T) {
	a, b := pair(t, verbs.MTU256)
	if err := a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 256*8)},
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	req := pump(a, 0)
	if len(req) != 8 {
		t.Fatalf("%d packets", len(req))
	}
	// Packet 3 is lost: the responder takes 0-2, NAKs once for the gap.
	deliver(t, b, 0, req[:3]...)
	deliver(t, b, 0, req[4:]...)
	resp := pump(b, 0)
	if len(resp) != 1 {
		t.Fatalf("%d responses", len(resp))
	}
	n := parse(t, resp[0])
	if !n.AETH().Syndrome().IsNAK() || n.AETH().Syndrome().Value() != bth.NAKPSNSeqError || n.BTH().PSN() != 103 {
		t.Fatalf("%v %v", n.AETH().Syndrome(), n.BTH().PSN())
	}
	if b.cnt[verbs.CntOutOfSeqRequest] != 1 {
		t.Fatalf("out_of_seq_request %d", b.cnt[verbs.CntOutOfSeqRequest])
	}
	// The NAK acknowledges 0-2; the requester goes back to 3.
	deliver(t, a, 0, resp...)
	if a.cnt[verbs.CntRcvdSeqErr] != 1 {
		t.Fatal("rcvd_seq_err")
	}
	req = pump(a, 0)
	var psns []bth.PSN
	for _, f := range req {
		psns = append(psns, parse(t, f).BTH().PSN())
	}
	if len(psns) != 5 || psns[0] != 103 || parse(t, req[0]).Opcode != bth.RCWriteMiddle {
		t.Fatalf("resent %v %v", psns, opcodes(t, req))
	}
	deliver(t, b, 0, req...)
	deliver(t, a, 0, pump(b, 0)...)
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("%+v", a.cq.wcs)
	}
	if string(a.mem[:2048]) != string(b.mem[:2048]) {
		t.Fatal("data")
	}
}

func TestTimeoutRetransmitsAndTimerValue(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 100)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	now := monotime.Time(0).Add(5 * time.Millisecond)
	if len(pump(a, now)) != 1 {
		t.Fatal("not sent")
	}
	dl, ok := a.q.NextDeadline()
	if want := now.Add(4096 * time.Nanosecond << 10); !ok || dl != want {
		t.Fatalf("deadline %v, want %v", dl, want)
	}
	a.q.OnTimer(dl - 1)
	if len(pump(a, dl-1)) != 0 {
		t.Fatal("early retransmission")
	}
	a.q.OnTimer(dl)
	again := pump(a, dl)
	if len(again) != 1 || parse(t, again[0]).BTH().PSN() != 100 || a.cnt[verbs.CntRetransmitPkts] != 1 {
		t.Fatalf("%d %d", len(again), a.cnt[verbs.CntRetransmitPkts])
	}
	// After three retries (retry_cnt 3) the fourth timeout fails the request.
	for i := 0; i < 3; i++ {
		dl, _ = a.q.NextDeadline()
		a.q.OnTimer(dl)
		pump(a, dl)
	}
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCRetryExcErr || a.q.State() != verbs.QPStateErr {
		t.Fatalf("%+v %v", a.cq.wcs, a.q.State())
	}
}

func TestDuplicateAtomicNotExecutedTwice(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	binary.NativeEndian.PutUint64(b.mem[64:], 10)
	a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpAtomicFetchAdd, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 8)},
		RemoteAddr: b.mr.IOVA() + 64, RKey: b.mr.RKey(), CompareAdd: 5})
	req := pump(a, 0)
	// The request arrives three times: twice while its atomic ACK is still
	// queued (that ACK answers them), once after it was sent.
	deliver(t, b, 0, req[0], req[0])
	resp := pump(b, 0)
	if len(resp) != 1 {
		t.Fatalf("%d atomic ACKs for a request and its duplicate, want 1", len(resp))
	}
	deliver(t, b, 0, req[0])
	resp = append(resp, pump(b, 0)...)
	if len(resp) != 2 {
		t.Fatalf("%d atomic ACKs, want 2", len(resp))
	}
	for _, f := range resp {
		p := parse(t, f)
		if p.Opcode != bth.RCAtomicAcknowledge || p.AtomicAckETH().OrigRemDt() != 10 {
			t.Fatalf("%v orig %d", p.Opcode, p.AtomicAckETH().OrigRemDt())
		}
	}
	if v := binary.NativeEndian.Uint64(b.mem[64:]); v != 15 {
		t.Fatalf("executed more than once: %d", v)
	}
	if b.cnt[verbs.CntDuplicateRequest] != 2 {
		t.Fatal("duplicates not counted")
	}
	deliver(t, a, 0, resp...)
	if len(a.cq.wcs) != 1 || binary.NativeEndian.Uint64(a.mem[:8]) != 10 {
		t.Fatalf("%+v", a.cq.wcs)
	}
}

func TestDuplicateReadServedAgain(t *testing.T) {
	a, b := pair(t, verbs.MTU256)
	for i := range b.mem[:1000] {
		b.mem[i] = byte(i)
	}
	a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 1000)},
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	req := pump(a, 0)
	deliver(t, b, 0, req...)
	first := pump(b, 0)
	if got := opcodes(t, first); len(got) != 4 || got[0] != bth.RCReadResponseFirst || got[3] != bth.RCReadResponseLast {
		t.Fatalf("%v", got)
	}
	// The memory changes; the duplicate READ reads it again (rxe re-reads).
	b.mem[5] = 0xee
	deliver(t, b, 0, req...)
	second := pump(b, 0)
	if len(second) != 4 || parse(t, second[0]).PayloadBytes()[5] != 0xee {
		t.Fatal("duplicate READ not served from memory")
	}
	// Responses 0-1 arrive, 2-3 are lost; the retry asks for the rest only.
	deliver(t, a, 0, first[:2]...)
	dl, _ := a.q.NextDeadline()
	a.q.OnTimer(dl)
	retry := pump(a, dl)
	rp := parse(t, retry[0])
	if len(retry) != 1 || rp.Opcode != bth.RCReadRequest || rp.BTH().PSN() != 102 ||
		rp.RETH().VA() != b.mr.IOVA()+512 || rp.RETH().DMALen() != 488 {
		t.Fatalf("retry %v psn %v va+%d len %d", rp.Opcode, rp.BTH().PSN(), rp.RETH().VA()-b.mr.IOVA(), rp.RETH().DMALen())
	}
	deliver(t, b, dl, retry...)
	rest := pump(b, dl)
	if got := opcodes(t, rest); len(got) != 2 || got[0] != bth.RCReadResponseMiddle || got[1] != bth.RCReadResponseLast {
		t.Fatalf("%v", got)
	}
	deliver(t, a, dl, rest...)
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCSuccess || a.mem[600] != b.mem[600] {
		t.Fatalf("%+v", a.cq.wcs)
	}
}

func TestRNRNak(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 10)}})
	deliver(t, b, 0, pump(a, 0)...)
	resp := pump(b, 0)
	p := parse(t, resp[0])
	if !p.AETH().Syndrome().IsRNR() || p.AETH().Syndrome().Value() != 3 || p.BTH().PSN() != 100 {
		t.Fatalf("%v psn %v", p.AETH().Syndrome(), p.BTH().PSN())
	}
	deliver(t, a, 0, resp...)
	dl, _ := a.q.NextDeadline()
	if dl != monotime.Time(0).Add(30*time.Microsecond) {
		t.Fatalf("RNR wait until %v, want timer 3 = 30us", dl)
	}
	if len(pump(a, dl-1)) != 0 {
		t.Fatal("sent during the RNR wait")
	}
	a.q.OnTimer(dl)
	b.q.PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{b.sge(0, 100)}})
	deliver(t, b, dl, pump(a, dl)...)
	deliver(t, a, dl, pump(b, dl)...)
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCSuccess || len(b.cq.wcs) != 1 || b.cq.wcs[0].ByteLen != 10 {
		t.Fatalf("%+v %+v", a.cq.wcs, b.cq.wcs)
	}
}

func TestACKCoalescing(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	for i := 0; i < 10; i++ {
		a.q.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{a.sge(0, 10)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	}
	req := pump(a, 0)
	deliver(t, b, 0, req...)
	resp := pump(b, 0)
	if len(resp) != 1 {
		t.Fatalf("%d ACKs for 10 messages taken at once", len(resp))
	}
	p := parse(t, resp[0])
	if p.BTH().PSN() != 109 || p.AETH().MSN() != 10 || p.AETH().Syndrome() != bth.SyndromeACKUnlimited {
		t.Fatalf("ACK psn %v msn %v", p.BTH().PSN(), p.AETH().MSN())
	}
	if b.cnt[verbs.CntAckDeferred] != 9 {
		t.Fatalf("ack_deferred %d", b.cnt[verbs.CntAckDeferred])
	}
	// A duplicate is ACKed again even without AckReq.
	deliver(t, b, 0, req[3])
	if d := pump(b, 0); len(d) != 1 || parse(t, d[0]).BTH().PSN() != 109 {
		t.Fatal("duplicate not re-ACKed with the last PSN")
	}
}

func TestForgedResponsesIgnored(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 10)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	req := pump(a, 0)
	// An ACK for a PSN never sent, from the right address: ignored.
	h := bth.Headers{BTH: bth.BTHFields{Opcode: bth.RCAcknowledge, PKey: 0xffff, DestQP: 20, PSN: 150},
		AETH: bth.AETHFields{Syndrome: bth.SyndromeACKUnlimited}}
	f := make([]byte, 200)
	e := b.q.AH().Encap
	n, _ := bth.Build(f, &e, &h, nil)
	deliver(t, a, 0, f[:n])
	if len(a.cq.wcs) != 0 || a.cnt[verbs.CntBadResponse] != 1 {
		t.Fatalf("%+v %d", a.cq.wcs, a.cnt[verbs.CntBadResponse])
	}
	// The same ACK from another address: dropped before the completer.
	e.Src = netip.MustParseAddr("10.0.0.9")
	h.BTH.PSN = 100
	n, _ = bth.Build(f, &e, &h, nil)
	deliver(t, a, 0, f[:n])
	if len(a.cq.wcs) != 0 || a.cnt[verbs.CntBadAddr] != 1 {
		t.Fatal("ACK from a foreign address accepted")
	}
	deliver(t, b, 0, req...)
	deliver(t, a, 0, pump(b, 0)...)
	if len(a.cq.wcs) != 1 {
		t.Fatal("genuine ACK not taken")
	}
}

func TestPostSendAllocatesNothing(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	var id uint64
	allocs := testing.AllocsPerRun(100, func() {
		id++
		a.q.PostSend(&verbs.SendWR{WRID: id, Opcode: verbs.WROpRDMAWrite, SGL: []mr.SGE{a.sge(0, 8), a.sge(8, 8)}, RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
		a.q.Pump(0, 100)
		a.env.recycle()
		// Let the queue drain: pretend everything was acknowledged.
		a.q.req.compPSN = a.q.req.maxPSN
		for i := a.q.req.compIdx; i != a.q.req.reqIdx; i++ {
			a.q.sq.at(i).state = wqeDone
		}
		a.q.completeSends()
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per post", allocs)
	}
}

func TestModifyTable(t *testing.T) {
	valid := func(typ verbs.QPType, from, to verbs.QPState) bool {
		tr := &modifyTable[from][to]
		return tr.valid && !(typ == verbs.QPTypeRC && from == verbs.QPStateSQE)
	}
	for _, c := range []struct {
		typ      verbs.QPType
		from, to verbs.QPState
		want     bool
	}{
		{verbs.QPTypeRC, verbs.QPStateReset, verbs.QPStateInit, true}, {verbs.QPTypeRC, verbs.QPStateReset, verbs.QPStateErr, false},
		{verbs.QPTypeRC, verbs.QPStateInit, verbs.QPStateRTS, false}, {verbs.QPTypeRC, verbs.QPStateRTR, verbs.QPStateRTS, true},
		{verbs.QPTypeRC, verbs.QPStateRTS, verbs.QPStateSQD, true}, {verbs.QPTypeRC, verbs.QPStateSQD, verbs.QPStateRTS, true},
		{verbs.QPTypeRC, verbs.QPStateSQE, verbs.QPStateRTS, false}, {verbs.QPTypeUD, verbs.QPStateSQE, verbs.QPStateRTS, true},
		{verbs.QPTypeUC, verbs.QPStateSQE, verbs.QPStateRTS, true}, {verbs.QPTypeRC, verbs.QPStateErr, verbs.QPStateReset, true},
		{verbs.QPTypeRC, verbs.QPStateErr, verbs.QPStateRTS, false}, {verbs.QPTypeRC, verbs.QPStateRTS, verbs.QPStateRTR, false},
	} {
		if got := valid(c.typ, c.from, c.to); got != c.want {
			t.Errorf("%v %v->%v: %v", c.typ, c.from, c.to, got)
		}
	}
	if modifyTable[verbs.QPStateReset][verbs.QPStateInit].req[verbs.QPTypeUD] != verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrQKey ||
		modifyTable[verbs.QPStateInit][verbs.QPStateRTR].req[verbs.QPTypeRC] != verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer ||
		modifyTable[verbs.QPStateRTR][verbs.QPStateRTS].req[verbs.QPTypeRC] != verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrSQPSN|verbs.AttrMaxQPRdAtomic {
		t.Fatal("required attributes differ from the verbs table")
	}
	e := newEnd(t, verbs.QPTypeUD, 40, "10.0.0.3")
	err := e.q.Modify(&verbs.QPAttr{State: verbs.QPStateInit}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort)
	var me *ModifyError
	if !errors.As(err, &me) || me.Missing != verbs.AttrQKey {
		t.Fatalf("%v", err)
	}
	if got := err.Error(); got != "qp: modify UD QP RESET->INIT: missing required attributes QKEY" {
		t.Fatalf("%q", got)
	}
}

func TestHostileMisalignedAtomic(t *testing.T) {
	a, b := pair(t, verbs.MTU1024)
	h := bth.Headers{BTH: bth.BTHFields{Opcode: bth.RCFetchAdd, PKey: 0xffff, DestQP: 30, PSN: 100},
		Atomic: bth.AtomicETHFields{VA: b.mr.IOVA() + 4, RKey: b.mr.RKey(), SwapAdd: 1}}
	f := make([]byte, 200)
	e := a.q.AH().Encap
	n, _ := bth.Build(f, &e, &h, nil)
	before := string(b.mem[:16])
	deliver(t, b, 0, f[:n])
	resp := pump(b, 0)
	p := parse(t, resp[0])
	if len(resp) != 1 || !p.AETH().Syndrome().IsNAK() || p.AETH().Syndrome().Value() != bth.NAKInvalidRequest {
		t.Fatalf("%d responses, %v", len(resp), p.AETH().Syndrome())
	}
	if b.q.State() != verbs.QPStateErr || string(b.mem[:16]) != before {
		t.Fatal("misaligned atomic executed or QP not in error")
	}
}

// TestLateACKDuringResend: the ACK of a whole WRITE comes late, after the
// retransmit timer has rewound the request and while only part of it has
// been sent again. That ACK completes the request; and if it is lost, the
// ACK of the resent last packet (a duplicate at the responder) does.
func TestLateACKDuringResend(t *testing.T) {
	for _, lateLost := range []bool{false, true} {
		a, b := pair(t, verbs.MTU256)
		if err := a.q.PostSend(&verbs.SendWR{WRID: 7, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 256*4)},
			RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		req := pump(a, 0)
		if len(req) != 4 {
			t.Fatalf("%d packets", len(req))
		}
		deliver(t, b, 0, req...)
		late := pump(b, 0) // the ACK of PSN 103, held back
		if len(late) != 1 || !parse(t, late[0]).AETH().Syndrome().IsACK() || parse(t, late[0]).BTH().PSN() != 103 {
			t.Fatalf("responder sent %v", opcodes(t, late))
		}
		// The timer fires; the requester sends two packets again before
		// the late ACK arrives.
		dl, _ := a.q.NextDeadline()
		a.q.OnTimer(dl)
		a.q.Pump(dl, 2)
		resent := a.env.take()
		if len(resent) != 2 || parse(t, resent[0]).BTH().PSN() != 100 {
			t.Fatalf("resent %d", len(resent))
		}
		if !lateLost {
			deliver(t, a, dl, late...)
			if len(a.cq.wcs) != 1 || a.cq.wcs[0].WRID != 7 || a.cq.wcs[0].Status != verbs.WCSuccess {
				t.Fatalf("late ACK: completions %+v", a.cq.wcs)
			}
			if rest := pump(a, dl); len(rest) != 0 {
				t.Fatalf("the completed request was sent on: %v", opcodes(t, rest))
			}
			continue
		}
		// The late ACK is lost: the rest is resent, the responder answers
		// the duplicates, and that answer completes the request.
		deliver(t, b, dl, resent...)
		rest := pump(a, dl)
		if len(rest) != 2 || parse(t, rest[1]).BTH().PSN() != 103 {
			t.Fatalf("rest %d", len(rest))
		}
		deliver(t, b, dl, rest...)
		deliver(t, a, dl, pump(b, dl)...)
		if len(a.cq.wcs) != 1 || a.cq.wcs[0].WRID != 7 || a.cq.wcs[0].Status != verbs.WCSuccess {
			t.Fatalf("duplicate ACK: completions %+v", a.cq.wcs)
		}
	}
}

// TestACKWhileRewoundThenLost: the late ACK of the last PSN arrives while
// the request is partly resent, then every further answer is lost. The
// request must not hang with nothing outstanding: it completes at once.
func TestACKWhileRewoundThenLost(t *testing.T) {
	a, b := pair(t, verbs.MTU256)
	a.q.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(0, 256*4)},
		RemoteAddr: b.mr.IOVA(), RKey: b.mr.RKey()})
	deliver(t, b, 0, pump(a, 0)...)
	late := pump(b, 0)
	dl, _ := a.q.NextDeadline()
	a.q.OnTimer(dl)
	a.q.Pump(dl, 2)
	a.env.take()
	deliver(t, a, dl, late...)
	a.q.Pump(dl, 100)
	a.env.take()
	for i := 0; i < 10 && len(a.cq.wcs) == 0; i++ {
		next, ok := a.q.NextDeadline()
		if !ok {
			break
		}
		a.q.OnTimer(next)
		a.q.Pump(next, 100)
		a.env.take() // lost
	}
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCSuccess {
		inflight, _, _ := a.q.Outstanding()
		t.Fatalf("completions %+v with %d PSNs outstanding", a.cq.wcs, inflight)
	}
}
