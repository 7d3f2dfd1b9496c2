package netif

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Route is the kernel's answer to "how do I reach Dst" (ip route get).
type Route struct {
	Dst     netip.Addr
	Ifname  string
	Ifindex int
	Src     netip.Addr // preferred source address
	Gateway netip.Addr // invalid when Dst is on-link
}

// NextHop returns the address whose MAC a frame to Dst is sent to: the
// gateway, or Dst itself when it is on-link.
func (r Route) NextHop() netip.Addr {
	if r.Gateway.IsValid() {
		return r.Gateway
	}
	return r.Dst
}

// RouteTo looks up the route to dst (RTM_GETROUTE, like `ip route get`).
func (h *Handle) RouteTo(dst netip.Addr) (Route, error) {
	dst = dst.Unmap()
	if !dst.IsValid() {
		return Route{}, errors.New("netif: route to an invalid address")
	}
	var rs []netlink.Route
	err := h.do(func(nh *netlink.Handle) (err error) {
		rs, err = nh.RouteGet(dst.AsSlice())
		return err
	})
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			return Route{}, fmt.Errorf("netif: no route to %v", dst)
		}
		return Route{}, fmt.Errorf("netif: route to %v: %w", dst, err)
	}
	if len(rs) == 0 {
		return Route{}, fmt.Errorf("netif: no route to %v", dst)
	}
	r := Route{Dst: dst, Ifindex: rs[0].LinkIndex}
	r.Src, _ = netip.AddrFromSlice(rs[0].Src)
	r.Gateway, _ = netip.AddrFromSlice(rs[0].Gw)
	if r.Ifindex != 0 {
		l, found, err := h.linkByIndex(r.Ifindex)
		if err == nil && !found {
			err = fmt.Errorf("%w: index %d", ErrNoInterface, r.Ifindex)
		}
		if err != nil {
			return Route{}, fmt.Errorf("netif: route to %v: %w", dst, err)
		}
		r.Ifname = l.Name
	}
	return r, nil
}

// SourceFor returns the interface and source address the kernel would use
// to reach dst, in the calling thread's network namespace.
func SourceFor(dst netip.Addr) (ifname string, src netip.Addr, err error) {
	h, err := NewHandle()
	if err != nil {
		return "", netip.Addr{}, err
	}
	defer h.Close()
	r, err := h.RouteTo(dst)
	if err != nil {
		return "", netip.Addr{}, err
	}
	return r.Ifname, r.Src, nil
}

// Path is everything needed to address a frame to a destination.
type Path struct {
	Route
	SrcMAC net.HardwareAddr // the outgoing interface's MAC
	DstMAC net.HardwareAddr // the next hop's MAC
}

// ResolvePath looks up the route to dst and resolves the next hop's MAC
// on the outgoing interface (see ResolveNeighbor for the waiting rules).
func (h *Handle) ResolvePath(ctx context.Context, dst netip.Addr) (Path, error) {
	r, err := h.RouteTo(dst)
	if err != nil {
		return Path{}, err
	}
	if r.Ifname == "" {
		return Path{}, fmt.Errorf("netif: the route to %v has no outgoing interface", dst)
	}
	l, err := h.link(r.Ifname)
	if err != nil {
		return Path{}, err
	}
	if l.Flags&unix.IFF_LOOPBACK != 0 {
		return Path{}, fmt.Errorf("netif: %v is an address of this host (route via %s)", dst, r.Ifname)
	}
	mac, err := h.ResolveNeighbor(ctx, r.Ifname, r.NextHop())
	if err != nil {
		return Path{}, err
	}
	return Path{Route: r, SrcMAC: l.MAC, DstMAC: mac}, nil
}
