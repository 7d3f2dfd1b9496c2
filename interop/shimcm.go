package interop

import (
	"context"
	"errors"
	"net/netip"
	"os/exec"

	"github.com/sroce/sroce/internal/rxeguest"
)

// PeerProc is a command running in the background on the rig's rdma_rxe
// peer (StartPeer).
type PeerProc interface {
	// Wait waits for it to end, at most until ctx is done.
	Wait(ctx context.Context) (rxeguest.Result, error)
	// Kill ends it.
	Kill(ctx context.Context) error
	// Exited says whether it has ended.
	Exited(ctx context.Context) (bool, error)
}

// StartPeer starts a shell script on the rdma_rxe peer in the background,
// for programs the case table does not run (rdmacm-utils' rping).
func (r *Rig) StartPeer(ctx context.Context, script string) (PeerProc, error) {
	return r.peer.start(ctx, script)
}

// PeerAddr returns the rdma_rxe peer's IPv4 address.
func (r *Rig) PeerAddr() netip.Addr { return r.peer.ip() }

// ShimCommand returns the command that runs prog with args through "sroce
// run" and the rig's daemon (RigConfig.Shim) in ShimHost's namespace.
func (r *Rig) ShimCommand(ctx context.Context, prog string, args ...string) (*exec.Cmd, error) {
	if r.daemon == nil {
		return nil, errors.New("the rig has no sroce daemon for real tools through the shim (RigConfig.Shim)")
	}
	return r.sroce(ctx, r.ShimHost, append([]string{"run", "--socket", r.daemon.socket, "--", prog}, args...)...), nil
}

// ShimDaemonLog returns what the rig's sroce daemon (RigConfig.Shim) has
// logged so far, "" without one.
func (r *Rig) ShimDaemonLog() string {
	if r.daemon == nil {
		return ""
	}
	return r.daemon.proc.stderr.String()
}

// StartPeerCapture starts capturing the peer's RoCEv2 traffic into path
// (a pcap file); Stop the capture before reading it, with Dissect.
func (r *Rig) StartPeerCapture(ctx context.Context, path string) (*rxeguest.Capture, error) {
	ns, ifname := r.peer.capturePoint()
	return rxeguest.StartCapture(ctx, ns, ifname, path, "udp port 4791")
}

// WaitPeerCMListening waits until an RDMA CM ID of the peer listens on
// port, or p ends, or ctx is done (rxeguest.WaitCMListening).
func (r *Rig) WaitPeerCMListening(ctx context.Context, port int, p PeerProc) error {
	return rxeguest.WaitCMListening(ctx, r.peer, r.peer.name(), port, p)
}

// RunPeer runs a shell script on the rdma_rxe peer and waits for it.
func (r *Rig) RunPeer(ctx context.Context, script string) (rxeguest.Result, error) {
	return r.peer.Run(ctx, script)
}
