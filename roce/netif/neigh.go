package netif

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// DefaultResolveTimeout bounds ResolveNeighbor when its context has no
// deadline: the kernel's own ARP/ND gives up after 3 probes a second
// apart.
const DefaultResolveTimeout = 3 * time.Second

// ErrNoNeighbor matches (errors.Is) the error of a neighbour resolution
// that got no answer in time.
var ErrNoNeighbor = errors.New("no ARP/ND answer")

// NeighState is a neighbour entry's state (NUD_*), as `ip neigh` shows it.
type NeighState uint16

// Neighbour states.
const (
	NeighIncomplete NeighState = unix.NUD_INCOMPLETE
	NeighReachable  NeighState = unix.NUD_REACHABLE
	NeighStale      NeighState = unix.NUD_STALE
	NeighDelay      NeighState = unix.NUD_DELAY
	NeighProbe      NeighState = unix.NUD_PROBE
	NeighFailed     NeighState = unix.NUD_FAILED
	NeighNoARP      NeighState = unix.NUD_NOARP
	NeighPermanent  NeighState = unix.NUD_PERMANENT
	NeighNone       NeighState = unix.NUD_NONE
)

// Usable reports whether an entry in this state carries a link-layer
// address that may be used to send: REACHABLE, STALE, DELAY, PROBE (the
// kernel is re-checking a known address), PERMANENT or NOARP.
func (s NeighState) Usable() bool {
	return s&(NeighReachable|NeighStale|NeighDelay|NeighProbe|NeighPermanent|NeighNoARP) != 0
}

// String returns the state as `ip neigh` prints it.
func (s NeighState) String() string {
	if s == NeighNone {
		return "NONE"
	}
	var parts []string
	for _, n := range []struct {
		s    NeighState
		name string
	}{{NeighIncomplete, "INCOMPLETE"}, {NeighReachable, "REACHABLE"}, {NeighStale, "STALE"},
		{NeighDelay, "DELAY"}, {NeighProbe, "PROBE"}, {NeighFailed, "FAILED"},
		{NeighNoARP, "NOARP"}, {NeighPermanent, "PERMANENT"}} {
		if s&n.s != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("NeighState(%#x)", uint16(s))
	}
	return strings.Join(parts, "|")
}

// Neighbor is an entry of the kernel's neighbour table (ARP for IPv4, ND
// for IPv6).
type Neighbor struct {
	IP      netip.Addr
	MAC     net.HardwareAddr // empty while unresolved
	State   NeighState
	Ifindex int
}

// NoAnswerError is the error of a neighbour resolution that timed out. It
// matches ErrNoNeighbor.
type NoAnswerError struct {
	IP     netip.Addr
	Ifname string
	Wait   time.Duration
}

// Error returns the sentence, e.g. "no ARP answer from 10.0.0.2 on veth0
// within 3s".
func (e *NoAnswerError) Error() string {
	proto := "ARP"
	if e.IP.Is6() {
		proto = "ND"
	}
	return fmt.Sprintf("no %s answer from %v on %s within %v", proto, e.IP, e.Ifname, roundWait(e.Wait))
}

// Is makes errors.Is(err, ErrNoNeighbor) true.
func (e *NoAnswerError) Is(target error) bool { return target == ErrNoNeighbor }

func roundWait(d time.Duration) time.Duration {
	if d >= time.Second {
		return d.Round(100 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

func neighFamily(ip netip.Addr) int {
	if ip.Is4() {
		return unix.AF_INET
	}
	return unix.AF_INET6
}

// Neighbor returns the neighbour table entry for ip on the interface with
// the given index, without triggering resolution. found is false when
// there is no entry.
func (h *Handle) Neighbor(ifindex int, ip netip.Addr) (n Neighbor, found bool, err error) {
	ip = ip.Unmap()
	var e *netlink.Neigh
	err = h.do(func(*netlink.Handle) (err error) {
		e, err = h.getNeigh(ifindex, ip)
		return err
	})
	if errors.Is(err, unix.ENOENT) {
		return Neighbor{}, false, nil
	}
	if err != nil {
		return Neighbor{}, false, fmt.Errorf("netif: neighbour %v: %w", ip, err)
	}
	n = Neighbor{IP: ip, State: NeighState(e.State), Ifindex: e.LinkIndex}
	if len(e.HardwareAddr) > 0 {
		n.MAC = append(net.HardwareAddr(nil), e.HardwareAddr...)
	}
	return n, true, nil
}

// getNeigh reads the one entry for ip with an RTM_GETNEIGH request naming
// it (the kernel's neigh_get, Linux 4.20 and later), built with the
// library's request layer; ENOENT means there is none. The library itself
// only dumps the whole table (NeighList): with 1000 neighbours in the
// namespace that is 1.2-1.5 ms and 1.2 MB allocated per lookup against
// 6-12 us here, and ResolveNeighbor repeats the lookup every 1-50 ms while
// it waits (go test -bench Neighbor, as root). The caller holds h.mu.
func (h *Handle) getNeigh(ifindex int, ip netip.Addr) (*netlink.Neigh, error) {
	req := nl.NewNetlinkRequest(unix.RTM_GETNEIGH, 0)
	req.Sockets = h.get
	req.AddData(&netlink.Ndmsg{Family: uint8(neighFamily(ip)), Index: uint32(ifindex)})
	req.AddData(nl.NewRtAttr(unix.NDA_DST, ip.AsSlice()))
	msgs, err := req.Execute(unix.NETLINK_ROUTE, unix.RTM_NEWNEIGH)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, unix.ENOENT
	}
	return netlink.NeighDeserialize(msgs[0])
}

// triggerResolution asks the kernel to resolve ip on the interface. The
// first choice is an RTM_NEWNEIGH with NTF_USE: it creates the entry if
// needed and starts ARP/ND exactly as an outgoing packet would
// (neigh_event_send), without sending anything ourselves. That needs
// CAP_NET_ADMIN; without it, a one-byte UDP datagram to the discard port
// of ip, sent from a socket bound to the interface, makes the kernel
// resolve the address before sending it.
func (h *Handle) triggerResolution(ifname string, ifindex int, ip netip.Addr) error {
	if !h.noNTFUse {
		err := h.do(func(nh *netlink.Handle) error {
			return nh.NeighSet(&netlink.Neigh{LinkIndex: ifindex, Family: neighFamily(ip), Flags: unix.NTF_USE, IP: ip.AsSlice()})
		})
		if err == nil {
			return nil
		}
		if !errors.Is(err, unix.EPERM) {
			return fmt.Errorf("netif: start resolving %v: %w", ip, err)
		}
	}
	if err := h.sendProbe(ifname, ifindex, ip); err != nil {
		return fmt.Errorf("netif: start resolving %v: %w", ip, err)
	}
	return nil
}

// sendProbe sends a one-byte UDP datagram to ip port 9 (discard) out of
// the interface, from a socket in the handle's namespace.
func (h *Handle) sendProbe(ifname string, ifindex int, ip netip.Addr) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.nl == nil {
		return errClosed
	}
	return inNetns(h.ns, func() error {
		var (
			fam int
			sa  unix.Sockaddr
		)
		if ip.Is4() {
			fam, sa = unix.AF_INET, &unix.SockaddrInet4{Port: 9, Addr: ip.As4()}
		} else {
			fam = unix.AF_INET6
			sa6 := &unix.SockaddrInet6{Port: 9, Addr: ip.As16()}
			if ip.IsLinkLocalUnicast() {
				sa6.ZoneId = uint32(ifindex)
			}
			sa = sa6
		}
		fd, err := unix.Socket(fam, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if err := unix.BindToDevice(fd, ifname); err != nil {
			return fmt.Errorf("bind to %s: %w", ifname, err)
		}
		err = unix.Sendto(fd, []byte{0}, 0, sa)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.ECONNREFUSED) {
			err = nil // queued behind the resolution, or an earlier ICMP error
		}
		return err
	})
}

// ResolveNeighbor returns the MAC address of ip on the interface ifname,
// from the kernel's neighbour table. When the entry is missing, failed or
// not yet resolved it makes the kernel resolve it (ARP or IPv6 neighbour
// discovery, started with NTF_USE, or without CAP_NET_ADMIN by sending a
// UDP datagram to the address) and polls with backoff (1 ms doubling
// to 50 ms) until the entry is usable (REACHABLE, STALE, DELAY, PROBE,
// PERMANENT), restarting resolution after the kernel gives up, until ctx
// ends. Without a deadline on ctx it waits DefaultResolveTimeout. A
// timeout gives a *NoAnswerError such as "no ARP answer from 10.0.0.2 on
// veth0 within 3s". An interface that is down or has no carrier fails at
// once.
//
// ip must be on-link (the next hop): for a destination behind a router,
// resolve Route.NextHop (RouteTo). The call blocks only its caller, for
// at most the context's time; it holds no lock between polls, so other
// calls on the Handle proceed meanwhile. The engine calls it while a QP is
// being set up, never from its packet loop.
func (h *Handle) ResolveNeighbor(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, error) {
	ip = ip.Unmap()
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsMulticast() {
		return nil, fmt.Errorf("netif: cannot resolve %v: not a unicast address", ip)
	}
	l, err := h.link(ifname)
	if err != nil {
		return nil, err
	}
	if l.Flags&unix.IFF_UP == 0 {
		return nil, fmt.Errorf("netif: cannot resolve %v: %s is down", ip, ifname)
	}
	if l.Flags&unix.IFF_LOWER_UP == 0 {
		return nil, fmt.Errorf("netif: cannot resolve %v: %s has no carrier", ip, ifname)
	}
	start := time.Now()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultResolveTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	const (
		minBackoff = time.Millisecond
		maxBackoff = 50 * time.Millisecond
	)
	backoff := minBackoff
	var timer *time.Timer
	for {
		n, found, err := h.Neighbor(l.Index, ip)
		if err != nil {
			return nil, err
		}
		if found && n.State.Usable() && len(n.MAC) > 0 {
			return n.MAC, nil
		}
		// Start (or restart) resolution unless the kernel is at it.
		if !found || n.State&(NeighIncomplete|NeighDelay|NeighProbe) == 0 {
			if err := h.triggerResolution(ifname, l.Index, ip); err != nil {
				return nil, err
			}
			backoff = minBackoff
		}
		if timer == nil {
			timer = time.NewTimer(backoff)
			defer timer.Stop()
		} else {
			timer.Reset(backoff)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, &NoAnswerError{IP: ip, Ifname: ifname, Wait: max(deadline.Sub(start), 0)}
			}
			return nil, fmt.Errorf("netif: resolving %v on %s: %w", ip, ifname, ctx.Err())
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// ResolveNeighbor resolves ip on ifname in the calling thread's network
// namespace (see Handle.ResolveNeighbor).
func ResolveNeighbor(ctx context.Context, ifname string, ip netip.Addr) (net.HardwareAddr, error) {
	h, err := NewHandle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return h.ResolveNeighbor(ctx, ifname, ip)
}
