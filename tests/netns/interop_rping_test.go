package netns

// RDMA CM against rdma_rxe: rdma-core's rping in the guest and "sroce
// rping" on the host (over AF_XDP on the veth of the guest's bridge), each
// once as the server and once as the client, then again with the guest
// dropping 2% of the RoCEv2 frames each way, CM MADs included (the CM's
// retries must carry the connection through). Both sides must exit 0 and
// print every ping line (-v) with the text rping puts in it. A failed run
// logs the capture taken on the guest's tap, dissected (CM messages by
// name) and as a ladder.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
)

// rpingCount is the number of pings of each interop run.
const rpingCount = 100

// rpingLimit bounds one rping run (TCG guests are slow; with loss a lost
// REQ costs rxe's CM response timeout, about 6 s, and a lost DREQ more).
const rpingLimit = 3 * time.Minute

// TestInteropRping runs rping against "sroce rping", both ways, without
// and with loss.
func TestInteropRping(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	rig := newInteropLAN(t, ctx)
	// The guest's kernel CM answers REQs only once ib_cm is loaded (a
	// real rping loads it through rdma_ucm; sroce's REQ may come first).
	if res, err := rig.Guest.Run(ctx, "modprobe rdma_ucm"); err != nil || res.ExitCode != 0 {
		t.Fatalf("modprobe rdma_ucm in the guest: %v %v\n%s", err, res.Err(), res.Stderr)
	}
	port := 7180
	for _, loss := range []float64{0, lossPct} {
		name := "clean"
		if loss > 0 {
			name = fmt.Sprintf("loss%v%%", loss)
			if err := rig.Guest.SetRoCELoss(ctx, loss); err != nil {
				t.Fatal(err)
			}
		}
		for _, realServer := range []bool{true, false} {
			dir := "real-server"
			if !realServer {
				dir = "real-client"
			}
			port++
			t.Run(name+"/"+dir, func(t *testing.T) {
				var before rxeguest.LossCount
				if loss > 0 {
					before, _ = rig.Guest.RoCELoss(ctx)
				}
				runRpingPair(t, ctx, rig, realServer, port)
				if loss > 0 {
					if after, err := rig.Guest.RoCELoss(ctx); err == nil {
						t.Logf("%s", after.Minus(before).Describe(rig.Guest.Name(), "sroce"))
					}
				}
			})
		}
	}
}

// runRpingPair runs one rping pair on port: the guest's rping as the
// server (realServer) or the client, "sroce rping" as the other side, and
// checks both.
func runRpingPair(t *testing.T, ctx context.Context, rig *interop.Rig, realServer bool, port int) {
	ctx, cancel := context.WithTimeout(ctx, rpingLimit)
	defer cancel()
	pcap := filepath.Join(t.TempDir(), "rping.pcap")
	capt, err := rxeguest.StartCapture(ctx, rig.LAN.NS, rig.Guest.Tap(), pcap, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	count, p := strconv.Itoa(rpingCount), strconv.Itoa(port)
	sroce := func(args ...string) *toolProc {
		cmd := rig.Host.NS.Command(ctx, rig.Bin, append([]string{"rping"}, args...)...)
		cmd.Env = rig.Env
		return startTool(t, cmd, (*exec.Cmd).Start)
	}
	var real, ours toolOutcome
	guestIP, hostIP := rig.Guest.IP().String(), rig.Host.IP.Addr().String()
	if realServer {
		srv, err := rig.Guest.Start(ctx, "exec stdbuf -oL -eL rping -s -a "+guestIP+" -p "+p+" -C "+count+" -v")
		if err != nil {
			t.Fatal(err)
		}
		if err := waitCMListening(ctx, rig.Guest, port, srv); err != nil {
			t.Fatal(err)
		}
		ours = sroce("-c", "-a", guestIP, "-p", p, "-C", count, "-v").wait(ctx)
		real = guestWait(ctx, srv, !ours.OK())
	} else {
		srv := sroce("-s", "-a", hostIP, "-p", p, "-C", count, "-v", "-d")
		err := waitFor(ctx, "sroce rping -s to listen (its \"rdma_listen\" line)", func() (bool, error) {
			if srv.exited() {
				return false, fmt.Errorf("sroce rping -s ended before listening: %v", srv.wait(ctx))
			}
			return strings.Contains(srv.stdout.String()+srv.stderr.String(), "rdma_listen"), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := rig.Guest.Run(ctx, "stdbuf -oL -eL rping -c -a "+hostIP+" -p "+p+" -C "+count+" -v")
		if err != nil {
			t.Fatal(err)
		}
		real = toolOutcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		ours = srv.wait(wctx)
		wcancel()
	}
	capt.Stop()
	problems := rpingProblems("rping (rxe)", real, realServer) + rpingProblems("sroce rping", ours, !realServer)
	if problems == "" {
		t.Logf("both sides printed %d pings; %s", rpingCount, capt.Summary())
		return
	}
	keepCapture(t, pcap)
	t.Logf("the capture on the guest's tap, dissected:\n%s", dissectOrErr(rig, pcap))
	t.Logf("its ladder:\n%s", ladderOrErr(t, rig, pcap))
	t.Logf("the guest after the run:\n%s", rig.GuestState(ctx))
	t.Logf("rping (rxe): %v", real)
	t.Logf("sroce rping: %v", ours)
	t.Error(strings.TrimSpace(problems))
}

// guestWait waits for a guest process; if kill (the other side failed
// already) it gives it ten seconds and then stops it.
func guestWait(ctx context.Context, p *rxeguest.Proc, kill bool) toolOutcome {
	if kill {
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		res, err := p.Wait(wctx)
		if err != nil {
			kctx, kcancel := context.WithTimeout(context.Background(), 10*time.Second)
			p.Kill(kctx)
			kcancel()
			return toolOutcome{Exit: -1, Stdout: string(res.Stdout), Stderr: string(res.Stderr) + "\n(stopped: " + err.Error() + ")"}
		}
		return toolOutcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
	}
	res, err := p.Wait(ctx)
	if err != nil {
		return toolOutcome{Exit: -1, Stdout: string(res.Stdout), Stderr: string(res.Stderr) + "\n(waiting: " + err.Error() + ")"}
	}
	return toolOutcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
}

// rpingProblems says, in a line, what is wrong with one rping side, or
// returns "".
func rpingProblems(who string, o toolOutcome, server bool) string {
	role, prefix := "client", "ping data: "
	if server {
		role, prefix = "server", "server ping data: "
	}
	var p []string
	if o.Exit != 0 {
		p = append(p, fmt.Sprintf("exit %d", o.Exit))
	}
	if s := checkRpingOutput(o.Stdout, prefix, rpingCount, rpingDefaultSize); s != "" {
		p = append(p, s)
	}
	if len(p) == 0 {
		return ""
	}
	return who + " as the " + role + ": " + strings.Join(p, "; ") + "\n"
}

// keepCapture copies a capture into $SROCE_CAPTURE_DIR, when set, named
// after the test.
func keepCapture(t *testing.T, pcap string) {
	dir := os.Getenv("SROCE_CAPTURE_DIR")
	if dir == "" {
		return
	}
	if data, err := os.ReadFile(pcap); err == nil {
		os.WriteFile(filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".pcap"), data, 0o644)
	}
}

// dissectOrErr returns "sroce dissect" of a capture, or why it failed.
func dissectOrErr(rig *interop.Rig, pcap string) string {
	out, err := rig.Dissect(pcap)
	if err != nil {
		return fmt.Sprintf("(sroce dissect: %v)\n%s", err, out)
	}
	return out
}

// ladderOrErr returns "sroce ladder" of a capture, or why it failed.
func ladderOrErr(t *testing.T, rig *interop.Rig, pcap string) string {
	out, err := exec.Command(rig.Bin, "ladder", pcap).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(sroce ladder: %v)\n%s", err, out)
	}
	return string(out)
}
