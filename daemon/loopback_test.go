package daemon_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/verbs"
)

// ifaceDaemon serves a port on an interface of a fresh namespace over
// AF_XDP; it returns the port and the daemon's socket.
func ifaceDaemon(t *testing.T) (*iface.Port, string) {
	t.Helper()
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-dlo"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	var port *iface.Port
	if err := pair.A.Do(func() (err error) {
		port, err = iface.Open(context.Background(), pair.Veth.NameA, iface.Options{Mode: iface.ModeXDP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { port.Close() })
	srv, err := daemon.New([]daemon.Device{port}, daemon.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "sroce.sock")
	ln, err := daemon.Listen(socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return port, socket
}

// ownGRH is the GRH an application such as UCX asks for: the port's
// link-local GID (index 0) to itself, every flow label bit set, a
// traffic class, and hop limit 0.
func ownGRH(t *testing.T, port *iface.Port) verbs.AHAttr {
	t.Helper()
	g, err := port.GID(0)
	if err != nil || !g.Addr().IsLinkLocalUnicast() {
		t.Fatalf("GID 0 of %s: %v %v; want its link-local address", port.Ifname(), g, err)
	}
	return verbs.AHAttr{DGID: g, SGIDIndex: 0, FlowLabel: 0xffffffff, TrafficClass: 0x68, HopLimit: 0}
}

// checkGRH waits for a frame the port sent to itself and checks its IPv6
// header: the flow label's low 20 bits, the traffic class as given, hop
// limit 0 sent as 64, and the port's own MAC as destination.
func checkGRH(t *testing.T, sub *roce.Subscription, port *iface.Port) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		ev, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("waiting for a frame the device sent itself: %v", err)
		}
		f := ev.Frame
		if ev.Kind != roce.TraceTx || len(f) < 14+40 || binary.BigEndian.Uint16(f[12:]) != 0x86dd {
			continue
		}
		w := binary.BigEndian.Uint32(f[14:])
		if fl, tc, hl := w&0xfffff, uint8(w>>20), f[14+7]; fl != 0xfffff || tc != 0x68 || hl != 64 {
			t.Errorf("IPv6 header: flow label %#x traffic class %#x hop limit %d; want 0xfffff 0x68 64", fl, tc, hl)
		}
		if !bytes.Equal(f[:6], port.MAC()) {
			t.Errorf("destination MAC %x, want the port's own %x", f[:6], port.MAC())
		}
		return
	}
}

// TestLoopbackOwnGID connects two RC QPs of a device on a real interface
// through the daemon, each with its address vector to the device's own
// link-local GID as UCX gives it (flow label 0xffffffff, hop limit 0),
// and sends between two UD QPs through an address handle to it: the data
// arrive, and the frames carry the flow label's low 20 bits.
func TestLoopbackOwnGID(t *testing.T) {
	port, socket := ifaceDaemon(t)
	sub, err := port.Device().Subscribe(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	r := &rig{socket: socket}
	dev := "sroce_" + port.Ifname()
	a, b := newEndpoint(t, r, dev, false), newEndpoint(t, r, dev, false)
	grh := ownGRH(t, port)
	for _, c := range [][2]*endpoint{{a, b}, {b, a}} {
		if err := c[0].qp.Connect(&roce.ConnectAttr{Access: mr.AccessRemoteWrite | mr.AccessRemoteRead,
			AH: grh, PathMTU: verbs.MTU1024, DestQPN: c[1].qp.QPN(), RQPSN: 100,
			MaxDestRdAtomic: 4, MinRNRTimer: 12, SQPSN: 100, Timeout: 14, RetryCnt: 3, RNRRetry: 7, MaxRdAtomic: 4}); err != nil {
			t.Fatalf("RC to the device's own GID: %v", err)
		}
	}
	msg := bytes.Repeat([]byte("loop"), 600)
	copy(a.buf.Buf, msg)
	b.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{b.mr.SGE(0, 4096)}})
	if err := a.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.mr.SGE(0, len(msg))}}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, b, "RC loopback receive"); wc.Status != verbs.WCSuccess || int(wc.ByteLen) != len(msg) || !bytes.Equal(b.buf.Buf[:len(msg)], msg) {
		t.Fatalf("RC loopback receive: %+v, data equal %v", wc, bytes.Equal(b.buf.Buf[:len(msg)], msg))
	}
	if wc := wait(t, a, "RC loopback send"); wc.Status != verbs.WCSuccess {
		t.Fatalf("RC loopback send: %+v", wc)
	}
	checkGRH(t, sub, port)

	// UD: an address handle to the device's own GID.
	ud := func(e *endpoint) *client.QP {
		q, err := e.pd.CreateQP(&client.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: e.cq, RecvCQ: e.cq,
			Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.Connect(&roce.ConnectAttr{QKey: 0x1234, SQPSN: 1}); err != nil {
			t.Fatal(err)
		}
		return q
	}
	ua, ub := ud(a), ud(b)
	ah, err := a.pd.CreateAH(&grh)
	if err != nil {
		t.Fatalf("AH to the device's own GID: %v", err)
	}
	const grhLen = 40
	ub.PostRecv(&verbs.RecvWR{WRID: 3, SGL: []mr.SGE{b.mr.SGE(8192, grhLen+256)}})
	if err := ua.PostSend(&verbs.SendWR{WRID: 4, Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.mr.SGE(0, 256)},
		AH: ah, RemoteQPN: ub.QPN(), RemoteQKey: 0x1234}); err != nil {
		t.Fatal(err)
	}
	if wc := wait(t, b, "UD loopback receive"); wc.Status != verbs.WCSuccess || wc.ByteLen != grhLen+256 ||
		!bytes.Equal(b.buf.Buf[8192+grhLen:8192+grhLen+256], msg[:256]) {
		t.Fatalf("UD loopback receive: %+v", wc)
	}
	if wc := wait(t, a, "UD loopback send"); wc.Status != verbs.WCSuccess {
		t.Fatalf("UD loopback send: %+v", wc)
	}
	checkGRH(t, sub, port)
}
