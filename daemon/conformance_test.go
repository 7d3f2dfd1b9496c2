package daemon_test

// The engine's error-path tests that fit package rdma's interfaces, run
// twice: on two in-process roce devices and through the daemon on two of
// its devices. Each scenario writes a transcript (completions with their
// status, post and modify results, QP states, whether target memory
// changed); both transcripts must be equal and hold what the engine's own
// tests (roce/errors_test.go) expect.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/daemon"
	tb "github.com/sroce/sroce/internal/testbed"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/rdma"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// confSide is one device of a scenario: a PD, a CQ and memory that
// scenarios register as they need.
type confSide struct {
	t    *testing.T
	dev  rdma.Device
	pd   rdma.PD
	cq   rdma.CQ
	gid  bth.GID
	dmac [6]byte // where peers send (in process only; the daemon resolves it)
}

// confPair is the two sides and a transcript.
type confPair struct {
	t     *testing.T
	a, b  *confSide
	log   []string
	rules *tb.Rules // sees the frames of both sides' routers
}

func (p *confPair) logf(format string, args ...any) {
	p.log = append(p.log, fmt.Sprintf(format, args...))
}

// reg registers n bytes of fresh memory with access, filled with fill.
func (s *confSide) reg(n int, access mr.Access, fill byte) (rdma.MR, []byte) {
	s.t.Helper()
	buf, err := s.dev.Alloc(n)
	if err != nil {
		s.t.Fatal(err)
	}
	for i := range buf {
		buf[i] = fill
	}
	m, err := s.pd.RegMR(buf, access)
	if err != nil {
		s.t.Fatal(err)
	}
	return m, buf
}

func sgeOf(m rdma.MR, off, n int) mr.SGE {
	return mr.SGE{Addr: m.Addr() + uint64(off), Length: uint32(n), LKey: m.LKey()}
}

// confOpts are a pair's connection settings: the engine's test bed's,
// whose zero fields take the defaults the engine's own tests use.
type confOpts = tb.RC

const confAccess = tb.AllAccess

// createQP creates a QP of o's type and capacity on s.
func (s *confSide) createQP(o confOpts) rdma.QP {
	s.t.Helper()
	o.Defaults()
	q, err := s.pd.CreateQP(&rdma.QPInitAttr{Type: o.QPType, SendCQ: s.cq, RecvCQ: s.cq, Cap: o.Cap()})
	if err != nil {
		s.t.Fatal(err)
	}
	return q
}

// connect takes x (on p's side xs) to RTS toward y's QP yq, and tells
// the rules checker.
func (p *confPair) connect(xs *confSide, x rdma.QP, y *confSide, yq bth.QPN, o confOpts) {
	p.t.Helper()
	if err := x.Connect(o.ConnectAttr(verbs.AHAttr{DGID: y.gid, HopLimit: 64, DMAC: y.dmac}, yq, 100, 100)); err != nil {
		p.t.Fatal(err)
	}
	p.rules.Connected(tb.QPAddr{IP: xs.gid.Addr(), QPN: x.QPN()}, tb.QPAddr{IP: y.gid.Addr(), QPN: yq}, o.MTU.Bytes())
}

// pair creates a connected QP pair of o's kind, a's toward b's.
func (p *confPair) pair(o confOpts) (qa, qb rdma.QP) {
	o.Defaults()
	qa, qb = p.a.createQP(o), p.b.createQP(o)
	p.connect(p.a, qa, p.b, qb.QPN(), o)
	p.connect(p.b, qb, p.a, qa.QPN(), o)
	return qa, qb
}

// post posts wr on q and logs a refusal.
func (p *confPair) post(q rdma.QP, wr verbs.SendWR) {
	if err := q.PostSend(&wr); err != nil {
		p.logf("post %d refused", wr.WRID)
	}
}

// expect waits (10 s at most) for len(want) completions on s and logs them.
func (p *confPair) expect(s *confSide, who string, want ...verbs.WCStatus) {
	p.t.Helper()
	wcs := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < len(want); {
		n, err := s.cq.WaitTimeout(wcs, 50*time.Millisecond)
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			p.t.Fatal(err)
		}
		if n == 0 {
			if time.Now().After(deadline) {
				p.t.Fatalf("%s: completion %d of %d did not come within 10 s (log %q)", who, i+1, len(want), p.log)
			}
			continue
		}
		w := wcs[0]
		p.logf("%s wc %d %v", who, w.WRID, w.Status)
		if w.Status != want[i] {
			p.t.Errorf("%s: completion %d (wr %d) has status %v, want %v", who, i+1, w.WRID, w.Status, want[i])
		}
		i++
	}
}

// quiet checks that s gets no completion for d.
func (p *confPair) quiet(s *confSide, who string, d time.Duration) {
	p.t.Helper()
	wcs := make([]verbs.WC, 1)
	if n, _ := s.cq.WaitTimeout(wcs, d); n != 0 {
		p.t.Errorf("%s: unexpected completion %+v", who, wcs[0])
		p.logf("%s unexpected wc %d %v", who, wcs[0].WRID, wcs[0].Status)
	}
}

// state waits (5 s at most) for q to reach want and logs the state it has.
func (p *confPair) state(q rdma.QP, who string, want verbs.QPState) {
	p.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.State() != want && time.Now().Before(deadline) {
		// wall clock: the state changes on the devices' loops and the daemon's goroutines, not on a timer
		time.Sleep(time.Millisecond)
	}
	p.logf("%s state %v", who, q.State())
	if s := q.State(); s != want {
		p.t.Errorf("%s: QP state %v, want %v", who, s, want)
	}
}

type confScenario struct {
	name string
	run  func(p *confPair)
}

var confScenarios = []confScenario{
	{"remote access errors", confRemoteAccess},
	{"QP access flags refuse READ", func(p *confPair) {
		qa, qb := p.pair(confOpts{NoAccess: true})
		lm, _ := p.a.reg(4096, confAccess, 1)
		rm, _ := p.b.reg(4096, confAccess, 2)
		p.post(qa, verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, 64)},
			RemoteAddr: rm.Addr(), RKey: rm.RKey()})
		p.expect(p.a, "requester", verbs.WCRemInvReqErr)
		p.state(qb, "responder", verbs.QPStateErr)
	}},
	{"bad lkey", func(p *confPair) {
		qa, _ := p.pair(confOpts{})
		lm, _ := p.a.reg(4096, confAccess, 1)
		rm, _ := p.b.reg(4096, confAccess, 2)
		for i, g := range []mr.SGE{sgeOf(lm, 0, 100), {Addr: lm.Addr(), Length: 100, LKey: lm.LKey() ^ 0x55}, sgeOf(lm, 0, 100)} {
			p.post(qa, verbs.SendWR{WRID: uint64(i + 1), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{g},
				RemoteAddr: rm.Addr(), RKey: rm.RKey()})
		}
		p.expect(p.a, "requester", verbs.WCSuccess, verbs.WCLocProtErr, verbs.WCWRFlushErr)
		p.state(qa, "requester", verbs.QPStateErr)
	}},
	{"receive buffer without local write", func(p *confPair) {
		qa, qb := p.pair(confOpts{})
		lm, _ := p.a.reg(4096, confAccess, 1)
		ro, _ := p.b.reg(4096, mr.AccessRemoteRead, 2)
		if err := qb.PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{sgeOf(ro, 0, 4096)}}); err != nil {
			p.t.Fatal(err)
		}
		p.post(qa, verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, 64)}})
		p.expect(p.a, "requester", verbs.WCRemOpErr)
		p.expect(p.b, "responder", verbs.WCLocProtErr)
	}},
	{"RNR retries used up", func(p *confPair) {
		qa, qb := p.pair(confOpts{RNR: 2, MinRNR: 1})
		lm, _ := p.a.reg(4096, confAccess, 1)
		for id := uint64(1); id <= 2; id++ {
			p.post(qa, verbs.SendWR{WRID: id, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, 100)}})
		}
		p.expect(p.a, "requester", verbs.WCRNRRetryExcErr, verbs.WCWRFlushErr)
		p.state(qa, "requester", verbs.QPStateErr)
		p.state(qb, "responder", verbs.QPStateRTS)
	}},
	{"RNR retries unlimited", func(p *confPair) {
		qa, qb := p.pair(confOpts{RNR: 7, MinRNR: 14})
		lm, lbuf := p.a.reg(4096, confAccess, 1)
		rm, rbuf := p.b.reg(4096, confAccess, 2)
		for i := range lbuf {
			lbuf[i] = byte(i * 3)
		}
		p.post(qa, verbs.SendWR{WRID: 1, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, 3000)}})
		p.quiet(p.a, "requester", 50*time.Millisecond)
		if err := qb.PostRecv(&verbs.RecvWR{WRID: 5, SGL: []mr.SGE{sgeOf(rm, 0, 4096)}}); err != nil {
			p.t.Fatal(err)
		}
		p.expect(p.a, "requester", verbs.WCSuccess)
		p.expect(p.b, "responder", verbs.WCSuccess)
		if !slices.Equal(rbuf[:3000], lbuf[:3000]) {
			p.t.Error("the SEND's data did not arrive")
		}
		p.logf("data arrived %v", slices.Equal(rbuf[:3000], lbuf[:3000]))
	}},
	{"retries used up against a destroyed QP", func(p *confPair) {
		qa, qb := p.pair(confOpts{Retry: 3, Timeout: 10})
		lm, _ := p.a.reg(4096, confAccess, 1)
		rm, _ := p.b.reg(4096, confAccess, 2)
		if err := qb.Destroy(); err != nil {
			p.t.Fatal(err)
		}
		p.post(qa, verbs.SendWR{WRID: 1, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, 3000)},
			RemoteAddr: rm.Addr(), RKey: rm.RKey()})
		p.post(qa, verbs.SendWR{WRID: 2, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, 30)},
			RemoteAddr: rm.Addr(), RKey: rm.RKey()})
		p.expect(p.a, "requester", verbs.WCRetryExcErr, verbs.WCWRFlushErr)
		p.state(qa, "requester", verbs.QPStateErr)
	}},
	{"receives flushed by the error state", func(p *confPair) {
		qa, _ := p.pair(confOpts{})
		lm, _ := p.a.reg(4096, confAccess, 1)
		for id := uint64(1); id <= 3; id++ {
			if err := qa.PostRecv(&verbs.RecvWR{WRID: id, SGL: []mr.SGE{sgeOf(lm, 0, 64)}}); err != nil {
				p.t.Fatal(err)
			}
		}
		if err := qa.Modify(&verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState); err != nil {
			p.t.Fatal(err)
		}
		p.expect(p.a, "owner", verbs.WCWRFlushErr, verbs.WCWRFlushErr, verbs.WCWRFlushErr)
		// Work posted in the error state is flushed too.
		// (One at a time: the order of completions from the send and the
		// receive queue on one CQ is not defined.)
		if err := qa.PostRecv(&verbs.RecvWR{WRID: 4, SGL: []mr.SGE{sgeOf(lm, 0, 64)}}); err != nil {
			p.logf("post recv in ERR refused")
		}
		p.expect(p.a, "owner", verbs.WCWRFlushErr)
		p.post(qa, verbs.SendWR{WRID: 5, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, 8)}})
		p.expect(p.a, "owner", verbs.WCWRFlushErr)
	}},
	{"illegal transitions", func(p *confPair) {
		q := p.a.createQP(confOpts{MaxWR: 4, MaxSGE: 1, QPType: verbs.QPTypeRC})
		try := func(name string, attr verbs.QPAttr, mask verbs.QPAttrMask, ok bool) {
			err := q.Modify(&attr, mask)
			p.logf("%s: accepted %v", name, err == nil)
			if (err == nil) != ok {
				p.t.Errorf("%s: error %v", name, err)
			}
		}
		initMask := verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags
		try("RESET->RTR", verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState, false)
		try("RESET->INIT without port", verbs.QPAttr{State: verbs.QPStateInit}, initMask&^verbs.AttrPort, false)
		try("RESET->INIT with Q_Key on RC", verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, initMask|verbs.AttrQKey, false)
		try("RESET->INIT port 2", verbs.QPAttr{State: verbs.QPStateInit, PortNum: 2}, initMask, false)
		try("RESET->INIT", verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1}, initMask, true)
		try("INIT->RTS", verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState|verbs.AttrSQPSN, false)
		rtr := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
		ah := verbs.AHAttr{DGID: p.b.gid, HopLimit: 64, DMAC: p.b.dmac}
		try("path MTU above the port", verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: 6, AH: ah}, rtr, false)
		try("INIT->RTR, RQ PSN beyond 24 bits", verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: verbs.MTU1024, AH: ah, DestQPN: 99, RQPSN: 1<<24 | 5, MaxDestRdAtomic: 4, MinRNRTimer: 12}, rtr, true)
		rts := verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic
		try("RTR->RTS retry_cnt 8", verbs.QPAttr{State: verbs.QPStateRTS, RetryCnt: 8}, rts, false)
		try("RTR->RTS", verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1}, rts, true)
		try("RTS->INIT", verbs.QPAttr{State: verbs.QPStateInit}, verbs.AttrState, false)
		try("RTS->ERR", verbs.QPAttr{State: verbs.QPStateErr}, verbs.AttrState, true)
		try("ERR->RTS", verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState, false)
		try("ERR->RESET", verbs.QPAttr{State: verbs.QPStateReset}, verbs.AttrState, true)
		p.state(q, "QP", verbs.QPStateReset)
	}},
	{"posts the QP refuses", func(p *confPair) {
		qa, _ := p.pair(confOpts{MaxSGE: 2, MaxInline: 16, MaxWR: 2})
		lm, _ := p.a.reg(4096, confAccess, 1)
		rm, _ := p.b.reg(4096, confAccess, 2)
		for i, wr := range []verbs.SendWR{
			{Opcode: verbs.WROpAtomicFetchAdd, SGL: []mr.SGE{sgeOf(lm, 0, 8)}, RemoteAddr: rm.Addr() + 4, RKey: rm.RKey()},
			{Opcode: verbs.WROpAtomicFetchAdd, SGL: []mr.SGE{sgeOf(lm, 0, 4)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()},
			{Opcode: verbs.WROpSend, SGL: []mr.SGE{sgeOf(lm, 0, 1), sgeOf(lm, 1, 1), sgeOf(lm, 2, 1)}},
			{Opcode: verbs.WROpSend, Flags: verbs.Inline, InlineData: make([]byte, 33)}, // beyond the 32 bytes 2 SGEs give
			{Opcode: verbs.WROpcode(10)},
		} {
			wr.WRID, wr.Flags = uint64(i+1), wr.Flags|verbs.Signaled
			err := qa.PostSend(&wr)
			p.logf("post %d refused %v", wr.WRID, err != nil)
			if err == nil {
				p.t.Errorf("post %d (%v) was accepted", wr.WRID, wr.Opcode)
			}
		}
		ok := verbs.SendWR{WRID: 9, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, 8)}, RemoteAddr: rm.Addr(), RKey: rm.RKey()}
		p.post(qa, ok)
		p.expect(p.a, "requester", verbs.WCSuccess)
		p.state(qa, "requester", verbs.QPStateRTS)
	}},
}

// confRemoteAccess is roce's TestRemoteAccessErrors: each bad access gets
// a NAK, a remote access error and a flush, both QPs end in ERR and the
// target memory is untouched.
func confRemoteAccess(p *confPair) {
	type tc struct {
		name   string
		access mr.Access
		op     verbs.WROpcode
		rkey   func(m rdma.MR) uint32
		off, n int
	}
	rkey := func(m rdma.MR) uint32 { return m.RKey() }
	for _, c := range []tc{
		{"bad rkey", confAccess, verbs.WROpRDMAWrite, func(m rdma.MR) uint32 { return m.RKey() ^ 0x100 }, 0, 64},
		{"no remote write", mr.AccessLocalWrite | mr.AccessRemoteRead, verbs.WROpRDMAWrite, rkey, 0, 64},
		{"no remote read", mr.AccessLocalWrite | mr.AccessRemoteWrite, verbs.WROpRDMARead, rkey, 0, 64},
		{"no remote atomic", mr.AccessLocalWrite | mr.AccessRemoteWrite, verbs.WROpAtomicFetchAdd, rkey, 0, 8},
		{"write out of bounds", confAccess, verbs.WROpRDMAWrite, rkey, 4000, 200},
		{"read before the region", confAccess, verbs.WROpRDMARead, rkey, -8, 16},
		{"atomic out of bounds", confAccess, verbs.WROpAtomicCmpSwp, rkey, 4096, 8},
	} {
		p.logf("case %s", c.name)
		qa, qb := p.pair(confOpts{})
		lm, _ := p.a.reg(4096, confAccess, 1)
		rm, rbuf := p.b.reg(4096, c.access, 2)
		before := slices.Clone(rbuf)
		wr := verbs.SendWR{WRID: 1, Opcode: c.op, Flags: verbs.Signaled, SGL: []mr.SGE{sgeOf(lm, 0, c.n)},
			RemoteAddr: uint64(int64(rm.Addr()) + int64(c.off)), RKey: c.rkey(rm), CompareAdd: 1}
		p.post(qa, wr)
		wr.WRID, wr.Opcode, wr.RKey, wr.RemoteAddr = 2, verbs.WROpRDMAWrite, rm.RKey(), rm.Addr()
		p.post(qa, wr)
		p.expect(p.a, "requester", verbs.WCRemAccessErr, verbs.WCWRFlushErr)
		p.state(qa, "requester", verbs.QPStateErr)
		p.state(qb, "responder", verbs.QPStateErr)
		p.logf("target unchanged %v", slices.Equal(before, rbuf))
		if !slices.Equal(before, rbuf) {
			p.t.Errorf("%s: the target memory changed", c.name)
		}
	}
}

// confSides opens the two sides in process on a memlink router, or
// through a daemon serving two memlink devices.
func confSides(t *testing.T, viaDaemon bool, rules *tb.Rules) (a, b *confSide) {
	var devs [2]rdma.Device
	var macs [2][6]byte
	if viaDaemon {
		r := newRig(t, daemon.Options{})
		r.router.SetTap(func(_ *memlink.Port, f []byte) { rules.Frame(f) })
		for i := range devs {
			d, err := rdma.Daemon(r.socket, fmt.Sprintf("sroce_mem%d", i))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			devs[i] = d
		}
	} else {
		router := memlink.NewRouter(roce.SystemClock(), 1, memlink.Impairments{})
		router.SetTap(func(_ *memlink.Port, f []byte) { rules.Frame(f) })
		for i, e := range inProcessDevicesOn(t, router) {
			devs[i], macs[i] = e.dev, e.mac
		}
	}
	var s [2]*confSide
	for i, d := range devs {
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, err := d.CreateCQ(256)
		if err != nil {
			t.Fatal(err)
		}
		gid, err := d.QueryGID(0)
		if err != nil {
			t.Fatal(err)
		}
		s[i] = &confSide{t: t, dev: d, pd: pd, cq: cq, gid: gid, dmac: macs[i]}
	}
	return s[0], s[1]
}

// TestConformanceInProcessAndThroughDaemon runs every scenario both ways
// and compares the transcripts.
func TestConformanceInProcessAndThroughDaemon(t *testing.T) {
	for _, sc := range confScenarios {
		t.Run(sc.name, func(t *testing.T) {
			var logs [2][]string
			for i, via := range []bool{false, true} {
				rules := tb.NewRules(t)
				a, b := confSides(t, via, rules)
				p := &confPair{t: t, a: a, b: b, rules: rules}
				sc.run(p)
				logs[i] = p.log
			}
			if !slices.Equal(logs[0], logs[1]) {
				t.Errorf("transcripts differ:\nin process:\n  %s\nthrough the daemon:\n  %s",
					strings.Join(logs[0], "\n  "), strings.Join(logs[1], "\n  "))
			}
		})
	}
}
