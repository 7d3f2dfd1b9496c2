package rdmacm_test

import (
	"errors"
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

// mcID makes a UDP ID on h bound to its address, resolved to group when
// resolve is set (as mckey does), with a UD QP.
func mcID(t *testing.T, h *host, group netip.Addr, resolve bool) *rdmacm.ID {
	t.Helper()
	id, err := h.cm.CreateID(h.ch, cm.PortSpaceUDP, nil)
	must(t, err)
	t.Cleanup(func() { id.Destroy() })
	src := netip.AddrPortFrom(h.addr, 0)
	if resolve {
		must(t, id.ResolveAddr(src, netip.AddrPortFrom(group, 0), time.Second))
		expect(t, h.ch, rdmacm.EventAddrResolved)
	} else {
		must(t, id.BindAddr(src))
	}
	_, err = id.CreateQP(nil, &roce.QPInitAttr{Type: verbs.QPTypeUD, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
	must(t, err)
	return id
}

// TestMulticastJoin: a join completes at once with the group's address
// vector, QPN 0xFFFFFF and the UDP Q_Key, attaches the ID's QP, and a
// datagram sent to the group with that address vector reaches it; leaving
// detaches the QP.
func TestMulticastJoin(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	group := netip.MustParseAddr("239.1.2.3")
	mgid := bth.GIDFromAddr(group)
	rx := mcID(t, p.b, group, false)
	tx := mcID(t, p.a, group, true)

	must(t, rx.JoinMulticast(group, false, "rx"))
	je := expect(t, p.b.ch, rdmacm.EventMulticastJoin)
	wantAH := rdmacm.AHInfo{DGID: mgid, SGIDIndex: uint8(rx.SGIDIndex()), HopLimit: 64, DMAC: [6]byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}}
	if je.ID != rx || je.Status != 0 || je.UD.QPNum != bth.MulticastQPN || je.UD.QKey != 0x01234567 || je.UD.AH != wantAH ||
		je.Mcast.Group != group || je.Mcast.Context != "rx" {
		t.Fatalf("MULTICAST_JOIN %+v, want the group's AH %+v", je, wantAH)
	}
	if g := rx.QP().McastGroups(); len(g) != 1 || g[0] != mgid {
		t.Fatalf("the receiver's QP is attached to %v, want %v", g, mgid)
	}
	must(t, tx.JoinMulticast(group, true, nil))
	se := expect(t, p.a.ch, rdmacm.EventMulticastJoin)
	if g := tx.QP().McastGroups(); len(g) != 0 {
		t.Fatalf("a send-only join attached the QP to %v", g)
	}

	rmr, err := rx.PD().RegMR(make([]byte, 128), mr.AccessLocalWrite)
	must(t, err)
	must(t, rx.QP().PostRecv(&verbs.RecvWR{SGL: []mr.SGE{rmr.SGE(0, 128)}}))
	ud := se.UD.AH
	ah, err := tx.PD().CreateAH(&verbs.AHAttr{DGID: ud.DGID, SGIDIndex: ud.SGIDIndex, HopLimit: ud.HopLimit, DMAC: ud.DMAC})
	must(t, err)
	smr, err := tx.PD().RegMR([]byte("to the group"), 0)
	must(t, err)
	must(t, tx.QP().PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, SGL: []mr.SGE{smr.SGE(0, 12)}, AH: ah,
		RemoteQPN: se.UD.QPNum, RemoteQKey: se.UD.QKey}))
	_, qa := rx.QP().Query()
	var wcs [1]verbs.WC
	if n, _ := qa.RecvCQ.WaitTimeout(wcs[:], wait); n != 1 || wcs[0].Status != verbs.WCSuccess || string(rmr.Buf()[40:52]) != "to the group" {
		t.Fatalf("multicast receive: %d %+v %q", n, wcs[0], rmr.Buf()[40:52])
	}

	must(t, rx.LeaveMulticast(group))
	if g := rx.QP().McastGroups(); len(g) != 0 {
		t.Fatalf("after the leave the QP is attached to %v", g)
	}
	if err := rx.LeaveMulticast(group); !errors.Is(err, rdmacm.ErrNotJoined) {
		t.Fatalf("a second leave: %v, want ErrNotJoined", err)
	}
	// A join attaches until DestroyQP, which detaches the QP first (an
	// attached QP is busy).
	must(t, rx.JoinMulticast(group, false, nil))
	expect(t, p.b.ch, rdmacm.EventMulticastJoin)
	must(t, rx.DestroyQP())
	// Destroying an ID leaves its groups: its QP, which the program
	// destroys afterwards, is no longer attached.
	d := mcID(t, p.b, group, false)
	must(t, d.JoinMulticast(group, false, nil))
	expect(t, p.b.ch, rdmacm.EventMulticastJoin)
	q := d.QP()
	must(t, d.Destroy())
	if g := q.McastGroups(); len(g) != 0 {
		t.Fatalf("after the ID's Destroy its QP is attached to %v", g)
	}
	must(t, q.Destroy())
}

// TestMulticastJoinErrors: the joins Linux's rdma_cm refuses, and a join
// whose attach fails.
func TestMulticastJoinErrors(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	h := p.a
	group := netip.MustParseAddr("239.1.2.4")

	idle, err := h.cm.CreateID(h.ch, cm.PortSpaceUDP, nil)
	must(t, err)
	if err := idle.JoinMulticast(group, false, nil); !errors.Is(err, rdmacm.ErrState) {
		t.Fatalf("join on an unbound ID: %v, want ErrState", err)
	}
	must(t, idle.BindAddr(netip.AddrPortFrom(netip.IPv4Unspecified(), 0)))
	if err := idle.JoinMulticast(group, false, nil); !errors.Is(err, rdmacm.ErrState) {
		t.Fatalf("join on an ID bound to no device: %v, want ErrState", err)
	}
	tcp, err := h.cm.CreateID(h.ch, cm.PortSpaceTCP, nil)
	must(t, err)
	must(t, tcp.BindAddr(netip.AddrPortFrom(h.addr, 0)))
	if err := tcp.JoinMulticast(group, false, nil); !errors.Is(err, rdmacm.ErrInvalid) {
		t.Fatalf("join in the TCP port space: %v, want ErrInvalid", err)
	}
	id := mcID(t, h, group, false)
	for _, g := range []netip.Addr{{}, netip.IPv4Unspecified()} {
		if err := id.JoinMulticast(g, false, nil); !errors.Is(err, rdmacm.ErrInvalid) {
			t.Fatalf("join %v: %v, want ErrInvalid", g, err)
		}
	}
	if err := id.JoinMulticast(netip.MustParseAddr("ff0e::1"), false, nil); !errors.Is(err, rdmacm.ErrIPv6Group) {
		t.Fatalf("join an IPv6 group: %v, want ErrIPv6Group", err)
	}
	if err := id.LeaveMulticast(group); !errors.Is(err, rdmacm.ErrNotJoined) {
		t.Fatalf("leave a group never joined: %v, want ErrNotJoined", err)
	}
	// Two joins of one group are two events; a unicast address is joined,
	// but the QP cannot be attached to it.
	must(t, id.JoinMulticast(group, false, 1))
	must(t, id.JoinMulticast(group, false, 2))
	for want := 1; want <= 2; want++ {
		if e := expect(t, h.ch, rdmacm.EventMulticastJoin); e.Mcast.Context != want {
			t.Fatalf("join %d: context %v", want, e.Mcast.Context)
		}
	}
	must(t, id.JoinMulticast(netip.MustParseAddr("10.9.9.9"), false, nil))
	if e := expect(t, h.ch, rdmacm.EventMulticastError); e.Status != rdmacm.StatusInvalid {
		t.Fatalf("MULTICAST_ERROR status %d, want %d", e.Status, rdmacm.StatusInvalid)
	}
	must(t, id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(p.b.addr, 1), time.Second))
	expect(t, h.ch, rdmacm.EventAddrResolved)
	must(t, id.ResolveRoute(time.Second))
	expect(t, h.ch, rdmacm.EventRouteResolved)
	if err := id.JoinMulticast(group, false, nil); !errors.Is(err, rdmacm.ErrState) {
		t.Fatalf("join after the route is resolved: %v, want ErrState", err)
	}
}
