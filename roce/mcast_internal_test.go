package roce

import (
	"net"
	"net/netip"
	"testing"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce/memlink"
	"github.com/sroce/sroce/verbs"
)

// TestMcastAcrossEngines gives a frame to a group to one engine of a
// device whose group members run on both: each member gets it once.
func TestMcastAcrossEngines(t *testing.T) {
	group := bth.GIDFromAddr(netip.MustParseAddr("239.9.9.9"))
	const qkey = 0x1234

	// A sender on a router of its own: its frame is captured.
	clock := &memlink.VirtualClock{}
	r := memlink.NewRouter(clock, 1, memlink.Impairments{})
	var frame []byte
	r.SetTap(func(_ *memlink.Port, f []byte) { frame = append([]byte(nil), f...) })
	src, err := Open(r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 9}, 1500),
		&Options{Clock: clock, GIDs: []bth.GID{bth.GIDFromAddr(netip.MustParseAddr("192.0.2.9"))}})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	r.NewPort(net.HardwareAddr{2, 0, 0, 0, 0, 10}, 1500)
	spd, scq := pdAndCQ(src)
	sq := udRTS(t, spd, scq, qkey)
	ah, err := spd.CreateAH(&verbs.AHAttr{DGID: group})
	if err != nil {
		t.Fatal(err)
	}
	m, err := spd.RegMR(make([]byte, 64), mr.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := sq.PostSend(&verbs.SendWR{Opcode: verbs.WROpSend, SGL: []mr.SGE{m.SGE(0, 64)}, AH: ah,
		RemoteQPN: bth.MulticastQPN, RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	for src.Step(clock.Now()) {
	}
	if frame == nil {
		t.Fatal("no frame sent")
	}

	d := twoEngines(t)
	pd, cq := pdAndCQ(d)
	rm, err := pd.RegMR(make([]byte, 4096), mr.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	var qs []*QP
	engines := map[int]bool{}
	for len(engines) < 2 {
		q := udRTS(t, pd, cq, qkey)
		if engines[q.eng.idx] {
			continue
		}
		engines[q.eng.idx] = true
		if err := q.AttachMcast(group, 0); err != nil {
			t.Fatal(err)
		}
		qs = append(qs, q)
	}
	// The frame arrives on each engine's link in turn: each member gets
	// it once, from its own engine or handed over.
	for _, e := range d.eng {
		for _, q := range qs {
			if err := q.PostRecv(&verbs.RecvWR{WRID: uint64(q.QPN()), SGL: []mr.SGE{rm.SGE(0, 4096)}}); err != nil {
				t.Fatal(err)
			}
		}
		for d.Step(clock.Now()) {
		}
		e.mu.Lock()
		e.receive(clock.Now(), frame)
		e.mu.Unlock()
		for d.Step(clock.Now()) {
		}
		got := map[uint64]int{}
		var wcs [8]verbs.WC
		for _, w := range wcs[:cq.Poll(wcs[:])] {
			if w.Status == verbs.WCSuccess {
				got[w.WRID]++
			}
		}
		for _, q := range qs {
			if got[uint64(q.QPN())] != 1 || len(got) != 2 {
				t.Fatalf("frame on engine %d: completions by QP %v, want one each for %d and %d", e.idx, got, qs[0].QPN(), qs[1].QPN())
			}
		}
	}
}

// udRTS creates a UD QP in RTS with Q_Key qkey.
func udRTS(t *testing.T, pd *PD, cq *CQ, qkey uint32) *QP {
	t.Helper()
	q, err := pd.CreateQP(smallQP(verbs.QPTypeUD, cq))
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Connect(&ConnectAttr{QKey: qkey}); err != nil {
		t.Fatal(err)
	}
	return q
}
