// Package device chooses and opens the sroce device a tool runs on, from
// the tools' -d value: a network interface name, optionally followed by
// "@" and the local address the UDP link binds to ("veth0",
// "lo@127.0.0.2"). Without -d a client takes the interface of its route to
// the server and a server the first interface that is up; the environment
// variable SROCE_LINK picks the link (auto, xdp or udp) and SROCE_ENGINE
// the engine mode (auto, sleep, spin, adaptive or inline).
package device

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sroce/sroce/roce"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/roce/netif"
	"github.com/sroce/sroce/roce/tracesock"
)

// EnvLink names the environment variable that picks the link: "auto" (the
// default: AF_XDP as root, the UDP link otherwise or on loopback), "xdp"
// or "udp".
const EnvLink = "SROCE_LINK"

// EnvEngine names the environment variable that picks the engine mode
// (roce.ParseEngineMode): "auto" (the default: inline when the process may
// use one CPU, adaptive otherwise), "sleep", "spin", "adaptive" or
// "inline".
const EnvEngine = "SROCE_ENGINE"

// EnvQueues names the environment variable that sets how many receive
// queues of the interface a device uses, one engine each
// (iface.Options.Queues): a positive number. Unset, the device uses the
// interface's queue count capped by the CPUs the process may use.
const EnvQueues = "SROCE_QUEUES"

// Queues returns the queue count SROCE_QUEUES asks for (0: unset), with
// an error that names the variable.
func Queues() (int, error) {
	v := os.Getenv(EnvQueues)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, fmt.Errorf("%s=%q: want a positive number of queues", EnvQueues, v)
	}
	return n, nil
}

// ResolveTimeout bounds resolving a peer's MAC address, both while the
// device opens and when a tool builds a path to its peer.
const ResolveTimeout = 5 * time.Second

// Spec is a parsed -d value: the interface and, when given, the local
// address the UDP link binds to (several engines on one host).
type Spec struct {
	// Ifname is the network interface, e.g. "veth0" or "lo".
	Ifname string
	// Addr is the address after "@", or the zero Addr.
	Addr netip.Addr
	// Queues is the number of receive queues the device uses, one engine
	// each (iface.Options.Queues); 0 means SROCE_QUEUES, else the
	// default.
	Queues int
}

// ParseSpec parses "IF" or "IF@ADDR". An empty s gives an empty Spec,
// which Resolve fills in.
func ParseSpec(s string) (Spec, error) {
	name, addr, ok := strings.Cut(s, "@")
	d := Spec{Ifname: name}
	if ok {
		a, err := netip.ParseAddr(addr)
		if err != nil {
			return d, fmt.Errorf("%q after @ in the device %q is not an IP address", addr, s)
		}
		d.Addr = a
	}
	if ok && name == "" {
		return d, fmt.Errorf("the device %q names no interface before @", s)
	}
	return d, nil
}

// Resolve parses the -d value spec and, when it names no interface, picks
// one as DefaultInterface does for peer (the server a client connects to,
// or "" on a server).
func Resolve(ctx context.Context, spec, peer string) (Spec, error) {
	d, err := ParseSpec(spec)
	if err != nil {
		return d, err
	}
	if d.Ifname == "" {
		if d.Ifname, err = DefaultInterface(ctx, peer); err != nil {
			return d, err
		}
	}
	return d, nil
}

// DefaultInterface picks the interface when -d is not given, as the
// reference tools pick the first RDMA device: a client (peer not empty)
// takes the interface of its route to the server, a server the first
// interface that is up, not a loopback, and has an address.
func DefaultInterface(ctx context.Context, peer string) (string, error) {
	if peer != "" {
		if addrs, err := net.DefaultResolver.LookupNetIP(ctx, "ip", peer); err == nil && len(addrs) > 0 {
			if name, _, err := netif.SourceFor(addrs[0].Unmap()); err == nil {
				return name, nil
			}
		}
	}
	ifs, err := net.Interfaces()
	if err != nil {
		return "", fmt.Errorf("cannot list the network interfaces: %w", err)
	}
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		if addrs, err := ifc.Addrs(); err == nil && len(addrs) > 0 {
			return ifc.Name, nil
		}
	}
	return "", errors.New("no network interface is up with an address: name one with -d")
}

// LinkMode returns the link that SROCE_LINK asks for (iface.ParseMode of
// its value), with an error that names the variable.
func LinkMode() (iface.Mode, error) {
	mode, err := iface.ParseMode(os.Getenv(EnvLink))
	if err != nil {
		return mode, fmt.Errorf("%s: %w", EnvLink, err)
	}
	return mode, nil
}

// Engine returns the engine mode SROCE_ENGINE asks for, with an error that
// names the variable.
func Engine() (roce.EngineMode, error) {
	v := os.Getenv(EnvEngine)
	if v == "" {
		return roce.EngineAuto, nil
	}
	m, err := roce.ParseEngineMode(v)
	if err != nil {
		return m, fmt.Errorf("%s: %w", EnvEngine, err)
	}
	return m, nil
}

// Open opens the device on the interface of d with the link mode, the
// engine mode of SROCE_ENGINE and d.Queues queues (else SROCE_QUEUES),
// within ctx, and serves its live trace
// (package roce/tracesock) until it closes.
func Open(ctx context.Context, d Spec, mode iface.Mode) (*iface.Port, error) {
	engine, err := Engine()
	if err != nil {
		return nil, err
	}
	queues := d.Queues
	if queues == 0 {
		if queues, err = Queues(); err != nil {
			return nil, err
		}
	}
	port, err := iface.Open(ctx, d.Ifname, iface.Options{Mode: mode, Addr: d.Addr, ResolveTimeout: ResolveTimeout,
		Engine: engine, Queues: queues})
	if err != nil {
		return nil, err
	}
	// "sroce trace" attaches here. A tool runs as well without it (a
	// runtime directory it may not create), so a failure only means no
	// trace; the socket goes when the device closes.
	tracesock.Serve(port.Device())
	return port, nil
}

// DefaultRouteInterface returns the interface of the default route (IPv4,
// else IPv6), which devinfo and stat describe when no interface is named.
func DefaultRouteInterface() (string, error) {
	for _, probe := range []string{"192.0.2.1", "2001:db8::1"} {
		name, _, err := netif.SourceFor(netip.MustParseAddr(probe))
		if err == nil && name != "" && name != "lo" {
			return name, nil
		}
	}
	return "", errors.New("there is no default route to take the interface from; name one with -d (sroce devinfo -l lists them)")
}
