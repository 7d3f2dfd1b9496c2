package interop

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/internal/rxeguest"
)

// Addresses of the rig's LAN: the rdma_rxe peer (the guest, or the
// namespace of this host's rxe device) and the namespace where sroce
// runs.
var (
	GuestAddr = netip.MustParsePrefix("192.0.2.1/24")
	HostAddr  = netip.MustParsePrefix("192.0.2.10/24")
	// ShimAddr is the namespace of the sroce daemon (RigConfig.Shim): a
	// daemon holds its interface's AF_XDP queue, so sroce's own tools
	// run beside it, not on it.
	ShimAddr = netip.MustParsePrefix("192.0.2.11/24")
)

// Bounds of the waits of one pair.
const (
	// RunLimit bounds one run of a pair, both sides included.
	RunLimit = 4 * time.Minute
	// realLimit bounds the wait for the real tool once sroce's side has
	// ended well (or once it was started, when sroce is the server).
	realLimit = 3 * time.Minute
	// realGrace is what the real tool is given once sroce's side failed.
	realGrace = 5 * time.Second
	// ourLimit bounds the wait for sroce's server once the real client
	// has ended.
	ourLimit = time.Minute
	// guestQuery bounds a question to the guest after a run.
	guestQuery = time.Minute
	// attempts bounds the runs of a pair whose failure says nothing
	// about the wire (see offWire and the NIC watchdog).
	attempts = 3
)

// Rig is an rdma_rxe peer and a host network namespace with a veth on the
// peer's bridge, where sroce's tools run over AF_XDP. The peer is a qemu
// guest (Img, Guest) or this host's own rdma_rxe on the veth of another
// namespace on the bridge (Guest and Img are nil then).
type Rig struct {
	Img   *rxeguest.Image // the guest's image
	LAN   *rxeguest.LAN   // the bridge's namespace, which Close deletes
	Guest *rxeguest.Guest // the guest (a reboot replaces it)
	Host  *rxeguest.Host  // where sroce runs
	// ShimHost is where the sroce daemon and the real tools through the
	// shim run (RigConfig.Shim), nil without.
	ShimHost *rxeguest.Host
	// Bin is the sroce binary run in Host's namespace, Env its
	// environment.
	Bin string
	Env []string

	peer     peer
	borrowed bool        // LAN and Guest are RigConfig's: Close leaves them
	hostPeer *hostPeer   // the peer, when it is this host's rdma_rxe
	daemon   *shimDaemon // with RigConfig.Shim
	dir      string      // captures
	mu       sync.Mutex
	runs     int
}

// RigConfig says how to make a Rig.
type RigConfig struct {
	// Bin is the sroce binary; Env its environment (nil: DefaultEnv()).
	Bin string
	Env []string
	// Logf, if not nil, is told the image build's progress and which
	// peer was chosen.
	Logf func(format string, args ...any)
	// Peer is PeerGuest (the default), PeerHost or PeerAuto.
	Peer string
	// Shim starts a sroce daemon on the host namespace's interface, so
	// that pairs can run the real tool on sroce's side too, through
	// "sroce run" and the drop-in libibverbs (PairOpts.Shim).
	Shim bool
	// LAN, Img and Guest, when all set, are an rdma_rxe guest already
	// running on a LAN at GuestAddr (booted from Img): the rig adds its
	// namespaces to that LAN instead of making one and booting a guest,
	// so that several rigs in turn, or a rig and other tests, share one
	// boot. Close then removes only what the rig added; a reboot (after
	// the guest's NIC hung) replaces Guest on the LAN with the same
	// configuration.
	LAN   *rxeguest.LAN
	Img   *rxeguest.Image
	Guest *rxeguest.Guest
}

// shimDaemon is the sroce daemon of a rig, serving Host's interface.
type shimDaemon struct {
	proc   *proc
	socket string
	dev    string // its device, as the real tools name it
}

// daemonLimit bounds the wait for the daemon's socket.
const daemonLimit = time.Minute

// startDaemon adds ShimHost, starts "sroce daemon" on its interface and
// waits until the daemon answers on its socket.
func (r *Rig) startDaemon(ctx context.Context) error {
	h, err := r.LAN.AddHost(ctx, rxeguest.HostConfig{IP: ShimAddr})
	if err != nil {
		return err
	}
	r.ShimHost = h
	sock := filepath.Join(r.dir, "daemon.sock")
	p, err := startProc(r.sroce(context.Background(), h, "daemon", "-d", h.Ifname, "--link", "xdp", "--socket", sock))
	if err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, daemonLimit)
	defer cancel()
	err = poll(wctx, "the sroce daemon to answer on "+sock, func() (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("the sroce daemon ended:\n%v", p.wait(wctx))
		}
		_, err := client.Devices(sock)
		return err == nil, nil
	})
	if err != nil {
		p.kill()
		return err
	}
	r.daemon = &shimDaemon{proc: p, socket: sock, dev: "sroce_" + h.Ifname}
	return nil
}

// NewRig sets up the peer (the guest: builds or finds in its cache the
// guest image and boots the guest; this host: loads rdma_rxe and makes an
// rxe device on a veth of a namespace of its own) and adds the host
// namespace where sroce runs. Close tears everything down.
func NewRig(ctx context.Context, cfg RigConfig) (*Rig, error) {
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if cfg.LAN != nil || cfg.Img != nil || cfg.Guest != nil {
		return newRigOn(ctx, cfg)
	}
	tryHost := false
	switch cfg.Peer {
	case "", PeerGuest:
	case PeerHost:
		if err := HostRxe(); err != nil {
			return nil, err
		}
		tryHost = true
	case PeerAuto:
		if err := HostRxe(); err != nil {
			logf("%v: the rdma_rxe peer is a qemu guest", err)
		} else {
			tryHost = true
		}
	default:
		return nil, fmt.Errorf("no such kind of peer %q (auto, host or guest)", cfg.Peer)
	}
	if !tryHost {
		if err := rxeguest.Available(); err != nil {
			return nil, err
		}
	}
	if cfg.Env == nil {
		cfg.Env = DefaultEnv()
	}
	dir, err := os.MkdirTemp("", "sroce-interop-")
	if err != nil {
		return nil, fmt.Errorf("making a directory for the captures: %w", err)
	}
	r := &Rig{Bin: cfg.Bin, Env: cfg.Env, dir: dir}
	if r.LAN, err = rxeguest.NewLAN(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if tryHost {
		hp, err := newHostPeer(ctx, r.LAN, GuestAddr)
		switch {
		case err == nil:
			r.hostPeer, r.peer = hp, hp
		case cfg.Peer == PeerHost:
			r.Close()
			return nil, err
		default:
			logf("%v: the rdma_rxe peer is a qemu guest", err)
			if err := rxeguest.Available(); err != nil {
				r.Close()
				return nil, err
			}
		}
	}
	if r.peer == nil {
		if r.Img, err = (rxeguest.ImageOptions{Logf: cfg.Logf}).Ensure(ctx); err != nil {
			r.Close()
			return nil, err
		}
		if r.Guest, err = r.LAN.Boot(ctx, r.Img, rxeguest.Config{Name: "rxe-interop", IP: GuestAddr}); err != nil {
			r.Close()
			return nil, err
		}
		r.peer = guestPeer{r}
	}
	return r.addHosts(ctx, cfg.Shim)
}

// newRigOn is NewRig on the guest and LAN of cfg.
func newRigOn(ctx context.Context, cfg RigConfig) (*Rig, error) {
	if cfg.LAN == nil || cfg.Img == nil || cfg.Guest == nil {
		return nil, errors.New("interop: RigConfig's LAN, Img and Guest go together: set all three or none")
	}
	if cfg.Guest.IP() != GuestAddr.Addr() {
		return nil, fmt.Errorf("interop: the guest %s is at %s, not at the rig's peer address %s", cfg.Guest.Name(), cfg.Guest.IP(), GuestAddr.Addr())
	}
	if cfg.Env == nil {
		cfg.Env = DefaultEnv()
	}
	dir, err := os.MkdirTemp("", "sroce-interop-")
	if err != nil {
		return nil, fmt.Errorf("making a directory for the captures: %w", err)
	}
	r := &Rig{Bin: cfg.Bin, Env: cfg.Env, dir: dir, LAN: cfg.LAN, Img: cfg.Img, Guest: cfg.Guest, borrowed: true}
	r.peer = guestPeer{r}
	return r.addHosts(ctx, cfg.Shim)
}

// addHosts adds the namespace of sroce's tools and, with shim, the sroce
// daemon's; on failure it closes r.
func (r *Rig) addHosts(ctx context.Context, shim bool) (*Rig, error) {
	var err error
	if r.Host, err = r.LAN.AddHost(ctx, rxeguest.HostConfig{IP: HostAddr}); err != nil {
		r.Close()
		return nil, err
	}
	if shim {
		if err := r.startDaemon(ctx); err != nil {
			r.Close()
			return nil, err
		}
	}
	return r, nil
}

// Describe names the peer: the kernel and the packages of its tools, and
// where it is.
func (r *Rig) Describe() string {
	if r.Guest == nil {
		rel, _ := os.ReadFile("/proc/sys/kernel/osrelease")
		return fmt.Sprintf("rdma_rxe of this host (Linux %s), device %s on a veth in a network namespace at %s",
			strings.TrimSpace(string(rel)), r.hostPeer.dev, r.peer.ip())
	}
	d := fmt.Sprintf("rdma_rxe in a qemu guest at %s (Linux %s", r.Guest.IP(), r.Img.KernelRelease)
	for _, p := range []string{"rdma-core", "perftest"} {
		if v := r.Img.Packages[p]; v != "" {
			d += ", " + p + " " + v
		}
	}
	return d + ")"
}

// Close stops the peer, deletes the namespaces and the captures.
func (r *Rig) Close() error {
	if r.daemon != nil {
		r.daemon.proc.kill()
	}
	if r.hostPeer != nil {
		r.hostPeer.close()
	}
	var err error
	if r.borrowed {
		for _, h := range []*rxeguest.Host{r.Host, r.ShimHost} {
			if h != nil {
				err = errors.Join(err, h.Close())
			}
		}
	} else {
		err = r.LAN.Close()
	}
	os.RemoveAll(r.dir)
	return err
}

// sroce returns the command that runs sroce with args in h's namespace.
func (r *Rig) sroce(ctx context.Context, h *rxeguest.Host, args ...string) *exec.Cmd {
	cmd := h.NS.Command(ctx, r.Bin, args...)
	cmd.Env = r.Env
	return cmd
}

// DefaultEnv is the environment of sroce's tools in a rig: this
// process's, with the AF_XDP link, and stall and exchange limits that fit
// a slow emulated guest (90 s each) unless the environment sets them.
func DefaultEnv() []string {
	env := append(os.Environ(), "SROCE_LINK=xdp")
	for _, kv := range []string{"SROCE_STALL_TIMEOUT=90s", "SROCE_EXCHANGE_TIMEOUT=90s"} {
		if k, _, _ := strings.Cut(kv, "="); os.Getenv(k) == "" {
			env = append(env, kv)
		}
	}
	return env
}

// LingerEnv is PairOpts.RealEnv for runs with loss: it makes
// ibv_rc_pingpong keep its QP a second before destroying it
// (rxeguest.LingerLib). The tool has no closing handshake: each side ends
// at its own last completion, and when the ACK of the peer's last message
// is lost the peer retransmits to a QP that is gone and fails, whatever
// the peer is (two rxe guests fail the same way). sroce's tools linger on
// their own; perftest's tools close with a TCP handshake that keeps both
// QPs until each side has its completions.
func LingerEnv(c Case) string {
	if strings.HasSuffix(c.Real, "_pingpong") {
		return "LD_PRELOAD=" + rxeguest.LingerLib + " SROCE_LINGER_MS=1000"
	}
	return ""
}

// PairOpts are what an impaired run of a pair adds: an environment for
// the real tool, and an impairment that runs while both sides do.
type PairOpts struct {
	// RealEnv, if not nil, returns what is put before the real tool's
	// command line (VAR=value ...), or "".
	RealEnv func(c Case) string
	// Impair, if not nil, starts the impairment of one run, whose RoCEv2
	// traffic is being captured into pcap; the function it returns stops
	// it and describes what it did.
	Impair func(ctx context.Context, pcap string) (stop func() (string, error), err error)
	// Shim runs the real tool on sroce's side too, through "sroce run" on
	// the rig's daemon (RigConfig.Shim), instead of sroce's own tool.
	Shim bool
}

// PairResult is the last run of a pair.
type PairResult struct {
	Case Case
	// RealServer reports whether the real tool was the server.
	RealServer bool
	Real, Ours Outcome
	// Pcap is the RoCEv2 traffic on the guest's tap (the file lives
	// until the rig is closed).
	Pcap string
	// Impaired describes what an impairment did and, when opts were
	// given, the packets each side sent again.
	Impaired string
	// Attempt numbers this run from 1 (see RunPair).
	Attempt int
	// Shim reports that sroce's side was the real tool through "sroce
	// run" and the daemon.
	Shim bool
	// CaptureErr, if not nil, says that Pcap misses frames (tcpdump
	// could not keep up).
	CaptureErr error
}

// Direction names the run's direction: "real-server" or "real-client".
func (p PairResult) Direction() string {
	if p.RealServer {
		return "real-server"
	}
	return "real-client"
}

// Verdict is the judgement of one side of a run.
type Verdict struct {
	Who  string // the real tool's name, or "sroce CMD"
	Role string // "server" or "client"
	O    Outcome
	// Problem says what is wrong, or is "".
	Problem string
}

// Verdicts judges both sides, the real tool's first: each must exit 0 and
// print its result.
func (p PairResult) Verdicts() []Verdict {
	var vs []Verdict
	for _, side := range []struct {
		who    string
		o      Outcome
		server bool
	}{{p.Case.Real, p.Real, p.RealServer}, {p.oursName(), p.Ours, !p.RealServer}} {
		v := Verdict{Who: side.who, Role: "client", O: side.o, Problem: SideProblem(p.Case.Cmd, side.o, side.server)}
		if side.server {
			v.Role = "server"
		}
		vs = append(vs, v)
	}
	return vs
}

// oursName names sroce's side: "sroce write-bw", or "sroce run ib_write_bw"
// through the shim.
func (p PairResult) oursName() string {
	if p.Shim {
		return "sroce run " + p.Case.Real
	}
	return "sroce " + p.Case.Cmd
}

// Failed reports whether either side failed.
func (p PairResult) Failed() bool {
	for _, v := range p.Verdicts() {
		if v.Problem != "" {
			return true
		}
	}
	return false
}

// Figure returns the run's headline figure: sroce's, or the real tool's
// when sroce's side prints none (a read-lat or atomic-lat server).
func (p PairResult) Figure() string {
	if f := Figure(p.Case.Cmd, p.Ours.Stdout); f != "" {
		return f
	}
	return Figure(p.Case.Cmd, p.Real.Stdout)
}

// perftestUncalibrated reports whether a perftest tool gave up because it
// could not measure its CPU's cycle rate: before its report it times a
// busy loop against gettimeofday and refuses a fit worse than r^2 0.9
// ("Can't produce a report"). In an emulated guest on a busy host that
// happens now and then, whatever the peer did; such a run says nothing
// about sroce and is run again.
func perftestUncalibrated(o Outcome) bool {
	return !o.OK() && strings.Contains(o.Stderr, "Correlation coefficient r^2:")
}

// offWire says why a failed run of a pair says nothing about the traffic
// between the two sides, or returns "". The only such failure is the real
// tool's clock calibration; everything else, stalls included, is judged.
func offWire(c Case, real Outcome) string {
	if perftestUncalibrated(real) {
		return fmt.Sprintf("%s could not calibrate its cycle counter in the guest (%q)", c.Real, strings.TrimSpace(real.Stderr))
	}
	return ""
}

// RunPair runs one pair: the real tool as the server (realServer) or as
// the client, sroce as the other side. A run whose real tool failed off
// the wire is logged through logf, with the end of its capture, and
// repeated; so is a run during which the guest's emulated NIC hung, after
// a reboot of the guest: up to three runs in all. opts, if not nil,
// impairs the runs. The error reports a failure of the rig, not of the
// tools (their verdicts are in the result).
func (r *Rig) RunPair(ctx context.Context, c Case, realServer bool, opts *PairOpts, logf func(string, ...any)) (PairResult, error) {
	for attempt := 1; ; attempt++ {
		res, err := r.runOnce(ctx, c, realServer, opts, attempt)
		if err != nil {
			return res, err
		}
		if res.Impaired != "" {
			logf("run %d: %s", attempt, res.Impaired)
		}
		if attempt < attempts {
			if why := offWire(c, res.Real); why != "" {
				logf("run %d: %s; running the pair again\n%s: %v\nsroce's side: %v\nend of the capture:\n%s",
					attempt, why, c.Real, res.Real, res.Ours, r.DissectTail(res.Pcap, 12))
				continue
			}
			if !res.Real.OK() || !res.Ours.OK() {
				if hung := r.nicHung(ctx); hung != "" {
					logf("run %d: the guest's emulated NIC stopped transmitting (its kernel: %q); qemu's virtio-net took none of the guest's frames, RoCE or TCP, from then on, so this run says nothing about sroce; rebooting the guest and running the pair again\n%s: %v\nsroce's side: %v\nend of the capture:\n%s",
						attempt, hung, c.Real, res.Real, res.Ours, r.DissectTail(res.Pcap, 12))
					if err := r.reboot(ctx); err != nil {
						return res, err
					}
					continue
				}
			}
		}
		return res, nil
	}
}

// runOnce runs the pair once.
func (r *Rig) runOnce(ctx context.Context, c Case, realServer bool, opts *PairOpts, attempt int) (res PairResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, RunLimit)
	defer cancel()
	res = PairResult{Case: c, RealServer: realServer, Attempt: attempt, Shim: opts != nil && opts.Shim}
	r.mu.Lock()
	r.runs++
	res.Pcap = filepath.Join(r.dir, fmt.Sprintf("%03d-%s-%s-%d.pcap", r.runs, c.Name, res.Direction(), attempt))
	r.mu.Unlock()
	capNS, capIf := r.peer.capturePoint()
	capt, err := rxeguest.StartCapture(ctx, capNS, capIf, res.Pcap, "udp port 4791")
	if err != nil {
		return res, err
	}
	captured := false
	defer func() {
		if !captured {
			capt.Stop()
		}
	}()
	realArgs := c.Args
	if strings.HasPrefix(c.Real, "ib_") {
		realArgs = "-d " + r.peer.device() + " " + realArgs
	}
	host := r.Host
	sroceArgs := append([]string{c.Cmd, "-d", r.Host.Ifname}, strings.Fields(c.Args)...)
	if res.Shim {
		if r.daemon == nil {
			return res, errors.New("the rig has no sroce daemon for the real tools through the shim (RigConfig.Shim)")
		}
		host = r.ShimHost
		sroceArgs = append([]string{"run", "--socket", r.daemon.socket, "--", c.Real, "-d", r.daemon.dev}, strings.Fields(c.Args)...)
	}
	realCmd := "exec stdbuf -oL -eL " + c.Real + " " + realArgs
	if opts != nil && opts.RealEnv != nil {
		if env := opts.RealEnv(c); env != "" {
			realCmd = "exec env " + env + " stdbuf -oL -eL " + c.Real + " " + realArgs
		}
	}
	var stop func() (string, error)
	defer func() {
		if stop != nil {
			stop()
		}
	}()
	startImpairment := func() error {
		if opts != nil && opts.Impair != nil {
			s, err := opts.Impair(ctx, res.Pcap)
			if err != nil {
				return err
			}
			stop = s
		}
		return nil
	}

	if realServer {
		srv, err := r.peer.start(ctx, realCmd)
		if err != nil {
			return res, err
		}
		if err := r.peer.waitListening(ctx, 18515, srv); err != nil {
			return res, fmt.Errorf("%s as the server: %w", c.Real, err)
		}
		if err := startImpairment(); err != nil {
			return res, err
		}
		p, err := startProc(r.sroce(ctx, host, append(sroceArgs, r.peer.ip().String())...))
		if err != nil {
			return res, err
		}
		res.Ours = p.wait(ctx)
		if res.Real, err = r.guestOutcome(ctx, srv, !res.Ours.OK()); err != nil {
			return res, err
		}
	} else {
		p, err := startProc(r.sroce(ctx, host, sroceArgs...))
		if err != nil {
			return res, err
		}
		defer p.kill()
		err = poll(ctx, "sroce "+c.Cmd+" to listen on TCP port 18515", func() (bool, error) {
			if p.exited() {
				return false, fmt.Errorf("sroce %s as the server ended before listening:\n%v", c.Cmd, p.wait(ctx))
			}
			out, err := host.NS.Exec(ctx, "ss", "-Hltn", "sport = :18515")
			return strings.TrimSpace(string(out)) != "", err
		})
		if err != nil {
			return res, err
		}
		if err := startImpairment(); err != nil {
			return res, err
		}
		cli, err := r.peer.start(ctx, realCmd+" "+host.IP.Addr().String())
		if err != nil {
			return res, err
		}
		if res.Real, err = r.guestOutcome(ctx, cli, false); err != nil {
			return res, err
		}
		wctx, wcancel := context.WithTimeout(ctx, ourLimit)
		res.Ours = p.wait(wctx)
		wcancel()
	}
	if stop != nil {
		s := stop
		stop = nil
		desc, err := s()
		if err != nil {
			return res, err
		}
		res.Impaired = desc
	}
	captured = true
	capt.Stop()
	if err := capt.Complete(); err != nil {
		res.CaptureErr = err
		res.Impaired = strings.TrimPrefix(res.Impaired+"; "+err.Error(), "; ")
	}
	if opts != nil && opts.Impair != nil {
		res.Impaired = strings.TrimPrefix(res.Impaired+"; "+Resent(res.Pcap, r.peer.ip()), "; ")
	}
	return res, nil
}

// guestOutcome waits for a real tool; if kill is set (the sroce side has
// already failed) it gives the tool a few seconds and then stops it.
func (r *Rig) guestOutcome(ctx context.Context, p peerProc, kill bool) (Outcome, error) {
	limit := realLimit
	if kill {
		limit = realGrace
	}
	wctx, cancel := context.WithTimeout(ctx, limit)
	res, err := p.Wait(wctx)
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			p.Kill(kctx)
			cancel()
			return Outcome{}, fmt.Errorf("waiting for the real tool in %s: %w", r.peer.name(), ctx.Err())
		}
		p.Kill(ctx)
		kctx, cancel := context.WithTimeout(ctx, guestQuery)
		res, err = p.Wait(kctx)
		cancel()
		if err != nil {
			return Outcome{}, fmt.Errorf("collecting the output of the real tool in %s, killed after %v: %w", r.peer.name(), limit, err)
		}
		res.ExitCode = -1
	}
	return Outcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}, nil
}

// nicHung returns the guest kernel's report that eth0's transmit queue
// timed out (the netdev watchdog: the emulated virtio-net device stopped
// consuming the guest's frames), or "" if the log has none. The guest's
// agent answers over virtio-serial, so it is reachable when eth0 is not.
func (r *Rig) nicHung(ctx context.Context) string {
	if r.Guest == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, guestQuery)
	defer cancel()
	res, err := r.Guest.Run(ctx, `dmesg | grep -m1 'NETDEV WATCHDOG.*transmit queue.*timed out' || true`)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(res.Stdout))
}

// reboot replaces the guest with a fresh one with the same name, address
// and MAC on the same bridge.
func (r *Rig) reboot(ctx context.Context) error {
	old := r.Guest.Config()
	r.Guest.Close()
	cfg := old
	cfg.Netns, cfg.Bridge, cfg.Tap = "", "", "" // the LAN's
	g, err := r.LAN.Boot(ctx, r.Img, cfg)
	if err != nil {
		return fmt.Errorf("rebooting the guest after its NIC hung: %w", err)
	}
	r.Guest = g
	r.Host.NS.Exec(ctx, "ip", "neigh", "flush", "all")
	if r.ShimHost != nil {
		r.ShimHost.NS.Exec(ctx, "ip", "neigh", "flush", "all")
	}
	return nil
}

// GuestState describes the peer's side of a failed run: eth0's counters,
// its qdiscs, the rxe device's counters and the end of the kernel log, so
// that a peer whose network or rxe stopped shows it.
func (r *Rig) GuestState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, guestQuery)
	defer cancel()
	res, err := r.peer.Run(ctx, `ip -s link show dev eth0
tc -s qdisc show dev eth0
cd /sys/class/infiniband/`+r.peer.device()+`/ports/1/hw_counters 2>/dev/null && for f in *; do printf '%s=%s ' "$f" "$(cat $f)"; done; echo
dmesg | tail -n 20`)
	if err != nil {
		return fmt.Sprintf("(%s did not answer within %v: %v)", r.peer.name(), guestQuery, err)
	}
	return strings.TrimRight(string(res.Stdout)+string(res.Stderr), "\n")
}

// Dissect returns the capture decoded by "sroce dissect".
func (r *Rig) Dissect(pcap string) (string, error) {
	out, err := exec.Command(r.Bin, "dissect", pcap).CombinedOutput()
	return string(out), err
}

// DissectTail returns the last n lines of the decoded capture before its
// summary line.
func (r *Rig) DissectTail(pcap string, n int) string {
	out, _ := r.Dissect(pcap)
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n-1):], "\n")
}

// Resent counts the packets each side sent again in a capture between the
// guest (rxe) and sroce: requests and responses whose PSN that side had
// already sent to the same QP.
func Resent(pcap string, guest netip.Addr) string {
	frames, _, err := rxeguest.ReadPcapFile(pcap)
	if err != nil {
		return fmt.Sprintf("the capture is unreadable: %v", err)
	}
	type key struct {
		fromGuest, request bool
		qpn                bth.QPN
		psn                bth.PSN
	}
	seen := map[key]bool{}
	var resent [2][2]int // [fromGuest][request]
	var p bth.Packet
	for _, f := range frames {
		if p.Parse(f.Data) != nil || p.Info().Service != bth.ServiceRC {
			continue
		}
		b := p.BTH()
		k := key{p.SrcAddr().Unmap() == guest.Unmap(), p.Info().Request, b.DestQP(), b.PSN()}
		if seen[k] {
			resent[b2i(k.fromGuest)][b2i(k.request)]++
		}
		seen[k] = true
	}
	return fmt.Sprintf("sent again: rxe %d requests and %d responses, sroce %d requests and %d responses",
		resent[1][1], resent[1][0], resent[0][1], resent[0][0])
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// proc is a sroce process started in the host namespace.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{}
}

// startProc starts cmd and collects its output.
func startProc(cmd *exec.Cmd) (*proc, error) {
	p := &proc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %v: %w", cmd.Args, err)
	}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// exited reports whether the process has ended.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill kills the process if it is still running and waits for it.
func (p *proc) kill() {
	if !p.exited() {
		p.cmd.Process.Kill()
	}
	<-p.done
}

// wait waits for the process until ctx ends, then kills it, and returns
// its outcome (exit -1 when it was killed).
func (p *proc) wait(ctx context.Context) Outcome {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.kill()
	}
	o := Outcome{Exit: -1, Stdout: p.stdout.String(), Stderr: p.stderr.String()}
	if p.cmd.ProcessState != nil && p.cmd.ProcessState.Exited() {
		o.Exit = p.cmd.ProcessState.ExitCode()
	}
	return o
}

// lockedBuffer collects a process's output while another goroutine may
// read it.
type lockedBuffer struct {
	mu sync.Mutex
	b  []byte
}

// Write appends p.
func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	b.b = append(b.b, p...)
	b.mu.Unlock()
	return len(p), nil
}

// String returns what was written so far.
func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.b)
}

// poll checks cond every 100 ms until it holds or ctx ends; the error
// names what it waited for.
func poll(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// SetLoss makes the peer drop about pct percent of the RoCEv2 frames it
// sends and receives (rxeguest.SetRoCELoss: netem and a tc gact action
// on its eth0).
func (r *Rig) SetLoss(ctx context.Context, pct float64) error {
	return rxeguest.SetRoCELoss(ctx, r.peer, r.peer.name(), pct)
}

// Loss reads the counters of the loss SetLoss put in place.
func (r *Rig) Loss(ctx context.Context) (rxeguest.LossCount, error) {
	return rxeguest.RoCELoss(ctx, r.peer, r.peer.name())
}
