package netif

// Privileged tests: two network namespaces joined by a veth pair (package
// nsutil). They skip with a message when not run as root.
//
//	ns A: veth0 10.47.N.1/24 fd00:47:N::1/64  <-->  ns B: veth1 10.47.N.2/24 fd00:47:N::2/64

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/verbs"
)

var topoSeq atomic.Int32

type topo struct {
	*nsutil.Pair
	ipA, ipB   netip.Addr // IPv4
	ip6A, ip6B netip.Addr // IPv6 (ULA)
	hA, hB     *Handle    // handles bound to A and B
}

// newTopo builds the pair; extra addresses go on A after the defaults.
func newTopo(t testing.TB, cfg nsutil.VethConfig) *topo {
	t.Helper()
	nsutil.Skip(t)
	n := byte(topoSeq.Add(1))
	tp := &topo{
		ipA:  netip.AddrFrom4([4]byte{10, 47, n, 1}),
		ipB:  netip.AddrFrom4([4]byte{10, 47, n, 2}),
		ip6A: netip.MustParseAddr(fmt.Sprintf("fd00:47:%x::1", n)),
		ip6B: netip.MustParseAddr(fmt.Sprintf("fd00:47:%x::2", n)),
	}
	if len(cfg.AddrA) == 0 {
		cfg.AddrA = []netip.Prefix{netip.PrefixFrom(tp.ipA, 24), netip.PrefixFrom(tp.ip6A, 64)}
	}
	if len(cfg.AddrB) == 0 {
		cfg.AddrB = []netip.Prefix{netip.PrefixFrom(tp.ipB, 24), netip.PrefixFrom(tp.ip6B, 64)}
	}
	p, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-netif", Veth: cfg})
	if err != nil {
		t.Fatal(err)
	}
	tp.Pair = p
	t.Cleanup(func() { p.Close() })
	if tp.hA, err = NewHandleAt(p.A.Path()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.hA.Close() })
	if tp.hB, err = NewHandleAt(p.B.Path()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tp.hB.Close() })
	return tp
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestLookup checks the interface fields and the GID table against what
// rxe built in the guest for the same MAC and addresses, added in the same
// order (see TestGIDTableAtCreation).
func TestLookup(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nsutil.VethConfig{
		MTU: 9000, MTUB: 1500, MACA: testMAC,
		AddrA: []netip.Prefix{
			netip.MustParsePrefix("192.0.2.1/24"),
			netip.MustParsePrefix("2001:db8::1/64"),
			netip.MustParsePrefix("2001:db8::2/64"),
			netip.MustParsePrefix("192.0.2.7/24"),
			netip.MustParsePrefix("198.51.100.1/24"),
		},
		AddrB: []netip.Prefix{netip.MustParsePrefix("192.0.2.2/24")},
	})
	ifc, err := tp.hA.Lookup("veth0")
	if err != nil {
		t.Fatal(err)
	}
	if ifc.Name != "veth0" || ifc.Index == 0 || ifc.MAC.String() != testMAC.String() || ifc.MTU != 9000 ||
		!ifc.Up || !ifc.Carrier || !ifc.Active() || ifc.OperState != OperUp || ifc.Kind != "veth" || ifc.RxQueues < 1 {
		t.Errorf("interface = %+v", ifc)
	}
	if ifc.PathMTU() != 4096 {
		t.Errorf("PathMTU at MTU 9000 = %d, want 4096", ifc.PathMTU())
	}
	want := "0=fe80::5054:ff:fe12:3456 1=::ffff:192.0.2.1 2=::ffff:198.51.100.1 3=::ffff:192.0.2.7 4=2001:db8::2 5=2001:db8::1"
	if got := table(ifc.GIDs); got != want {
		t.Errorf("GID table\n got %s\nwant %s (rxe's order)", got, want)
	}
	for i, e := range ifc.GIDs {
		if e.Index != i || e.Type != GIDTypeRoCEv2 {
			t.Errorf("entry %d: %+v", i, e)
		}
	}
	if ifc.IPv4() != netip.MustParseAddr("192.0.2.1") {
		t.Errorf("IPv4 = %v", ifc.IPv4())
	}
	var secondary bool
	for _, a := range ifc.Addrs {
		if a.Prefix.Addr() == netip.MustParseAddr("192.0.2.7") {
			secondary = a.Flags&0x01 != 0 // IFA_F_SECONDARY
		}
		if a.Tentative() {
			t.Errorf("%v tentative", a)
		}
	}
	if !secondary {
		t.Error("192.0.2.7 not flagged secondary")
	}

	ifb, err := tp.hB.Lookup("veth1")
	if err != nil {
		t.Fatal(err)
	}
	if ifb.MTU != 1500 || ifb.PathMTU() != 1024 {
		t.Errorf("B: MTU %d path MTU %d, want 1500/1024", ifb.MTU, ifb.PathMTU())
	}
	def, _ := DefaultGID(ifb.MAC)
	if len(ifb.GIDs) != 2 || ifb.GIDs[0].GID != def || FormatGID(ifb.GIDs[1].GID) != "::ffff:192.0.2.2" {
		t.Errorf("B's GIDs = %s", table(ifb.GIDs))
	}

	// The namespaces are separate: A has no veth1, and the host neither.
	_, err = tp.hA.Lookup("veth1")
	if !errors.Is(err, ErrNoInterface) || !strings.Contains(err.Error(), `"veth1"`) {
		t.Errorf("Lookup(veth1) in A: %v", err)
	}

	// The package-level Lookup works in the calling thread's namespace.
	var viaDo *Interface
	if err := tp.A.Do(func() (err error) {
		viaDo, err = Lookup("veth0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if table(viaDo.GIDs) != want {
		t.Errorf("Lookup inside Do: %s", table(viaDo.GIDs))
	}
	if host, err := Lookup("veth0"); err == nil && host.MAC.String() == testMAC.String() {
		t.Error("Lookup outside the namespace found the namespace's veth0")
	}
}

// TestLookupSimple is the common case: one IPv4 and one global IPv6
// address give link-local, IPv4-mapped, IPv6.
func TestLookupSimple(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nsutil.VethConfig{MACA: testMAC})
	ifc, err := tp.hA.Lookup("veth0")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("0=fe80::5054:ff:fe12:3456 1=::ffff:%v 2=%v", tp.ipA, tp.ip6A)
	if got := table(ifc.GIDs); got != want {
		t.Errorf("GIDs %s, want %s", got, want)
	}
	if ifc.PathMTU() != 1024 {
		t.Errorf("PathMTU = %d", ifc.PathMTU())
	}
}

// TestResolveNeighbor resolves a neighbour that answers (IPv4 and IPv6),
// one that does not (timeout error), one that appears while we wait, and
// the fast failures.
func TestResolveNeighbor(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nsutil.VethConfig{})
	macB := tp.Veth.MACB.String()
	for _, ip := range []netip.Addr{tp.ipB, tp.ip6B, netip.AddrFrom16(tp.ipB.As16())} {
		start := time.Now()
		mac, err := tp.hA.ResolveNeighbor(ctxFor(t, 5*time.Second), "veth0", ip)
		if err != nil {
			t.Fatalf("resolve %v: %v", ip, err)
		}
		if mac.String() != macB {
			t.Errorf("resolve %v = %v, want %v", ip, mac, macB)
		}
		t.Logf("resolved %v in %v", ip, time.Since(start))
		n, found, err := tp.hA.Neighbor(tp.Veth.IndexA, ip)
		if err != nil || !found || !n.State.Usable() || n.MAC.String() != macB {
			t.Errorf("Neighbor(%v) = %+v, %v, %v", ip, n, found, err)
		}
	}
	// Cached now: no wait.
	start := time.Now()
	if _, err := tp.hA.ResolveNeighbor(ctxFor(t, 5*time.Second), "veth0", tp.ipB); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 100*time.Millisecond {
		t.Errorf("resolving a known neighbour took %v", d)
	}

	// Nobody answers.
	absent := netip.AddrFrom4([4]byte{10, 47, tp.ipA.As4()[2], 99})
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err := tp.hA.ResolveNeighbor(ctx, "veth0", absent)
	took := time.Since(start)
	want := fmt.Sprintf("no ARP answer from %v on veth0 within 1.5s", absent)
	if err == nil || err.Error() != want || !errors.Is(err, ErrNoNeighbor) {
		t.Errorf("absent neighbour: %v, want %q", err, want)
	}
	if took < 1400*time.Millisecond || took > 2500*time.Millisecond {
		t.Errorf("absent neighbour: gave up after %v, want about 1.5s", took)
	}
	absent6 := netip.MustParseAddr(strings.TrimSuffix(tp.ip6A.String(), "1") + "99")
	ctx6, cancel6 := context.WithTimeout(context.Background(), 700*time.Millisecond)
	defer cancel6()
	if _, err := tp.hA.ResolveNeighbor(ctx6, "veth0", absent6); err == nil || !strings.HasPrefix(err.Error(), "no ND answer from "+absent6.String()+" on veth0 within") {
		t.Errorf("absent IPv6 neighbour: %v", err)
	}

	// Without a deadline the default of 3s applies.
	start = time.Now()
	_, err = tp.hA.ResolveNeighbor(context.Background(), "veth0", absent)
	want = fmt.Sprintf("no ARP answer from %v on veth0 within 3s", absent)
	if err == nil || err.Error() != want {
		t.Errorf("default timeout: %v, want %q", err, want)
	}
	if d := time.Since(start); d < 2900*time.Millisecond || d > 4*time.Second {
		t.Errorf("default timeout took %v", d)
	}

	// A neighbour that appears while we wait: the address is added to B
	// after 500ms; the kernel's ARP (or our restart after it failed) gets
	// the answer.
	late := netip.AddrFrom4([4]byte{10, 47, tp.ipA.As4()[2], 3})
	go func() {
		time.Sleep(500 * time.Millisecond)
		if err := tp.B.AddAddr("veth1", netip.PrefixFrom(late, 24)); err != nil {
			t.Error(err)
		}
	}()
	start = time.Now()
	mac, err := tp.hA.ResolveNeighbor(ctxFor(t, 6*time.Second), "veth0", late)
	if err != nil || mac.String() != macB {
		t.Errorf("late neighbour: %v, %v", mac, err)
	}
	t.Logf("late neighbour (address added after 500ms) resolved after %v", time.Since(start))

	// Cancellation is not a timeout.
	cctx, ccancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, ccancel)
	_, err = tp.hA.ResolveNeighbor(cctx, "veth0", absent)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrNoNeighbor) {
		t.Errorf("canceled: %v", err)
	}

	// Fast failures.
	if _, err := tp.hA.ResolveNeighbor(ctxFor(t, time.Second), "nope0", tp.ipB); !errors.Is(err, ErrNoInterface) {
		t.Errorf("no interface: %v", err)
	}
	if _, err := tp.hA.ResolveNeighbor(ctxFor(t, time.Second), "veth0", netip.MustParseAddr("224.0.0.1")); err == nil {
		t.Error("multicast: no error")
	}
	if err := tp.B.SetLinkUp("veth1", false); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, tp.hA, "veth0", false)
	start = time.Now()
	_, err = tp.hA.ResolveNeighbor(ctxFor(t, 3*time.Second), "veth0", netip.AddrFrom4([4]byte{10, 47, tp.ipA.As4()[2], 4}))
	if err == nil || !strings.Contains(err.Error(), "veth0 has no carrier") || time.Since(start) > 100*time.Millisecond {
		t.Errorf("peer down: %v after %v", err, time.Since(start))
	}
	if err := tp.A.SetLinkUp("veth0", false); err != nil {
		t.Fatal(err)
	}
	if _, err := tp.hA.ResolveNeighbor(ctxFor(t, 3*time.Second), "veth0", tp.ipB); err == nil || !strings.Contains(err.Error(), "veth0 is down") {
		t.Errorf("own link down: %v", err)
	}

	// The package-level function, inside the namespace.
	if err := tp.A.SetLinkUp("veth0", true); err != nil {
		t.Fatal(err)
	}
	if err := tp.B.SetLinkUp("veth1", true); err != nil {
		t.Fatal(err)
	}
	waitCarrier(t, tp.hA, "veth0", true)
	if err := tp.A.Do(func() error {
		mac, err := ResolveNeighbor(ctxFor(t, 5*time.Second), "veth0", tp.ipB)
		if err == nil && mac.String() != macB {
			err = fmt.Errorf("got %v, want %v", mac, macB)
		}
		return err
	}); err != nil {
		t.Errorf("package-level ResolveNeighbor: %v", err)
	}
}

func waitCarrier(t *testing.T, h *Handle, ifname string, want bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		ifc, err := h.Lookup(ifname)
		if err != nil {
			t.Fatal(err)
		}
		if ifc.Carrier == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s carrier still %v", ifname, ifc.Carrier)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// next returns the next event that satisfies pred, failing after 5s.
func next(t *testing.T, ch <-chan LinkEvent, what string, pred func(LinkEvent) bool) LinkEvent {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("waiting for %s: channel closed", what)
			}
			t.Logf("event: %v", ev)
			if pred(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event within 5s", what)
		}
	}
}

// TestWatch follows link down/up (own end and peer end), MTU and address
// changes, and the interface's deletion.
func TestWatch(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nsutil.VethConfig{})
	ctx := ctxFor(t, time.Minute)
	ch, err := tp.hA.Watch(ctx, "veth0")
	if err != nil {
		t.Fatal(err)
	}
	ev := next(t, ch, "initial", func(LinkEvent) bool { return true })
	if ev.Kind != EventLink || !ev.Active() || ev.Name != "veth0" || ev.MTU != 1500 || ev.OperState != OperUp {
		t.Fatalf("first event %+v, want the current state, active", ev)
	}
	ifc, err := tp.hA.Lookup("veth0")
	if err != nil {
		t.Fatal(err)
	}
	gids := ifc.GIDTable()

	// The peer goes down: carrier lost, port not active.
	if err := tp.B.SetLinkUp("veth1", false); err != nil {
		t.Fatal(err)
	}
	ev = next(t, ch, "carrier lost", func(e LinkEvent) bool { return e.Kind == EventLink && !e.Carrier })
	// The operational state is LOWERLAYERDOWN or, when both ends happen
	// to have the same ifindex in their namespaces, DOWN.
	if ev.Active() || !ev.Up || ev.OperState == OperUp {
		t.Errorf("peer down: %+v", ev)
	}
	if err := tp.B.SetLinkUp("veth1", true); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "active again", func(e LinkEvent) bool { return e.Kind == EventLink && e.Active() })

	// Our end goes down: the IPv6 addresses go with it.
	if err := tp.A.SetLinkUp("veth0", false); err != nil {
		t.Fatal(err)
	}
	ev = next(t, ch, "admin down", func(e LinkEvent) bool { return e.Kind == EventLink && !e.Up })
	if ev.Active() || ev.OperState != OperDown {
		t.Errorf("down: %+v", ev)
	}
	ev = next(t, ch, "IPv6 address removed", func(e LinkEvent) bool {
		return e.Kind == EventAddrRemoved && e.Addr.Prefix.Addr() == tp.ip6A
	})
	if !gids.Apply(ev) {
		t.Error("GID table did not change on address removal")
	}
	if _, ok := gids.Find(bth.GIDFromAddr(tp.ip6A)); ok {
		t.Error("removed IPv6 address still in the GID table")
	}
	if err := tp.A.SetLinkUp("veth0", true); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "up", func(e LinkEvent) bool { return e.Kind == EventLink && e.Active() })

	// MTU and addresses.
	if err := tp.A.SetMTU("veth0", 4000); err != nil {
		t.Fatal(err)
	}
	ev = next(t, ch, "MTU", func(e LinkEvent) bool { return e.Kind == EventLink && e.MTU == 4000 })
	if verbs.PortMTU(ev.MTU) != verbs.MTU2048 {
		t.Errorf("path MTU at 4000 = %v", verbs.PortMTU(ev.MTU))
	}
	extra := netip.MustParsePrefix("198.51.100.7/24")
	if err := tp.A.AddAddr("veth0", extra); err != nil {
		t.Fatal(err)
	}
	ev = next(t, ch, "address added", func(e LinkEvent) bool { return e.Kind == EventAddrAdded && e.Addr.Prefix == extra })
	gids.Apply(ev)
	idx, ok := gids.Find(bth.GIDFromAddr(extra.Addr()))
	if !ok || idx != 2 {
		t.Errorf("new address at GID index %d (%v), want 2 (the IPv6 address's freed slot)", idx, ok)
	}
	if err := tp.A.DelAddr("veth0", extra); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "address removed", func(e LinkEvent) bool { return e.Kind == EventAddrRemoved && e.Addr.Prefix == extra })

	// Deleting the pair ends the watch.
	if err := tp.Veth.Close(); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "removed", func(e LinkEvent) bool { return e.Kind == EventRemoved })
	select {
	case _, ok := <-ch:
		if ok {
			t.Error("event after EventRemoved")
		}
	case <-time.After(5 * time.Second):
		t.Error("channel not closed after EventRemoved")
	}
}

// TestWatchCancel checks that ending the context closes the channel, also
// through the package-level Watch started inside the namespace.
func TestWatchCancel(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nsutil.VethConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	var ch <-chan LinkEvent
	if err := tp.A.Do(func() (err error) {
		ch, err = Watch(ctx, "veth0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ev := <-ch
	if ev.Kind != EventLink || ev.Name != "veth0" {
		t.Fatalf("first event %+v", ev)
	}
	// Events keep coming although the goroutine that reads them is
	// outside the namespace.
	if err := tp.B.SetLinkUp("veth1", false); err != nil {
		t.Fatal(err)
	}
	next(t, ch, "carrier lost", func(e LinkEvent) bool { return e.Kind == EventLink && !e.Carrier })
	cancel()
	timeout := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-timeout:
			t.Fatal("channel not closed after cancel")
		}
	}
}

// TestWatchMissing is the error for a missing interface.
func TestWatchMissing(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nsutil.VethConfig{})
	if _, err := tp.hA.Watch(ctxFor(t, time.Second), "nope0"); !errors.Is(err, ErrNoInterface) {
		t.Errorf("Watch(nope0): %v", err)
	}
}

// TestRoute looks up on-link and routed destinations and resolves paths.
func TestRoute(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nsutil.VethConfig{})
	for _, c := range []struct{ dst, src netip.Addr }{{tp.ipB, tp.ipA}, {tp.ip6B, tp.ip6A}} {
		r, err := tp.hA.RouteTo(c.dst)
		if err != nil {
			t.Fatal(err)
		}
		if r.Ifname != "veth0" || r.Src != c.src || r.Gateway.IsValid() || r.NextHop() != c.dst {
			t.Errorf("RouteTo(%v) = %+v", c.dst, r)
		}
		p, err := tp.hA.ResolvePath(ctxFor(t, 5*time.Second), c.dst)
		if err != nil {
			t.Fatal(err)
		}
		if p.SrcMAC.String() != tp.Veth.MACA.String() || p.DstMAC.String() != tp.Veth.MACB.String() {
			t.Errorf("ResolvePath(%v) = %+v", c.dst, p)
		}
	}
	if _, err := tp.hA.RouteTo(netip.MustParseAddr("203.0.113.1")); err == nil || !strings.Contains(err.Error(), "no route to 203.0.113.1") {
		t.Errorf("unroutable: %v", err)
	}
	if _, err := tp.hA.ResolvePath(ctxFor(t, time.Second), tp.ipA); err == nil || !strings.Contains(err.Error(), "address of this host") {
		t.Errorf("own address: %v", err)
	}
	var ifname string
	var src netip.Addr
	if err := tp.A.Do(func() (err error) {
		ifname, src, err = SourceFor(tp.ipB)
		return err
	}); err != nil || ifname != "veth0" || src != tp.ipA {
		t.Errorf("SourceFor = %s, %v, %v", ifname, src, err)
	}

	// Through a gateway (needs the ip command to add the route).
	if _, err := exec.LookPath("ip"); err != nil {
		t.Log("ip not installed: skipping the gateway case")
		return
	}
	if out, err := tp.A.Exec(ctxFor(t, 10*time.Second), "ip", "route", "add", "203.0.113.0/24", "via", tp.ipB.String()); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	r, err := tp.hA.RouteTo(netip.MustParseAddr("203.0.113.9"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Gateway != tp.ipB || r.NextHop() != tp.ipB || r.Ifname != "veth0" || r.Src != tp.ipA {
		t.Errorf("routed: %+v", r)
	}
	p, err := tp.hA.ResolvePath(ctxFor(t, 5*time.Second), netip.MustParseAddr("203.0.113.9"))
	if err != nil || p.DstMAC.String() != tp.Veth.MACB.String() {
		t.Errorf("ResolvePath via gateway: %+v, %v", p, err)
	}
}

// TestHandleAtErrors covers a bad namespace path.
func TestHandleAtErrors(t *testing.T) {
	if _, err := NewHandleAt("/nonexistent/netns"); err == nil || !strings.Contains(err.Error(), "/nonexistent/netns") {
		t.Errorf("NewHandleAt: %v", err)
	}
	// The host handle works unprivileged too.
	h, err := NewHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ifc, err := h.Lookup("lo")
	if err != nil {
		t.Fatal(err)
	}
	if !ifc.Up || ifc.IPv4() != netip.MustParseAddr("127.0.0.1") {
		t.Errorf("lo: %+v", ifc)
	}
	// lo's all-zero MAC is a MAC: rxe makes the default GID from it.
	if ifc.MAC.String() != "00:00:00:00:00:00" || len(ifc.GIDs) == 0 || FormatGID(ifc.GIDs[0].GID) != "fe80::200:ff:fe00:0" {
		t.Errorf("lo: MAC %v, GIDs %s", ifc.MAC, table(ifc.GIDs))
	}
	// A closed handle refuses, rather than asking another namespace.
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Lookup("lo"); err == nil {
		t.Error("Lookup on a closed handle succeeded")
	}
	if err := h.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestResolveNeighborUDP resolves the way a process without CAP_NET_ADMIN
// does: a UDP datagram instead of RTM_NEWNEIGH with NTF_USE.
func TestResolveNeighborUDP(t *testing.T) {
	t.Parallel()
	tp := newTopo(t, nsutil.VethConfig{})
	tp.hA.noNTFUse = true
	for _, ip := range []netip.Addr{tp.ipB, tp.ip6B} {
		if _, found, _ := tp.hA.Neighbor(tp.Veth.IndexA, ip); found {
			t.Fatalf("%v already in the neighbour table", ip)
		}
		mac, err := tp.hA.ResolveNeighbor(ctxFor(t, 5*time.Second), "veth0", ip)
		if err != nil || mac.String() != tp.Veth.MACB.String() {
			t.Errorf("resolve %v: %v, %v", ip, mac, err)
		}
	}
	absent := netip.AddrFrom4([4]byte{10, 47, tp.ipA.As4()[2], 99})
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := tp.hA.ResolveNeighbor(ctx, "veth0", absent); !errors.Is(err, ErrNoNeighbor) {
		t.Errorf("absent: %v", err)
	}
}
