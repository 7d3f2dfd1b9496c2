package iface

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
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

func TestParseMode(t *testing.T) {
	for in, want := range map[string]Mode{"": ModeAuto, "auto": ModeAuto, "XDP": ModeXDP, "udp": ModeUDP} {
		if m, err := ParseMode(in); err != nil || m != want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q", in, m, err, want)
		}
	}
	if _, err := ParseMode("tcp"); err == nil {
		t.Error("ParseMode(tcp) succeeded")
	}
}

// TestNodeGUID checks the EUI-64 node GUID against what ibv_devinfo shows
// for rxe on a netdev with MAC 52:54:00:12:34:56.
func TestNodeGUID(t *testing.T) {
	mac, _ := net.ParseMAC("52:54:00:12:34:56")
	if got := FormatGUID(NodeGUID(mac)); got != "5054:00ff:fe12:3456" {
		t.Errorf("node GUID %s, want 5054:00ff:fe12:3456", got)
	}
	if NodeGUID(nil) != ([8]byte{}) {
		t.Error("NodeGUID(nil) is not zero")
	}
}

func TestOpenNoInterface(t *testing.T) {
	_, err := Open(context.Background(), "nosuchif0", Options{})
	if !errors.Is(err, ErrNoInterface) || !strings.Contains(err.Error(), `no network interface named "nosuchif0"`) {
		t.Fatalf("got %v", err)
	}
	if _, err := Open(context.Background(), "lo", Options{Mode: "tcp"}); err == nil {
		t.Fatal("bad mode accepted")
	}
}

// TestLoopbackUDP runs an RC SEND and WRITE between two ports on the
// loopback interface over the UDP link, as an unprivileged user can. The
// addresses are ones no other test binds (any of 127.0.0.0/8 works on lo).
func TestLoopbackUDP(t *testing.T) {
	ctx := context.Background()
	a, err := Open(ctx, "lo", Options{Mode: ModeAuto, Addr: netip.MustParseAddr("127.83.0.1")})
	if err != nil {
		t.Skipf("loopback UDP link unavailable here: %v", err)
	}
	defer a.Close()
	b, err := Open(ctx, "lo", Options{Mode: ModeUDP, Addr: netip.MustParseAddr("127.83.0.2")})
	if err != nil {
		t.Skipf("loopback UDP link unavailable here: %v", err)
	}
	defer b.Close()
	if a.LinkMode() != LinkUDP || !strings.Contains(a.Reason(), "loopback") {
		t.Errorf("auto on lo: mode %q, reason %q", a.LinkMode(), a.Reason())
	}
	if a.PathMTU() != 4096 {
		t.Errorf("path MTU on lo %d, want 4096", a.PathMTU())
	}
	gidB, _ := b.GID(b.DefaultGIDIndex())
	if gidB.Addr().Unmap() != netip.MustParseAddr("127.83.0.2") {
		t.Fatalf("B's default GID %v", gidB)
	}
	if _, err := a.AHAttr(ctx, gidB, 0); err == nil {
		t.Error("AHAttr from the IPv6 default GID to an IPv4 GID succeeded")
	}
	rcRoundTrip(t, a, b)
}

// TestXDPPair runs an RC WRITE between two namespaces over AF_XDP and
// checks that Close leaves no XDP program on the interfaces.
func TestXDPPair(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-iftest"})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	var a, b *Port
	open := func(ns *nsutil.Namespace, ifname string, p **Port) {
		t.Helper()
		if err := ns.Do(func() (err error) {
			*p, err = Open(context.Background(), ifname, Options{Mode: ModeXDP})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	open(pair.A, pair.Veth.NameA, &a)
	defer a.Close()
	open(pair.B, pair.Veth.NameB, &b)
	defer b.Close()
	if a.LinkMode() != LinkXDPCopy || a.PathMTU() != 1024 || a.State() != verbs.PortActive {
		t.Errorf("A: %v", a)
	}
	if g := a.GIDs(); len(g) < 2 || !g[0].Default || g[1].GID.Addr().Unmap() != nsutil.DefaultAddrA.Addr() {
		t.Errorf("A's GID table %v", g)
	}
	rcRoundTrip(t, a, b)
	a.Close()
	b.Close()
	for _, ns := range []*nsutil.Namespace{pair.A, pair.B} {
		out, err := ns.Exec(context.Background(), "ip", "link", "show")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(out), "xdp") {
			t.Errorf("XDP program left after Close in %s:\n%s", ns, out)
		}
	}
}

// TestOpenErrors checks the errors of Open on an interface that is down,
// has no carrier, or has no address for the UDP link.
func TestOpenErrors(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-iftest",
		Veth: nsutil.VethConfig{Down: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	err = pair.A.Do(func() error {
		_, err := Open(context.Background(), pair.Veth.NameA, Options{})
		return err
	})
	if !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), "is down") {
		t.Errorf("down interface: %v", err)
	}
	if err := pair.A.SetLinkUp(pair.Veth.NameA, true); err != nil {
		t.Fatal(err)
	}
	err = pair.A.Do(func() error {
		_, err := Open(context.Background(), pair.Veth.NameA, Options{})
		return err
	})
	if !errors.Is(err, ErrDown) || !strings.Contains(err.Error(), "no carrier") {
		t.Errorf("no carrier: %v", err)
	}
	if err := pair.B.SetLinkUp(pair.Veth.NameB, true); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, pair.A, pair.Veth.NameA)
	if err := pair.A.DelAddr(pair.Veth.NameA, nsutil.DefaultAddrA); err != nil {
		t.Fatal(err)
	}
	err = pair.A.Do(func() error {
		p, err := Open(context.Background(), pair.Veth.NameA, Options{Mode: ModeUDP})
		if err == nil {
			p.Close()
		}
		return err
	})
	if !errors.Is(err, ErrNoAddress) {
		t.Errorf("UDP without an address: %v", err)
	}
}

func waitCarrier(t *testing.T, ns *nsutil.Namespace, ifname string) {
	t.Helper()
	for i := 0; i < 200; i++ {
		out, _ := ns.Exec(context.Background(), "ip", "link", "show", ifname)
		if strings.Contains(string(out), "LOWER_UP") {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s has no carrier", ifname)
}

// rcRoundTrip connects an RC QP on each port and checks a SEND from a to b
// and an RDMA WRITE from b to a.
func rcRoundTrip(t *testing.T, a, b *Port) {
	t.Helper()
	type side struct {
		p   *Port
		cq  *roce.CQ
		mr  *roce.MR
		qp  *roce.QP
		gid bth.GID
		idx int
	}
	mk := func(p *Port) *side {
		pd, err := p.Device().AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, _ := p.Device().CreateCQ(64, nil)
		mr, err := pd.RegMR(make([]byte, 8192), mr.AccessLocalWrite|mr.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		idx := p.DefaultGIDIndex()
		gid, _ := p.GID(idx)
		return &side{p: p, cq: cq, mr: mr, qp: q, gid: gid, idx: idx}
	}
	x, y := mk(a), mk(b)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	connect := func(s, peer *side) { connectRC(ctx, t, s.p, s.qp, s.idx, peer.gid, peer.qp.QPN()) }
	connect(x, y)
	connect(y, x)
	wait := func(s *side, want verbs.WCOpcode) verbs.WC {
		var wc [1]verbs.WC
		n, err := s.cq.Wait(ctx, wc[:])
		if err != nil || n != 1 {
			t.Fatalf("no completion: %v", err)
		}
		if wc[0].Status != verbs.WCSuccess || wc[0].Opcode != want {
			t.Fatalf("completion %v %v, want %v", wc[0].Opcode, wc[0].Status, want)
		}
		return wc[0]
	}
	msg := bytes.Repeat([]byte("sroce!"), 1000)
	copy(x.mr.Buf(), msg)
	if err := y.qp.PostRecv(&verbs.RecvWR{WRID: 1, SGL: []mr.SGE{y.mr.SGE(0, 8192)}}); err != nil {
		t.Fatal(err)
	}
	if err := x.qp.PostSend(&verbs.SendWR{WRID: 2, Opcode: verbs.WROpSend, Flags: verbs.Signaled,
		SGL: []mr.SGE{x.mr.SGE(0, len(msg))}}); err != nil {
		t.Fatal(err)
	}
	wait(x, verbs.WCSend)
	if wc := wait(y, verbs.WCRecv); int(wc.ByteLen) != len(msg) || !bytes.Equal(y.mr.Buf()[:len(msg)], msg) {
		t.Fatalf("SEND: %d bytes received, data equal %v", wc.ByteLen, bytes.Equal(y.mr.Buf()[:len(msg)], msg))
	}
	for i := range y.mr.Buf() {
		y.mr.Buf()[i] = byte(i * 7)
	}
	if err := y.qp.PostSend(&verbs.SendWR{WRID: 3, Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{y.mr.SGE(0, 8192)}, RemoteAddr: x.mr.Addr(), RKey: x.mr.RKey()}); err != nil {
		t.Fatal(err)
	}
	wait(y, verbs.WCRDMAWrite)
	// The WRITE completed at y when x's ACK arrived through the kernel,
	// which the race detector cannot see: take x's device lock, held by
	// x's loop while it placed the data, before reading x's memory.
	x.p.Device().Counters()
	if !bytes.Equal(x.mr.Buf(), y.mr.Buf()) {
		t.Fatal("WRITE: data differs")
	}
}

// TestLinkFlap takes the link away under connected QPs, twice: the peer's
// end of the veth down (A loses its carrier) and A's own interface down.
// Each time the port goes DOWN with EventPortErr and link_downed counted,
// stays usable (Lost stays open, the QPs keep their state, as on rxe), and
// comes back ACTIVE with EventPortActive when the link does: a WRITE posted
// while the link was down completes once it is back (RC retransmits it),
// and new QPs connect and move data. On the AF_XDP link and the UDP link.
func TestLinkFlap(t *testing.T) {
	for _, mode := range []Mode{ModeXDP, ModeUDP} {
		t.Run(string(mode), func(t *testing.T) { linkFlap(t, mode) })
	}
}

func linkFlap(t *testing.T, mode Mode) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-iftest"})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	var a, b *Port
	for _, x := range []struct {
		ns  *nsutil.Namespace
		if_ string
		p   **Port
	}{{pair.A, pair.Veth.NameA, &a}, {pair.B, pair.Veth.NameB, &b}} {
		if err := x.ns.Do(func() (err error) {
			*x.p, err = Open(context.Background(), x.if_, Options{Mode: mode})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer (*x.p).Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// One RC pair that lives through both falls.
	type side struct {
		cq *roce.CQ
		mr *roce.MR
		qp *roce.QP
	}
	mk := func(p *Port) side {
		pd, err := p.Device().AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		cq, _ := p.Device().CreateCQ(16, nil)
		m, err := pd.RegMR(make([]byte, 4096), mr.AccessLocalWrite|mr.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		q, err := pd.CreateQP(&roce.QPInitAttr{Type: verbs.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Cap: verbs.QPCap{MaxSendWR: 16, MaxRecvWR: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		if err != nil {
			t.Fatal(err)
		}
		return side{cq, m, q}
	}
	x, y := mk(a), mk(b)
	gidA, _ := a.GID(a.DefaultGIDIndex())
	gidB, _ := b.GID(b.DefaultGIDIndex())
	connectRC(ctx, t, a, x.qp, a.DefaultGIDIndex(), gidB, y.qp.QPN())
	connectRC(ctx, t, b, y.qp, b.DefaultGIDIndex(), gidA, x.qp.QPN())
	event := func(p *Port, want verbs.EventType) {
		t.Helper()
		ectx, ecancel := context.WithTimeout(ctx, 5*time.Second)
		defer ecancel()
		ev, err := p.Device().GetAsyncEvent(ectx)
		if err != nil || ev.Type != want {
			t.Fatalf("%s: asynchronous event %v (%v), want %v within 5s", p.Ifname(), ev.Type, err, want)
		}
	}
	waitState := func(p *Port, want verbs.PortState) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); p.State() != want; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: port %v 5s after the link changed, want %v", p.Ifname(), p.State(), want)
			}
		}
	}
	for i, fall := range []struct {
		name   string
		ns     *nsutil.Namespace
		ifname string
	}{{"carrier loss", pair.B, pair.Veth.NameB}, {"admin down", pair.A, pair.Veth.NameA}} {
		if err := fall.ns.SetLinkUp(fall.ifname, false); err != nil {
			t.Fatal(err)
		}
		event(a, verbs.EventPortErr)
		waitState(a, verbs.PortDown)
		if got := a.LinkDowned(); got != uint64(i+1) {
			t.Errorf("%s: link_downed %d, want %d", fall.name, got, i+1)
		}
		select {
		case <-a.Lost():
			t.Fatalf("%s: the port was lost: %v", fall.name, a.Err())
		default:
		}
		if st := x.qp.State(); st != verbs.QPStateRTS {
			t.Errorf("%s: QP %v while the port is down, want RTS as on rxe", fall.name, st)
		}
		msg := []byte(fmt.Sprintf("written while down (%s)", fall.name))
		copy(x.mr.Buf(), msg)
		if err := x.qp.PostSend(&verbs.SendWR{WRID: uint64(i), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
			SGL: []mr.SGE{x.mr.SGE(0, len(msg))}, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}); err != nil {
			t.Fatalf("%s: posting while down: %v", fall.name, err)
		}
		if err := fall.ns.SetLinkUp(fall.ifname, true); err != nil {
			t.Fatal(err)
		}
		event(a, verbs.EventPortActive)
		waitState(a, verbs.PortActive)
		var wc [1]verbs.WC
		if n, err := x.cq.Wait(ctx, wc[:]); n != 1 || wc[0].Status != verbs.WCSuccess {
			t.Fatalf("%s: the WRITE posted while down: %d completions %v (%v)", fall.name, n, wc[0].Status, err)
		}
		b.Device().Counters() // see rcRoundTrip: the WRITE's data under b's lock
		if !bytes.Equal(y.mr.Buf()[:len(msg)], msg) {
			t.Errorf("%s: the WRITE posted while down left %q", fall.name, y.mr.Buf()[:len(msg)])
		}
		rcRoundTrip(t, a, b)
	}
}

// TestGIDChange adds and removes an address of the interface under an open
// port: the GID table follows at the kernel's index and the device posts
// EventGIDChange each time.
func TestGIDChange(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-iftest"})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	var a *Port
	if err := pair.A.Do(func() (err error) {
		a, err = Open(context.Background(), pair.Veth.NameA, Options{Mode: ModeXDP})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	extra := netip.MustParsePrefix("10.99.0.7/24")
	want := bth.GIDFromAddr(extra.Addr())
	has := func() bool {
		for _, e := range a.GIDs() {
			if e.GID == want {
				return true
			}
		}
		return false
	}
	for _, add := range []bool{true, false} {
		op := pair.A.AddAddr
		if !add {
			op = pair.A.DelAddr
		}
		if err := op(pair.Veth.NameA, extra); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		ev, err := a.Device().GetAsyncEvent(ctx)
		cancel()
		if err != nil || ev.Type != verbs.EventGIDChange {
			t.Fatalf("address added %v: asynchronous event %v (%v), want %v", add, ev.Type, err, verbs.EventGIDChange)
		}
		if has() != add {
			t.Fatalf("address added %v: GID table %v", add, a.GIDs())
		}
		found := false
		for i := 0; i < roce.GIDTableLen; i++ {
			if g, _ := a.Device().QueryGID(i); g == want {
				found = true
			}
		}
		if found != add {
			t.Fatalf("address added %v: the device's GID table has it: %v", add, found)
		}
	}
}

// connectRC moves q through INIT and RTR to RTS toward the QP peerQPN at
// peerGID, from GID index idx of p.
func connectRC(ctx context.Context, t testing.TB, p *Port, q *roce.QP, idx int, peerGID bth.GID, peerQPN bth.QPN) {
	t.Helper()
	ah, err := p.AHAttr(ctx, peerGID, idx)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		attr verbs.QPAttr
		mask verbs.QPAttrMask
	}{
		{verbs.QPAttr{State: verbs.QPStateInit, PortNum: 1, AccessFlags: mr.AccessRemoteWrite},
			verbs.AttrState | verbs.AttrPKeyIndex | verbs.AttrPort | verbs.AttrAccessFlags},
		{verbs.QPAttr{State: verbs.QPStateRTR, PathMTU: p.ActiveMTU(), DestQPN: peerQPN, AH: ah,
			MaxDestRdAtomic: 1, MinRNRTimer: 12},
			verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer},
		{verbs.QPAttr{State: verbs.QPStateRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
			verbs.AttrState | verbs.AttrSQPSN | verbs.AttrTimeout | verbs.AttrRetryCnt | verbs.AttrRNRRetry | verbs.AttrMaxQPRdAtomic},
	}
	for _, st := range steps {
		if err := q.Modify(&st.attr, st.mask); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOpenDownThenUp opens ports on interfaces that are down (AllowDown):
// they are DOWN, and once the links come up they are ACTIVE and carry
// traffic, with the link opened while down.
func TestOpenDownThenUp(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-iftest", Veth: nsutil.VethConfig{Down: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer pair.Close()
	var a, b *Port
	for _, x := range []struct {
		ns  *nsutil.Namespace
		if_ string
		p   **Port
	}{{pair.A, pair.Veth.NameA, &a}, {pair.B, pair.Veth.NameB, &b}} {
		if err := x.ns.Do(func() (err error) {
			*x.p, err = Open(context.Background(), x.if_, Options{Mode: ModeXDP, AllowDown: true})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer (*x.p).Close()
		if st := (*x.p).State(); st != verbs.PortDown {
			t.Fatalf("%s: port %v on a down interface", x.if_, st)
		}
		if err := x.ns.SetLinkUp(x.if_, true); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []*Port{a, b} {
		for deadline := time.Now().Add(5 * time.Second); p.State() != verbs.PortActive; time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: port %v 5s after the link came up", p.Ifname(), p.State())
			}
		}
	}
	rcRoundTrip(t, a, b)
}
