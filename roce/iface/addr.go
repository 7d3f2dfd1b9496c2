package iface

// Address vectors: from a destination GID to the verbs.AHAttr a QP (RTR) or
// an address handle (UD) needs, with the next hop's MAC from the kernel's
// neighbour table.

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/verbs"
)

// DefaultHopLimit is the IPv4 TTL / IPv6 hop limit AHAttr sets, as rxe
// does for ibv_rc_pingpong traffic.
const DefaultHopLimit = 64

// AHAttr returns the address vector from GID sgidIndex of this port to the
// destination dgid: the GIDs, hop limit 64, port 1 and, on the XDP link,
// the Ethernet address of the next hop. The next hop is dgid itself when it
// is on the interface's link (or an IPv6 link-local address), else the
// gateway of the kernel's route to it; its MAC comes from the kernel's
// neighbour table, and when missing the kernel is made to resolve it (ARP or
// neighbour discovery), waiting until ctx ends or, without a deadline,
// Options.ResolveTimeout (default 3s).
//
// A multicast dgid needs no route nor neighbour: the MAC is the group's
// (01:00:5e or 33:33 and the group's low bits).
//
// A dgid that is one of the port's own GIDs (any index, any source GID of
// its IP version) is loopback, as on rxe: the engine keeps the frames it
// sends to itself, so no route, neighbour nor carrier is needed and the MAC
// is the port's own. A dgid of another port of this process on another
// interface of the namespace (AF_XDP) is reached in process, with that
// port's MAC, as the kernel's stack loops a packet to a local address.
//
// On the UDP link the kernel addresses the frames itself: the MAC is not
// needed and left zero, and the source must be the link's own address.
//
// Errors are one sentence and match ErrUnreachable (or ErrDown when the
// port is down).
func (p *Port) AHAttr(ctx context.Context, dgid bth.GID, sgidIndex int) (verbs.AHAttr, error) {
	var attr verbs.AHAttr
	if sgidIndex < 0 || sgidIndex >= roce.GIDTableLen {
		return attr, errorf(ErrUnreachable, nil, "GID index %d is out of range (0..%d)", sgidIndex, roce.GIDTableLen-1)
	}
	sgid, err := p.GID(sgidIndex)
	if err != nil {
		return attr, errorf(ErrUnreachable, err, "%v", err)
	}
	if dgid.IsZero() {
		return attr, errorf(ErrUnreachable, nil, "the destination GID is zero")
	}
	dst := dgid.Addr().Unmap()
	if sgid.IsIPv4() != dgid.IsIPv4() {
		want := "IPv6"
		if dgid.IsIPv4() {
			want = "IPv4"
		}
		return attr, errorf(ErrUnreachable, nil, "GID index %d (%s) and the destination %v are of different IP versions; use the index of an %s GID",
			sgidIndex, netif.FormatGID(sgid), dst, want)
	}
	attr = verbs.AHAttr{DGID: dgid, SGIDIndex: uint8(sgidIndex), HopLimit: DefaultHopLimit, PortNum: 1}
	if !p.deliversToSelf() && isLocal(p, dst) {
		// To the device itself: the engine keeps these frames.
		copy(attr.DMAC[:], p.mac)
		return attr, nil
	}
	if p.local.IsValid() {
		// A link bound to one address (the UDP link): the kernel routes.
		if src := sgid.Addr().Unmap(); src != p.local {
			return verbs.AHAttr{}, errorf(ErrUnreachable, nil, "the UDP link of %s is bound to %v, so GID index %d (%v) cannot be a source; use index %d",
				p.ifname, p.local, sgidIndex, src, p.DefaultGIDIndex())
		}
		return attr, nil
	}
	if p.State() != verbs.PortActive {
		return verbs.AHAttr{}, errorf(ErrDown, nil, "cannot reach %v: interface %s is down", dst, p.ifname)
	}
	if mac, ok := dgid.MulticastMAC(); ok {
		// A group: its frames go to the group's Ethernet address.
		attr.DMAC = mac
		return attr, nil
	}
	hop := dst
	if !dst.IsLinkLocalUnicast() {
		r, err := p.h.RouteTo(dst)
		if err != nil {
			return verbs.AHAttr{}, errorf(ErrUnreachable, err, "cannot reach %v: %v", dst, err)
		}
		if r.Ifindex != p.ifindex {
			via := r.Ifname
			if mac, ok := p.dev.HostMAC(dst); ok {
				// A device of this process on another interface of
				// the namespace: the engine hands it the frames.
				copy(attr.DMAC[:], mac)
				return attr, nil
			}
			if via == "lo" || isLocal(p, dst) {
				return verbs.AHAttr{}, errorf(ErrUnreachable, nil, "%v is an address of this host, not of a peer on %s", dst, p.ifname)
			}
			return verbs.AHAttr{}, errorf(ErrUnreachable, nil, "the route to %v goes through %s, not %s", dst, via, p.ifname)
		}
		hop = r.NextHop()
	}
	if _, ok := ctx.Deadline(); !ok && p.resolveT > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.resolveT)
		defer cancel()
	}
	mac, err := p.h.ResolveNeighbor(ctx, p.ifname, hop)
	if err != nil {
		return verbs.AHAttr{}, errorf(ErrUnreachable, err, "%v", err)
	}
	copy(attr.DMAC[:], mac)
	return attr, nil
}

// isLocal reports whether a is one of the port's GIDs.
func isLocal(p *Port, a netip.Addr) bool {
	g := bth.GIDFromAddr(a)
	for _, e := range p.GIDs() {
		if e.GID == g {
			return true
		}
	}
	return false
}

// SourceGIDIndex returns the GID index to send from towards dgid: on the
// UDP link the link's address, on XDP the first GID of the same IP version
// (preferring the kernel's preferred source for the route), as a tool would
// pick with -g.
func (p *Port) SourceGIDIndex(dgid bth.GID) (int, error) {
	if p.local.IsValid() {
		i := p.DefaultGIDIndex()
		if g, err := p.GID(i); err != nil || g.IsIPv4() != dgid.IsIPv4() {
			return 0, errorf(ErrUnreachable, nil, "the UDP link of %s is bound to %v, which cannot reach %v", p.ifname, p.local, dgid.Addr().Unmap())
		}
		return i, nil
	}
	gids := p.GIDs()
	if r, err := p.h.RouteTo(dgid.Addr().Unmap()); err == nil && r.Src.IsValid() {
		sg := bth.GIDFromAddr(r.Src)
		for _, e := range gids {
			if e.GID == sg {
				return e.Index, nil
			}
		}
	}
	for _, e := range gids {
		if e.GID.IsIPv4() == dgid.IsIPv4() && (dgid.IsIPv4() || !e.Default || dgid.Addr().IsLinkLocalUnicast()) {
			return e.Index, nil
		}
	}
	return 0, errorf(ErrUnreachable, nil, "%s has no GID of the IP version of %v", p.ifname, dgid.Addr().Unmap())
}

// String describes the port in one line, e.g.
// "sroce_veth0 on veth0: XDP (copy), MTU 1500, path MTU 1024, ACTIVE".
func (p *Port) String() string {
	st := "ACTIVE"
	if p.State() != verbs.PortActive {
		st = "DOWN"
	}
	return fmt.Sprintf("%s on %s: %s, MTU %d, path MTU %d, %s", p.dev.Name(), p.ifname, p.linkMode, p.mtu, p.PathMTU(), st)
}
