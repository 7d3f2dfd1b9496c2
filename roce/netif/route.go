package netif

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/roce/netif/rtnl"
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
	fam, bits := uint8(unix.AF_INET), uint8(32)
	if dst.Is6() {
		fam, bits = unix.AF_INET6, 128
	}
	var e rtnl.Encoder
	e.Header(rtnl.RtMsg{Family: fam, DstLen: bits}.Encode())
	e.Addr(unix.RTA_DST, dst)
	msgs, err := h.c.Request(unix.RTM_GETROUTE, 0, e.Encode())
	if err != nil {
		if errors.Is(err, unix.ENETUNREACH) || errors.Is(err, unix.EHOSTUNREACH) {
			return Route{}, fmt.Errorf("netif: no route to %v", dst)
		}
		return Route{}, fmt.Errorf("netif: route to %v: %w", dst, err)
	}
	for _, m := range msgs {
		if m.Type != unix.RTM_NEWROUTE {
			continue
		}
		_, attrs, err := rtnl.ParseRtMsg(m.Data)
		if err != nil {
			return Route{}, err
		}
		r := Route{Dst: dst}
		for _, a := range attrs {
			switch a.Type {
			case unix.RTA_OIF:
				r.Ifindex = int(a.Uint32())
			case unix.RTA_PREFSRC:
				r.Src = a.Addr()
			case unix.RTA_GATEWAY:
				r.Gateway = a.Addr()
			}
		}
		if r.Ifindex != 0 {
			l, err := h.c.LinkByIndex(r.Ifindex)
			if err != nil {
				return Route{}, fmt.Errorf("netif: route to %v: %w", dst, err)
			}
			r.Ifname = l.Name
		}
		return r, nil
	}
	return Route{}, fmt.Errorf("netif: no route to %v", dst)
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
