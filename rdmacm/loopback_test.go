package rdmacm_test

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/sroce/sroce/cm"
	"github.com/sroce/sroce/rdmacm"
	"github.com/sroce/sroce/roce/memlink"
)

// TestBindLoopbackAndWildcard binds IDs as the kernel's rdma_cm lets a
// program on a RoCE device: to the wildcard addresses of both families,
// and to loopback addresses no device holds, which bind with no device
// (libfabric's verbs provider relies on it); resolving a loopback or wildcard
// destination resolves to that device's own GID, the source the loopback
// address (cma_resolve_loopback).
func TestBindLoopbackAndWildcard(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	h := p.a
	for i, a := range []netip.Addr{netip.IPv4Unspecified(), netip.IPv6Unspecified(),
		netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.AddrFrom4([4]byte{127, 1, 2, 3}), netip.IPv6Loopback()} {
		id, err := h.cm.CreateID(h.ch, cm.PortSpaceTCP, nil)
		must(t, err)
		ap := netip.AddrPortFrom(a, uint16(6000+i))
		if err := id.BindAddr(ap); err != nil {
			t.Fatalf("bind to %v: %v", ap, err)
		}
		if got := id.LocalAddr(); got != ap {
			t.Fatalf("bound to %v, LocalAddr says %v", ap, got)
		}
		must(t, id.Listen(4))
		must(t, id.Destroy())
	}
	for _, dst := range []netip.Addr{netip.AddrFrom4([4]byte{127, 0, 0, 1}), netip.IPv6Loopback(), netip.IPv4Unspecified()} {
		id, err := h.cm.CreateID(h.ch, cm.PortSpaceTCP, nil)
		must(t, err)
		must(t, id.ResolveAddr(netip.AddrPort{}, netip.AddrPortFrom(dst, 7000), time.Second))
		ev := expect(t, h.ch, rdmacm.EventAddrResolved)
		if ev.ID != id {
			t.Fatalf("ADDR_RESOLVED for another ID")
		}
		if src := id.LocalAddr().Addr(); !src.IsLoopback() || src.Is4() != dst.Is4() {
			t.Fatalf("resolving %v left the source %v, want the loopback address", dst, src)
		}
		must(t, id.ResolveRoute(time.Second))
		expect(t, h.ch, rdmacm.EventRouteResolved)
		must(t, id.Destroy())
	}
}

// TestLoopbackListenerHearsAll listens on 127.0.0.1, which binds as a
// wildcard (the kernel's cma_any_addr): the ID has no device, and a peer
// on another host connecting to the device's own address reaches it, as
// a client of `rping -s -a 127.0.0.1` on rdma_rxe does.
func TestLoopbackListenerHearsAll(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	l, err := p.b.cm.CreateID(p.b.ch, cm.PortSpaceTCP, nil)
	must(t, err)
	must(t, l.BindAddr(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), 6100)))
	if l.Device() != nil {
		t.Fatalf("an ID bound to 127.0.0.1 has the device %v, want none", l.Device().Name())
	}
	must(t, l.Listen(4))
	dial(t, p.a, netip.AddrPortFrom(p.b.addr, 6100), true, &rdmacm.ConnParam{RetryCount: 7, RNRRetryCount: 7})
	ev := expect(t, p.b.ch, rdmacm.EventConnectRequest)
	if ev.ListenID != l {
		t.Fatalf("CONNECT_REQUEST for listener %p, want %p", ev.ListenID, l)
	}
	if got := ev.ID.LocalAddr().Addr(); got != p.b.addr {
		t.Fatalf("the passive ID's source is %v, want the device's %v", got, p.b.addr)
	}
	must(t, ev.ID.Reject(nil))
	expect(t, p.a.ch, rdmacm.EventRejected)
}

// TestLoopbackBindConflicts checks that a port bound on 127.0.0.1 is taken
// for every address, and that 127.0.0.1 cannot take a port bound on the
// device's address, as binds to a wildcard.
func TestLoopbackBindConflicts(t *testing.T) {
	p := newPair(t, memlink.Impairments{}, rdmacm.Config{})
	h := p.a
	lo := netip.AddrFrom4([4]byte{127, 0, 0, 1})
	for _, tc := range []struct{ first, second netip.Addr }{{lo, h.addr}, {h.addr, lo}} {
		a, err := h.cm.CreateID(h.ch, cm.PortSpaceTCP, nil)
		must(t, err)
		must(t, a.BindAddr(netip.AddrPortFrom(tc.first, 6200)))
		b, err := h.cm.CreateID(h.ch, cm.PortSpaceTCP, nil)
		must(t, err)
		if err := b.BindAddr(netip.AddrPortFrom(tc.second, 6200)); !errors.Is(err, rdmacm.ErrAddrInUse) {
			t.Errorf("bind to %v:6200 with %v:6200 bound: %v, want %v", tc.second, tc.first, err, rdmacm.ErrAddrInUse)
		}
		must(t, a.Destroy())
		must(t, b.Destroy())
	}
}
