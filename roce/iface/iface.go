package iface

// Opening a port: look the interface up (netif), choose and open the link
// (a kind of the table in kinds.go), build the GID table, open the roce.Device on the link
// and start its loop and the watch on the interface. The Port owns all of
// it; Close undoes it in reverse order.

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/roce/udplink"
	"github.com/sroce/sroce/verbs"
	"github.com/sroce/sroce/xdp"
)

// Mode selects the link a Port uses (Options.Mode).
type Mode string

// Link modes accepted by Open: ModeAuto and the Mode of each kind of the
// table (Kinds).
const (
	// ModeAuto uses the first kind of link that the process may open and
	// that opens: AF_XDP when the process has the privileges and the
	// socket opens, the UDP link otherwise. The empty Mode means ModeAuto.
	ModeAuto Mode = "auto"
	// ModeXDP uses an AF_XDP socket with the steering program, or fails.
	ModeXDP Mode = "xdp"
	// ModeUDP uses a kernel UDP socket on port 4791.
	ModeUDP Mode = "udp"
)

// ParseMode parses a command-line mode: "auto" or the Mode of a kind of
// the table (ModeChoices lists them).
func ParseMode(s string) (Mode, error) {
	m := Mode(strings.ToLower(s))
	if m == "" || m == ModeAuto {
		return ModeAuto, nil
	}
	if kindOf(m) != nil {
		return m, nil
	}
	return "", fmt.Errorf("unknown link mode %q (want %s)", s, ModeChoices(", "))
}

// What Port.LinkMode returns.
const (
	LinkXDPCopy     = "XDP (copy)"
	LinkXDPZeroCopy = "XDP (zero-copy)"
	LinkUDP         = "UDP"
)

// Errors that Open and AHAttr wrap; test them with errors.Is. The error
// values returned carry a complete sentence of their own.
var (
	// ErrNoInterface: no interface has the name (in this namespace).
	ErrNoInterface = netif.ErrNoInterface
	// ErrDown: the interface is down or has no carrier.
	ErrDown = errors.New("interface is down")
	// ErrNotPermitted: AF_XDP was asked for without the privileges.
	ErrNotPermitted = errors.New("AF_XDP needs root")
	// ErrNoAddress: the interface has no address the UDP link can bind.
	ErrNoAddress = errors.New("no address for the UDP link")
	// ErrXDP: the AF_XDP socket or the steering program could not be set
	// up.
	ErrXDP = errors.New("AF_XDP setup failed")
	// ErrQueues: Options.Queues does not fit the interface or the link
	// mode (more queues than the interface has, several with Queue set or
	// on the UDP link).
	ErrQueues = errors.New("bad queue count")
	// ErrUnreachable: AHAttr found no way to the destination through this
	// port (wrong family, other interface, no ARP/ND answer).
	ErrUnreachable = errors.New("destination unreachable")
	// ErrClosed: the Port was closed.
	ErrClosed = errors.New("port closed")
)

// portError is an error with a one-sentence message that matches a kind
// (one of the Err values) and, when there is one, its cause.
type portError struct {
	msg   string
	kind  error
	cause error
}

func (e *portError) Error() string { return e.msg }

func (e *portError) Unwrap() []error {
	if e.cause == nil {
		return []error{e.kind}
	}
	return []error{e.kind, e.cause}
}

func errorf(kind, cause error, format string, args ...any) error {
	return &portError{msg: fmt.Sprintf(format, args...), kind: kind, cause: cause}
}

// Direction says which way a frame passed the link (Options.Tap).
type Direction uint8

// Frame directions.
const (
	RX Direction = iota + 1 // received from the link
	TX                      // handed to the link
)

// String returns "rx" or "tx".
func (d Direction) String() string {
	if d == TX {
		return "tx"
	}
	return "rx"
}

// DefaultBusyPoll is the kernel busy-poll time (xdp.Options.BusyPoll) of
// an AF_XDP link under a spinning or adaptive engine, unless Options.XDP
// sets one.
const DefaultBusyPoll = 20 * time.Microsecond

// Options configure Open. The zero value opens queue 0 in auto mode.
type Options struct {
	// Mode is ModeAuto (or empty), ModeXDP or ModeUDP.
	Mode Mode
	// Queue is the receive queue the AF_XDP socket binds to (XDP only)
	// when the device uses one queue. Frames arriving on other queues go
	// to the kernel.
	Queue int
	// Queues is the number of receive queues the device uses, one engine
	// (loop, AF_XDP socket and transmit ring) on each of queues 0 to
	// Queues-1, with one steering program for all (XDP only; the UDP link
	// has one). Zero means the interface's queue count capped by the CPUs
	// the process may use (GOMAXPROCS), or one when Queue is set.
	Queues int
	// Addr is the local address of the UDP link; it must be an address of
	// the interface (on a loopback interface, any address of its
	// prefixes, such as 127.0.0.2). Default: the first IPv4 address, else
	// the first global IPv6 address. Its GID is added to the GID table if
	// the interface does not list it. Ignored by the XDP link.
	Addr netip.Addr
	// Name is the device name (default "sroce_" + the interface name).
	Name string
	// XDP tunes the AF_XDP socket; the zero value is a good default.
	XDP xdp.Options
	// StrictAuto makes ModeAuto fall back to the UDP link only when
	// AF_XDP is not permitted (no privileges, or EPERM/EACCES from the
	// kernel); any other AF_XDP failure (the interface's queue is busy,
	// the driver refuses, ...) fails Open with its sentence. The daemon
	// sets it: a link it was not asked for must not hide a fault.
	StrictAuto bool
	// AllowDown opens the port even when the interface is down or has no
	// carrier (port state DOWN), for inspection. By default Open refuses.
	AllowDown bool
	// ResolveTimeout bounds neighbour resolution in AHAttr when its
	// context has no deadline (default netif.DefaultResolveTimeout, 3s).
	ResolveTimeout time.Duration
	// Tap, if set, sees every frame the device receives from and hands to
	// the link, on the device loop goroutine (with several queues, on each
	// queue's loop: concurrently). The frame is only valid
	// during the call; Tap must be quick and must not call back into the
	// device. The tapped link keeps every capability of the link under
	// it, the lending path included: on AF_XDP the frames Tap sees lie in
	// the socket's UMEM, and none is copied for it.
	Tap func(dir Direction, frame []byte)
	// Clock and Rand are passed to roce.Open (nil: system clock, random
	// seed).
	Clock roce.Clock
	Rand  rand.Source
	// Engine and SpinFor are passed to roce.Open: how the device loop
	// waits for work (zero: chosen by the CPUs the process may use).
	Engine  roce.EngineMode
	SpinFor time.Duration
}

// Port is a roce.Device running on a network interface, with what it needs
// of the interface: the link, the GID table, the port state. Its methods
// may be called from any goroutine.
type Port struct {
	dev   *roce.Device
	kind  *LinkKind   // the kind of its links (the table's entry)
	links []roce.Link // the links under any Tap, by queue
	// closeShared releases what the links share once they are closed
	// (Links.Close), or is nil.
	closeShared func() error
	attach      string // Links.Attach
	h           *netif.Handle
	ifname      string
	ifindex     int
	mac         net.HardwareAddr
	mtu         int
	linkMode    string
	reason      string
	local       netip.Addr // the UDP link's address
	resolveT    time.Duration

	cancel    context.CancelFunc
	loopDone  chan struct{}
	watchDone chan struct{}
	closeOnce sync.Once
	closeErr  error

	mu       sync.Mutex
	gidt     *netif.GIDTable
	active   bool
	up       bool // administratively up (the last link event's IFF_UP)
	lost     chan struct{}
	lostErr  error
	watchErr error
}

// Open opens a sroce device on the network interface ifname of the calling
// thread's network namespace and starts it (see the package documentation).
// ctx bounds the opening only; the Port lives until Close. Errors are one
// sentence and match ErrNoInterface, ErrDown, ErrNotPermitted, ErrNoAddress,
// ErrQueues or ErrXDP with errors.Is.
func Open(ctx context.Context, ifname string, opts Options) (*Port, error) {
	mode := opts.Mode
	if mode == "" {
		mode = ModeAuto
	}
	if _, err := ParseMode(string(mode)); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	h, err := netif.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("cannot read the network interfaces: %w", err)
	}
	p, err := open(ctx, h, ifname, mode, &opts)
	if err != nil {
		h.Close()
		return nil, err
	}
	return p, nil
}

func open(ctx context.Context, h *netif.Handle, ifname string, mode Mode, opts *Options) (*Port, error) {
	ifc, err := h.Lookup(ifname)
	if errors.Is(err, netif.ErrNoInterface) {
		return nil, errorf(ErrNoInterface, err, "there is no network interface named %q", ifname)
	}
	if err != nil {
		return nil, fmt.Errorf("cannot read interface %s: %w", ifname, err)
	}
	if !ifc.Active() && !opts.AllowDown {
		if !ifc.Up {
			return nil, errorf(ErrDown, nil, "interface %s is down (bring it up with: ip link set %s up)", ifname, ifname)
		}
		return nil, errorf(ErrDown, nil, "interface %s has no carrier (is the other end of the cable or veth down?)", ifname)
	}
	p := &Port{h: h, ifname: ifc.Name, ifindex: ifc.Index, mac: ifc.MAC, mtu: ifc.MTU,
		gidt: ifc.GIDTable(), active: ifc.Active(), up: ifc.Up, lost: make(chan struct{}),
		resolveT: opts.ResolveTimeout}

	if err := checkQueues(ifc.Name, mode, opts); err != nil {
		return nil, err
	}
	if err := p.openLinks(ifc, mode, opts); err != nil {
		return nil, err
	}

	links := make([]roce.Link, len(p.links))
	for i, l := range p.links {
		links[i] = l
		if opts.Tap != nil {
			t, err := newTapLink(l, opts.Tap)
			if err != nil {
				p.closeLinks()
				return nil, fmt.Errorf("cannot tap the %s link of %s: %w", p.linkMode, ifname, err)
			}
			links[i] = t
		}
	}
	name := opts.Name
	if name == "" {
		name = "sroce_" + ifc.Name
	}
	dev, err := roce.OpenLinks(links, &roce.Options{Name: name, Clock: opts.Clock, Rand: opts.Rand,
		Engine: opts.Engine, SpinFor: opts.SpinFor,
		GIDs: gidArray(p.gidt)})
	if err != nil {
		p.closeLinks()
		return nil, fmt.Errorf("cannot open the device on %s: %w", ifname, err)
	}
	p.dev = dev
	if !p.deliversToSelf() {
		// The kernel's stack never sees this device's frames: to the
		// devices of this process on other interfaces of the namespace
		// they go in process, as the stack would loop them.
		dev.JoinHost("netns " + h.NamespaceID())
	}

	runCtx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	events, err := h.Watch(runCtx, ifc.Name)
	if err != nil {
		cancel()
		dev.Close()
		if p.closeShared != nil {
			p.closeShared()
		}
		return nil, fmt.Errorf("cannot follow the link state of %s: %w", ifname, err)
	}
	p.loopDone = make(chan struct{})
	p.watchDone = make(chan struct{})
	if !p.active {
		dev.PortDown()
	}
	go p.loop(runCtx)
	go p.watch(events)
	return p, nil
}

// closeLinks closes the links opened for the device and the steering
// program of several queues.
func (p *Port) closeLinks() {
	for _, l := range p.links {
		l.Close()
	}
	if p.closeShared != nil {
		p.closeShared()
	}
}

// checkQueues refuses a queue count (Options.Queues) that cannot work,
// whatever link auto mode would pick.
func checkQueues(ifname string, mode Mode, opts *Options) error {
	q := opts.Queues
	switch {
	case q < 0:
		return errorf(ErrQueues, nil, "%d queues asked for on %s: the count must be positive", q, ifname)
	case q <= 1:
		return nil
	case q > roce.MaxEngines:
		return errorf(ErrQueues, nil, "%d queues asked for on %s: a device takes at most %d", q, ifname, roce.MaxEngines)
	case opts.Queue != 0:
		return errorf(ErrQueues, nil, "%d queues and queue %d asked for on %s: a device on several queues uses queues 0 to %d", q, opts.Queue, ifname, q-1)
	case mode != ModeAuto && !kindOf(mode).MultiQueue:
		return errorf(ErrQueues, nil, "%d queues asked for on %s: %s has one", q, ifname, kindOf(mode).Title)
	}
	if n, err := xdp.QueueCount(ifname); err == nil && q > n {
		return errorf(ErrQueues, nil, "%d queues asked for, and %s has %d receive queues", q, ifname, n)
	}
	return nil
}

// queueCount is the number of queues the device uses (Options.Queues,
// checked by checkQueues).
func queueCount(ifname string, opts *Options) int {
	if opts.Queues > 0 {
		return opts.Queues
	}
	if opts.Queue != 0 {
		return 1
	}
	n, err := xdp.QueueCount(ifname)
	if err != nil || n < 1 {
		return 1
	}
	return max(1, min(n, runtime.GOMAXPROCS(0), roce.MaxEngines))
}

// udpAddr picks the UDP link's address.
func udpAddr(ifc *netif.Interface, want netip.Addr) (netip.Addr, error) {
	if want.IsValid() {
		want = want.Unmap()
		for _, a := range ifc.Addrs {
			if a.Prefix.Addr() == want || (want.IsLoopback() && a.Prefix.Contains(want)) {
				return want, nil
			}
		}
		return netip.Addr{}, errorf(ErrNoAddress, nil, "%v is not an address of interface %s", want, ifc.Name)
	}
	if a := ifc.IPv4(); a.IsValid() {
		return a, nil
	}
	for _, a := range ifc.Addrs {
		ip := a.Prefix.Addr()
		if ip.Is6() && !ip.IsLinkLocalUnicast() && !a.Tentative() {
			return ip, nil
		}
	}
	return netip.Addr{}, errorf(ErrNoAddress, nil, "interface %s has no IPv4 or global IPv6 address for the UDP link to bind to", ifc.Name)
}

// isLoopback reports whether ifc is a loopback interface: AF_XDP cannot
// serve two engines on it (one queue, both ends on the same socket).
func isLoopback(ifc *netif.Interface) bool {
	if ifc.Name == "lo" {
		return true
	}
	for _, a := range ifc.Addrs {
		if !a.Prefix.Addr().IsLoopback() {
			return false
		}
	}
	return len(ifc.Addrs) > 0
}

// gidArray returns the first roce.GIDTableLen entries of t, by index.
func gidArray(t *netif.GIDTable) []bth.GID {
	gids := make([]bth.GID, roce.GIDTableLen)
	for _, e := range t.Entries() {
		if e.Index < len(gids) {
			gids[e.Index] = e.GID
		}
	}
	return gids
}

// loop runs the device until Close, and notes a link failure.
func (p *Port) loop(ctx context.Context) {
	defer close(p.loopDone)
	err := p.dev.Run(ctx)
	if err != nil && ctx.Err() == nil {
		p.lose(fmt.Errorf("the %s link of %s failed: %w", p.linkMode, p.ifname, err))
	}
}

// watch follows the interface's link events: port state and addresses.
func (p *Port) watch(events <-chan netif.LinkEvent) {
	defer close(p.watchDone)
	for ev := range events {
		switch ev.Kind {
		case netif.EventLink:
			p.setActive(ev)
		case netif.EventAddrAdded, netif.EventAddrRemoved:
			p.mu.Lock()
			changed := p.gidt.Apply(ev)
			var gids []bth.GID
			if changed {
				gids = gidArray(p.gidt)
			}
			p.mu.Unlock()
			set := false
			for i, g := range gids {
				if cur, err := p.dev.QueryGID(i); err == nil && cur != g {
					p.dev.SetGID(i, g)
					set = true
				}
			}
			if set {
				p.dev.GIDChanged()
			}
		case netif.EventRemoved:
			p.mu.Lock()
			was := p.active
			p.active = false
			p.mu.Unlock()
			// Why first: a goroutine polling a CQ may see the flushed
			// completions the moment PortDown makes them.
			p.lose(fmt.Errorf("interface %s was deleted", p.ifname))
			if was {
				p.dev.PortDown()
			}
		case netif.EventError:
			p.mu.Lock()
			p.watchErr = ev.Err
			p.mu.Unlock()
		}
	}
}

// setActive applies the port state of a link event: the port follows the
// interface between DOWN and ACTIVE (roce.Device.PortDown and PortUp post
// the asynchronous events) and stays usable: the link, the device and its
// QPs outlive the fall, as an rxe device outlives its netdev going down.
func (p *Port) setActive(ev netif.LinkEvent) {
	now := ev.Active()
	p.mu.Lock()
	was := p.active
	p.active, p.up = now, ev.Up
	p.mu.Unlock()
	switch {
	case was && !now:
		p.dev.PortDown()
	case !was && now:
		p.dev.PortUp()
	}
}

// DownErr says why the port is DOWN (matching ErrDown): the interface went
// down or lost its carrier, or was deleted; nil while it is ACTIVE. A
// program that would rather fail than wait for the link to come back (a
// benchmark, a tool) checks it beside Lost.
func (p *Port) DownErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active {
		return nil
	}
	if p.lostErr != nil && !errors.Is(p.lostErr, ErrClosed) {
		return p.lostErr
	}
	if !p.up {
		return errorf(ErrDown, nil, "interface %s went down", p.ifname)
	}
	return errorf(ErrDown, nil, "interface %s lost its carrier (the other end went down)", p.ifname)
}

// lose records why the port became unusable and closes Lost, once.
func (p *Port) lose(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lostErr != nil {
		return
	}
	p.lostErr = errorf(ErrDown, err, "%s", err.Error())
	close(p.lost)
}

// Close stops the device loop and the watch, closes the device and its
// link (the AF_XDP socket with its UMEM and steering program, or the UDP
// socket) and releases the netlink handle. It is idempotent.
func (p *Port) Close() error {
	p.closeOnce.Do(func() {
		p.cancel()
		<-p.loopDone
		p.closeErr = p.dev.Close()
		if errors.Is(p.closeErr, roce.ErrClosed) {
			p.closeErr = nil
		}
		if p.closeShared != nil {
			// The device closed the links; what they share (a steering
			// program) goes.
			p.closeErr = errors.Join(p.closeErr, p.closeShared())
		}
		<-p.watchDone
		p.h.Close()
		p.mu.Lock()
		if p.lostErr == nil {
			p.lostErr = ErrClosed
			close(p.lost)
		}
		p.mu.Unlock()
	})
	return p.closeErr
}

// Device returns the running device.
func (p *Port) Device() *roce.Device { return p.dev }

// Ifname returns the interface name.
func (p *Port) Ifname() string { return p.ifname }

// Ifindex returns the interface index.
func (p *Port) Ifindex() int { return p.ifindex }

// MAC returns the interface's Ethernet address (for the UDP link too; the
// frames the UDP link synthesizes carry an address of its own).
func (p *Port) MAC() net.HardwareAddr { return p.mac }

// MTU returns the interface MTU at Open.
func (p *Port) MTU() int { return p.mtu }

// PathMTU returns the port's active MTU in bytes, as rxe computes it from
// the link MTU (1500 gives 1024).
func (p *Port) PathMTU() int { return p.dev.QueryPort().ActiveMTU.Bytes() }

// ActiveMTU returns the port's active MTU as the verbs enum.
func (p *Port) ActiveMTU() verbs.MTU { return p.dev.QueryPort().ActiveMTU }

// LinkMode returns LinkXDPCopy, LinkXDPZeroCopy or LinkUDP.
func (p *Port) LinkMode() string { return p.linkMode }

// Reason says why the link mode was chosen, e.g. "not root: AF_XDP needs
// CAP_NET_RAW, CAP_BPF" or the AF_XDP error that made auto mode fall back.
func (p *Port) Reason() string { return p.reason }

// LocalAddr returns the address the UDP link is bound to (invalid for
// XDP).
func (p *Port) LocalAddr() netip.Addr { return p.local }

// Kind returns the kind of the port's links (an entry of Kinds).
func (p *Port) Kind() LinkKind { return *p.kind }

// XDPLink returns the AF_XDP link (queue 0's), or nil on another link.
func (p *Port) XDPLink() *xdp.Link {
	if x := p.XDPLinks(); x != nil {
		return x[0]
	}
	return nil
}

// XDPLinks returns the AF_XDP link of every queue the device uses, by
// queue, or nil on another link.
func (p *Port) XDPLinks() []*xdp.Link {
	var out []*xdp.Link
	for _, l := range p.links {
		if x, ok := l.(*xdp.Link); ok {
			out = append(out, x)
		}
	}
	return out
}

// Queues returns the number of queues (engines) the device uses.
func (p *Port) Queues() int { return len(p.links) }

// UDPLink returns the UDP link, or nil on another link.
func (p *Port) UDPLink() *udplink.Link {
	u, _ := p.links[0].(*udplink.Link)
	return u
}

// XDPAttach returns how the steering program is attached ("driver" or
// "generic"), or "" on a link without one.
func (p *Port) XDPAttach() string { return p.attach }

// GIDs returns the valid entries of the device's GID table (indexes below
// roce.GIDTableLen), in index order.
func (p *Port) GIDs() []netif.GIDEntry {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []netif.GIDEntry
	for _, e := range p.gidt.Entries() {
		if e.Index < roce.GIDTableLen {
			out = append(out, e)
		}
	}
	return out
}

// GID returns the GID at index, or an error naming the valid indexes.
func (p *Port) GID(index int) (bth.GID, error) {
	g, err := p.dev.QueryGID(index)
	if err == nil && !g.IsZero() {
		return g, nil
	}
	var idx []string
	for _, e := range p.GIDs() {
		idx = append(idx, fmt.Sprint(e.Index))
	}
	return bth.GID{}, fmt.Errorf("GID index %d is empty on %s (valid indexes: %s)", index, p.dev.Name(), strings.Join(idx, ", "))
}

// DefaultGIDIndex returns the GID index a tool uses when none is given:
// the UDP link's address, else the first IPv4 GID (rxe's index 1 on a
// usual interface), else the first IPv6 GID other than the default one,
// else 0.
func (p *Port) DefaultGIDIndex() int { return DefaultGIDIndex(p.GIDs(), p.local) }

// DefaultGIDIndex is Port.DefaultGIDIndex for a GID table given as its
// entries (a daemon's device, read through its client) and the one address
// the link sends from, if it is bound to one (else invalid).
func DefaultGIDIndex(gids []netif.GIDEntry, local netip.Addr) int {
	if local.IsValid() {
		for _, e := range gids {
			if e.GID.Addr().Unmap() == local {
				return e.Index
			}
		}
	}
	for _, e := range gids {
		if e.GID.IsIPv4() {
			return e.Index
		}
	}
	for _, e := range gids {
		if !e.Default {
			return e.Index
		}
	}
	return 0
}

// State returns the port state: verbs.PortActive while the interface is up
// with carrier, verbs.PortDown otherwise.
func (p *Port) State() verbs.PortState {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.active {
		return verbs.PortActive
	}
	return verbs.PortDown
}

// LinkDowned returns how many times the port went from ACTIVE to DOWN
// since Open, or its link failed: the device's link_downed counter, which
// Device.PortDown counts.
func (p *Port) LinkDowned() uint64 { return p.dev.Counter(verbs.CntLinkDowned) }

// Lost is closed when the port becomes unusable for good: the interface
// was deleted (or left the namespace), the link failed, or Close was
// called. Err then says which. An interface that goes down or loses its
// carrier does not close it: the port is DOWN (State) until the link comes
// back. Programs waiting for completions select on it to fail with a clear
// error instead of waiting out their timeouts.
func (p *Port) Lost() <-chan struct{} { return p.lost }

// Err returns why Lost was closed (matching ErrDown or ErrClosed), or nil
// while the port is usable (ACTIVE or DOWN).
func (p *Port) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lostErr
}

// NodeGUID returns the node GUID rxe derives from the MAC address: the
// modified EUI-64 (universal/local bit flipped, ff:fe in the middle).
func (p *Port) NodeGUID() [8]byte { return NodeGUID(p.mac) }

// NodeGUID returns the modified EUI-64 of a 6-byte MAC address, as rxe
// makes its node GUID; zero for other lengths.
func NodeGUID(mac net.HardwareAddr) [8]byte {
	var g [8]byte
	if len(mac) != 6 {
		return g
	}
	g = [8]byte{mac[0] ^ 2, mac[1], mac[2], 0xff, 0xfe, mac[3], mac[4], mac[5]}
	return g
}

// FormatGUID writes a GUID as ibv_devinfo does: "5254:00ff:fe12:3456".
func FormatGUID(g [8]byte) string {
	return fmt.Sprintf("%02x%02x:%02x%02x:%02x%02x:%02x%02x", g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7])
}
