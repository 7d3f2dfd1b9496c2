package interop

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
)

// Peer kinds for RigConfig.Peer.
const (
	PeerAuto  = "auto"  // this host when HostRxe allows it, else a guest
	PeerHost  = "host"  // rdma_rxe of this host's kernel, in a namespace
	PeerGuest = "guest" // rdma_rxe in a qemu guest
)

// peer is the rdma_rxe side of a rig: where the real tools run.
type peer interface {
	// Run runs a shell script where the real tools run.
	Run(ctx context.Context, script string) (rxeguest.Result, error)
	// start starts a script in the background.
	start(ctx context.Context, script string) (peerProc, error)
	// waitListening waits until a TCP socket listens on port, or p ends.
	waitListening(ctx context.Context, port int, p peerProc) error
	ip() netip.Addr
	// device is the rdma device the real tools open.
	device() string
	// capturePoint is where the peer's RoCEv2 traffic is captured.
	capturePoint() (*rxeguest.Netns, string)
	// name names the peer in messages.
	name() string
}

// peerProc is a script running in the background on a peer.
type peerProc interface {
	Wait(ctx context.Context) (rxeguest.Result, error)
	Kill(ctx context.Context) error
	Exited(ctx context.Context) (bool, error)
}

// guestPeer is the rig's guest (r.Guest, which a reboot replaces).
type guestPeer struct{ r *Rig }

func (g guestPeer) Run(ctx context.Context, script string) (rxeguest.Result, error) {
	return g.r.Guest.Run(ctx, script)
}

func (g guestPeer) start(ctx context.Context, script string) (peerProc, error) {
	p, err := g.r.Guest.Start(ctx, script)
	if err != nil {
		return nil, err
	}
	return p, nil
}

func (g guestPeer) waitListening(ctx context.Context, port int, p peerProc) error {
	return g.r.Guest.WaitListening(ctx, port, p.(*rxeguest.Proc))
}

func (g guestPeer) ip() netip.Addr { return g.r.Guest.IP() }
func (g guestPeer) device() string { return "rxe0" }
func (g guestPeer) name() string   { return g.r.Guest.Name() }

func (g guestPeer) capturePoint() (*rxeguest.Netns, string) { return g.r.LAN.NS, g.r.Guest.Tap() }

// realTools are the reference tools the pairs run.
func realTools() []string {
	set := map[string]bool{}
	for _, table := range [][]Case{Cases, LossyCases} {
		for _, c := range table {
			set[c.Real] = true
		}
	}
	var tools []string
	for t := range set {
		tools = append(tools, t)
	}
	sort.Strings(tools)
	return tools
}

// HostRxe reports why this host's kernel cannot be the rdma_rxe peer, or
// returns nil: it needs root, the rdma_rxe module (loaded, or there to
// load), the rdma, tc, ss, stdbuf and tcpdump commands and the real tools
// (rdma-core's ibv_*_pingpong, perftest's ib_*; and libibverbs' rxe
// provider, which the tools find at run time).
func HostRxe() error {
	if os.Geteuid() != 0 {
		return errors.New("an rdma_rxe peer on this host needs root")
	}
	if _, err := os.Stat("/sys/module/rdma_rxe"); err != nil {
		if err := exec.Command("modprobe", "-n", "-q", "rdma_rxe").Run(); err != nil {
			return errors.New("this kernel has no rdma_rxe module")
		}
	}
	var missing []string
	for _, t := range append([]string{"rdma", "tc", "ss", "stdbuf", "tcpdump", "ip"}, realTools()...) {
		if _, err := exec.LookPath(t); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("this kernel has rdma_rxe, but %s not installed (apt-get install iproute2 tcpdump ibverbs-utils ibverbs-providers perftest)",
			strings.Join(missing, ", ")+map[bool]string{true: " is", false: " are"}[len(missing) == 1])
	}
	return nil
}

// hostPeer is rdma_rxe of this host's kernel on the veth of a network
// namespace on the rig's bridge.
type hostPeer struct {
	host *rxeguest.Host
	dev  string
}

// hostActiveLimit bounds the wait for a new rxe device's port to become
// ACTIVE.
const hostActiveLimit = 15 * time.Second

// newHostPeer loads rdma_rxe, adds a namespace with a veth on lan's
// bridge at addr and creates an rxe device on it.
func newHostPeer(ctx context.Context, lan *rxeguest.LAN, addr netip.Prefix) (*hostPeer, error) {
	if out, err := exec.CommandContext(ctx, "modprobe", "rdma_rxe").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("loading rdma_rxe: %w: %s", err, bytes.TrimSpace(out))
	}
	h, err := lan.AddHost(ctx, rxeguest.HostConfig{IP: addr})
	if err != nil {
		return nil, err
	}
	p := &hostPeer{host: h, dev: fmt.Sprintf("sroce_rxe%d", os.Getpid())}
	if out, err := h.NS.Exec(ctx, "rdma", "link", "add", p.dev, "type", "rxe", "netdev", h.Ifname); err != nil {
		h.Close()
		return nil, fmt.Errorf("creating the rxe device: %w: %s", err, out)
	}
	wctx, cancel := context.WithTimeout(ctx, hostActiveLimit)
	defer cancel()
	err = poll(wctx, "port 1 of "+p.dev+" to become ACTIVE", func() (bool, error) {
		out, err := h.NS.Exec(wctx, "rdma", "link", "show", p.dev+"/1")
		return strings.Contains(string(out), "state ACTIVE"), err
	})
	if err == nil {
		// rdma_rxe before it knew network namespaces kept its UDP socket
		// in the initial one: a device on a veth elsewhere sends, but
		// what comes back finds no socket.
		out, serr := h.NS.Exec(ctx, "ss", "-Hlun", "sport = :4791")
		switch {
		case serr != nil:
			err = serr
		case strings.TrimSpace(string(out)) == "":
			err = errors.New("this kernel's rdma_rxe has no socket on UDP port 4791 in the namespace of its device (it predates network namespace support), so it cannot receive there")
		}
	}
	if err != nil {
		p.close()
		h.Close()
		return nil, err
	}
	return p, nil
}

// close deletes the rxe device (deleting the namespace's veth would too).
func (p *hostPeer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p.host.NS.Exec(ctx, "rdma", "link", "delete", p.dev)
}

// Run runs script with sh in the peer's namespace, in a process group of
// its own that is killed when ctx ends.
func (p *hostPeer) Run(ctx context.Context, script string) (rxeguest.Result, error) {
	cmd := p.host.NS.Command(ctx, "sh", "-c", script)
	cmd.SysProcAttr.Setpgid = true
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	res := rxeguest.Result{Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.ExitCode = ee.ExitCode()
	case err != nil:
		return res, fmt.Errorf("running a script in %s: %w", p.name(), err)
	}
	return res, nil
}

func (p *hostPeer) start(ctx context.Context, script string) (peerProc, error) {
	cmd := exec.Command("ip", "netns", "exec", p.host.NS.Name, "sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	hp := &hostProc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &hp.stdout, &hp.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting a script in %s: %w", p.name(), err)
	}
	go func() {
		cmd.Wait()
		close(hp.done)
	}()
	return hp, nil
}

func (p *hostPeer) waitListening(ctx context.Context, port int, proc peerProc) error {
	return poll(ctx, fmt.Sprintf("a listener on TCP port %d in %s", port, p.name()), func() (bool, error) {
		if done, _ := proc.Exited(ctx); done {
			res, _ := proc.Wait(ctx)
			return false, fmt.Errorf("server exited before listening: %w", res.Err())
		}
		out, err := p.host.NS.Exec(ctx, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port))
		return strings.TrimSpace(string(out)) != "", err
	})
}

func (p *hostPeer) ip() netip.Addr { return p.host.IP.Addr() }
func (p *hostPeer) device() string { return p.dev }
func (p *hostPeer) name() string   { return "the rxe namespace " + p.host.NS.Name }

func (p *hostPeer) capturePoint() (*rxeguest.Netns, string) { return p.host.NS, p.host.Ifname }

// hostProc is a script running in the background in a namespace of this
// host, in a process group of its own.
type hostProc struct {
	cmd            *exec.Cmd
	stdout, stderr lockedBuffer
	done           chan struct{}
}

// Wait waits for the script to end, or ctx.
func (h *hostProc) Wait(ctx context.Context) (rxeguest.Result, error) {
	select {
	case <-h.done:
	case <-ctx.Done():
		return rxeguest.Result{}, fmt.Errorf("waiting for %q: %w", h.cmd.Args[len(h.cmd.Args)-1], ctx.Err())
	}
	res := rxeguest.Result{Stdout: []byte(h.stdout.String()), Stderr: []byte(h.stderr.String()), ExitCode: -1}
	if st := h.cmd.ProcessState; st != nil && st.Exited() {
		res.ExitCode = st.ExitCode()
	}
	return res, nil
}

// Kill kills the script's process group.
func (h *hostProc) Kill(context.Context) error {
	if err := syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return err
	}
	return nil
}

// Exited reports whether the script has ended.
func (h *hostProc) Exited(context.Context) (bool, error) {
	select {
	case <-h.done:
		return true, nil
	default:
		return false, nil
	}
}
