package netns

// The real rping, ucmatose, udaddy, ib_write_bw -R and ib_send_lat -R
// through `sroce run` (the drop-in librdmacm
// and libibverbs, the daemon running the CM) against the same programs on
// rdma_rxe in the guest, each side once the server: the CM's REQ/REP/RTU
// and DREQ/DREP between the daemon and the kernel's rdma_cm, then the
// programs' traffic (rping's RDMA READs, WRITEs and sends, every ping
// verified with -v; ucmatose's sends on each connection).

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
)

// rxePings is the number of pings of each rping run (docs/programs.md's
// `rping -C 100`); the guest is emulated (TCG), so the other programs run
// short.
const rxePings = 100

// TestCMToolsShimRxe runs each rxeCMCases program both ways against rxe.
func TestCMToolsShimRxe(t *testing.T) {
	rigTestParallel(t, 90*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rig := newShimRxeRig(ctx, t)
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
	// Real perftest over the link-local IPv6 GIDs (-x 0), with no CM.
	t.Run("perftest-x0", func(t *testing.T) { perftestLinkLocal(t, ctx, rig) })
	// Last, rping again with 2% of the guest's RoCEv2 frames dropped each
	// way: the CM's resends and the RC retransmissions carry it through.
	type run struct {
		rxeCMCase
		loss float64 // percent of the guest's RoCEv2 frames dropped each way
	}
	var runs []run
	for _, c := range rxeCMCases {
		runs = append(runs, run{c, 0})
	}
	lossy := rpingCase("rping-2%-loss", rxeLossyPings)
	runs = append(runs, run{lossy, 2})
	for _, c := range runs {
		ran := false // a subtest of c ran (-run may pick none)
		if c.loss > 0 {
			if err := rig.SetLoss(ctx, c.loss); err != nil {
				t.Fatal(err)
			}
			before, err := rig.Loss(ctx)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				after, err := rig.Loss(context.Background())
				if err != nil {
					t.Error(err)
					return
				}
				d := after.Minus(before)
				t.Logf("%s: %s", c.name, d.Describe("rxe", "sroce"))
				if ran && d.OutDropped+d.InDropped == 0 {
					t.Errorf("%s: the guest dropped no RoCEv2 frame; the run had no loss to survive", c.name)
				}
			})
		}
		t.Run(c.name+"/rxe-server", func(t *testing.T) {
			ran = true
			for attempt := 1; ; attempt++ {
				srv, err := rig.StartPeer(ctx, c.prog+" "+strings.ReplaceAll(c.server, "{addr}", guest))
				if err != nil {
					t.Fatal(err)
				}
				lctx, lcancel := context.WithTimeout(ctx, 30*time.Second)
				err = rig.WaitPeerCMListening(lctx, c.port, srv)
				lcancel()
				if err != nil {
					t.Fatal(err)
				}
				out, errOut, err := runShim(ctx, rig, c.prog, strings.Fields(strings.ReplaceAll(c.client, "{addr}", guest))...)
				if err != nil && attempt < cmAttempts && noListener.MatchString(out+errOut) {
					kctx, kcancel := context.WithTimeout(ctx, 30*time.Second)
					srv.Kill(kctx)
					kcancel()
					t.Logf("attempt %d: rxe's %s rejected a connection of the client for want of a listener; both start again:\n%s%s", attempt, c.prog, out, errOut)
					continue
				}
				wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
				res, werr := srv.Wait(wctx)
				wcancel()
				t.Logf("rxe's %s (server): exit %d, %v\n%s%s", c.prog, res.ExitCode, werr, res.Stdout, res.Stderr)
				t.Logf("%s through the shim (client): %v\n%s%s", c.prog, err, out, errOut)
				if err != nil || werr != nil || res.ExitCode != 0 {
					t.Fatalf("%s failed", c.prog)
				}
				if p := c.check(string(res.Stdout), out); p != "" {
					t.Error(p)
				}
				return
			}
		})

		t.Run(c.name+"/shim-server", func(t *testing.T) {
			ran = true
			type result struct {
				out, errOut string
				err         error
			}
			for attempt := 1; ; attempt++ {
				sctx, scancel := context.WithTimeout(ctx, 5*time.Minute)
				sc := make(chan result, 1)
				go func() {
					o, e, err := runShim(sctx, rig, c.prog, strings.Fields(strings.ReplaceAll(c.server, "{addr}", shim))...)
					sc <- result{o, e, err}
				}()
				// The daemon's listeners show in no table the guest
				// can read: the client starts a second later, and both
				// start again when it finds no listener.
				time.Sleep(time.Second)
				cli, err := rig.StartPeer(ctx, c.prog+" "+strings.ReplaceAll(c.client, "{addr}", shim))
				if err != nil {
					scancel()
					t.Fatal(err)
				}
				wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
				r, werr := cli.Wait(wctx)
				wcancel()
				res := interopResult{r.ExitCode, string(r.Stdout), string(r.Stderr), werr}
				if (werr != nil || r.ExitCode != 0) && attempt < cmAttempts && noListener.MatchString(res.out+res.errOut) {
					scancel()
					s := <-sc
					t.Logf("attempt %d: the shim's %s rejected a connection of rxe's client for want of a listener; both start again:\n%s%s\n(the server: %v\n%s%s)",
						attempt, c.prog, res.out, res.errOut, s.err, s.out, s.errOut)
					continue
				}
				s := <-sc
				scancel()
				t.Logf("%s through the shim (server): %v\n%s%s", c.prog, s.err, s.out, s.errOut)
				t.Logf("rxe's %s (client): exit %d, %v\n%s%s", c.prog, res.exit, res.err, res.out, res.errOut)
				if s.err != nil || res.err != nil || res.exit != 0 {
					t.Fatalf("%s failed", c.prog)
				}
				if p := c.check(s.out, res.out); p != "" {
					t.Error(p)
				}
				return
			}
		})
	}
}

// newShimRxeRig skips unless the rdma_rxe interop tests can run, and
// returns the package's rig (sharedInteropRig), whose rdma_rxe peer is
// the shared guest rxe-a and which has a sroce daemon for programs through
// the shim (its log shown when t fails).
func newShimRxeRig(ctx context.Context, t *testing.T) *interop.Rig {
	t.Helper()
	if testing.Short() {
		t.Skip("skipping the rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
	needCMTools(t)
	rxeguest.Skip(t)
	rig := sharedInteropRig(t)
	t.Logf("peer: %s", rig.Describe())
	return rig
}

// cmAttempts bounds the runs of one pair that noListener starts again.
const cmAttempts = 5

// noListener matches what rping, ucmatose, udaddy and perftest print when
// a connection is rejected with reason 8 (invalid service ID: nothing
// listened on the port yet). perftest's -R makes two connections, and its
// server listens for the second only after the first one's exchange; a
// client quicker than that is rejected, and perftest 4.5-0.17's retry
// then uses the CM IDs it has just freed and dies. The server has moved
// on by then, so a pair rejected this way starts again, server and
// client, a bounded number of times, each logged.
var noListener = regexp.MustCompile(`RDMA_CM_EVENT_REJECTED[,;] error:? 8\b`)

// rxeCMCase is a real RDMA CM program run against rdma_rxe: its server and
// client arguments ({addr}: the server's address), the port its server
// listens on, and a check of both outputs ("" when good).
type rxeCMCase struct {
	name, prog, server, client string
	port                       int
	check                      func(srv, cli string) string
}

var rxeCMCases = []rxeCMCase{
	rpingCase("rping", rxePings),
	{"ucmatose", "ucmatose", "-b {addr} -p 7491 -C 10", "-s {addr} -p 7491 -C 10", 7491, func(srv, cli string) string {
		if !strings.Contains(srv, "data transfers complete") || !strings.Contains(cli, "data transfers complete") {
			return "ucmatose did not complete its data transfers on both sides"
		}
		return ""
	}},
	{"udaddy", "udaddy", "-b {addr} -C 10", "-s {addr} -C 10", udaddyPort, func(srv, cli string) string {
		if !strings.Contains(srv, "data transfers complete") || !strings.Contains(cli, "data transfers complete") {
			return "udaddy did not complete its data transfers on both sides"
		}
		return ""
	}},
	{"ib_write_bw -R", "ib_write_bw", "-R -n 200 -s 65536 -p 18600", "-R -n 200 -s 65536 -p 18600 {addr}", 18600, func(srv, cli string) string {
		if !bwRow.MatchString(cli) {
			return "ib_write_bw's client printed no bandwidth row"
		}
		return ""
	}},
	{"ib_send_lat -R", "ib_send_lat", "-R -n 200 -s 8 -p 18601", "-R -n 200 -s 8 -p 18601 {addr}", 18601, func(srv, cli string) string {
		if !latRow.MatchString(cli) {
			return "ib_send_lat's client printed no latency row"
		}
		return ""
	}},
	// fio's rdma ioengine: RDMA WRITE at iodepth 16, and SEND at iodepth 1
	// with a receive posted for every message (fio connects with
	// rnr_retry_count 0; see TestAppFio).
	{"fio write", "fio", "--name=server --rw=read --ioengine=rdma --port=18602 --bs=64k --size=4m --iodepth=16",
		"--name=client --rw=write --ioengine=rdma --port=18602 --bs=64k --size=4m --iodepth=16 --verb=write --hostname={addr}",
		18602, fioMoved},
	{"fio send", "fio", "--name=server --rw=read --ioengine=rdma --port=18603 --bs=64k --size=4m --iodepth=64",
		"--name=client --rw=write --ioengine=rdma --port=18603 --bs=64k --size=4m --iodepth=1 --verb=send --hostname={addr}",
		18603, fioMoved},
}

// fioMoved checks that fio's client moved its 4 MiB and neither side
// reported an error.
func fioMoved(srv, cli string) string {
	if !strings.Contains(cli, "io=4096KiB") {
		return "fio's client did not report 4 MiB moved"
	}
	for _, out := range []string{srv, cli} {
		if strings.Contains(out, "err=") && !strings.Contains(out, "err= 0") {
			return "fio reported an error"
		}
	}
	return ""
}

// udaddyPort is the port udaddy listens on when given none.
const udaddyPort = 7174

// interopResult is the outcome of a program on the peer.
type interopResult struct {
	exit        int
	out, errOut string
	err         error
}

// runShim runs prog through the rig's daemon and returns its output.
func runShim(ctx context.Context, rig *interop.Rig, prog string, args ...string) (string, string, error) {
	return runShimEnv(ctx, rig, nil, prog, args...)
}

// rpingCase is rping with n verified pings, each side checked for all n.
func rpingCase(name string, n int) rxeCMCase {
	args := func(server bool) string { return strings.Join(rpingArgs(server, "{addr}", 7490, n), " ") }
	return rxeCMCase{name, "rping", args(true), args(false), 7490,
		func(server, client string) string {
			var p []string
			if s := checkRpingOutput(server, rpingServerPrefix, n, rpingDefaultSize); s != "" {
				p = append(p, "server: "+s)
			}
			if s := checkRpingOutput(client, rpingClientPrefix, n, rpingDefaultSize); s != "" {
				p = append(p, "client: "+s)
			}
			return strings.Join(p, "; ")
		}}
}

// rxeLossyPings is the number of pings of the rping run with loss. Each
// RoCEv2 frame lost costs rping's QP its retransmission timeout, about
// half a second on both sides (rdma_cm's packet lifetime on RoCE): 100
// pings (about 600 frames each way) lost some 25 frames and took 30 to
// 40 s. 40 pings (about 250 frames each way) lose about 10 in a run,
// and none in both runs only by a chance of about e^-20.
const rxeLossyPings = 40
