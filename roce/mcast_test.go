package roce_test

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

const mcQKey = 0x01234567

// mcastBed is three nodes with a UD QP each.
func mcastBed(t *testing.T, ipv6 bool) (*testbed, []*roce.QP) {
	b := newBed(t, bedOpts{Nodes: 3, IPv6: ipv6, LinkMTU: 1500})
	var qs []*roce.QP
	for _, n := range b.Nodes {
		q := b.CreateQP(n, rcOpts{QPType: verbs.QPTypeUD, MaxWR: 16, MaxSGE: 1}, nil)
		toRTSUD(t, q, mcQKey)
		qs = append(qs, q)
	}
	return b, qs
}

func TestMcastUD(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		t.Run(fmt.Sprintf("ipv6=%v", v6), func(t *testing.T) {
			b, qs := mcastBed(t, v6)
			group := netip.MustParseAddr("239.1.2.3")
			wantMAC := [6]byte{0x01, 0x00, 0x5e, 0x01, 0x02, 0x03}
			if v6 {
				group = netip.MustParseAddr("ff0e::1:2")
				wantMAC = [6]byte{0x33, 0x33, 0x00, 0x01, 0x00, 0x02}
			}
			gid := bth.GIDFromAddr(group)
			var frames [][]byte
			b.SetTap(func(_ *memlink.Port, f []byte) { frames = append(frames, append([]byte(nil), f...)) })
			for _, q := range qs[1:] {
				if err := q.AttachMcast(gid, 0); err != nil {
					t.Fatal(err)
				}
			}
			a := b.Nodes[0]
			ah, err := a.PD.CreateAH(&verbs.AHAttr{DGID: gid, HopLimit: 64})
			if err != nil {
				t.Fatal(err)
			}
			lm, lbuf := a.Reg(t, 4096, 0, 1)
			type rx struct {
				m   *roce.MR
				buf []byte
			}
			var rxs []rx
			for i, n := range b.Nodes[1:] {
				m, buf := n.Reg(t, 4096, 0, byte(10+i))
				rxs = append(rxs, rx{m, buf})
				qs[i+1].PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{m.SGE(0, 2048)}})
			}
			send := func(wrid uint64, n int) {
				t.Helper()
				if err := qs[0].PostSend(&verbs.SendWR{WRID: wrid, Opcode: verbs.WROpSend, Flags: verbs.Signaled,
					SGL: []mr.SGE{lm.SGE(0, n)}, AH: ah, RemoteQPN: bth.MulticastQPN, RemoteQKey: mcQKey}); err != nil {
					t.Fatal(err)
				}
				b.expectWC(a, verbs.WCSuccess)
			}
			send(2, 700)
			for i, n := range b.Nodes[1:] {
				w := b.expectWC(n, verbs.WCSuccess)[0]
				if w.ByteLen != 740 || w.Flags&verbs.WCGRH == 0 || w.SrcQP != qs[0].QPN() || w.QPNum != qs[i+1].QPN() {
					t.Fatalf("node %d: %+v", i+1, w)
				}
				got := rxs[i].buf
				if !bytes.Equal(got[40:740], lbuf[:700]) {
					t.Fatalf("node %d: payload differs", i+1)
				}
				// The GRH space names the group as the destination.
				if v6 && !bytes.Equal(got[24:40], gid[:]) || !v6 && !bytes.Equal(got[36:40], gid[12:]) {
					t.Fatalf("node %d: GRH %x", i+1, got[:40])
				}
			}
			if len(frames) != 1 {
				t.Fatalf("%d frames for one multicast send", len(frames))
			}
			var p bth.Packet
			if err := p.Parse(frames[0]); err != nil {
				t.Fatal(err)
			}
			hl := 64
			if v6 {
				hl = int(p.IPv6Header().HopLimit())
			} else {
				hl = int(p.IPv4Header().TTL())
			}
			if p.Ethernet().DstMAC() != wantMAC || p.DstAddr() != group || p.BTH().DestQP() != bth.MulticastQPN || hl != 64 {
				t.Fatalf("frame to %x %v QPN %#x hop limit %d", p.Ethernet().DstMAC(), p.DstAddr(), p.BTH().DestQP(), hl)
			}

			// A sender attached to the group receives its own message too,
			// as does its device's other attached QP; a member with
			// another Q_Key drops it.
			c := b.Nodes[1]
			own := b.CreateQP(c, rcOpts{QPType: verbs.QPTypeUD, MaxWR: 16, MaxSGE: 1}, nil)
			toRTSUD(t, own, mcQKey)
			other := b.CreateQP(b.Nodes[2], rcOpts{QPType: verbs.QPTypeUD, MaxWR: 16, MaxSGE: 1}, nil)
			toRTSUD(t, other, 0x77)
			for _, q := range []*roce.QP{own, other} {
				if err := q.AttachMcast(gid, 0); err != nil {
					t.Fatal(err)
				}
			}
			om, _ := c.Reg(t, 4096, 0, 3)
			own.PostRecv(&verbs.RecvWR{WRID: 7, SGL: []mr.SGE{om.SGE(0, 2048)}})
			other.PostRecv(&verbs.RecvWR{WRID: 8, SGL: []mr.SGE{om.SGE(2048, 2048)}})
			for i := range b.Nodes[1:] {
				qs[i+1].PostRecv(&verbs.RecvWR{WRID: 9, SGL: []mr.SGE{rxs[i].m.SGE(0, 2048)}})
			}
			cah, err := c.PD.CreateAH(&verbs.AHAttr{DGID: gid, HopLimit: 64})
			if err != nil {
				t.Fatal(err)
			}
			cm, _ := c.Reg(t, 4096, 0, 4)
			badQKey := b.Nodes[2].Dev.Counter(verbs.CntBadQKey)
			if err := own.PostSend(&verbs.SendWR{WRID: 10, Opcode: verbs.WROpSend, SGL: []mr.SGE{cm.SGE(0, 100)},
				AH: cah, RemoteQPN: bth.MulticastQPN, RemoteQKey: mcQKey}); err != nil {
				t.Fatal(err)
			}
			b.settle()
			got := map[string]int{}
			for i, n := range b.Nodes {
				for _, w := range n.WCs {
					if w.Opcode == verbs.WCRecv && w.Status == verbs.WCSuccess && w.SrcQP == own.QPN() {
						got[fmt.Sprintf("node %d QP %d", i, w.QPNum)]++
					}
				}
				n.WCs = nil
			}
			want := map[string]int{fmt.Sprintf("node 1 QP %d", qs[1].QPN()): 1, fmt.Sprintf("node 2 QP %d", qs[2].QPN()): 1,
				fmt.Sprintf("node 1 QP %d", own.QPN()): 1}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("receivers %v, want %v", got, want)
			}
			if d := b.Nodes[2].Dev.Counter(verbs.CntBadQKey) - badQKey; d != 1 {
				t.Fatalf("bad_qkey +%d, want +1", d)
			}

			// Detached, a device's QPs take nothing more; a device with
			// no QP left in the group counts the frame as unknown_qpn.
			for _, q := range []*roce.QP{qs[2], other} {
				if err := q.DetachMcast(gid, 0); err != nil {
					t.Fatal(err)
				}
			}
			unknown := b.Nodes[2].Dev.Counter(verbs.CntUnknownQPN)
			qs[1].PostRecv(&verbs.RecvWR{WRID: 11, SGL: []mr.SGE{rxs[0].m.SGE(0, 2048)}})
			send(3, 10)
			b.settle()
			for i, n := range b.Nodes[1:] {
				k := 0
				for _, w := range n.WCs {
					if w.Opcode == verbs.WCRecv {
						k++
					}
				}
				n.WCs = nil
				if want := 1 - i; k != want {
					t.Fatalf("node %d: %d receive completions after the detach, want %d", i+1, k, want)
				}
			}
			if b.Nodes[2].Dev.Counter(verbs.CntUnknownQPN) != unknown+1 {
				t.Fatal("the frame to a group the device left was not counted")
			}
		})
	}
}

func TestMcastErrors(t *testing.T) {
	b, qs := mcastBed(t, false)
	n := b.Nodes[0]
	gid := bth.GIDFromAddr(netip.MustParseAddr("239.0.0.9"))
	rc := b.CreateQP(n, rcOpts{QPType: verbs.QPTypeRC, MaxWR: 4, MaxSGE: 1}, nil)
	q := qs[0]
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"attach RC", rc.AttachMcast(gid, 0), roce.ErrInvalid},
		{"detach RC", rc.DetachMcast(gid, 0), roce.ErrInvalid},
		{"attach unicast GID", q.AttachMcast(n.GID, 0), roce.ErrInvalid},
		{"attach zero GID", q.AttachMcast(bth.GID{}, 0), roce.ErrInvalid},
		{"detach unattached", q.DetachMcast(gid, 0), roce.ErrInvalid},
		{"attach", q.AttachMcast(gid, 0), nil},
		{"attach again", q.AttachMcast(gid, 0), nil},
		{"destroy attached", q.Destroy(), roce.ErrBusy},
		{"detach", q.DetachMcast(gid, 0), nil},
		{"detach again", q.DetachMcast(gid, 0), roce.ErrInvalid},
	} {
		if !errors.Is(c.err, c.want) || (c.want == nil) != (c.err == nil) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	if a := n.Dev.Query(); a.MaxMcastGrp != 8192 || a.MaxMcastQPAttach != 56 || a.MaxTotalMcastQPAttach != 0x70000 {
		t.Errorf("device attributes %+v", a)
	}

	// A group takes 56 QPs; the 57th is refused with ENOMEM's error.
	var members []*roce.QP
	for i := 0; i < roce.MaxMcastQPAttach+1; i++ {
		m := b.CreateQP(n, rcOpts{QPType: verbs.QPTypeUD, MaxWR: 1, MaxSGE: 1}, nil)
		err := m.AttachMcast(gid, 0)
		if i < roce.MaxMcastQPAttach && err != nil {
			t.Fatalf("QP %d: %v", i, err)
		}
		if i == roce.MaxMcastQPAttach && !errors.Is(err, roce.ErrNoResources) {
			t.Fatalf("QP %d: %v, want ErrNoResources", i, err)
		}
		members = append(members, m)
	}
	if err := members[0].Destroy(); !errors.Is(err, roce.ErrBusy) {
		t.Fatalf("destroy of an attached QP: %v", err)
	}
	if k := members[0].DetachAllMcast(); k != 1 {
		t.Fatalf("DetachAllMcast left %d groups", k)
	}
	if err := members[0].Destroy(); err != nil {
		t.Fatal(err)
	}
	// The group has room again.
	if err := members[len(members)-1].AttachMcast(gid, 0); err != nil {
		t.Fatal(err)
	}
	// Groups are bounded too.
	for i := 0; i < roce.MaxMcastGrp; i++ {
		g := bth.GIDFromAddr(netip.AddrFrom4([4]byte{239, 1, byte(i >> 8), byte(i)}))
		if err := q.AttachMcast(g, 0); err != nil {
			if i != roce.MaxMcastGrp-1 || !errors.Is(err, roce.ErrNoResources) {
				t.Fatalf("group %d: %v", i, err)
			}
		} else if i == roce.MaxMcastGrp-1 {
			t.Fatal("a group beyond MaxMcastGrp was taken")
		}
	}
	if k := q.DetachAllMcast(); k != roce.MaxMcastGrp-1 {
		t.Fatalf("DetachAllMcast left %d groups", k)
	}
}
