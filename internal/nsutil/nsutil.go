// Package nsutil creates network namespaces joined by veth pairs for sroce's
// tests and for `sroce demo`, runs Go code and programs inside them, and
// removes them reliably.
//
// It is internal: the demo and the tests share it, and product code never
// imports tests/. Everything
// here needs root (CAP_SYS_ADMIN and CAP_NET_ADMIN); Available reports
// whether the process has what it takes, and tests call Skip first.
//
// # Namespaces
//
// New creates a named namespace, "<prefix>-<pid>-<n>", bind-mounted at
// /run/netns/NAME exactly as `ip netns add` does, so `ip netns list`,
// `ip -n NAME ...` and `ip netns exec NAME ...` see it while a test runs.
// Its loopback is up and IPv6 duplicate address detection is off (accept_dad
// 0), so IPv6 addresses are usable the moment they are added. Close unmounts
// and removes it; the kernel frees it (and destroys the veth ends inside)
// once no socket, process or thread uses it any more.
//
// # Running code inside
//
// A network namespace belongs to a thread, not to a process. Do runs a
// function on a thread locked to the namespace and puts the thread back
// afterwards (a thread that cannot be put back is discarded). Sockets are
// bound to the namespace of the thread that creates them and stay bound to
// it, so the usual pattern is to create sockets inside Do and use them from
// any goroutine afterwards:
//
//	var link *xdp.Link
//	err := ns.Do(func() (err error) {
//		link, err = xdp.OpenLink("veth0", 0, xdp.Options{})
//		return err
//	})
//	// link.ReadBatch / WriteBatch from any goroutine: the AF_XDP socket,
//	// its UMEM and the XDP program belong to the namespace.
//
// The same holds for UDP sockets (roce/udplink), netlink sockets
// (netif.NewHandle) and listening TCP sockets. Goroutines started inside Do
// do NOT run in the namespace: the Go runtime starts them on other threads.
// Go starts a goroutine that stays on a namespace thread for its whole
// life, for code that must create sockets over time.
//
// Exec and Start run programs inside a namespace (like `ip netns exec`,
// without the /sys remount: a program that reads /sys/class/net sees the
// namespace that mounted /sys; tools that use netlink or ioctls, such as
// ip, tc and ping, are unaffected).
//
// # Impairment (netem)
//
// SetNetem installs a netem qdisc with the tc program. Kernels built without
// sch_netem (CONFIG_NET_SCH_NETEM, missing on some CI machines) cannot do
// that, so NewPair can also impair the link in user space: with
// PairConfig.Impair set it joins A and B through a third namespace whose
// Forwarder copies frames between two veth pairs with AF_PACKET sockets and
// drops, duplicates, corrupts, delays and reorders them as netem would.
// ImpairAuto (the default) takes the qdisc where it works and the
// forwarder elsewhere; A and B see the same single Ethernet segment either
// way.
//
// # Cleanup
//
// Close removes what New and NewVeth created. Sweep removes namespaces
// left behind by killed processes (same prefix, creating pid no longer
// running). HandleSignals installs a SIGINT/SIGTERM handler that runs the
// caller's cleanups, closes every namespace this process still has, and
// exits, for long-running users such as `sroce demo`.
package nsutil

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// DefaultPrefix is the name prefix of namespaces made by New with an empty
// prefix: their names are sroce-<pid>-<n>.
const DefaultPrefix = "sroce"

// RunDir is where named namespaces are bind-mounted (as by iproute2).
const RunDir = "/run/netns"

// ErrNotPermitted is returned (wrapped) when the process lacks the
// privileges to create namespaces.
var ErrNotPermitted = errors.New("network namespaces and veth pairs need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)")

// Capability bits (linux/capability.h).
const (
	capNetAdmin = 12
	capSysAdmin = 21
)

// Available reports why namespaces cannot be created here, or nil: it
// checks the effective capabilities CAP_SYS_ADMIN and CAP_NET_ADMIN.
func Available() error {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fmt.Errorf("%w: cannot read capabilities: %w", ErrNotPermitted, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		hex, ok := strings.CutPrefix(line, "CapEff:")
		if !ok {
			continue
		}
		caps, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
		if err != nil {
			return fmt.Errorf("%w: cannot parse capabilities %q", ErrNotPermitted, line)
		}
		if caps&(1<<capSysAdmin) == 0 || caps&(1<<capNetAdmin) == 0 {
			return fmt.Errorf("%w; running as uid %d without them", ErrNotPermitted, os.Geteuid())
		}
		return nil
	}
	return fmt.Errorf("%w: no CapEff in /proc/self/status", ErrNotPermitted)
}

// TB is the part of testing.TB that Skip uses.
type TB interface {
	Helper()
	Skipf(format string, args ...any)
}

// Skip skips the test with a clear message when namespaces are not
// available.
func Skip(t TB) {
	t.Helper()
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// Namespace is a named network namespace.
type Namespace struct {
	name  string
	path  string
	owned bool

	mu     sync.Mutex
	fd     *os.File // the namespace, kept open for setns
	closed bool
}

// nsSeq numbers the namespaces New makes in this process.
var nsSeq atomic.Int64

// swept records the prefixes New has swept in this process.
var swept sync.Map

// New creates a network namespace named "<prefix>-<pid>-<n>" (prefix
// DefaultPrefix if empty), visible to `ip netns`, with loopback up and
// IPv6 duplicate address detection off. Close removes it. The first New
// with a given prefix in a process also removes that prefix's leftovers
// from dead processes (Sweep).
func New(prefix string) (*Namespace, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if strings.ContainsAny(prefix, "/\x00") {
		return nil, fmt.Errorf("nsutil: bad namespace prefix %q", prefix)
	}
	if _, done := swept.LoadOrStore(prefix, true); !done && Available() == nil {
		Sweep(prefix) // best effort; a failure here must not stop New
	}
	name := fmt.Sprintf("%s-%d-%d", prefix, os.Getpid(), nsSeq.Add(1))
	return NewNamed(name)
}

// NewNamed creates a network namespace with the given name (which must not
// exist yet), with loopback up and IPv6 duplicate address detection off.
func NewNamed(name string) (*Namespace, error) {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return nil, fmt.Errorf("nsutil: bad namespace name %q", name)
	}
	if err := Available(); err != nil {
		return nil, err
	}
	path := filepath.Join(RunDir, name)
	if err := createNetns(path); err != nil {
		return nil, fmt.Errorf("nsutil: create namespace %s: %w", name, err)
	}
	fd, err := os.Open(path)
	if err != nil {
		removeNetns(path)
		return nil, fmt.Errorf("nsutil: open namespace %s: %w", name, err)
	}
	ns := &Namespace{name: name, path: path, owned: true, fd: fd}
	register(ns)
	if err := ns.Do(ns.setup); err != nil {
		ns.Close()
		return nil, fmt.Errorf("nsutil: set up namespace %s: %w", name, err)
	}
	return ns, nil
}

// setup runs inside the new namespace: loopback up, DAD off.
func (ns *Namespace) setup() error {
	for _, p := range []string{
		"/proc/sys/net/ipv6/conf/all/accept_dad",
		"/proc/sys/net/ipv6/conf/default/accept_dad",
	} {
		// Missing when IPv6 is disabled; not an error.
		if err := os.WriteFile(p, []byte("0\n"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	c, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return err
	}
	defer c.Close()
	lo, err := c.LinkByName("lo")
	if err != nil {
		return err
	}
	return c.LinkSetUp(lo)
}

// Open returns the existing namespace /run/netns/NAME (made by anyone, for
// example `ip netns add`). Close on it only releases the file descriptor;
// the namespace stays.
func Open(name string) (*Namespace, error) {
	path := filepath.Join(RunDir, name)
	fd, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("nsutil: open namespace %s: %w", name, err)
	}
	return &Namespace{name: name, path: path, fd: fd}, nil
}

// Name returns the namespace's name (as `ip netns list` shows it).
func (ns *Namespace) Name() string { return ns.name }

// Path returns the namespace's file, /run/netns/NAME, for setns or
// netif.NewHandleAt.
func (ns *Namespace) Path() string { return ns.path }

// String returns the name.
func (ns *Namespace) String() string { return ns.name }

// file returns the open namespace file, or an error after Close.
func (ns *Namespace) file() (*os.File, error) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.closed {
		return nil, fmt.Errorf("nsutil: namespace %s is closed", ns.name)
	}
	return ns.fd, nil
}

// Close removes the namespace if New created it (unmounts /run/netns/NAME
// and deletes the file) and releases its file descriptor. The kernel frees
// the namespace, with its interfaces, when nothing uses it any more:
// close sockets created inside it first. Close is idempotent.
func (ns *Namespace) Close() error {
	ns.mu.Lock()
	if ns.closed {
		ns.mu.Unlock()
		return nil
	}
	ns.closed = true
	fd := ns.fd
	ns.mu.Unlock()
	unregister(ns)
	err := fd.Close()
	if ns.owned {
		if rerr := removeNetns(ns.path); rerr != nil {
			err = fmt.Errorf("nsutil: remove namespace %s: %w", ns.name, rerr)
		}
	}
	return err
}

// Do runs fn on an OS thread switched into the namespace and returns its
// error. fn runs on a new goroutine (the caller waits), so it must not call
// t.Fatal or runtime.Goexit; a panic in fn is re-raised in the caller. The
// thread is switched back to its original namespace afterwards; if that
// fails it is discarded. Sockets fn creates stay in the namespace.
func (ns *Namespace) Do(fn func() error) error {
	f, err := ns.file()
	if err != nil {
		return err
	}
	type result struct {
		err      error
		panicked bool
		value    any
	}
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("nsutil: open own namespace: %w", err)}
			return
		}
		defer orig.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			done <- result{err: fmt.Errorf("nsutil: enter namespace %s: %w", ns.name, err)}
			return
		}
		var r result
		func() {
			defer func() {
				if v := recover(); v != nil {
					r = result{panicked: true, value: v}
				}
			}()
			r.err = fn()
		}()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		} // else the goroutine exits locked and the runtime ends the thread.
		done <- r
	}()
	r := <-done
	if r.panicked {
		panic(r.value)
	}
	return r.err
}

// Go starts fn on a goroutine that runs inside the namespace for its whole
// life, for long-lived code that creates sockets as it goes. The goroutine
// is locked to its thread, which is discarded when fn returns. Goroutines
// that fn starts run outside the namespace. Go returns once the thread has
// entered the namespace.
func (ns *Namespace) Go(fn func()) error {
	f, err := ns.file()
	if err != nil {
		return err
	}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with fn
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			started <- fmt.Errorf("nsutil: enter namespace %s: %w", ns.name, err)
			return
		}
		started <- nil
		fn()
	}()
	return <-started
}

// Dial opens a routing netlink handle inside the namespace.
func (ns *Namespace) Dial() (*netlink.Handle, error) {
	var c *netlink.Handle
	err := ns.Do(func() (err error) {
		c, err = netlink.NewHandle(unix.NETLINK_ROUTE)
		return err
	})
	return c, err
}

// withConn runs fn with a netlink handle in the namespace.
func (ns *Namespace) withConn(fn func(c *netlink.Handle) error) error {
	c, err := ns.Dial()
	if err != nil {
		return err
	}
	defer c.Close()
	return fn(c)
}

// SetLinkUp brings the interface up or down (ip link set IFNAME up|down).
func (ns *Namespace) SetLinkUp(ifname string, up bool) error {
	return ns.withConn(func(c *netlink.Handle) error {
		l, err := c.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("nsutil: %s: %w", ns.name, err)
		}
		set := c.LinkSetDown
		if up {
			set = c.LinkSetUp
		}
		if err := set(l); err != nil {
			return fmt.Errorf("nsutil: %s: set %s up=%v: %w", ns.name, ifname, up, err)
		}
		return nil
	})
}

// SetMTU sets the interface's MTU.
func (ns *Namespace) SetMTU(ifname string, mtu int) error {
	return ns.withConn(func(c *netlink.Handle) error {
		l, err := c.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("nsutil: %s: %w", ns.name, err)
		}
		if err := c.LinkSetMTU(l, mtu); err != nil {
			return fmt.Errorf("nsutil: %s: set %s mtu %d: %w", ns.name, ifname, mtu, err)
		}
		return nil
	})
}

// AddAddr adds an address with prefix length to the interface. IPv6
// addresses are added without duplicate address detection.
func (ns *Namespace) AddAddr(ifname string, p netip.Prefix) error {
	return ns.withConn(func(c *netlink.Handle) error {
		l, err := c.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("nsutil: %s: %w", ns.name, err)
		}
		return addAddr(c, ns.name, l, p)
	})
}

// DelAddr removes an address from the interface.
func (ns *Namespace) DelAddr(ifname string, p netip.Prefix) error {
	return ns.withConn(func(c *netlink.Handle) error {
		l, err := c.LinkByName(ifname)
		if err != nil {
			return fmt.Errorf("nsutil: %s: %w", ns.name, err)
		}
		if err := c.AddrDel(l, nlAddr(p, 0)); err != nil {
			return fmt.Errorf("nsutil: %s: del %s from %s: %w", ns.name, p, ifname, err)
		}
		return nil
	})
}

func addAddr(c *netlink.Handle, nsName string, l netlink.Link, p netip.Prefix) error {
	var flags int
	if !p.Addr().Unmap().Is4() {
		flags = unix.IFA_F_NODAD
	}
	if err := c.AddrAdd(l, nlAddr(p, flags)); err != nil {
		return fmt.Errorf("nsutil: %s: add %s to %s: %w", nsName, p, l.Attrs().Name, err)
	}
	return nil
}

// nlAddr is p as an address to add or delete, without a broadcast address
// (as `ip addr add` without brd).
func nlAddr(p netip.Prefix, flags int) *netlink.Addr {
	ip := p.Addr().Unmap()
	return &netlink.Addr{
		IPNet:     &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(p.Bits(), ip.BitLen())},
		Flags:     flags,
		Broadcast: net.IPv4zero,
	}
}

// parsePid returns the pid in a name "<prefix>-<pid>-<n>".
func parsePid(name, prefix string) (int, bool) {
	rest, ok := strings.CutPrefix(name, prefix+"-")
	if !ok {
		return 0, false
	}
	pidStr, nStr, ok := strings.Cut(rest, "-")
	if !ok || !allDigits(pidStr) || !allDigits(nStr) {
		return 0, false
	}
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
