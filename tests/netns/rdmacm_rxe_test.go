package netns

// The real rping through `sroce run` (the drop-in librdmacm and libibverbs,
// the daemon running the CM) against the real rping on rdma_rxe in the
// guest, each side once the server: the CM's REQ/REP/RTU and DREQ/DREP
// between the daemon and the kernel's rdma_cm, then rping's RDMA READs and
// WRITEs and sends, every ping verified (-v).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/interop"
)

// rxePings is the number of pings of each run: the guest is emulated (TCG).
const rxePings = 10

func TestRpingShimRxe(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
	needCMTools(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rig, err := interop.NewRig(ctx, interop.RigConfig{Bin: buildSroce(t), Env: sroceEnv("xdp"), Logf: t.Logf, Shim: true})
	if err != nil {
		if strings.Contains(err.Error(), "not available") {
			t.Skip(err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the sroce daemon's log:\n%s", rig.ShimDaemonLog())
		}
		rig.Close()
	})
	t.Logf("peer: %s", rig.Describe())
	guest, shim := rig.PeerAddr().String(), interop.ShimAddr.Addr().String()
	pcap := filepath.Join(t.TempDir(), "rping.pcap")
	capt, err := rig.StartPeerCapture(ctx, pcap)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		capt.Stop()
		if t.Failed() {
			logDissect(t, rig, pcap)
			t.Logf("the guest after the runs:\n%s", rig.GuestState(context.Background()))
		}
	})
	count := fmt.Sprint(rxePings)

	t.Run("rxe-server", func(t *testing.T) {
		srv, err := rig.StartPeer(ctx, "rping -s -a "+guest+" -p 7490 -C "+count+" -v")
		if err != nil {
			t.Fatal(err)
		}
		var out, errOut string
		for try := 0; try < 30; try++ {
			time.Sleep(time.Second)
			if done, _ := srv.Exited(ctx); done {
				break
			}
			out, errOut, err = runShim(ctx, rig, "rping", "-c", "-a", guest, "-p", "7490", "-C", count, "-v")
			if err == nil || !strings.Contains(out+errOut, "REJECTED") {
				break
			}
		}
		wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
		res, werr := srv.Wait(wctx)
		wcancel()
		t.Logf("rxe's rping (server): exit %d, %v\n%s%s", res.ExitCode, werr, res.Stdout, res.Stderr)
		t.Logf("rping through the shim (client): %v\n%s%s", err, out, errOut)
		if err != nil || werr != nil || res.ExitCode != 0 {
			t.Fatal("rping failed")
		}
		checkPings(t, string(res.Stdout), out)
	})

	t.Run("shim-server", func(t *testing.T) {
		sctx, scancel := context.WithTimeout(ctx, 5*time.Minute)
		defer scancel()
		type result struct {
			out, errOut string
			err         error
		}
		sc := make(chan result, 1)
		go func() {
			o, e, err := runShim(sctx, rig, "rping", "-s", "-a", shim, "-p", "7491", "-C", count, "-v")
			sc <- result{o, e, err}
		}()
		var res interopResult
		for try := 0; try < 30; try++ {
			time.Sleep(time.Second)
			cli, err := rig.StartPeer(ctx, "rping -c -a "+shim+" -p 7491 -C "+count+" -v")
			if err != nil {
				t.Fatal(err)
			}
			wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
			r, werr := cli.Wait(wctx)
			wcancel()
			res = interopResult{r.ExitCode, string(r.Stdout), string(r.Stderr), werr}
			if (werr == nil && r.ExitCode == 0) || !strings.Contains(res.out+res.errOut, "REJECTED") {
				break
			}
		}
		s := <-sc
		t.Logf("rping through the shim (server): %v\n%s%s", s.err, s.out, s.errOut)
		t.Logf("rxe's rping (client): exit %d, %v\n%s%s", res.exit, res.err, res.out, res.errOut)
		if s.err != nil || res.err != nil || res.exit != 0 {
			t.Fatal("rping failed")
		}
		checkPings(t, s.out, res.out)
	})
}

// interopResult is the outcome of a program on the peer.
type interopResult struct {
	exit        int
	out, errOut string
	err         error
}

// runShim runs prog through the rig's daemon and returns its output.
func runShim(ctx context.Context, rig *interop.Rig, prog string, args ...string) (string, string, error) {
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd, err := rig.ShimCommand(rctx, prog, args...)
	if err != nil {
		return "", "", err
	}
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if rctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within 90 s", prog)
	}
	return o.String(), e.String(), err
}

// checkPings checks that both rpings printed every verified ping.
func checkPings(t *testing.T, server, client string) {
	t.Helper()
	if n := strings.Count(server, "server ping data: rdma-ping-"); n != rxePings {
		t.Errorf("the server printed %d verified pings, want %d", n, rxePings)
	}
	if n := strings.Count(client, "ping data: rdma-ping-"); n != rxePings {
		t.Errorf("the client printed %d verified pings, want %d", n, rxePings)
	}
}
