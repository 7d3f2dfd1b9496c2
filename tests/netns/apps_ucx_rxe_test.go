package netns

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/interop"
)

// ucxRxeCases are the ucx_perftest runs against rdma_rxe: UCP's tests
// only (UCT's take one device name for both sides), few iterations (the
// guest is emulated).
var ucxRxeCases = []struct {
	tls  string
	test ucxCase
}{
	{"rc_verbs,ud_verbs:aux", ucxCase{"tag_lat", 8, 500, nil}},
	{"rc_verbs,ud_verbs:aux", ucxCase{"ucp_put_bw", 65536, 200, nil}},
	{"ud_verbs", ucxCase{"tag_lat", 8, 500, nil}},
}

// TestUCXPerftestShimRxe runs ucx_perftest between UCX through sroce's
// drop-in libraries and UCX on rdma_rxe in the guest, each side the
// server once, over rc_verbs and ud_verbs. UCX 1.13 reads the GID's RoCE
// version from sysfs and connects only to a peer of the same version: the
// runs show that UCX on sroce takes its GID for RoCE v2, as it takes
// rxe's, and that the traffic then flows both ways.
//
// UCX on rdma_rxe runs with UCX_UD_VERBS_ETH_DGID_CHECK=n, as it must
// between two rxe devices too: ud_verbs tells an IPv4 from an IPv6 RoCE v2
// packet by the completion's sl (ConnectX's packet type), which rxe leaves
// 0, so it compares 16 bytes of the IPv4 header with its GID and drops
// every datagram (between two processes on the guest's rxe0, ud_verbs'
// tag_lat aborts with "UD endpoint ... unhandled timeout error" without
// the setting and runs with it). UCX on sroce keeps the check: sroce fills
// sl as ConnectX does.
func TestUCXPerftestShimRxe(t *testing.T) {
	rigTestParallel(t, 15*time.Second)
	needUCX(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	rig := newShimRxeRig(ctx, t)
	if r, err := rig.RunPeer(ctx, "command -v ucx_perftest"); err != nil || r.ExitCode != 0 {
		t.Fatalf("the guest has no ucx_perftest (internal/rxeguest's image installs ucx-utils): %v %s", err, r.Stderr)
	}
	guest, shim := rig.PeerAddr().String(), interop.ShimAddr.Addr().String()
	dev := "sroce_" + rig.ShimHost.Ifname + ":1"
	port := 19150
	for _, c := range ucxRxeCases {
		tr := strings.Split(c.tls, ",")[0]
		for _, rxeServer := range []bool{true, false} {
			port++
			name := fmt.Sprintf("%s/%s/rxe-server", tr, c.test.test)
			if !rxeServer {
				name = fmt.Sprintf("%s/%s/shim-server", tr, c.test.test)
			}
			t.Run(name, func(t *testing.T) {
				args := fmt.Sprintf("-p %d -t %s -s %d -n %d", port, c.test.test, c.test.size, c.test.iters)
				guestEnv := "UCX_TLS=" + c.tls + " UCX_NET_DEVICES=rxe0:1 UCX_UD_VERBS_ETH_DGID_CHECK=n"
				shimEnv := []string{"UCX_TLS=" + c.tls, "UCX_NET_DEVICES=" + dev}
				var out string
				if rxeServer {
					srv, err := rig.StartPeer(ctx, guestEnv+fmt.Sprintf(" ucx_perftest -p %d", port))
					if err != nil {
						t.Fatal(err)
					}
					if err := waitFor(ctx, fmt.Sprintf("rxe's ucx_perftest to listen on TCP port %d", port), func() (bool, error) {
						if done, err := srv.Exited(ctx); done || err != nil {
							return false, fmt.Errorf("rxe's ucx_perftest ended before listening (%v)", err)
						}
						r, err := rig.RunPeer(ctx, fmt.Sprintf("ss -Hltn 'sport = :%d'", port))
						return err == nil && strings.TrimSpace(string(r.Stdout)) != "", err
					}); err != nil {
						t.Fatal(err)
					}
					o, e, err := runShimEnv(ctx, rig, shimEnv, "ucx_perftest", append([]string{guest}, strings.Fields(args)...)...)
					wctx, wcancel := context.WithTimeout(ctx, time.Minute)
					res, werr := srv.Wait(wctx)
					wcancel()
					t.Logf("rxe's ucx_perftest (server): exit %d, %v\n%s%s", res.ExitCode, werr, res.Stdout, res.Stderr)
					t.Logf("ucx_perftest through the shim (client): %v\n%s%s", err, o, e)
					if err != nil || werr != nil || res.ExitCode != 0 {
						t.Fatal("ucx_perftest failed")
					}
					out = o
				} else {
					cmd, err := rig.ShimCommand(ctx, "ucx_perftest", "-p", fmt.Sprint(port))
					if err != nil {
						t.Fatal(err)
					}
					cmd.Env = append(cmd.Environ(), shimEnv...)
					var so, se bytes.Buffer
					cmd.Stdout, cmd.Stderr = &so, &se
					if err := cmd.Start(); err != nil {
						t.Fatal(err)
					}
					done := make(chan error, 1)
					go func() { done <- cmd.Wait() }()
					if err := waitFor(ctx, fmt.Sprintf("ucx_perftest through the shim to listen on TCP port %d", port), func() (bool, error) {
						select {
						case err := <-done:
							return false, fmt.Errorf("ucx_perftest through the shim ended before listening (%v): %s%s", err, so.String(), se.String())
						default:
						}
						o, err := rig.ShimHost.NS.Exec(ctx, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port))
						return strings.TrimSpace(string(o)) != "", err
					}); err != nil {
						cmd.Process.Kill()
						t.Fatal(err)
					}
					res, err := rig.RunPeer(ctx, guestEnv+" timeout 90 ucx_perftest "+shim+" "+args)
					var werr error
					select {
					case werr = <-done:
					case <-time.After(time.Minute):
						cmd.Process.Kill()
						werr = fmt.Errorf("did not end within a minute of the client")
					}
					t.Logf("ucx_perftest through the shim (server): %v\n%s%s", werr, so.String(), se.String())
					t.Logf("rxe's ucx_perftest (client): exit %d, %v\n%s%s", res.ExitCode, err, res.Stdout, res.Stderr)
					if err != nil || werr != nil || res.ExitCode != 0 {
						t.Fatal("ucx_perftest failed")
					}
					out = string(res.Stdout)
				}
				r, err := parsePerf(out)
				if err != nil {
					t.Fatal(err)
				}
				if r.iters != c.test.iters {
					t.Fatalf("%d iterations, asked for %d", r.iters, c.test.iters)
				}
				if c.test.test == "tag_lat" && (r.latOverall <= 0 || r.latOverall > 1e5) {
					t.Fatalf("latency %.2f µs", r.latOverall)
				}
				if c.test.test != "tag_lat" && r.bwOverall <= 0 {
					t.Fatalf("bandwidth %.2f MB/s", r.bwOverall)
				}
				t.Logf("%s: latency %.2f µs, %.1f MB/s", name, r.latOverall, r.bwOverall)
			})
		}
	}
}

// runShimEnv is runShim with env added to the program's environment.
func runShimEnv(ctx context.Context, rig *interop.Rig, env []string, prog string, args ...string) (string, string, error) {
	rctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	cmd, err := rig.ShimCommand(rctx, prog, args...)
	if err != nil {
		return "", "", err
	}
	cmd.Env = append(cmd.Environ(), env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	if rctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within 90 s", prog)
	}
	return o.String(), e.String(), err
}
