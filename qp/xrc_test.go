package qp

import (
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
)

// xrcPair is an XRC initiator (a, QPN 20 at 10.0.0.1) connected to an XRC
// target (b, QPN 30 at 10.0.0.2) whose domain has two XRC SRQs, numbers 7
// and 8, each with its own CQ; SRQ 8 is of another domain.
type xrcPair struct {
	a, b       *end
	srq7, srq8 *SRQ
	cq7        *fakeCQ
}

func newXRCPair(t *testing.T) *xrcPair {
	x := &xrcPair{a: newEnd(t, verbs.QPTypeXRCSend, 20, "10.0.0.1"), cq7: &fakeCQ{}}
	b := &end{env: &fakeEnv{addr: netip.MustParseAddr("10.0.0.2")}, cq: &fakeCQ{}}
	b.pd = mr.NewTable(mr.Options{}).AllocPD()
	b.mem = make([]byte, 1<<16)
	m, err := b.pd.RegMR(mr.Slice(b.mem), mr.AccessLocalWrite|mr.AccessRemoteWrite|mr.AccessRemoteRead|mr.AccessRemoteAtomic)
	if err != nil {
		t.Fatal(err)
	}
	b.mr = m
	d, other := &XRCD{}, &XRCD{}
	x.srq7 = NewXRCSRQ(16, 2, d, 7, b.pd, x.cq7)
	x.srq8 = NewXRCSRQ(16, 2, other, 8, b.pd, &fakeCQ{})
	find := func(n uint32) *SRQ {
		switch n {
		case 7:
			return x.srq7
		case 8:
			return x.srq8
		}
		return nil
	}
	b.q = New(&Config{QPN: 30, Type: verbs.QPTypeXRCRecv, PortMTU: verbs.MTU4096, XRCD: d, XRCSRQ: find,
		Env: b.env, Counters: &b.cnt})
	x.b = b
	connectXRC(t, x.a, b)
	return x
}

// connectXRC brings both to RTS with the masks ibv_xsrq_pingpong uses.
func connectXRC(t *testing.T, a, b *end) {
	t.Helper()
	steps := []struct {
		q    *end
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{b, verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite | mr.AccessRemoteRead},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{a, verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{b, verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: 20, RQPSN: 100, MaxDestRdAtomic: 1,
			MinRNRTimer: 12, AH: verbs.AHAttr{DGID: bth.GIDFromAddr(a.env.addr)}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{b, verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, SQPSN: 500}, verbs.AttrState | verbs.AttrTimeout | verbs.AttrSQPSN},
		{a, verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, DestQPN: 30, RQPSN: 500,
			AH: verbs.AHAttr{DGID: bth.GIDFromAddr(b.env.addr)}},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN},
		{a, verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, SQPSN: 100, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrTimeout | verbs.AttrSQPSN | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, s := range steps {
		if err := s.q.q.Modify(&s.attr, s.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// TestXRCSendWriteRead: a SEND of three packets to SRQ 7 lands in SRQ 7's
// receive request and completes on SRQ 7's CQ; every request carries the
// XRCETH, every response is an XRC opcode; an RDMA WRITE and READ use the
// SRQ's PD.
func TestXRCSendWriteRead(t *testing.T) {
	x := newXRCPair(t)
	a, b := x.a, x.b
	for i := range a.mem[:3000] {
		a.mem[i] = byte(i * 7)
	}
	if err := x.srq7.PostRecv(&verbs.RecvWR{WRID: 77, SGL: []mr.SGE{b.sge(0, 4096)}}); err != nil {
		t.Fatal(err)
	}
	if err := a.q.PostSend(&verbs.SendWR{WRID: 1, Opcode: verbs.WROpSendWithImm, Flags: verbs.Signaled, Imm: 0x1234,
		SGL: []mr.SGE{a.sge(0, 3000)}, RemoteSRQN: 7}); err != nil {
		t.Fatal(err)
	}
	req := pump(a, 0)
	if got := opcodes(t, req); len(got) != 3 || got[0] != bth.XRCSendFirst || got[2] != bth.Opcode(0xa3) {
		t.Fatalf("SEND went out as %v", got)
	}
	for _, f := range req {
		if n := parse(t, f).XRCETH().SRQN(); n != 7 {
			t.Fatalf("XRCETH names SRQ %d", n)
		}
	}
	deliver(t, b, 0, req...)
	resp := pump(b, 0)
	if got := opcodes(t, resp); len(got) != 1 || got[0] != bth.XRCAcknowledge {
		t.Fatalf("answered %v", got)
	}
	if len(x.cq7.wcs) != 1 || x.cq7.wcs[0].WRID != 77 || x.cq7.wcs[0].ByteLen != 3000 || x.cq7.wcs[0].Imm != 0x1234 ||
		x.cq7.wcs[0].QPNum != 30 || string(b.mem[:3000]) != string(a.mem[:3000]) {
		t.Fatalf("SRQ 7's CQ has %+v", x.cq7.wcs)
	}
	deliver(t, a, 0, resp...)
	if len(a.cq.wcs) != 1 || a.cq.wcs[0].Status != verbs.WCSuccess || a.cq.wcs[0].WRID != 1 {
		t.Fatalf("initiator completions %+v", a.cq.wcs)
	}

	// WRITE then READ back through SRQ 7's PD.
	binary.NativeEndian.PutUint64(a.mem[8192:], 0x1122334455667788)
	a.q.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(8192, 8)},
		RemoteAddr: b.mr.IOVA() + 100, RKey: b.mr.RKey(), RemoteSRQN: 7})
	a.q.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{a.sge(9000, 8)},
		RemoteAddr: b.mr.IOVA() + 100, RKey: b.mr.RKey(), RemoteSRQN: 7})
	req = pump(a, 0)
	if got := opcodes(t, req); len(got) != 2 || got[0] != bth.Opcode(0xaa) || got[1] != bth.XRCReadRequest {
		t.Fatalf("WRITE, READ went out as %v", got)
	}
	deliver(t, b, 0, req...)
	resp = pump(b, 0)
	deliver(t, a, 0, resp...)
	if got := opcodes(t, resp); len(got) < 1 || got[len(got)-1] != bth.XRCReadResponseOnly {
		t.Fatalf("answered %v", got)
	}
	if len(a.cq.wcs) != 3 || a.cq.wcs[2].Status != verbs.WCSuccess || string(a.mem[9000:9008]) != string(a.mem[8192:8200]) {
		t.Fatalf("completions %+v, read back %x", a.cq.wcs, a.mem[9000:9008])
	}
}

// TestXRCWrongSRQ: a request naming an SRQ of another domain, or none, is
// an invalid request (NAK, the target QP in error); the initiator's request
// completes with REM_INV_REQ_ERR.
func TestXRCWrongSRQ(t *testing.T) {
	for _, n := range []uint32{8, 9} {
		x := newXRCPair(t)
		x.srq8.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{x.b.sge(0, 64)}})
		x.a.q.PostSend(&verbs.SendWR{WRID: 5, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{x.a.sge(0, 16)},
			RemoteSRQN: n})
		deliver(t, x.b, 0, pump(x.a, 0)...)
		resp := pump(x.b, 0)
		if len(resp) != 1 || !parse(t, resp[0]).AETH().Syndrome().IsNAK() || parse(t, resp[0]).Opcode != bth.XRCAcknowledge {
			t.Fatalf("SRQ %d: answered %v", n, opcodes(t, resp))
		}
		if x.srq8.Len() != 1 || x.b.q.State() != verbs.QPStateErr {
			t.Fatalf("SRQ %d: a receive of another domain was taken, or the target is %v", n, x.b.q.State())
		}
		deliver(t, x.a, 0, resp...)
		if len(x.a.cq.wcs) != 1 || x.a.cq.wcs[0].Status != verbs.WCRemInvReqErr {
			t.Fatalf("SRQ %d: initiator completions %+v", n, x.a.cq.wcs)
		}
	}
}

// TestXRCRoles: an initiator takes no requests, a target sends nothing
// and takes no responses, and ATOMIC_WRITE is not an XRC operation.
func TestXRCRoles(t *testing.T) {
	x := newXRCPair(t)
	if err := x.b.q.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend}); err == nil {
		t.Error("an XRC target accepted a send request")
	}
	cap := verbs.QPCap{MaxSendSGE: 1}
	if err := CheckSendWR(verbs.QPTypeXRCSend, &cap, &verbs.SendWR{Opcode: verbs.WROpAtomicWrite, Flags: verbs.Inline,
		InlineData: make([]byte, 8)}); err != ErrOpcode {
		t.Errorf("ATOMIC_WRITE on XRC: %v", err)
	}
	if err := CheckSendWR(verbs.QPTypeXRCSend, &cap, &verbs.SendWR{Opcode: verbs.WROpSend, RemoteSRQN: 1 << 24}); err != ErrXRCSRQ {
		t.Errorf("SRQ number of 25 bits: %v", err)
	}
	x.a.q.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, SGL: []mr.SGE{x.a.sge(0, 4)}, RemoteSRQN: 7})
	req := pump(x.a, 0)
	before := x.a.cnt[verbs.CntWrongType]
	deliver(t, x.a, 0, req...) // a request to the initiator (addresses aside)
	if x.a.cnt[verbs.CntWrongType] == before && x.a.cnt[verbs.CntBadAddr] == 0 {
		t.Error("the initiator took a request")
	}
}
