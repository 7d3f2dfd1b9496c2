package rdmacm_test

import (
	"bytes"
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
	clock := roce.SystemClock()
	router := memlink.NewRouter(clock, 7, imp)
	var hosts [2]*host
	macs := map[bth.GID]net.HardwareAddr{}
	var devs [2]*roce.Device
	for i := range hosts {
		mac := net.HardwareAddr{2, 0, 0, 0, 9, byte(i + 1)}
		port := router.NewPort(mac, 1500)
		addr := netip.AddrFrom4([4]byte{10, 9, 0, byte(i + 1)})
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

func expect(t *testing.T, ch *rdmacm.EventChannel, want rdmacm.EventType) *rdmacm.Event {
	t.Helper()
	e, err := ch.Wait(want, wait)
	if err != nil {
		t.Fatal(err)
	}
	return e
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
