package netns

// Debian's perftest through `sroce run` against the same tools on rdma_rxe
// in the guest, over each side's GID 0: the link-local IPv6 one (`-x 0`),
// as a user who takes the first GID gets it. The tools exchange their
// GIDs over TCP on the IPv4 addresses; the RoCEv2 traffic is IPv6
// between link-local addresses, each side once the server.

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/interop"
)

// perftestLinkLocal runs the cases on rig (TestCMToolsShimRxe's, whose
// guest it shares).
func perftestLinkLocal(t *testing.T, ctx context.Context, rig *interop.Rig) {
	guest, shim := rig.PeerAddr().String(), interop.ShimAddr.Addr().String()
	port := 18630
	for _, c := range []realTool{
		{"ib_write_bw", "-x 0 -n 200 -s 65536 -F", "-x"},
		{"ib_send_lat", "-x 0 -n 200 -s 8 -F", "-x"},
	} {
		port++
		p := fmt.Sprint(port)
		args := strings.Fields(c.args + " -p " + p)
		t.Run(c.prog+"/rxe-server", func(t *testing.T) {
			srv, err := rig.StartPeer(ctx, c.prog+" "+strings.Join(args, " "))
			if err != nil {
				t.Fatal(err)
			}
			if err := waitFor(ctx, "rxe's "+c.prog+" to listen on TCP port "+p, func() (bool, error) {
				res, err := rig.RunPeer(ctx, "ss -Hltn 'sport = :"+p+"'")
				if err != nil {
					return false, err
				}
				if done, err := srv.Exited(ctx); done || err != nil {
					return false, fmt.Errorf("rxe's %s ended before it listened (%v)", c.prog, err)
				}
				return strings.TrimSpace(string(res.Stdout)) != "", nil
			}); err != nil {
				t.Fatal(err)
			}
			so, se, serr := runShim(ctx, rig, c.prog, append(args, guest)...)
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
			res, werr := srv.Wait(wctx)
			wcancel()
			s := toolOutcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
			if werr != nil {
				s.Exit = -1
			}
			checkReal(t, c, s, toolOutcome{Exit: exitOf(serr), Stdout: so, Stderr: se})
			checkIPv6GIDs(t, s.Stdout+so)
		})
		t.Run(c.prog+"/shim-server", func(t *testing.T) {
			// stdbuf: the banner as it is printed, not when the output
			// is flushed at exit.
			cmd, err := rig.ShimCommand(ctx, "stdbuf", append([]string{"-oL", c.prog}, args...)...)
			if err != nil {
				t.Fatal(err)
			}
			srv := startTool(t, cmd, (*exec.Cmd).Start)
			// The client in the guest starts once the server printed its
			// banner (it listens before it prints the table's header).
			if err := waitFor(ctx, "the shim's "+c.prog+" to print its banner", func() (bool, error) {
				if srv.exited() {
					return false, fmt.Errorf("the shim's %s ended before it listened:\n%v", c.prog, srv.wait(ctx))
				}
				return strings.Contains(srv.stdout.String(), "Waiting for client"), nil
			}); err != nil {
				t.Fatal(err)
			}
			cctx, ccancel := context.WithTimeout(ctx, 2*time.Minute)
			res, err := rig.RunPeer(cctx, c.prog+" "+strings.Join(args, " ")+" "+shim)
			ccancel()
			cli := toolOutcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
			if err != nil {
				cli.Exit = -1
			}
			wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
			s := srv.wait(wctx)
			wcancel()
			checkReal(t, c, s, cli)
			checkIPv6GIDs(t, s.Stdout+cli.Stdout)
		})
	}
}

// checkIPv6GIDs checks that both sides' address lines show link-local
// IPv6 GIDs (perftest prints "GID: fe:80:...").
func checkIPv6GIDs(t *testing.T, out string) {
	t.Helper()
	if n := strings.Count(out, "GID: 254:128:"); n < 2 {
		t.Errorf("%d of the address lines show a link-local GID (254:128:...), want both sides':\n%s", n, out)
	}
}
