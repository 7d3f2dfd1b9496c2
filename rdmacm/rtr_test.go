package rdmacm_test

import (
	"net"
	"net/netip"
	"testing"

	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// TestPassiveRTRBeforeAccept moves the passive side's QP with InitQPAttr
// before Accept, as perftest does with -R: the RTR attributes must carry
// the peer's MAC already (they carried zeros, and rxe never saw the ACKs
// of that QP), and the QP must then connect.
func TestPassiveRTRBeforeAccept(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	l := listen(t, p.b, 7300)
	t.Cleanup(func() { l.Destroy() })
	act := dial(t, p.a, netip.AddrPortFrom(p.b.addr, 7300), true, &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7})
	pas := expect(t, p.b.ch, rdmacm.EventConnectRequest).ID
	// The QP is the application's own, not the ID's (perftest's test QP).
	pd, err := p.b.dev.AllocPD()
	must(t, err)
	cq, err := p.b.dev.CreateCQ(16, nil)
	must(t, err)
	attr := qpAttr()
	attr.SendCQ, attr.RecvCQ = cq, cq
	qp, err := pd.CreateQP(attr)
	must(t, err)
	for _, st := range []verbs.QPState{verbs.QPStateInit, verbs.QPStateRTR, verbs.QPStateRTS} {
		a, mask, err := pas.InitQPAttr(st)
		must(t, err)
		if st == verbs.QPStateRTR {
			if got, want := net.HardwareAddr(a.AH.DMAC[:]), (net.HardwareAddr{2, 0, 0, 0, 9, 1}); got.String() != want.String() {
				t.Fatalf("RTR attributes before Accept: destination MAC %v, want the peer's %v", got, want)
			}
		}
		must(t, qp.Modify(&a, mask))
	}
	must(t, pas.Accept(&rdmacm.ConnParam{QPNum: qp.QPN(), RNRRetryCount: 7}))
	expect(t, p.a.ch, rdmacm.EventEstablished)
	expect(t, p.b.ch, rdmacm.EventEstablished)
	if st := act.QP().State(); st != verbs.QPStateRTS {
		t.Fatalf("active QP %v", st)
	}
}

// TestPassiveSendsFromREQPSN pins which starting PSN each side sends from,
// as Linux's CM and rxe use them: the passive side sends from the REQ's
// starting PSN (and the active side from the REP's), so the passive QP's
// send PSN is the REQ's, not the one its REP announces.
func TestPassiveSendsFromREQPSN(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	l := listen(t, p.b, 7301)
	t.Cleanup(func() { l.Destroy() })
	b := reqMAD(t, 0x5151, cm.ServiceID(cm.PortSpaceTCP, 7301))
	h, msg, err := cm.Unmarshal(b)
	must(t, err)
	const reqPSN = 0x123456
	msg.(*cm.REQ).StartingPSN = reqPSN
	must(t, cm.Marshal(b, h, msg))
	newRawGSI(t, p).send(b)
	pas := expect(t, p.b.ch, rdmacm.EventConnectRequest).ID
	rts, _, err := pas.InitQPAttr(verbs.QPStateRTS)
	must(t, err)
	rtr, _, err := pas.InitQPAttr(verbs.QPStateRTR)
	must(t, err)
	if rts.SQPSN != reqPSN || rtr.RQPSN == reqPSN {
		t.Fatalf("passive QP: send PSN %#x, receive PSN %#x; the REQ's starting PSN %#x must be the send PSN", uint32(rts.SQPSN), uint32(rtr.RQPSN), reqPSN)
	}
}
