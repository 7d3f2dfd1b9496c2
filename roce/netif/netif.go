package netif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netlink/nl"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/verbs"
)

// ErrNoInterface is returned (wrapped) when no interface has the given
// name in the handle's network namespace.
var ErrNoInterface = errors.New("no such network interface")

// errClosed is returned by the methods of a closed Handle.
var errClosed = errors.New("handle is closed")

// Handle reads interfaces, neighbours and routes of one network namespace.
// Its methods may be called from any goroutine.
type Handle struct {
	mu  sync.RWMutex // held for reading by requests, for writing by Close
	nl  *netlink.Handle
	get map[int]*nl.SocketHandle // for requests the library lacks (getNeigh)
	ns  netns.NsHandle           // the namespace, for sockets made later (Watch, probes)

	noNTFUse bool // tests: resolve as an unprivileged process would
}

// NewHandle opens a Handle on the calling thread's network namespace.
func NewHandle() (*Handle, error) {
	ns, err := netns.Get()
	if err != nil {
		return nil, fmt.Errorf("netif: open own network namespace: %w", err)
	}
	return newHandle(ns)
}

// NamespaceID names the handle's network namespace uniquely on the host
// (its device and inode numbers): two handles with the same ID are in one
// namespace.
func (h *Handle) NamespaceID() string { return h.ns.UniqueId() }

// NewHandleAt opens a Handle on the network namespace at path (for example
// /run/netns/NAME, nsutil.Namespace.Path, or /proc/PID/ns/net). A
// namespace other than the caller's needs CAP_SYS_ADMIN.
func NewHandleAt(path string) (*Handle, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("netif: open network namespace: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	return newHandle(ns)
}

func newHandle(ns netns.NsHandle) (*Handle, error) {
	var (
		nh  *netlink.Handle
		get *nl.NetlinkSocket
	)
	err := inNetns(ns, func() (err error) {
		if nh, err = netlink.NewHandle(unix.NETLINK_ROUTE); err != nil {
			return err
		}
		if get, err = nl.GetNetlinkSocketAt(netns.None(), netns.None(), unix.NETLINK_ROUTE); err != nil {
			nh.Close()
		}
		return err
	})
	if err != nil {
		ns.Close()
		return nil, fmt.Errorf("netif: netlink socket: %w", err)
	}
	return &Handle{nl: nh, get: map[int]*nl.SocketHandle{unix.NETLINK_ROUTE: {Socket: get}}, ns: ns}, nil
}

// Close releases the handle. Watches started from it keep running until
// their context ends.
func (h *Handle) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.nl == nil {
		return nil
	}
	h.nl.Close()
	h.nl = nil
	h.get[unix.NETLINK_ROUTE].Close()
	return h.ns.Close()
}

// do runs fn with the netlink handle, unless the Handle is closed (a
// closed netlink.Handle would quietly open sockets in the calling thread's
// namespace instead).
func (h *Handle) do(fn func(nh *netlink.Handle) error) error {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.nl == nil {
		return errClosed
	}
	return fn(h.nl)
}

// inNetns runs fn on a thread in the network namespace ns, for creating
// sockets there: sockets stay in the namespace they were created in. When
// ns is the namespace the process's threads are in, fn runs on a helper
// thread without any switch (and without privileges); otherwise the helper
// thread enters ns (which needs CAP_SYS_ADMIN) and leaves it again
// afterwards, and is discarded if leaving fails.
func inNetns(ns netns.NsHandle, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := netns.Get()
		if err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("open own network namespace: %w", err)
			return
		}
		defer orig.Close()
		if orig.Equal(ns) {
			err := fn()
			runtime.UnlockOSThread()
			done <- err
			return
		}
		if err := netns.Set(ns); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("enter network namespace: %w", err)
			return
		}
		err = fn()
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		} // else: the goroutine exits locked and the runtime ends the thread.
		done <- err
	}()
	return <-done
}

// dumpAttempts bounds how often a dump is repeated while the kernel flags
// it as interrupted (NLM_F_DUMP_INTR: the table changed while it was read).
const dumpAttempts = 5

// retryDump runs the dump fn again while its result is interrupted.
func retryDump[T any](fn func() ([]T, error)) ([]T, error) {
	for attempt := 1; ; attempt++ {
		r, err := fn()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return r, err
		}
		if attempt == dumpAttempts {
			return nil, fmt.Errorf("dump interrupted by concurrent changes %d times: %w", attempt, err)
		}
	}
}

// OperState is an interface's operational state (RFC 2863, IF_OPER_*), as
// `ip link` shows it after "state".
type OperState uint8

// Operational states.
const (
	OperUnknown        OperState = netlink.OperUnknown
	OperNotPresent     OperState = netlink.OperNotPresent
	OperDown           OperState = netlink.OperDown
	OperLowerLayerDown OperState = netlink.OperLowerLayerDown
	OperTesting        OperState = netlink.OperTesting
	OperDormant        OperState = netlink.OperDormant
	OperUp             OperState = netlink.OperUp
)

// String returns the state as `ip link` prints it (UP, DOWN,
// LOWERLAYERDOWN, ...).
func (s OperState) String() string {
	switch s {
	case OperUnknown:
		return "UNKNOWN"
	case OperNotPresent:
		return "NOTPRESENT"
	case OperDown:
		return "DOWN"
	case OperLowerLayerDown:
		return "LOWERLAYERDOWN"
	case OperTesting:
		return "TESTING"
	case OperDormant:
		return "DORMANT"
	case OperUp:
		return "UP"
	}
	return fmt.Sprintf("OperState(%d)", uint8(s))
}

// Addr is an IP address of an interface.
type Addr struct {
	Prefix netip.Prefix // the address with its prefix length
	Scope  uint8        // unix.RT_SCOPE_UNIVERSE (global), RT_SCOPE_LINK, RT_SCOPE_HOST
	Flags  uint32       // unix.IFA_F_* (secondary, tentative, dadfailed, ...)
}

// Tentative reports whether the address is still undergoing IPv6 duplicate
// address detection (it cannot be bound to yet).
func (a Addr) Tentative() bool { return a.Flags&unix.IFA_F_TENTATIVE != 0 }

// String returns the address with its prefix length.
func (a Addr) String() string { return a.Prefix.String() }

// addrFrom converts an address as the netlink library reads it: IP is the
// interface's own address (IFA_LOCAL when the kernel sent it, else
// IFA_ADDRESS), and on a point-to-point link Peer carries the prefix
// length.
func addrFrom(a netlink.Addr) (Addr, error) {
	if a.IPNet == nil {
		return Addr{}, errors.New("netif: address message without an address")
	}
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok {
		return Addr{}, fmt.Errorf("netif: address of %d bytes", len(a.IP))
	}
	mask := a.Mask
	if a.Peer != nil {
		mask = a.Peer.Mask
	}
	bits, _ := mask.Size()
	return Addr{Prefix: netip.PrefixFrom(ip, bits), Scope: uint8(a.Scope), Flags: uint32(a.Flags)}, nil
}

// Interface is a network interface with what the RoCE engine needs of it.
type Interface struct {
	Name      string
	Index     int
	MAC       net.HardwareAddr
	MTU       int       // the interface MTU (largest IP packet)
	Up        bool      // administratively up (IFF_UP)
	Carrier   bool      // the lower layer is up (IFF_LOWER_UP)
	OperState OperState // RFC 2863 operational state
	Kind      string    // link kind, e.g. "veth"; empty for physical NICs
	RxQueues  int       // number of receive queues (0 if not reported)
	// Addrs holds the IPv4 addresses, then the IPv6 addresses, each in
	// the kernel's list order.
	Addrs []Addr
	// GIDs is the GID table as rxe would build it for this interface at
	// device creation (see the package documentation), in index order.
	// Without a MAC address there is no default GID and index 0 is
	// missing; otherwise GIDs[i].Index == i.
	GIDs []GIDEntry
}

// Active reports whether a RoCE port on this interface is ACTIVE: the
// interface is up and has carrier, rxe's condition.
func (i *Interface) Active() bool { return i.Up && i.Carrier }

// PathMTU returns the path MTU rxe would use on this interface.
func (i *Interface) PathMTU() int { return verbs.PortMTU(i.MTU).Bytes() }

// GID returns the GID at index, with an error naming the valid indexes
// when there is none.
func (i *Interface) GID(index int) (bth.GID, error) {
	for _, e := range i.GIDs {
		if e.Index == index {
			return e.GID, nil
		}
	}
	if len(i.GIDs) == 0 {
		return bth.GID{}, fmt.Errorf("netif: %s has no GIDs", i.Name)
	}
	return bth.GID{}, fmt.Errorf("netif: %s has no GID at index %d (it has %d..%d)",
		i.Name, index, i.GIDs[0].Index, i.GIDs[len(i.GIDs)-1].Index)
}

// GIDIndex returns the index of g in the table.
func (i *Interface) GIDIndex(g bth.GID) (int, bool) {
	for _, e := range i.GIDs {
		if e.GID == g {
			return e.Index, true
		}
	}
	return 0, false
}

// IPv4 returns the interface's first IPv4 address (the primary one), or
// an invalid Addr.
func (i *Interface) IPv4() netip.Addr {
	for _, a := range i.Addrs {
		if a.Prefix.Addr().Is4() {
			return a.Prefix.Addr()
		}
	}
	return netip.Addr{}
}

// GIDTable returns a GIDTable initialized from this interface, for keeping
// up to date with Watch events.
func (i *Interface) GIDTable() *GIDTable {
	return NewGIDTable(i.MAC, addrsOf(i.Addrs))
}

func addrsOf(as []Addr) []netip.Addr {
	ips := make([]netip.Addr, 0, len(as))
	for _, a := range as {
		ips = append(ips, a.Prefix.Addr())
	}
	return ips
}

// Lookup returns the interface named ifname in the handle's namespace with
// its addresses and GID table.
func (h *Handle) Lookup(ifname string) (*Interface, error) {
	l, err := h.link(ifname)
	if err != nil {
		return nil, err
	}
	ifc := &Interface{
		Name:      l.Name,
		Index:     l.Index,
		MAC:       l.MAC,
		MTU:       l.MTU,
		Up:        l.Flags&unix.IFF_UP != 0,
		Carrier:   l.Flags&unix.IFF_LOWER_UP != 0,
		OperState: l.OperState,
		Kind:      l.Kind,
		RxQueues:  l.RxQueues,
	}
	if ifc.Addrs, err = h.addrs(l.Index); err != nil {
		return nil, fmt.Errorf("netif: addresses of %s: %w", ifname, err)
	}
	ifc.GIDs = ifc.GIDTable().Entries()
	return ifc, nil
}

// addrs returns the IPv4 then the IPv6 addresses of the interface, each
// in the kernel's list order.
func (h *Handle) addrs(index int) ([]Addr, error) {
	var all []Addr
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		var as []netlink.Addr
		err := h.do(func(nh *netlink.Handle) (err error) {
			as, err = retryDump(func() ([]netlink.Addr, error) {
				return nh.AddrList(&netlink.Device{LinkAttrs: netlink.LinkAttrs{Index: index}}, fam)
			})
			return err
		})
		if err != nil {
			return nil, err
		}
		for _, a := range as {
			addr, err := addrFrom(a)
			if err != nil {
				return nil, err
			}
			all = append(all, addr)
		}
	}
	return all, nil
}

// link is what sroce reads of a network interface.
type link struct {
	Index     int
	Name      string
	Flags     uint32 // IFF_*, including IFF_LOWER_UP (carrier)
	MTU       int
	MAC       net.HardwareAddr
	OperState OperState
	Kind      string // IFLA_INFO_KIND; empty for physical NICs
	RxQueues  int
}

// linkFrom converts a link as the netlink library reads it.
func linkFrom(l netlink.Link) link {
	a := l.Attrs()
	mac := a.HardwareAddr
	if mac == nil && (a.EncapType == "ether" || a.EncapType == "loopback") {
		// The library leaves an all-zero hardware address out (lo has
		// one); these types always carry six bytes, and the default GID
		// and node GUID are made from them as rxe makes them.
		mac = make(net.HardwareAddr, 6)
	}
	kind := l.Type()
	switch l.(type) {
	case *netlink.Device: // no IFLA_INFO_KIND
		kind = ""
	case *netlink.Tuntap:
		kind = "tun"
	}
	return link{
		Index:     a.Index,
		Name:      a.Name,
		Flags:     a.RawFlags,
		MTU:       a.MTU,
		MAC:       mac,
		OperState: OperState(a.OperState),
		Kind:      kind,
		RxQueues:  a.NumRxQueues,
	}
}

// link returns the link named ifname with an error that names it.
func (h *Handle) link(ifname string) (link, error) {
	var l netlink.Link
	err := h.do(func(nh *netlink.Handle) (err error) {
		l, err = nh.LinkByName(ifname)
		return err
	})
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		return link{}, fmt.Errorf("netif: %w %q in this network namespace", ErrNoInterface, ifname)
	}
	if err != nil {
		return link{}, fmt.Errorf("netif: %s: %w", ifname, err)
	}
	return linkFrom(l), nil
}

// linkByIndex returns the link with the given index; found is false when
// there is none.
func (h *Handle) linkByIndex(index int) (l link, found bool, err error) {
	var got netlink.Link
	err = h.do(func(nh *netlink.Handle) (err error) {
		got, err = nh.LinkByIndex(index)
		return err
	})
	if errors.As(err, &netlink.LinkNotFoundError{}) {
		return link{}, false, nil
	}
	if err != nil {
		return link{}, false, err
	}
	return linkFrom(got), true, nil
}

// Lookup returns the interface named ifname in the calling thread's
// network namespace (see Handle.Lookup).
func Lookup(ifname string) (*Interface, error) {
	h, err := NewHandle()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	return h.Lookup(ifname)
}
