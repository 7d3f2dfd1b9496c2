package rdmacm_test

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// host is one device with its own CM, as one machine.
type host struct {
	dev  *roce.Device
	addr netip.Addr
	cm   *rdmacm.CM
	ch   *rdmacm.EventChannel
}

type pair struct {
	router *memlink.Router
	a, b   *host
}

// newPair makes two devices on an in-memory link in real time, each with
// a CM, which know each other's MACs.
func newPair(t *testing.T, imp memlink.Impairments, cfg rdmacm.Config) *pair {
	t.Helper()
	return newPairAt(t, imp, cfg, func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)}) })
}

// newPairAt is newPair with host i at address addr(i).
func newPairAt(t *testing.T, imp memlink.Impairments, cfg rdmacm.Config, addr func(i int) netip.Addr) *pair {
	t.Helper()
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 7, imp)
	var hosts [2]*host
	macs := map[bth.GID]net.HardwareAddr{}
	var devs [2]*roce.Device
	macs[bth.GIDFromAddr(rawAddr)] = rawMAC
	for i := range hosts {
		mac := net.HardwareAddr{2, 0, 0, 0, 9, byte(i + 1)}
		port := router.NewPort(mac, 1500)
		addr := addr(i)
		gid := bth.GIDFromAddr(addr)
		macs[gid] = mac
		dev, err := roce.Open(port, &roce.Options{Name: fmt.Sprintf("cm%d", i), Clock: clock, GIDs: []bth.GID{gid}})
		if err != nil {
			t.Fatal(err)
		}
		if err := dev.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dev.Close() })
		devs[i] = dev
		hosts[i] = &host{dev: dev, addr: addr, ch: rdmacm.NewEventChannel()}
	}
	for i, h := range hosts {
		c, err := rdmacm.New(cfg, &rdmacm.StaticPort{Dev: devs[i], MACs: macs, GUID: [8]byte{7: byte(i + 1)}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		h.cm = c
	}
	return &pair{router: router, a: hosts[0], b: hosts[1]}
}

const wait = 10 * time.Second

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// expect waits for an event of type want on ch; TIMEWAIT_EXIT events of
// earlier connections are passed over.
func expect(t *testing.T, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	t.Helper()
	for {
		e, err := ch.Wait(want, wait)
		if e != nil && e.Type == rdmacm.EventTimewaitExit && want != rdmacm.EventTimewaitExit {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return e
	}
}

func qpAttr() *roce.QPInitAttr {
	return &roce.QPInitAttr{Type: verbs.QPTypeRC, Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}}
}

// listen makes b listen on port.
func listen(t *testing.T, h *host, port uint16) *rdmacm.ID {
	t.Helper()
	l, err := h.cm.CreateID(h.ch, cm.PortSpaceTCP, nil)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), port)))
	must(t, l.Listen(8))
	return l
}

// dial resolves and connects from a to dst with a QP and private data.
func dial(t *testing.T, h *host, dst netip.AddrPort, withQP bool, p *rdmacm.ConnParam) *rdmacm.ID {
	t.Helper()
	id, err := h.cm.CreateID(h.ch, cm.PortSpaceTCP, nil)
	must(t, err)
	must(t, id.ResolveAddr(netip.AddrPort{}, dst, 2*time.Second))
	expect(t, h.ch, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	expect(t, h.ch, rdmacm.EventRouteResolved)
	if withQP {
		_, err := id.CreateQP(nil, qpAttr())
		must(t, err)
		if st := id.QP().State(); st != verbs.QPStateInit {
			t.Fatalf("a new QP is %v, librdmacm leaves it in INIT", st)
		}
	}
	must(t, id.Connect(p))
	return id
}

// sendRecv sends msg on from's QP and checks that to's QP receives it.
func sendRecv(t *testing.T, from, to *rdmacm.ID, msg []byte) {
	t.Helper()
	sq, rq := from.QP(), to.QP()
	smr, err := from.PD().RegMR(append([]byte(nil), msg...), 0)
	must(t, err)
	defer smr.Dereg()
	rmr, err := to.PD().RegMR(make([]byte, 256), mr.AccessLocalWrite)
	must(t, err)
	defer rmr.Dereg()
	must(t, rq.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{rmr.SGE(0, 256)}}))
	must(t, sq.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{smr.SGE(0, len(msg))}}))
	_, qa := rq.Query()
	var wcs [1]verbs.WC
	n, err := qa.RecvCQ.WaitTimeout(wcs[:], wait)
	if n != 1 || wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("receive: %d completions %+v %v", n, wcs[0], err)
	}
	if !bytes.Equal(rmr.Buf()[:len(msg)], msg) {
		t.Fatalf("received %q", rmr.Buf()[:len(msg)])
	}
	_, sa := sq.Query()
	if n, err := sa.SendCQ.WaitTimeout(wcs[:], wait); n != 1 || wcs[0].Status != verbs.WCSuccess {
		t.Fatalf("send: %d completions %+v %v", n, wcs[0], err)
	}
}

// connect runs the whole exchange and returns the active and passive IDs.
func connect(t *testing.T, p *pair, port uint16) (act, pas *rdmacm.ID) {
	t.Helper()
	l := listen(t, p.b, port)
	t.Cleanup(func() { l.Destroy() })
	act = dial(t, p.a, netip.AddrPortFrom(p.b.addr, port), true,
		&rdmacm.ConnParam{PrivateData: []byte("hello from a"), ResponderResources: 1, InitiatorDepth: 1, RetryCount: 7, RNRRetryCount: 7})
	ev := expect(t, p.b.ch, rdmacm.EventConnectRequest)
	if ev.ListenID != l || !bytes.HasPrefix(ev.Param.PrivateData, []byte("hello from a")) {
		t.Fatalf("CONNECT_REQUEST: listener %p (want %p), private data %q", ev.ListenID, l, ev.Param.PrivateData)
	}
	if ev.Param.QPNum != act.QP().QPN() || ev.Param.InitiatorDepth != 1 || ev.Param.ResponderResources != 1 {
		t.Fatalf("CONNECT_REQUEST param %+v", ev.Param)
	}
	pas = ev.ID
	if got := pas.PeerAddr(); got.Addr() != p.a.addr || got.Port() != act.LocalAddr().Port() {
		t.Fatalf("passive peer address %v, active local %v", got, act.LocalAddr())
	}
	_, err := pas.CreateQP(nil, qpAttr())
	must(t, err)
	must(t, pas.Accept(&rdmacm.ConnParam{PrivateData: []byte("welcome"), ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 7}))
	if st := pas.QP().State(); st != verbs.QPStateRTS {
		t.Fatalf("after Accept the passive QP is %v, librdmacm moves it to RTS before the REP", st)
	}
	ea := expect(t, p.a.ch, rdmacm.EventEstablished)
	if ea.ID != act || !bytes.HasPrefix(ea.Param.PrivateData, []byte("welcome")) {
		t.Fatalf("ESTABLISHED on the active side: %+v", ea)
	}
	if st := act.QP().State(); st != verbs.QPStateRTS {
		t.Fatalf("active QP %v at ESTABLISHED", st)
	}
	if e := expect(t, p.b.ch, rdmacm.EventEstablished); e.ID != pas {
		t.Fatalf("ESTABLISHED for another ID")
	}
	return act, pas
}

func TestConnectSendDisconnect(t *testing.T) {
	for _, activeCloses := range []bool{true, false} {
		t.Run(fmt.Sprintf("activeDisconnects=%v", activeCloses), func(t *testing.T) {
			p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
			act, pas := connect(t, p, 7174)
			sendRecv(t, act, pas, []byte("ping"))
			sendRecv(t, pas, act, []byte("pong"))
			closer, other, och, cch := act, pas, p.b.ch, p.a.ch
			if !activeCloses {
				closer, other, och, cch = pas, act, p.a.ch, p.b.ch
			}
			must(t, closer.Disconnect())
			expect(t, och, rdmacm.EventDisconnected)
			if st := other.QP().State(); st != verbs.QPStateErr {
				t.Fatalf("the peer's DREQ left the QP %v, librdmacm moves it to ERR", st)
			}
			expect(t, cch, rdmacm.EventDisconnected)
			if st := closer.QP().State(); st != verbs.QPStateErr {
				t.Fatalf("Disconnect left the QP %v", st)
			}
			// As the kernel's: after the peer's DREQ, and a second
			// time, rdma_disconnect returns 0 and sends nothing.
			sent := p.a.cm.Stats()[0].MADsSent + p.b.cm.Stats()[0].MADsSent
			must(t, other.Disconnect())
			must(t, closer.Disconnect())
			if now := p.a.cm.Stats()[0].MADsSent + p.b.cm.Stats()[0].MADsSent; now != sent {
				t.Fatalf("Disconnect of a disconnected ID sent %d MADs", now-sent)
			}
			for _, id := range []*rdmacm.ID{act, pas} {
				must(t, id.DestroyQP())
				must(t, id.Destroy())
			}
			for _, s := range append(p.a.cm.Stats(), p.b.cm.Stats()...) {
				t.Logf("%+v", s)
				if s.Established != 1 || s.MADsSent == 0 || s.MADsReceived == 0 || len(s.Dropped) != 0 {
					t.Errorf("%s: %+v", s.Device, s)
				}
			}
		})
	}
}

var (
	rawAddr = netip.AddrFrom4([4]byte{10, 9, 0, 3})
	rawMAC  = net.HardwareAddr{2, 0, 0, 0, 9, 3}
)

// fast is CM timing for tests: resends after 2×4 ms + 16 ms.
var fast = rdmacm.Config{Manager: cm.Config{PacketLifetime: 10, ResponseTimeout: 12}}

// rawGSI is a third device on p's link whose QP1 sends whatever MAD a
// test makes, to b's QP1.
type rawGSI struct {
	t   *testing.T
	qp  *roce.QP
	mr  *roce.MR
	ah  *verbs.AH
	scq *roce.CQ
}

func newRawGSI(t *testing.T, p *pair) *rawGSI {
	t.Helper()
	port := p.router.NewPort(rawMAC, 1500)
	dev, err := roce.Open(port, &roce.Options{Name: "raw", Clock: roce.SystemClock(), GIDs: []bth.GID{bth.GIDFromAddr(rawAddr)}})
	must(t, err)
	must(t, dev.Start())
	t.Cleanup(func() { dev.Close() })
	pd, _ := dev.AllocPD()
	scq, _ := dev.CreateCQ(4096, nil)
	rcq, _ := dev.CreateCQ(16, nil)
	q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeGSI, SendCQ: scq, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: 4096, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	must(t, q.Modify(&verbs.QPAttr{State: verbs.QPStateInit}, verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrQKey))
	must(t, q.Modify(&verbs.QPAttr{State: verbs.QPStateRTR}, verbs.AttrState))
	must(t, q.Modify(&verbs.QPAttr{State: verbs.QPStateRTS}, verbs.AttrState|verbs.AttrSQPSN))
	m, err := pd.RegMR(make([]byte, 512), mr.AccessLocalWrite)
	must(t, err)
	ah, err := pd.CreateAH(&verbs.AHAttr{DGID: bth.GIDFromAddr(p.b.addr), DMAC: [6]byte{2, 0, 0, 0, 9, 2}, HopLimit: 64})
	must(t, err)
	return &rawGSI{t: t, qp: q, mr: m, ah: ah, scq: scq}
}

// send sends payload (any length up to 512) to b's QP1 and waits for its
// send completion.
func (r *rawGSI) send(payload []byte) {
	r.t.Helper()
	copy(r.mr.Buf(), payload)
	must(r.t, r.qp.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{r.mr.SGE(0, len(payload))},
		AH: r.ah, RemoteQPN: 1}))
	var wcs [1]verbs.WC
	if n, err := r.scq.WaitTimeout(wcs[:], wait); n != 1 || wcs[0].Status != verbs.WCSuccess {
		r.t.Fatalf("raw send: %v %+v", err, wcs[0])
	}
}

// until polls cond every few milliseconds for at most d.
func until(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("waited %v for %s", d, what)
		}
		// wall clock: the agents run CM timers on the devices' clock on their own goroutine, which memlink.Sim cannot step
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRejectWithPrivateData(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	listen(t, p.b, 5000)
	act := dial(t, p.a, netip.AddrPortFrom(p.b.addr, 5000), true, &rdmacm.ConnParam{PrivateData: []byte("may I")})
	ev := expect(t, p.b.ch, rdmacm.EventConnectRequest)
	must(t, ev.ID.Reject([]byte("no, go away")))
	e := expect(t, p.a.ch, rdmacm.EventRejected)
	if e.ID != act || e.Status != int(cm.RejConsumerDefined) || !bytes.HasPrefix(e.Param.PrivateData, []byte("no, go away")) {
		t.Fatalf("REJECTED: status %d private %q", e.Status, e.Param.PrivateData)
	}
	if s := p.b.cm.Stats()[0]; s.REJSent != 1 || s.HalfOpen != 0 {
		t.Fatalf("passive stats %+v", s)
	}
	if s := p.a.cm.Stats()[0]; s.REJReceived != 1 {
		t.Fatalf("active stats %+v", s)
	}
	// The named counters (sroce stat, the daemon's metrics) say the same.
	named := map[string]uint64{}
	st := p.b.cm.Stats()[0]
	for _, c := range st.List() {
		if _, dup := named[c.Name]; dup {
			t.Fatalf("counter %s listed twice", c.Name)
		}
		named[c.Name] = c.Value
	}
	if named["cm_rej_sent"] != 1 || named["cm_mads_received"] != st.MADsReceived || named["cm_mads_received"] == 0 {
		t.Fatalf("named counters %v", named)
	}
	// The kernel's rdma_disconnect of a rejected ID returns 0 (its IB CM
	// ID stays; neither a DREQ nor a DREP goes out).
	if err := act.Disconnect(); err != nil {
		t.Fatalf("Disconnect of a rejected ID: %v", err)
	}
	// Too much private data is refused before anything is sent.
	id, _ := p.a.cm.CreateID(p.a.ch, cm.PortSpaceTCP, nil)
	must(t, id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.b.addr, 5000), time.Second))
	expect(t, p.a.ch, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	expect(t, p.a.ch, rdmacm.EventRouteResolved)
	if err := id.Connect(&rdmacm.ConnParam{PrivateData: make([]byte, rdmacm.MaxREQPrivate+1)}); !errors.Is(err, rdmacm.ErrPrivateLen) {
		t.Fatalf("57 bytes of REQ private data: %v", err)
	}
}

func TestNoListener(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	act := dial(t, p.a, netip.AddrPortFrom(p.b.addr, 4444), true, nil)
	e := expect(t, p.a.ch, rdmacm.EventRejected)
	if e.ID != act || e.Status != int(cm.RejInvalidServiceID) {
		t.Fatalf("REQ to a port nobody listens on: %v, want REJECTED status 8", e)
	}
	if s := p.b.cm.Stats()[0]; s.NoListener != 1 || s.REJSent != 1 {
		t.Fatalf("passive stats %+v", s)
	}
}

// TestConnectUnderLoss drops 30% of the frames each device sends: the
// CM's resends and duplicate answers still connect, carry data and
// disconnect.
func TestConnectUnderLoss(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, fast)
	impair := func(loss float64, round int) {
		for i, h := range []*host{p.a, p.b} {
			must(t, h.dev.SetImpairment(roce.Impairment{Loss: loss, Seed: uint64(10*round + i + 3)}))
		}
	}
	var resends uint64
	for round := 0; round < 5; round++ {
		impair(30, round)
		act, pas := connect(t, p, uint16(6000+round))
		// The data path's retransmits wait the path's ACK timeout (2 s):
		// the loss is for the CM's MADs.
		impair(0, round)
		sendRecv(t, act, pas, []byte("through the loss"))
		impair(30, round)
		must(t, act.Disconnect())
		expect(t, p.a.ch, rdmacm.EventDisconnected)
		expect(t, p.b.ch, rdmacm.EventDisconnected)
		act.Destroy()
		pas.Destroy()
	}
	for _, s := range append(p.a.cm.Stats(), p.b.cm.Stats()...) {
		t.Logf("%s: sent %d received %d resends %d dups answered %d established %d", s.Device, s.MADsSent, s.MADsReceived, s.Resends, s.DupsAnswered, s.Established)
		resends += s.Resends
	}
	if resends == 0 {
		t.Fatal("no MAD was resent at 30% loss")
	}
}

// TestPeerVanishesBeforeRTU: the active side goes away after its REQ; the
// passive side's REP is resent, then the ID gets UNREACHABLE and the
// connection leaves TIMEWAIT, all within a bound.
func TestPeerVanishesBeforeRTU(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, fast)
	listen(t, p.b, 5001)
	dial(t, p.a, netip.AddrPortFrom(p.b.addr, 5001), true, nil)
	ev := expect(t, p.b.ch, rdmacm.EventConnectRequest)
	p.a.cm.Close()
	_, err := ev.ID.CreateQP(nil, qpAttr())
	must(t, err)
	start := time.Now()
	must(t, ev.ID.Accept(nil))
	e := expect(t, p.b.ch, rdmacm.EventUnreachable)
	if e.ID != ev.ID || e.Status != rdmacm.StatusTimedOut {
		t.Fatalf("%v", e)
	}
	if st := ev.ID.QP().State(); st != verbs.QPStateErr {
		t.Fatalf("QP %v after UNREACHABLE", st)
	}
	took := time.Since(start)
	until(t, 5*time.Second, "the connection to leave TIMEWAIT", func() bool { return p.b.cm.Stats()[0].Conns == 0 })
	s := p.b.cm.Stats()[0]
	t.Logf("UNREACHABLE after %v, %d resends, %d timeouts", took, s.Resends, s.Timeouts)
	if s.Resends != 15 || s.Timeouts != 1 || s.HalfOpen != 0 {
		t.Fatalf("stats %+v: want 15 REP resends, 1 timeout", s)
	}
}

func reqMAD(t *testing.T, commID uint32, svc uint64) []byte {
	t.Helper()
	return reqMADWith(t, commID, svc, bth.GIDFromAddr(rawAddr))
}

// reqMADWith is reqMAD with primaryGID as the primary path's local GID.
func reqMADWith(t *testing.T, commID uint32, svc uint64, primaryGID bth.GID) []byte {
	t.Helper()
	pd, err := cm.IPPrivateData(cm.IPHeader{SrcPort: 999, Src: rawAddr, Dst: netip.AddrFrom4([4]byte{10, 9, 0, 2})}, nil, cm.REQPrivateLen)
	must(t, err)
	b, err := cm.Send(uint64(commID), &cm.REQ{LocalCommID: commID, ServiceID: svc, LocalQPN: 0x100, StartingPSN: 1,
		RemoteCMResponseTimeout: 16, LocalCMResponseTimeout: 12, MaxCMRetries: 15, PKey: 0xffff, PathMTU: verbs.MTU1024,
		Primary:     cm.Path{LocalGID: primaryGID, RemoteGID: bth.GIDFromAddr(netip.AddrFrom4([4]byte{10, 9, 0, 2})), HopLimit: 64},
		PrivateData: pd})
	must(t, err)
	return b
}

// TestREQWithoutPrimaryGID: a REQ whose primary path names no GID is
// answered where it came from (the address handle of the passive ID, which
// its QP's RTR attributes and the REP use, gets the GRH's source GID).
func TestREQWithoutPrimaryGID(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, fast)
	l, err := p.b.cm.CreateID(p.b.ch, cm.PortSpaceTCP, nil)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 5003)))
	must(t, l.Listen(10))
	newRawGSI(t, p).send(reqMADWith(t, 7, cm.ServiceID(cm.PortSpaceTCP, 5003), bth.GID{}))
	ev := expect(t, p.b.ch, rdmacm.EventConnectRequest)
	attr, _, err := ev.ID.InitQPAttr(verbs.QPStateRTR)
	must(t, err)
	if want := bth.GIDFromAddr(rawAddr); attr.AH.DGID != want {
		t.Fatalf("RTR destination GID %v, want the REQ's source %v", attr.AH.DGID, want)
	}
}

// TestHalfOpenBounded floods the passive side with 3000 REQs nobody
// answers: at most MaxHalfOpen are held, the rest are rejected, and all
// are forgotten once the consumer's time to decide is over.
func TestHalfOpenBounded(t *testing.T) {
	cfg := fast
	cfg.Manager.MaxHalfOpen = 1000
	p := newPair(t, memlink.Impairments{}, cfg)
	l, err := p.b.cm.CreateID(p.b.ch, cm.PortSpaceTCP, nil)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 5002)))
	must(t, l.Listen(100000))
	r := newRawGSI(t, p)
	const n = 3000
	for i := 1; i <= n; i++ {
		r.send(reqMAD(t, uint32(i), cm.ServiceID(cm.PortSpaceTCP, 5002)))
		if i%32 == 0 {
			// Paced, so that QP1's receive queue keeps up.
			until(t, 5*time.Second, "the REQs to arrive", func() bool { return p.b.cm.Stats()[0].MADsReceived == uint64(i) })
		}
	}
	until(t, 10*time.Second, "every REQ to arrive", func() bool { return p.b.cm.Stats()[0].MADsReceived == n })
	s := p.b.cm.Stats()[0]
	t.Logf("after %d REQs: half-open %d, rejected for the bound %d, connections %d", n, s.HalfOpen, s.HalfOpenFull, s.Conns)
	if s.HalfOpen > 1000 || s.HalfOpenFull < n-1000 {
		t.Fatalf("half-open %d (bound 1000), rejected %d", s.HalfOpen, s.HalfOpenFull)
	}
	until(t, 20*time.Second, "the undecided requests to be forgotten", func() bool {
		s := p.b.cm.Stats()[0]
		return s.HalfOpen == 0 && s.Conns == 0
	})
}

// TestMalformedMADs sends QP1 MADs that are short, of the wrong class or
// class version, or of no CM message: each is dropped and counted, and the
// CM still connects afterwards.
func TestMalformedMADs(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, fast)
	r := newRawGSI(t, p)
	good := reqMAD(t, 1, cm.ServiceID(cm.PortSpaceTCP, 1))
	bad := func(f func(b []byte)) []byte {
		b := append([]byte(nil), good...)
		f(b)
		return b
	}
	r.send(good[:100])
	r.send(bad(func(b []byte) { b[2] = 1 }))       // class version 1
	r.send(bad(func(b []byte) { b[0] = 2 }))       // base version 2
	r.send(bad(func(b []byte) { b[1] = 0x81 }))    // another class
	r.send(bad(func(b []byte) { b[17] = 0x77 }))   // unknown attribute
	r.send(bad(func(b []byte) { b[3] = 0x81 }))    // a response method
	r.send(bad(func(b []byte) { b[16+1] = 0x14 })) // an RTU for no connection
	until(t, 5*time.Second, "the MADs to arrive", func() bool { return p.b.cm.Stats()[0].MADsReceived == 7 })
	s := p.b.cm.Stats()[0]
	var total uint64
	for k, v := range s.Dropped {
		t.Logf("dropped %q: %d", k, v)
		total += v
	}
	if total != 7 || s.Dropped["MAD class version: unsupported version"] != 1 {
		t.Fatalf("dropped %v", s.Dropped)
	}
	act, pas := connect(t, p, 5003)
	sendRecv(t, act, pas, []byte("still fine"))
}

// TestUDPPortSpace resolves a UD service with SIDR_REQ/SIDR_REP and sends
// a datagram to the QP and Q_Key the reply names.
func TestUDPPortSpace(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	udAttr := &roce.QPInitAttr{Type: verbs.QPTypeUD, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}}
	l, err := p.b.cm.CreateID(p.b.ch, cm.PortSpaceUDP, nil)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(p.b.addr, 7000)))
	must(t, l.Listen(4))
	id, err := p.a.cm.CreateID(p.a.ch, cm.PortSpaceUDP, nil)
	must(t, err)
	must(t, id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.b.addr, 7000), time.Second))
	expect(t, p.a.ch, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	expect(t, p.a.ch, rdmacm.EventRouteResolved)
	sq, err := id.CreateQP(nil, udAttr)
	must(t, err)
	if sq.State() != verbs.QPStateRTS {
		t.Fatalf("UD QP %v after CreateQP, librdmacm moves it to RTS", sq.State())
	}
	must(t, id.Connect(&rdmacm.ConnParam{PrivateData: []byte("udp?")}))
	req := expect(t, p.b.ch, rdmacm.EventConnectRequest)
	if !bytes.HasPrefix(req.Param.PrivateData, []byte("udp?")) {
		t.Fatalf("SIDR private data %q", req.Param.PrivateData)
	}
	rq, err := req.ID.CreateQP(nil, udAttr)
	must(t, err)
	must(t, req.ID.Accept(&rdmacm.ConnParam{PrivateData: []byte("udp!")}))
	est := expect(t, p.a.ch, rdmacm.EventEstablished)
	if est.UD.QPNum != rq.QPN() || est.UD.QKey != 0x01234567 || !bytes.HasPrefix(est.Param.PrivateData, []byte("udp!")) {
		t.Fatalf("ESTABLISHED UD param %+v", est.UD)
	}
	ah, err := id.PD().CreateAH(&verbs.AHAttr{DGID: est.UD.AH.DGID, SGIDIndex: est.UD.AH.SGIDIndex, HopLimit: est.UD.AH.HopLimit, DMAC: est.UD.AH.DMAC})
	must(t, err)
	rmr, _ := req.ID.PD().RegMR(make([]byte, 128), mr.AccessLocalWrite)
	smr, _ := id.PD().RegMR([]byte("datagram"), 0)
	must(t, rq.PostRecv(&verbs.RecvWR{SGL: []mr.SGE{rmr.SGE(0, 128)}}))
	must(t, sq.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{smr.SGE(0, 8)}, AH: ah, RemoteQPN: est.UD.QPNum, RemoteQKey: est.UD.QKey}))
	_, qa := rq.Query()
	var wcs [1]verbs.WC
	if n, _ := qa.RecvCQ.WaitTimeout(wcs[:], wait); n != 1 || wcs[0].Status != verbs.WCSuccess || string(rmr.Buf()[40:48]) != "datagram" {
		t.Fatalf("UD receive: %d %+v %q", n, wcs[0], rmr.Buf()[40:48])
	}
	// No listener on the port: UNREACHABLE with the SIDR status.
	id2, _ := p.a.cm.CreateID(p.a.ch, cm.PortSpaceUDP, nil)
	must(t, id2.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.b.addr, 7001), time.Second))
	expect(t, p.a.ch, rdmacm.EventAddrResolved)
	must(t, id2.ResolveRoute(time.Second))
	expect(t, p.a.ch, rdmacm.EventRouteResolved)
	must(t, id2.Connect(nil))
	if e := expect(t, p.a.ch, rdmacm.EventUnreachable); e.Status != int(cm.SIDRServiceUnsupported) {
		t.Fatalf("SIDR to no listener: %v", e)
	}
}

// TestConnectResponseWithoutQP: an active ID without a QP gets
// CONNECT_RESPONSE with the peer's QP number and answers with Accept (the
// RTU); InitQPAttr gives what the application's own QP needs.
func TestConnectResponseWithoutQP(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	listen(t, p.b, 5004)
	// The application's own QP.
	pd, _ := p.a.dev.AllocPD()
	cq, _ := p.a.dev.CreateCQ(16, nil)
	own, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	act := dial(t, p.a, netip.AddrPortFrom(p.b.addr, 5004), false, &rdmacm.ConnParam{QPNum: own.QPN(), ResponderResources: 2, InitiatorDepth: 2, RetryCount: 6, RNRRetryCount: 5})
	req := expect(t, p.b.ch, rdmacm.EventConnectRequest)
	if req.Param.QPNum != own.QPN() || req.Param.RetryCount != 6 || req.Param.RNRRetryCount != 5 {
		t.Fatalf("REQ param %+v", req.Param)
	}
	pq, err := req.ID.CreateQP(nil, qpAttr())
	must(t, err)
	must(t, req.ID.Accept(&rdmacm.ConnParam{ResponderResources: 1, InitiatorDepth: 1, RNRRetryCount: 3}))
	resp := expect(t, p.a.ch, rdmacm.EventConnectResponse)
	if resp.Param.QPNum != pq.QPN() {
		t.Fatalf("CONNECT_RESPONSE names QP %v, want %v", resp.Param.QPNum, pq.QPN())
	}
	for _, st := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		a, mask, err := act.InitQPAttr(st)
		must(t, err)
		switch st {
		case verbs.QPStateInit:
			if a.AccessFlags&mr.AccessRemoteRead == 0 {
				t.Fatalf("INIT access %v with responder resources", a.AccessFlags)
			}
		case verbs.QPStateRTR:
			if a.DestQPN != pq.QPN() || a.MaxDestRdAtomic != 1 || a.AH.DMAC != [6]byte{2, 0, 0, 0, 9, 2} {
				t.Fatalf("RTR attributes %+v", a)
			}
		case verbs.QPStateRTS:
			if a.RetryCnt != 6 || a.RNRRetry != 3 || a.MaxRdAtomic != 1 || a.Timeout == 0 {
				t.Fatalf("RTS attributes %+v", a)
			}
		}
		must(t, own.Modify(&a, mask))
	}
	must(t, act.Accept(nil))
	expect(t, p.a.ch, rdmacm.EventEstablished)
	expect(t, p.b.ch, rdmacm.EventEstablished)
}

// TestConnectIPv6 connects over IPv6 addresses: IPv6 GRHs on QP1 and an
// IPv6 IP CM header.
func TestConnectIPv6(t *testing.T) {
	p := newPairAt(t, memlink.Impairments{}, rdmacm.Config{}, func(i int) netip.Addr {
		return netip.MustParseAddr(fmt.Sprintf("fd00:c0::%d", i+1))
	})
	act, pas := connect(t, p, 7174)
	if pas.PeerAddr().Addr() != p.a.addr || act.LocalAddr().Addr() != p.a.addr {
		t.Fatalf("addresses: passive sees %v, active is %v", pas.PeerAddr(), act.LocalAddr())
	}
	sendRecv(t, act, pas, []byte("v6"))
	must(t, act.Disconnect())
	expect(t, p.b.ch, rdmacm.EventDisconnected)
}

// TestDestroyIDsAndAddPort: a CM started without devices' ports grows one
// with AddPort (listeners included), and DestroyIDs tears down a client's
// IDs: its connection is disconnected, its listener gone.
func TestDestroyIDsAndAddPort(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	act, _ := connect(t, p, 7300)
	if err := p.b.cm.AddPort(&rdmacm.StaticPort{Dev: p.b.dev}); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Fatalf("AddPort of a device the CM runs on: %v", err)
	}
	p.b.cm.DestroyIDs(p.b.ch)
	expect(t, p.a.ch, rdmacm.EventDisconnected)
	if st := act.QP().State(); st != verbs.QPStateErr {
		t.Fatalf("active QP %v after the peer's IDs were destroyed", st)
	}
	// The listener is gone: a new request is rejected.
	dial(t, p.a, netip.AddrPortFrom(p.b.addr, 7300), true, nil)
	if e := expect(t, p.a.ch, rdmacm.EventRejected); e.Status != int(cm.RejInvalidServiceID) {
		t.Fatalf("after DestroyIDs: %v", e)
	}
}

// TestDeviceRemoval: IDs on a device that closes get DEVICE_REMOVAL.
func TestDeviceRemoval(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	act, _ := connect(t, p, 7400)
	p.a.dev.Close()
	e := expect(t, p.a.ch, rdmacm.EventDeviceRemoval)
	if e.ID != act || e.Status != rdmacm.StatusNoDevice {
		t.Fatalf("%v for %p", e, e.ID)
	}
}

// TestOptions: SetTOS and SetACKTimeout reach the REQ's path and the QP
// attributes of both sides.
func TestOptions(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	listen(t, p.b, 7500)
	id, err := p.a.cm.CreateID(p.a.ch, cm.PortSpaceTCP, nil)
	must(t, err)
	id.SetTOS(0x68)
	must(t, id.SetACKTimeout(12))
	if err := id.SetACKTimeout(32); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Fatalf("ACK timeout 32: %v", err)
	}
	must(t, id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.b.addr, 7500), time.Second))
	expect(t, p.a.ch, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	expect(t, p.a.ch, rdmacm.EventRouteResolved)
	_, err = id.CreateQP(nil, qpAttr())
	must(t, err)
	must(t, id.Connect(nil))
	req := expect(t, p.b.ch, rdmacm.EventConnectRequest)
	_, err = req.ID.CreateQP(nil, qpAttr())
	must(t, err)
	must(t, req.ID.Accept(nil))
	expect(t, p.a.ch, rdmacm.EventEstablished)
	for _, x := range []*rdmacm.ID{id, req.ID} {
		rtr, _, err := x.InitQPAttr(verbs.QPStateRTR)
		must(t, err)
		rts, _, err := x.InitQPAttr(verbs.QPStateRTS)
		must(t, err)
		if rtr.AH.TrafficClass != 0x68 || rts.Timeout != 12 {
			t.Errorf("traffic class %#x, ACK timeout %d", rtr.AH.TrafficClass, rts.Timeout)
		}
	}
}

// TestManyConnections opens 40 connections at once from goroutines of
// their own, each with its own channel, sends on each and disconnects
// them all: the agents serve them concurrently.
func TestManyConnections(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	const n = 40
	l, err := p.b.cm.CreateID(p.b.ch, cm.PortSpaceTCP, nil)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 7600)))
	must(t, l.Listen(n)) // a backlog for all: they come at once
	// The passive side accepts whatever comes.
	go func() {
		for {
			e, err := p.b.ch.Get(t.Context())
			if err != nil {
				return
			}
			if e.Type == rdmacm.EventConnectRequest && e.ListenID == l {
				if _, err := e.ID.CreateQP(nil, qpAttr()); err == nil {
					e.ID.Accept(nil)
				}
			}
		}
	}()
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		go func() {
			ch := rdmacm.NewEventChannel()
			id, err := p.a.cm.CreateID(ch, cm.PortSpaceTCP, i)
			if err == nil {
				err = id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.b.addr, 7600), time.Second)
			}
			step := func(want rdmacm.EventType) {
				if err == nil {
					_, err = ch.Wait(want, wait)
				}
			}
			step(rdmacm.EventAddrResolved)
			if err == nil {
				err = id.ResolveRoute(time.Second)
			}
			step(rdmacm.EventRouteResolved)
			if err == nil {
				_, err = id.CreateQP(nil, qpAttr())
			}
			if err == nil {
				err = id.Connect(&rdmacm.ConnParam{RNRRetryCount: 7, RetryCount: 7})
			}
			step(rdmacm.EventEstablished)
			if err == nil {
				err = id.Disconnect()
			}
			step(rdmacm.EventDisconnected)
			errs <- err
		}()
	}
	for i := 0; i < n; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range append(p.a.cm.Stats(), p.b.cm.Stats()...) {
		if s.Established != n || len(s.Dropped) != 0 {
			t.Errorf("%+v", s)
		}
	}
}
