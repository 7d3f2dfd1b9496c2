package netns

// The real rping, ucmatose, udaddy, ib_write_bw -R and ib_send_lat -R
// through `sroce run` (the drop-in librdmacm
// and libibverbs, the daemon running the CM) against the same programs on
// rdma_rxe in the guest, each side once the server: the CM's REQ/REP/RTU
// and DREQ/DREP between the daemon and the kernel's rdma_cm, then the
// programs' traffic (rping's RDMA READs, WRITEs and sends, every ping
// verified with -v; ucmatose's sends on each connection).

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
)

// rxePings is the number of pings of each rping run (the README's
// `rping -C 100`); the guest is emulated (TCG), so the other programs run
// short.
const rxePings = 100

// TestCMToolsShimRxe runs each rxeCMCases program both ways against rxe.
func TestCMToolsShimRxe(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
	needCMTools(t)
	rxeguest.Skip(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	rig, err := interop.NewRig(ctx, interop.RigConfig{Bin: buildSroce(t), Env: sroceEnv("xdp"), Logf: t.Logf, Shim: true})
	if err != nil {
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
	lossy := rxeCMCases[0]
	lossy.name = "rping-2%-loss"
	runs = append(runs, run{lossy, 2})
	for _, c := range runs {
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
				if d.OutDropped+d.InDropped == 0 {
					t.Errorf("%s: the guest dropped no RoCEv2 frame; the run had no loss to survive", c.name)
				}
			})
		}
		t.Run(c.name+"/rxe-server", func(t *testing.T) {
			srv, err := rig.StartPeer(ctx, c.prog+" "+strings.ReplaceAll(c.server, "{addr}", guest))
			if err != nil {
				t.Fatal(err)
			}
			var out, errOut string
			for try := 0; try < 30; try++ {
				time.Sleep(time.Second)
				if done, _ := srv.Exited(ctx); done {
					break
				}
				out, errOut, err = runShim(ctx, rig, c.prog, strings.Fields(strings.ReplaceAll(c.client, "{addr}", guest))...)
				if err == nil || !strings.Contains(out+errOut, "REJECTED") {
					break
				}
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
		})

		t.Run(c.name+"/shim-server", func(t *testing.T) {
			sctx, scancel := context.WithTimeout(ctx, 5*time.Minute)
			defer scancel()
			type result struct {
				out, errOut string
				err         error
			}
			sc := make(chan result, 1)
			go func() {
				o, e, err := runShim(sctx, rig, c.prog, strings.Fields(strings.ReplaceAll(c.server, "{addr}", shim))...)
				sc <- result{o, e, err}
			}()
			var res interopResult
			for try := 0; try < 30; try++ {
				time.Sleep(time.Second)
				cli, err := rig.StartPeer(ctx, c.prog+" "+strings.ReplaceAll(c.client, "{addr}", shim))
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
			t.Logf("%s through the shim (server): %v\n%s%s", c.prog, s.err, s.out, s.errOut)
			t.Logf("rxe's %s (client): exit %d, %v\n%s%s", c.prog, res.exit, res.err, res.out, res.errOut)
			if s.err != nil || res.err != nil || res.exit != 0 {
				t.Fatalf("%s failed", c.prog)
			}
			if p := c.check(s.out, res.out); p != "" {
				t.Error(p)
			}
		})
	}
}

// rxeCMCase is a real RDMA CM program run against rdma_rxe: its server and
// client arguments ({addr}: the server's address) and a check of both
// outputs ("" when good).
type rxeCMCase struct {
	name, prog, server, client string
	check                      func(srv, cli string) string
}

var rxeCMCases = []rxeCMCase{
	{"rping", "rping", fmt.Sprintf("-s -a {addr} -p 7490 -C %d -v", rxePings), fmt.Sprintf("-c -a {addr} -p 7490 -C %d -v", rxePings), pingsChecked},
	{"ucmatose", "ucmatose", "-b {addr} -p 7491 -C 10", "-s {addr} -p 7491 -C 10", func(srv, cli string) string {
		if !strings.Contains(srv, "data transfers complete") || !strings.Contains(cli, "data transfers complete") {
			return "ucmatose did not complete its data transfers on both sides"
		}
		return ""
	}},
	{"udaddy", "udaddy", "-b {addr} -C 10", "-s {addr} -C 10", func(srv, cli string) string {
		if !strings.Contains(srv, "data transfers complete") || !strings.Contains(cli, "data transfers complete") {
			return "udaddy did not complete its data transfers on both sides"
		}
		return ""
	}},
	{"ib_write_bw -R", "ib_write_bw", "-R -n 200 -s 65536 -p 18600", "-R -n 200 -s 65536 -p 18600 {addr}", func(srv, cli string) string {
		if !bwRow.MatchString(cli) {
			return "ib_write_bw's client printed no bandwidth row"
		}
		return ""
	}},
	{"ib_send_lat -R", "ib_send_lat", "-R -n 200 -s 8 -p 18601", "-R -n 200 -s 8 -p 18601 {addr}", func(srv, cli string) string {
		if !latRow.MatchString(cli) {
			return "ib_send_lat's client printed no latency row"
		}
		return ""
	}},
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

// pingsChecked checks that both rpings printed every verified ping.
func pingsChecked(server, client string) string {
	s := strings.Count(server, "server ping data: rdma-ping-")
	c := strings.Count(client, "ping data: rdma-ping-")
	if s != rxePings || c != rxePings {
		return fmt.Sprintf("rping printed %d verified pings on the server and %d on the client, want %d", s, c, rxePings)
	}
	return ""
}
