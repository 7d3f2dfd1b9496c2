package netif

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/roce/netif/rtnl"
)

// ErrNoInterface is returned (wrapped) when no interface has the given
// name in the handle's network namespace.
var ErrNoInterface = errors.New("no such network interface")

// Handle reads interfaces, neighbours and routes of one network namespace.
// Its methods may be called from any goroutine.
type Handle struct {
	c     *rtnl.Conn
	nsfd  int // the namespace, for sockets made later (Watch)
	close sync.Once

	noNTFUse bool // tests: resolve as an unprivileged process would
}

// NewHandle opens a Handle on the calling thread's network namespace.
func NewHandle() (*Handle, error) {
	fd, err := unix.Open("/proc/thread-self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netif: open own network namespace: %w", err)
	}
	return newHandle(fd)
}

// NewHandleAt opens a Handle on the network namespace at path (for example
// /run/netns/NAME, nsutil.Namespace.Path, or /proc/PID/ns/net). A
// namespace other than the caller's needs CAP_SYS_ADMIN.
func NewHandleAt(path string) (*Handle, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netif: open network namespace: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	return newHandle(fd)
}

func newHandle(nsfd int) (*Handle, error) {
	c, err := rtnl.DialNetns(nsfd)
	if err != nil {
		unix.Close(nsfd)
		return nil, fmt.Errorf("netif: %w", err)
	}
	return &Handle{c: c, nsfd: nsfd}, nil
}

// Close releases the handle. Watches started from it keep running until
// their context ends.
func (h *Handle) Close() error {
	var err error
	h.close.Do(func() {
		err = h.c.Close()
		unix.Close(h.nsfd)
	})
	return err
}

// OperState is an interface's operational state (RFC 2863, IF_OPER_*), as
// `ip link` shows it after "state".
type OperState uint8

// Operational states.
const (
	OperUnknown        OperState = rtnl.OperUnknown
	OperNotPresent     OperState = rtnl.OperNotPresent
	OperDown           OperState = rtnl.OperDown
	OperLowerLayerDown OperState = rtnl.OperLowerLayerDown
	OperTesting        OperState = rtnl.OperTesting
	OperDormant        OperState = rtnl.OperDormant
	OperUp             OperState = rtnl.OperUp
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

func addrFrom(a rtnl.Address) Addr {
	return Addr{Prefix: a.Prefix, Scope: a.Scope, Flags: a.Flags}
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
func (i *Interface) PathMTU() int { return PathMTU(i.MTU) }

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
	ifc := interfaceFrom(l)
	for _, fam := range []uint8{unix.AF_INET, unix.AF_INET6} {
		addrs, err := h.c.Addrs(fam, l.Index)
		if err != nil {
			return nil, fmt.Errorf("netif: addresses of %s: %w", ifname, err)
		}
		for _, a := range addrs {
			ifc.Addrs = append(ifc.Addrs, addrFrom(a))
		}
	}
	ifc.GIDs = ifc.GIDTable().Entries()
	return ifc, nil
}

func interfaceFrom(l rtnl.Link) *Interface {
	return &Interface{
		Name:      l.Name,
		Index:     l.Index,
		MAC:       l.MAC,
		MTU:       l.MTU,
		Up:        l.Flags&unix.IFF_UP != 0,
		Carrier:   l.Flags&unix.IFF_LOWER_UP != 0,
		OperState: OperState(l.OperState),
		Kind:      l.Kind,
		RxQueues:  l.RxQueues,
	}
}

// link returns the link named ifname with an error that names it.
func (h *Handle) link(ifname string) (rtnl.Link, error) {
	l, err := h.c.LinkByName(ifname)
	if errors.Is(err, rtnl.ErrNoLink) {
		return l, fmt.Errorf("netif: %w %q in this network namespace", ErrNoInterface, ifname)
	}
	if err != nil {
		return l, fmt.Errorf("netif: %s: %w", ifname, err)
	}
	return l, nil
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
