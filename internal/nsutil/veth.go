package nsutil

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// VethConfig describes a veth pair between two namespaces. Zero fields get
// defaults.
type VethConfig struct {
	// NameA and NameB are the interface names in namespaces A and B
	// (default "veth0" and "veth1"; the same name in both is allowed).
	NameA, NameB string
	// AddrA and AddrB are the addresses with prefix length of each end,
	// IPv4 and/or IPv6, added in this order (none: no address).
	AddrA, AddrB []netip.Prefix
	// MTU of both ends (default 1500). MTUB, if set, overrides B's.
	MTU, MTUB int
	// MACA and MACB are the Ethernet addresses (default: random).
	MACA, MACB net.HardwareAddr
	// Queues is the number of rx and tx queues of each end (0: the
	// kernel's default).
	Queues int
	// Down leaves both ends down instead of bringing them up.
	Down bool
}

// Veth is a veth pair between namespaces A and B: the name, interface
// index, MAC address, configured addresses and MTU of each end.
type Veth struct {
	A, B         *Namespace
	NameA, NameB string
	IndexA       int
	IndexB       int
	MACA, MACB   net.HardwareAddr
	AddrA, AddrB []netip.Prefix
	MTUA, MTUB   int

	parts []*Veth // the pairs behind A's and B's ends, if not one pair
	once  sync.Once
}

// NewVeth creates a veth pair with one end in a and the other in b, adds
// the addresses and brings both ends up. Deleting either namespace deletes
// the pair; Close deletes it explicitly.
func NewVeth(a, b *Namespace, cfg VethConfig) (*Veth, error) {
	if cfg.NameA == "" {
		cfg.NameA = "veth0"
	}
	if cfg.NameB == "" {
		cfg.NameB = "veth1"
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTUB == 0 {
		cfg.MTUB = cfg.MTU
	}
	fb, err := b.file()
	if err != nil {
		return nil, err
	}
	v := &Veth{A: a, B: b, NameA: cfg.NameA, NameB: cfg.NameB}
	err = a.withConn(func(c *netlink.Handle) error {
		// Sent from inside A: the first end is created there, the peer
		// directly in B (IFLA_NET_NS_FD), so names only need to be
		// unique within each namespace.
		attrs := netlink.NewLinkAttrs()
		attrs.Name, attrs.MTU, attrs.HardwareAddr = cfg.NameA, cfg.MTU, cfg.MACA
		attrs.NumTxQueues, attrs.NumRxQueues = cfg.Queues, cfg.Queues
		veth := netlink.NewVeth(attrs)
		veth.PeerName, veth.PeerMTU, veth.PeerHardwareAddr = cfg.NameB, uint32(cfg.MTUB), cfg.MACB
		veth.PeerNamespace = netlink.NsFd(fb.Fd())
		err := c.LinkAdd(veth)
		if err != nil {
			return fmt.Errorf("nsutil: create veth %s/%s <-> %s/%s: %w", a.name, cfg.NameA, b.name, cfg.NameB, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	setup := func(ns *Namespace, name string, addrs []netip.Prefix, index *int, mac *net.HardwareAddr, mtu *int) error {
		return ns.withConn(func(c *netlink.Handle) error {
			l, err := c.LinkByName(name)
			if err != nil {
				return fmt.Errorf("nsutil: %s: %w", ns.name, err)
			}
			*index, *mac, *mtu = l.Attrs().Index, l.Attrs().HardwareAddr, l.Attrs().MTU
			for _, p := range addrs {
				if err := addAddr(c, ns.name, l, p); err != nil {
					return err
				}
			}
			if !cfg.Down {
				if err := c.LinkSetUp(l); err != nil {
					return fmt.Errorf("nsutil: %s: set %s up: %w", ns.name, name, err)
				}
			}
			return nil
		})
	}
	err = errors.Join(
		setup(a, cfg.NameA, cfg.AddrA, &v.IndexA, &v.MACA, &v.MTUA),
		setup(b, cfg.NameB, cfg.AddrB, &v.IndexB, &v.MACB, &v.MTUB))
	if err == nil && !cfg.Down {
		err = errors.Join(waitReady(a, cfg.NameA), waitReady(b, cfg.NameB))
	}
	if err != nil {
		v.Close()
		return nil, err
	}
	v.AddrA = append([]netip.Prefix(nil), cfg.AddrA...)
	v.AddrB = append([]netip.Prefix(nil), cfg.AddrB...)
	return v, nil
}

// readyTimeout bounds how long NewVeth waits for an end to be usable.
const readyTimeout = 5 * time.Second

// waitReady waits until the interface has carrier and, when IPv6 is on in
// the namespace, an IPv6 link-local address that is no longer tentative
// (the kernel adds it, and finishes the DAD-less check, asynchronously
// after the link comes up).
func waitReady(ns *Namespace, name string) error {
	ipv6 := true
	if err := ns.Do(func() error {
		b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + name + "/disable_ipv6")
		ipv6 = err == nil && strings.TrimSpace(string(b)) == "0"
		return nil
	}); err != nil {
		return err
	}
	return ns.withConn(func(c *netlink.Handle) error {
		deadline := time.Now().Add(readyTimeout)
		for {
			l, err := c.LinkByName(name)
			if err != nil {
				return fmt.Errorf("nsutil: %s: %w", ns.name, err)
			}
			ready := l.Attrs().RawFlags&unix.IFF_LOWER_UP != 0
			if ready && ipv6 {
				addrs, err := c.AddrList(l, unix.AF_INET6)
				if errors.Is(err, netlink.ErrDumpInterrupted) {
					addrs = nil // the list changed while it was read: poll again
				} else if err != nil {
					return fmt.Errorf("nsutil: %s: %w", ns.name, err)
				}
				ready = false
				for _, a := range addrs {
					if a.IP.IsLinkLocalUnicast() && a.Flags&unix.IFA_F_TENTATIVE == 0 {
						ready = true
					}
				}
			}
			if ready {
				return nil
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("nsutil: %s: %s not ready (carrier, IPv6 link-local) after %v", ns.name, name, readyTimeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
}

// Close deletes the pair (both ends). It is idempotent, and not an error
// when a namespace holding the pair is already gone.
func (v *Veth) Close() error {
	var err error
	v.once.Do(func() {
		if v.parts != nil {
			var errs []error
			for _, p := range v.parts {
				errs = append(errs, p.Close())
			}
			err = errors.Join(errs...)
			return
		}
		err = v.A.withConn(func(c *netlink.Handle) error {
			l, err := c.LinkByName(v.NameA)
			if errors.As(err, &netlink.LinkNotFoundError{}) {
				return nil
			}
			if err != nil {
				return err
			}
			return c.LinkDel(l)
		})
		if err != nil && v.A.isClosed() {
			err = nil
		}
	})
	return err
}

func (ns *Namespace) isClosed() bool {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	return ns.closed
}

// Default addresses of NewPair.
var (
	DefaultAddrA = netip.MustParsePrefix("10.47.0.1/24")
	DefaultAddrB = netip.MustParsePrefix("10.47.0.2/24")
	// DefaultAddr6A and DefaultAddr6B are added when PairConfig.IPv6 is set
	// and no addresses are given (ULA prefix fd00:5352::/64).
	DefaultAddr6A = netip.MustParsePrefix("fd00:5352::1/64")
	DefaultAddr6B = netip.MustParsePrefix("fd00:5352::2/64")
)

// PairConfig describes two namespaces joined by a veth pair.
type PairConfig struct {
	// Prefix of the namespace names (default DefaultPrefix).
	Prefix string
	// Veth configures the pair. Without addresses, A gets DefaultAddrA
	// and B DefaultAddrB (plus the IPv6 defaults if IPv6 is set).
	Veth VethConfig
	// IPv6 adds DefaultAddr6A/B when Veth has no addresses.
	IPv6 bool
	// Impair, if set, disturbs the link in both directions, each the way
	// `tc qdisc add dev X root netem ...` disturbs a device's output.
	Impair *Netem
	// ImpairWith picks how (default ImpairAuto: the netem qdisc if this
	// kernel has it, else the user-space forwarder).
	ImpairWith ImpairMethod
	// Seed makes the forwarder's random choices repeatable (0: random).
	Seed uint64
}

// Pair is two namespaces joined by a veth pair: the everyday topology of
// sroce's tests and of `sroce demo`.
type Pair struct {
	A, B *Namespace
	// Veth describes A's end (NameA in A) and B's end (NameB in B). With
	// the forwarder these are the outer ends of two veth pairs through Mid.
	Veth *Veth
	// Impairment is the method in use (ImpairQdisc or ImpairForwarder),
	// or ImpairAuto when the link is not impaired.
	Impairment ImpairMethod
	// Mid and Forwarder are the forwarder's namespace and the forwarder
	// itself, when Impairment is ImpairForwarder.
	Mid       *Namespace
	Forwarder *Forwarder
}

// PairTB is the part of testing.TB that NewTestPair uses.
type PairTB interface {
	TB
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// NewTestPair skips t when namespaces are not available here (Skip) and
// otherwise returns a new Pair made with cfg, which t's cleanup closes.
func NewTestPair(t PairTB, cfg PairConfig) *Pair {
	t.Helper()
	Skip(t)
	p, err := NewPair(cfg)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// NewPair creates namespaces A and B and the veth pair between them,
// impaired if cfg.Impair is set. On error nothing is left behind.
func NewPair(cfg PairConfig) (p *Pair, err error) {
	if len(cfg.Veth.AddrA) == 0 && len(cfg.Veth.AddrB) == 0 {
		cfg.Veth.AddrA = []netip.Prefix{DefaultAddrA}
		cfg.Veth.AddrB = []netip.Prefix{DefaultAddrB}
		if cfg.IPv6 {
			cfg.Veth.AddrA = append(cfg.Veth.AddrA, DefaultAddr6A)
			cfg.Veth.AddrB = append(cfg.Veth.AddrB, DefaultAddr6B)
		}
	}
	method := ImpairAuto
	if cfg.Impair != nil {
		method = cfg.ImpairWith
		if method == ImpairAuto {
			method = ImpairForwarder
			if NetemAvailable() == nil {
				method = ImpairQdisc
			}
		}
		if method == ImpairQdisc {
			if err := NetemAvailable(); err != nil {
				return nil, err
			}
		}
	}
	p = &Pair{Impairment: method}
	defer func() {
		if err != nil {
			p.Close()
			p = nil
		}
	}()
	if p.A, err = New(cfg.Prefix); err != nil {
		return p, err
	}
	if p.B, err = New(cfg.Prefix); err != nil {
		return p, err
	}
	if method != ImpairForwarder {
		if p.Veth, err = NewVeth(p.A, p.B, cfg.Veth); err != nil {
			return p, err
		}
		if method == ImpairQdisc {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err = p.A.SetNetem(ctx, p.Veth.NameA, *cfg.Impair); err != nil {
				return p, err
			}
			if err = p.B.SetNetem(ctx, p.Veth.NameB, *cfg.Impair); err != nil {
				return p, err
			}
		}
		return p, nil
	}
	// A <-> ma [Mid] mb <-> B, Mid without IPv6 so it stays silent.
	if p.Mid, err = New(cfg.Prefix); err != nil {
		return p, err
	}
	if err = p.Mid.Do(disableIPv6); err != nil {
		return p, fmt.Errorf("nsutil: %s: %w", p.Mid.name, err)
	}
	mtuA := cfg.Veth.MTU
	if mtuA == 0 {
		mtuA = 1500
	}
	mtuB := cfg.Veth.MTUB
	if mtuB == 0 {
		mtuB = mtuA
	}
	va := cfg.Veth
	va.NameB, va.AddrB, va.MACB = "ma", nil, nil
	va.MTU, va.MTUB = mtuA, max(mtuA, mtuB)
	left, err := NewVeth(p.A, p.Mid, va)
	if err != nil {
		return p, err
	}
	vb := cfg.Veth
	vb.NameA, vb.AddrA, vb.MACA = "mb", nil, nil
	vb.MTU, vb.MTUB = max(mtuA, mtuB), mtuB
	right, err := NewVeth(p.Mid, p.B, vb)
	if err != nil {
		left.Close()
		return p, err
	}
	p.Veth = &Veth{A: p.A, B: p.B, NameA: left.NameA, NameB: right.NameB,
		IndexA: left.IndexA, IndexB: right.IndexB, MACA: left.MACA, MACB: right.MACB,
		AddrA: left.AddrA, AddrB: right.AddrB, MTUA: left.MTUA, MTUB: right.MTUB,
		parts: []*Veth{left, right}}
	if p.Forwarder, err = NewForwarder(p.Mid, "ma", "mb", *cfg.Impair, cfg.Seed); err != nil {
		return p, err
	}
	return p, nil
}

// disableIPv6 turns IPv6 off for every interface of the calling thread's
// namespace, present and future.
func disableIPv6() error {
	for _, p := range []string{
		"/proc/sys/net/ipv6/conf/all/disable_ipv6",
		"/proc/sys/net/ipv6/conf/default/disable_ipv6",
	} {
		if err := os.WriteFile(p, []byte("1\n"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// Close stops the forwarder, if any, and removes the namespaces (and with
// them the veth pairs).
func (p *Pair) Close() error {
	var errs []error
	if p.Forwarder != nil {
		errs = append(errs, p.Forwarder.Close())
	}
	for _, ns := range []*Namespace{p.A, p.B, p.Mid} {
		if ns != nil {
			errs = append(errs, ns.Close())
		}
	}
	return errors.Join(errs...)
}
