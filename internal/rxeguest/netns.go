package rxeguest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Namespaces made here are named nsPrefix<pid>-<n> and guest temporary
// directories tmpPrefix<pid>-<name>-*; the pid lets a later run remove what
// a killed process left behind.
const (
	nsPrefix  = "sroce-rxe-"
	tmpPrefix = "sroce-rxe-guest-"
)

var nsCounter atomic.Int64

// Netns is a named network namespace (as made by `ip netns add`).
type Netns struct {
	Name  string
	owned bool
	once  sync.Once
}

// NewNetns creates a network namespace with a unique name and its loopback
// up. Close deletes it.
func NewNetns(ctx context.Context) (*Netns, error) {
	fixPath()
	reapStale()
	name := fmt.Sprintf("%s%d-%d", nsPrefix, os.Getpid(), nsCounter.Add(1))
	if _, err := ip(ctx, "netns", "add", name); err != nil {
		return nil, err
	}
	ns := &Netns{Name: name, owned: true}
	if _, err := ns.IP(ctx, "link", "set", "lo", "up"); err != nil {
		ns.Close()
		return nil, err
	}
	return ns, nil
}

// Close deletes the namespace if NewNetns created it. Processes still
// running inside keep it alive until they exit.
func (n *Netns) Close() error {
	if n == nil || !n.owned {
		return nil
	}
	var err error
	n.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err = ip(ctx, "netns", "del", n.Name)
	})
	return err
}

// Command returns a command that runs name inside the namespace.
func (n *Netns) Command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", n.Name, name}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// Exec runs name inside the namespace and returns its combined output.
func (n *Netns) Exec(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := n.Command(ctx, name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ip netns exec %s %s %s: %w: %s", n.Name, name,
			strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

// IP runs `ip -n NAME args...`.
func (n *Netns) IP(ctx context.Context, args ...string) ([]byte, error) {
	return ip(ctx, append([]string{"-n", n.Name}, args...)...)
}

func ip(ctx context.Context, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return out, nil
}

var reapOnce sync.Once

// reapStale deletes namespaces and guest temporary directories left by
// processes that no longer run (killed before their Close ran).
func reapStale() {
	reapOnce.Do(func() {
		if ents, err := os.ReadDir("/run/netns"); err == nil {
			for _, e := range ents {
				if stalePrefixed(e.Name(), nsPrefix) {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					ip(ctx, "netns", "del", e.Name())
					cancel()
				}
			}
		}
		if ents, err := os.ReadDir(os.TempDir()); err == nil {
			for _, e := range ents {
				if e.IsDir() && stalePrefixed(e.Name(), tmpPrefix) {
					os.RemoveAll(filepath.Join(os.TempDir(), e.Name()))
				}
			}
		}
	})
}

// stalePrefixed reports whether name is prefix<pid>-... for a pid that is
// not running.
func stalePrefixed(name, prefix string) bool {
	rest, ok := strings.CutPrefix(name, prefix)
	if !ok {
		return false
	}
	pidStr, _, _ := strings.Cut(rest, "-")
	pid, err := strconv.Atoi(pidStr)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	err = syscall.Kill(pid, 0)
	return errors.Is(err, syscall.ESRCH)
}

// LAN is a network namespace holding a Linux bridge: guests booted with
// LAN.Boot get a tap port on it, and hosts added with AddHost a veth port
// whose other end lives in a namespace of its own. Close tears everything
// down.
type LAN struct {
	NS     *Netns
	Bridge string // name of the bridge inside NS

	mu     sync.Mutex
	guests []*Guest
	hosts  []*Host
	n      int
}

// NewLAN creates the namespace and the bridge.
func NewLAN(ctx context.Context) (*LAN, error) {
	ns, err := NewNetns(ctx)
	if err != nil {
		return nil, err
	}
	l := &LAN{NS: ns, Bridge: "br0"}
	if _, err := ns.IP(ctx, "link", "add", l.Bridge, "type", "bridge", "stp_state", "0", "forward_delay", "0"); err != nil {
		ns.Close()
		return nil, err
	}
	if _, err := ns.IP(ctx, "link", "set", l.Bridge, "up"); err != nil {
		ns.Close()
		return nil, err
	}
	return l, nil
}

// Boot boots a guest whose tap is a port of the bridge.
func (l *LAN) Boot(ctx context.Context, img *Image, cfg Config) (*Guest, error) {
	cfg.Netns = l.NS.Name
	cfg.Bridge = l.Bridge
	if cfg.Tap == "" {
		l.mu.Lock()
		l.n++
		cfg.Tap = fmt.Sprintf("tap%d", l.n)
		l.mu.Unlock()
	}
	g, err := Boot(ctx, img, cfg)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.guests = append(l.guests, g)
	l.mu.Unlock()
	return g, nil
}

// HostConfig describes a host-side port of a LAN.
type HostConfig struct {
	Ifname string           // interface name in the host namespace (default "eth0")
	IP     netip.Prefix     // address with prefix length (optional)
	MAC    net.HardwareAddr // default: a locally administered address
	MTU    int              // default 1500
}

// Host is a network namespace with one veth interface whose peer is a port
// of a LAN's bridge. Programs run in NS (NS.Command, or setns on the
// namespace at /run/netns/NAME) reach the guests through Ifname.
type Host struct {
	NS     *Netns
	Ifname string
	IP     netip.Prefix
	MAC    net.HardwareAddr
	Peer   string // the bridge-side veth in the LAN namespace
}

// AddHost creates a namespace with a veth interface on the bridge.
func (l *LAN) AddHost(ctx context.Context, cfg HostConfig) (*Host, error) {
	if cfg.Ifname == "" {
		cfg.Ifname = "eth0"
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	l.mu.Lock()
	l.n++
	n := l.n
	l.mu.Unlock()
	if cfg.MAC == nil {
		cfg.MAC = net.HardwareAddr{0x02, 0x53, 0x52, 0x00, byte(os.Getpid()), byte(n)}
	}
	ns, err := NewNetns(ctx)
	if err != nil {
		return nil, err
	}
	h := &Host{NS: ns, Ifname: cfg.Ifname, IP: cfg.IP, MAC: cfg.MAC, Peer: fmt.Sprintf("vh%d", n)}
	steps := [][]string{
		{"-n", l.NS.Name, "link", "add", h.Peer, "mtu", strconv.Itoa(cfg.MTU), "type", "veth",
			"peer", "name", h.Ifname, "netns", ns.Name, "address", cfg.MAC.String(), "mtu", strconv.Itoa(cfg.MTU)},
		{"-n", l.NS.Name, "link", "set", h.Peer, "master", l.Bridge, "up"},
		{"-n", ns.Name, "link", "set", h.Ifname, "up"},
	}
	if cfg.IP.IsValid() {
		steps = append(steps, []string{"-n", ns.Name, "addr", "add", cfg.IP.String(), "dev", h.Ifname})
	}
	for _, s := range steps {
		if _, err := ip(ctx, s...); err != nil {
			ns.Close()
			return nil, err
		}
	}
	l.mu.Lock()
	l.hosts = append(l.hosts, h)
	l.mu.Unlock()
	return h, nil
}

// Close deletes the host namespace (and so the veth pair).
func (h *Host) Close() error { return h.NS.Close() }

// Close stops every guest, removes every host and deletes the namespace.
func (l *LAN) Close() error {
	l.mu.Lock()
	guests, hosts := l.guests, l.hosts
	l.guests, l.hosts = nil, nil
	l.mu.Unlock()
	var errs []error
	for _, g := range guests {
		errs = append(errs, g.Close())
	}
	for _, h := range hosts {
		errs = append(errs, h.Close())
	}
	errs = append(errs, l.NS.Close())
	return errors.Join(errs...)
}

// Pair is two guests on one LAN, the usual setup for running a reference
// tool pair.
type Pair struct {
	LAN  *LAN
	A, B *Guest
}

// Default addresses of BootPair's guests (TEST-NET-1, used only inside the
// LAN namespace).
var (
	PairAddrA = netip.MustParsePrefix("192.0.2.1/24")
	PairAddrB = netip.MustParsePrefix("192.0.2.2/24")
)

// BootPair creates a LAN and boots two guests on it in parallel, "rxe-a"
// at PairAddrA and "rxe-b" at PairAddrB. On error nothing is left behind.
func BootPair(ctx context.Context, img *Image) (*Pair, error) {
	l, err := NewLAN(ctx)
	if err != nil {
		return nil, err
	}
	a, b := PairConfigs()
	gs, err := l.BootAll(ctx, img, a, b)
	if err != nil {
		l.Close()
		return nil, err
	}
	return &Pair{LAN: l, A: gs[0], B: gs[1]}, nil
}

// PairConfigs returns the configurations of BootPair's guests: "rxe-a"
// at PairAddrA and "rxe-b" at PairAddrB, with fixed MACs.
func PairConfigs() (a, b Config) {
	return Config{Name: "rxe-a", IP: PairAddrA, MAC: net.HardwareAddr{0x52, 0x54, 0x00, 0x5e, 0x00, 0x01}},
		Config{Name: "rxe-b", IP: PairAddrB, MAC: net.HardwareAddr{0x52, 0x54, 0x00, 0x5e, 0x00, 0x02}}
}

// BootAll boots a guest of img on the LAN for each of cfgs, all at once,
// and returns them in the order of cfgs. If any fails, the others are
// closed and the errors returned.
func (l *LAN) BootAll(ctx context.Context, img *Image, cfgs ...Config) ([]*Guest, error) {
	gs := make([]*Guest, len(cfgs))
	errs := make([]error, len(cfgs))
	var wg sync.WaitGroup
	for i := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gs[i], errs[i] = l.Boot(ctx, img, cfgs[i])
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, g := range gs {
			if g != nil {
				g.Close()
			}
		}
		return nil, err
	}
	return gs, nil
}

// Close stops both guests and deletes the LAN.
func (p *Pair) Close() error { return p.LAN.Close() }
