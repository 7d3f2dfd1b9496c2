package iface

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/verbs"
)

// TestXDPMulticast opens a device over AF_XDP on each end of a veth pair
// in two namespaces. Two UD QPs on B and one on A attach to a group; A
// sends to it: B's QPs get it over the wire, A's own through the device's
// loopback. While attached, B's interface is a member of the group (the
// kernel lists it); after the last detach it is not, and B takes nothing.
func TestXDPMulticast(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-mctest"})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	open := func(ns *nsutil.Namespace, ifname string) *Port {
		t.Helper()
		var p *Port
		if err := ns.Do(func() (err error) {
			p, err = Open(context.Background(), ifname, Options{Mode: ModeXDP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}
	a, b := open(pair.A, pair.Veth.NameA), open(pair.B, pair.Veth.NameB)
	group := netip.MustParseAddr("239.1.2.3")
	gid := bth.GIDFromAddr(group)
	const qkey = 0x01234567
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	type member struct {
		qp *roce.QP
		cq *roce.CQ
		mr *roce.MR
	}
	// The kernel joins groups for the namespace of the caller, which
	// must be the interface's.
	join := func(ns *nsutil.Namespace, p *Port) *member {
		t.Helper()
		d := p.Device()
		pd, err := d.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, _ := d.CreateCQ(16, nil)
		q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(&roce.ConnectAttr{QKey: qkey}); err != nil {
			t.Fatal(err)
		}
		m, err := pd.RegMR(make([]byte, 4096), mr.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := ns.Do(func() error { return q.AttachMcast(gid, 0) }); err != nil {
			t.Fatal(err)
		}
		return &member{q, cq, m}
	}
	sender := join(pair.A, a)
	members := []*member{sender, join(pair.B, b), join(pair.B, b)}
	maddr := func() string {
		out, err := pair.B.Exec(ctx, "ip", "maddr", "show", "dev", pair.Veth.NameB)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	if out := maddr(); !strings.Contains(out, group.String()) || !strings.Contains(out, "01:00:5e:01:02:03") {
		t.Fatalf("%s is not a member of %v:\n%s", pair.Veth.NameB, group, out)
	}
	attr, err := a.AHAttr(ctx, gid, a.DefaultGIDIndex())
	if err != nil {
		t.Fatal(err)
	}
	ah, err := sender.qp.PD().CreateAH(&attr)
	if err != nil {
		t.Fatal(err)
	}
	copy(sender.mr.Buf()[2048:], "to the group")
	send := func() {
		t.Helper()
		if err := sender.qp.PostSend(&verbs.SendWR{WRID: 9, Opcode: verbs.WROpSend, SGL: []mr.SGE{sender.mr.SGE(2048, 12)},
			AH: ah, RemoteQPN: bth.MulticastQPN, RemoteQKey: qkey}); err != nil {
			t.Fatal(err)
		}
	}
	recv := func(m *member, id uint64) verbs.WC {
		t.Helper()
		var wc [1]verbs.WC
		for {
			n, err := m.cq.Wait(ctx, wc[:])
			if err != nil || n != 1 {
				t.Fatalf("no completion: %v", err)
			}
			if wc[0].Opcode == verbs.WCRecv {
				break
			}
		}
		w := wc[0]
		if w.Status != verbs.WCSuccess || w.WRID != id || w.SrcQP != sender.qp.QPN() {
			t.Fatalf("%+v", w)
		}
		return w
	}
	for _, m := range members {
		if err := m.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{m.mr.SGE(0, 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	send()
	for _, m := range members {
		if w := recv(m, 1); w.ByteLen != 52 || string(m.mr.Buf()[40:52]) != "to the group" {
			t.Fatalf("%+v %q", w, m.mr.Buf()[40:52])
		}
	}

	// B's QPs leave: its interface leaves the group, and the next
	// message reaches A's QP alone (B's receives stay posted; B counts
	// nothing delivered).
	for _, m := range members[1:] {
		if err := pair.B.Do(func() error { return m.qp.DetachMcast(gid, 0) }); err != nil {
			t.Fatal(err)
		}
		if err := m.qp.PostRecv(&verbs.RecvWR{WRID: 2, SGL: []mr.SGE{m.mr.SGE(0, 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	if out := maddr(); strings.Contains(out, group.String()) {
		t.Fatalf("%s is still a member of %v after the last detach:\n%s", pair.Veth.NameB, group, out)
	}
	if err := sender.qp.PostRecv(&verbs.RecvWR{WRID: 2, SGL: []mr.SGE{sender.mr.SGE(0, 2048)}}); err != nil {
		t.Fatal(err)
	}
	rcvd := b.Device().Counter(verbs.CntRcvdPkts)
	send()
	recv(sender, 2)
	// A unicast message to B's first QP shows what B received after the
	// detach: it takes the receive posted for the group's message.
	battr, err := a.AHAttr(ctx, bth.GIDFromAddr(nsutil.DefaultAddrB.Addr()), a.DefaultGIDIndex())
	if err != nil {
		t.Fatal(err)
	}
	bah, err := sender.qp.PD().CreateAH(&battr)
	if err != nil {
		t.Fatal(err)
	}
	if err := sender.qp.PostSend(&verbs.SendWR{WRID: 10, Opcode: verbs.WROpSend, SGL: []mr.SGE{sender.mr.SGE(2048, 12)},
		AH: bah, RemoteQPN: members[1].qp.QPN(), RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	recv(members[1], 2)
	if got := b.Device().Counter(verbs.CntRcvdPkts) - rcvd; got != 1 {
		t.Fatalf("B accepted %d packets after the detach, want the unicast one", got)
	}
}
