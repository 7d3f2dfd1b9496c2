package netif

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// EventKind says what a LinkEvent reports.
type EventKind uint8

// Event kinds.
const (
	// EventLink is the interface's state: the first event of every
	// Watch, then one whenever Up, Carrier, OperState, MTU, MAC or the
	// name changes.
	EventLink EventKind = iota + 1
	// EventAddrAdded: Addr was added to the interface.
	EventAddrAdded
	// EventAddrRemoved: Addr was removed from the interface.
	EventAddrRemoved
	// EventRemoved: the interface was deleted (or moved to another
	// namespace). The channel closes after it.
	EventRemoved
	// EventError: watching failed (Err says why). The channel closes
	// after it.
	EventError
)

// String names the kind.
func (k EventKind) String() string {
	switch k {
	case EventLink:
		return "link"
	case EventAddrAdded:
		return "addr-added"
	case EventAddrRemoved:
		return "addr-removed"
	case EventRemoved:
		return "removed"
	case EventError:
		return "error"
	}
	return fmt.Sprintf("EventKind(%d)", uint8(k))
}

// LinkEvent is a change of a watched interface. Every event carries the
// interface's state at that moment.
type LinkEvent struct {
	Kind      EventKind
	Name      string
	Index     int
	Up        bool // administratively up (IFF_UP)
	Carrier   bool // lower layer up (IFF_LOWER_UP)
	OperState OperState
	MTU       int
	MAC       net.HardwareAddr
	Addr      Addr  // for EventAddrAdded and EventAddrRemoved
	Err       error // for EventError
}

// Active reports whether a RoCE port on the interface is ACTIVE (up with
// carrier). The engine treats a change from true to false as the port
// going down: it counts link_downed and moves QPs to the error state.
func (e LinkEvent) Active() bool { return e.Up && e.Carrier }

// String describes the event, e.g. "veth0: link up carrier=true mtu 1500".
func (e LinkEvent) String() string {
	switch e.Kind {
	case EventAddrAdded, EventAddrRemoved:
		return fmt.Sprintf("%s: %s %s", e.Name, e.Kind, e.Addr)
	case EventError:
		return fmt.Sprintf("%s: watch failed: %v", e.Name, e.Err)
	case EventRemoved:
		return fmt.Sprintf("%s: removed", e.Name)
	}
	state := "down"
	if e.Up {
		state = "up"
	}
	return fmt.Sprintf("%s: link %s carrier=%v oper=%s mtu %d", e.Name, state, e.Carrier, e.OperState, e.MTU)
}

// Watch follows the interface ifname: link state (RTNLGRP_LINK) and its
// IPv4 and IPv6 addresses. The first event is the current state
// (EventLink); then come changes. The channel is closed when ctx ends,
// after EventRemoved, or after EventError. If the kernel dropped
// notifications (the socket buffer overflowed) the watcher re-reads the
// link and its addresses and reports the differences, so a slow reader
// loses intermediate states but never the current one.
//
// The kernel reports a lost carrier through its link watch, which batches
// non-urgent changes for up to a second; rxe learns of it the same way, so
// a port goes down up to about a second after the cable (or veth peer)
// does.
func (h *Handle) Watch(ctx context.Context, ifname string) (<-chan LinkEvent, error) {
	// Subscribe first, then read the state, so no change falls in between.
	sub, err := h.subscribe()
	if err != nil {
		return nil, fmt.Errorf("netif: watch %s: %w", ifname, err)
	}
	w := &watcher{h: h, sub: sub, ch: make(chan LinkEvent, 16), addrs: make(map[netip.Prefix]Addr)}
	l, err := h.link(ifname)
	if err != nil {
		sub.Close()
		return nil, err
	}
	w.link = l
	addrs, err := h.addrs(l.Index)
	if err != nil {
		sub.Close()
		return nil, fmt.Errorf("netif: addresses: %w", err)
	}
	for _, a := range addrs {
		w.addrs[a.Prefix] = a
	}
	stop := context.AfterFunc(ctx, sub.Close)
	go func() {
		defer stop()
		defer sub.Close()
		defer close(w.ch)
		w.run(ctx)
	}()
	return w.ch, nil
}

// Watch follows ifname in the calling thread's network namespace (see
// Handle.Watch).
func Watch(ctx context.Context, ifname string) (<-chan LinkEvent, error) {
	h, err := NewHandle()
	if err != nil {
		return nil, err
	}
	ch, err := h.Watch(ctx, ifname)
	if err != nil {
		h.Close()
		return nil, err
	}
	// The watcher re-reads state through h after lost notifications; close
	// h when the watch ends.
	out := make(chan LinkEvent)
	go func() {
		defer h.Close()
		defer close(out)
		for ev := range ch {
			select {
			case out <- ev:
			case <-ctx.Done():
				for range ch {
				}
				return
			}
		}
	}()
	return out, nil
}

// subscribe opens a netlink socket in the handle's namespace that
// receives link changes and IPv4 and IPv6 address changes. One socket for
// all three groups keeps the notifications in the order the kernel sent
// them (a link going down before its IPv6 addresses go), which the
// library's separate LinkSubscribe and AddrSubscribe channels do not; and
// a receive error, ENOBUFS included, reaches the watcher as the errno.
func (h *Handle) subscribe() (*nl.NetlinkSocket, error) {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.nl == nil {
		return nil, errClosed
	}
	var s *nl.NetlinkSocket
	err := inNetns(h.ns, func() (err error) {
		s, err = nl.Subscribe(unix.NETLINK_ROUTE, unix.RTNLGRP_LINK, unix.RTNLGRP_IPV4_IFADDR, unix.RTNLGRP_IPV6_IFADDR)
		return err
	})
	return s, err
}

// parseAddrMsg reads an RTM_NEWADDR or RTM_DELADDR notification as
// addrFrom reads the netlink library's AddrList results (the library's own
// parser is not exported): the interface's own address is IFA_LOCAL when
// present (IFA_ADDRESS is the peer on point-to-point links), else
// IFA_ADDRESS.
func parseAddrMsg(b []byte) (ifindex int, a Addr, err error) {
	if len(b) < unix.SizeofIfAddrmsg {
		return 0, Addr{}, fmt.Errorf("netif: address message of %d bytes", len(b))
	}
	hdr := nl.DeserializeIfAddrmsg(b)
	attrs, err := nl.ParseRouteAttr(b[unix.SizeofIfAddrmsg:])
	if err != nil {
		return 0, Addr{}, err
	}
	a = Addr{Scope: hdr.Scope, Flags: uint32(hdr.Flags)}
	var local, addr netip.Addr
	for _, at := range attrs {
		switch at.Attr.Type {
		case unix.IFA_LOCAL:
			local, _ = netip.AddrFromSlice(at.Value)
		case unix.IFA_ADDRESS:
			addr, _ = netip.AddrFromSlice(at.Value)
		case unix.IFA_FLAGS:
			if len(at.Value) >= 4 {
				a.Flags = nl.NativeEndian().Uint32(at.Value)
			}
		}
	}
	ip := addr
	if local.IsValid() {
		ip = local
	}
	if !ip.IsValid() {
		return 0, Addr{}, errors.New("netif: address message without an address")
	}
	a.Prefix = netip.PrefixFrom(ip, int(hdr.Prefixlen))
	return int(hdr.Index), a, nil
}

type watcher struct {
	h     *Handle
	sub   *nl.NetlinkSocket
	ch    chan LinkEvent
	link  link
	addrs map[netip.Prefix]Addr
}

func (w *watcher) event(kind EventKind) LinkEvent {
	return LinkEvent{
		Kind:      kind,
		Name:      w.link.Name,
		Index:     w.link.Index,
		Up:        w.link.Flags&unix.IFF_UP != 0,
		Carrier:   w.link.Flags&unix.IFF_LOWER_UP != 0,
		OperState: w.link.OperState,
		MTU:       w.link.MTU,
		MAC:       w.link.MAC,
	}
}

// send delivers ev unless ctx ends first; it reports whether to go on.
func (w *watcher) send(ctx context.Context, ev LinkEvent) bool {
	select {
	case w.ch <- ev:
		return true
	case <-ctx.Done():
		return false
	}
}

func (w *watcher) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	ev := w.event(EventError)
	ev.Err = err
	w.send(ctx, ev)
}

func (w *watcher) run(ctx context.Context) {
	if !w.send(ctx, w.event(EventLink)) {
		return
	}
	for {
		msgs, _, err := w.sub.Receive()
		if errors.Is(err, unix.ENOBUFS) {
			if !w.resync(ctx) {
				return
			}
			continue
		}
		if err != nil {
			w.fail(ctx, fmt.Errorf("netif: watch %s: %w", w.link.Name, err))
			return
		}
		for _, m := range msgs {
			if !w.handle(ctx, m) {
				return
			}
		}
	}
}

// handle processes one notification; false ends the watch.
func (w *watcher) handle(ctx context.Context, m syscall.NetlinkMessage) bool {
	switch m.Header.Type {
	case unix.RTM_NEWLINK, unix.RTM_DELLINK:
		if len(m.Data) < unix.SizeofIfInfomsg {
			return true
		}
		hdr := unix.NlMsghdr(m.Header)
		nlink, err := netlink.LinkDeserialize(&hdr, m.Data)
		if err != nil {
			return true
		}
		l := linkFrom(nlink)
		if l.Index != w.link.Index {
			return true
		}
		if m.Header.Type == unix.RTM_DELLINK {
			w.send(ctx, w.event(EventRemoved))
			return false
		}
		return w.updateLink(ctx, l)
	case unix.RTM_NEWADDR, unix.RTM_DELADDR:
		index, a, err := parseAddrMsg(m.Data)
		if err != nil || index != w.link.Index {
			return true
		}
		if m.Header.Type == unix.RTM_NEWADDR {
			_, known := w.addrs[a.Prefix]
			w.addrs[a.Prefix] = a
			if known {
				return true // a flag change (e.g. tentative -> valid)
			}
			ev := w.event(EventAddrAdded)
			ev.Addr = a
			return w.send(ctx, ev)
		}
		if _, known := w.addrs[a.Prefix]; !known {
			return true
		}
		delete(w.addrs, a.Prefix)
		ev := w.event(EventAddrRemoved)
		ev.Addr = a
		return w.send(ctx, ev)
	}
	return true
}

// updateLink records a new link state and reports a change that matters.
func (w *watcher) updateLink(ctx context.Context, l link) bool {
	const mask = unix.IFF_UP | unix.IFF_LOWER_UP
	old := w.link
	if l.Name == "" {
		l.Name = old.Name
	}
	if l.MAC == nil {
		l.MAC = old.MAC
	}
	if l.MTU == 0 {
		l.MTU = old.MTU
	}
	w.link = l
	if old.Flags&mask == l.Flags&mask && old.OperState == l.OperState && old.MTU == l.MTU &&
		old.Name == l.Name && bytes.Equal(old.MAC, l.MAC) {
		return true
	}
	return w.send(ctx, w.event(EventLink))
}

// resync re-reads the link and its addresses after lost notifications and
// reports what changed.
func (w *watcher) resync(ctx context.Context) bool {
	l, found, err := w.h.linkByIndex(w.link.Index)
	if err != nil {
		w.fail(ctx, fmt.Errorf("netif: watch %s: re-reading state: %w", w.link.Name, err))
		return false
	}
	if !found {
		w.send(ctx, w.event(EventRemoved))
		return false
	}
	if !w.updateLink(ctx, l) {
		return false
	}
	addrs, err := w.h.addrs(w.link.Index)
	if err != nil {
		w.fail(ctx, fmt.Errorf("netif: watch %s: re-reading state: %w", w.link.Name, err))
		return false
	}
	now := make(map[netip.Prefix]Addr, len(addrs))
	for _, a := range addrs {
		now[a.Prefix] = a
	}
	for p, a := range w.addrs {
		if _, ok := now[p]; !ok {
			ev := w.event(EventAddrRemoved)
			ev.Addr = a
			if !w.send(ctx, ev) {
				return false
			}
		}
	}
	for _, a := range addrs {
		if _, ok := w.addrs[a.Prefix]; !ok {
			ev := w.event(EventAddrAdded)
			ev.Addr = a
			if !w.send(ctx, ev) {
				return false
			}
		}
	}
	w.addrs = now
	return true
}
