package interop

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
)

// TestHostPeerShell drives the part of the host peer that needs no
// rdma_rxe: scripts run in its namespace, in the foreground and in the
// background, killed, and waited for until they listen on a port.
func TestHostPeerShell(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces need root")
	}
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("skipping: the listener of this test is python3, which is missing")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lan, err := rxeguest.NewLAN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lan.Close()
	h, err := lan.AddHost(ctx, rxeguest.HostConfig{IP: netip.MustParsePrefix("192.0.2.7/24")})
	if err != nil {
		t.Fatal(err)
	}
	p := &hostPeer{host: h, dev: "none"}

	res, err := p.Run(ctx, "ip -br addr show dev eth0; echo oops >&2; exit 3")
	if err != nil || res.ExitCode != 3 || !strings.Contains(string(res.Stdout), "192.0.2.7/24") || string(res.Stderr) != "oops\n" {
		t.Errorf("Run: %v, %+v", err, res)
	}

	sleeper, err := p.start(ctx, "sleep 30")
	if err != nil {
		t.Fatal(err)
	}
	if done, _ := sleeper.Exited(ctx); done {
		t.Error("a sleeping script has exited")
	}
	wctx, wcancel := context.WithTimeout(ctx, 100*time.Millisecond)
	if _, err := sleeper.Wait(wctx); err == nil {
		t.Error("Wait returned before the script ended")
	}
	wcancel()
	if err := sleeper.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := sleeper.Wait(ctx); err != nil || res.ExitCode != -1 {
		t.Errorf("Wait after Kill: %v, exit %d", err, res.ExitCode)
	}

	quitter, err := p.start(ctx, "echo bye; exit 4")
	if err != nil {
		t.Fatal(err)
	}
	if err := p.waitListening(ctx, 18515, quitter); err == nil || !strings.Contains(err.Error(), "server exited before listening") {
		t.Errorf("waitListening on a script that ends: %v", err)
	}

	listener, err := p.start(ctx, `exec python3 -c 'import socket, time
s = socket.socket(); s.bind(("0.0.0.0", 18515)); s.listen(); time.sleep(30)'`)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Kill(ctx)
	if err := p.waitListening(ctx, 18515, listener); err != nil {
		t.Errorf("waitListening: %v", err)
	}
}

// TestHostPeerUnavailable: asking for this host's rdma_rxe where it
// cannot be had fails with HostRxe's reason, before anything is set up.
func TestHostPeerUnavailable(t *testing.T) {
	why := HostRxe()
	if why == nil {
		t.Skip("skipping: this host can be the rdma_rxe peer")
	}
	_, err := NewRig(context.Background(), RigConfig{Bin: "/nonexistent", Peer: PeerHost})
	if err == nil || err.Error() != why.Error() {
		t.Errorf("NewRig with the host as peer: %v, want %v", err, why)
	}
	if _, err := NewRig(context.Background(), RigConfig{Peer: "moon"}); err == nil || !strings.Contains(err.Error(), `no such kind of peer "moon"`) {
		t.Errorf("NewRig with a bad peer kind: %v", err)
	}
}

// TestHostPeerRunBounded: a script that outlives its context is killed,
// children included, and Run says why.
func TestHostPeerRunBounded(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: network namespaces need root")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ns, err := rxeguest.NewNetns(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()
	p := &hostPeer{host: &rxeguest.Host{NS: ns, Ifname: "lo"}}
	rctx, rcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer rcancel()
	start := time.Now()
	_, err = p.Run(rctx, "sleep 30 & sleep 30")
	if err == nil || !strings.Contains(err.Error(), "running a script in") {
		t.Errorf("Run past its context: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("Run took %v after its context ended", d)
	}
}
