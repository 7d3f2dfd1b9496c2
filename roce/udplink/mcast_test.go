package udplink_test

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/udplink"
	"github.com/sroce/sroce/verbs"
)

// TestMcastOverUDP runs two devices on UDP links over loopback: a QP on
// each attaches to a group, one sends to it, both receive (the sender's
// own through the kernel's multicast loopback); after a detach only the
// sender's QP does.
func TestMcastOverUDP(t *testing.T) {
	group := bth.GIDFromAddr(netip.MustParseAddr("239.7.7.7"))
	const qkey = 0x01234567
	type end struct {
		dev *roce.Device
		qp  *roce.QP
		cq  *roce.CQ
		mr  *roce.MR
		buf []byte
	}
	var ends []*end
	for _, a := range []string{"127.0.0.1", "127.0.0.2"} {
		l, err := udplink.Open(netip.MustParseAddr(a), 0, 1500)
		if err != nil {
			t.Skipf("skipping: no UDP link on %s: %v", a, err)
		}
		d, err := roce.Open(l, &roce.Options{GIDs: []bth.GID{bth.GIDFromAddr(netip.MustParseAddr(a))}})
		if err != nil {
			t.Fatal(err)
		}
		d.Start()
		t.Cleanup(func() { d.Close() })
		pd, _ := d.AllocPD()
		cq, _ := d.CreateCQ(64, nil)
		q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 8, MaxRecvWR: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(&roce.ConnectAttr{QKey: qkey}); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 4096)
		m, err := pd.RegMR(buf, mr.AccessLocalWrite)
		if err != nil {
			t.Fatal(err)
		}
		if err := q.AttachMcast(group, 0); err != nil {
			t.Fatal(err)
		}
		ends = append(ends, &end{d, q, cq, m, buf})
	}
	recv := func(e *end, id uint64) {
		if err := e.qp.PostRecv(&verbs.RecvWR{WRID: id, SGL: []mr.SGE{e.mr.SGE(0, 2048)}}); err != nil {
			t.Fatal(err)
		}
	}
	a := ends[0]
	ah, err := a.qp.PD().CreateAH(&verbs.AHAttr{DGID: group})
	if err != nil {
		t.Fatal(err)
	}
	copy(a.buf[2048:], "to the group")
	send := func() {
		if err := a.qp.PostSend(&verbs.SendWR{WRID: 99, Opcode: verbs.WROpSend, SGL: []mr.SGE{a.mr.SGE(2048, 12)},
			AH: ah, RemoteQPN: bth.MulticastQPN, RemoteQKey: qkey}); err != nil {
			t.Fatal(err)
		}
	}
	// poll waits for n receive completions on e (the test's deadline
	// bounds it: no timed assertion).
	poll := func(e *end, n int) {
		var wcs [4]verbs.WC
		for got := 0; got < n; {
			for _, w := range wcs[:e.cq.Poll(wcs[:])] {
				if w.Opcode != verbs.WCRecv {
					continue
				}
				if w.Status != verbs.WCSuccess || w.ByteLen != 40+12 || string(e.buf[40:52]) != "to the group" {
					t.Fatalf("%+v %q", w, e.buf[40:52])
				}
				got++
			}
			time.Sleep(time.Millisecond)
		}
	}
	for _, e := range ends {
		recv(e, 1)
	}
	send()
	for _, e := range ends {
		poll(e, 1)
	}
	// Detached, the second device takes nothing: the sender's second
	// message reaches the sender alone, and the second device's receive
	// waits for a unicast message that shows it was not used.
	if err := ends[1].qp.DetachMcast(group, 0); err != nil {
		t.Fatal(err)
	}
	for _, e := range ends {
		recv(e, 2)
	}
	send()
	poll(a, 1)
	b := ends[1]
	bah, err := a.qp.PD().CreateAH(&verbs.AHAttr{DGID: bth.GIDFromAddr(netip.MustParseAddr("127.0.0.2"))})
	if err != nil {
		t.Fatal(err)
	}
	copy(a.buf[3072:], "only for you")
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 100, Opcode: verbs.WROpSend, SGL: []mr.SGE{a.mr.SGE(3072, 12)},
		AH: bah, RemoteQPN: b.qp.QPN(), RemoteQKey: qkey}); err != nil {
		t.Fatal(err)
	}
	var wcs [4]verbs.WC
	for {
		k := b.cq.Poll(wcs[:])
		if k > 0 {
			// The first receive after the detach holds the unicast
			// message, addressed to the device (the GRH's IPv4
			// destination, its last four bytes), not the group's.
			if w := wcs[0]; w.Opcode != verbs.WCRecv || w.WRID != 2 || w.SrcQP != a.qp.QPN() || k != 1 ||
				string(b.buf[40:52]) != "only for you" || netip.AddrFrom4([4]byte(b.buf[36:40])) != netip.MustParseAddr("127.0.0.2") {
				t.Fatalf("after the detach: %+v, data %q to %v: the detached device still took the group's message", wcs[:k], b.buf[40:52], b.buf[36:40])
			}
			break
		}
		time.Sleep(time.Millisecond)
	}
}
