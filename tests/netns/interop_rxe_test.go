package netns

// First contact with the real thing: each sroce tool against its
// counterpart (rdma-core's ibv_*_pingpong, perftest's ib_*) in an rdma_rxe
// guest, with the real tool once as the server and once as the client.
// sroce runs in a host namespace whose veth is a port of the guest's
// bridge, on that veth over AF_XDP. Both sides must exit 0 and print their
// result lines. One guest boot serves every subtest (TCG is slow: the runs
// are short, the limits generous). When a pair fails, the RoCEv2 traffic
// captured on the guest's tap is decoded with "sroce dissect" into the log.

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/tests/netns/rxeguest"
)

// interopCase is one tool and the arguments both sides take (sroce's
// device flags are added by the test).
type interopCase struct {
	name string // subtest name
	cmd  string // sroce subcommand
	real string // the reference tool
	args string // common arguments
}

// interopCases are the tool pairs of the interop tests. Sizes of 4096 with
// path MTU 1024 make every multi-packet message a first, middles and a
// last; iteration counts stay small for TCG.
var interopCases = []interopCase{
	{"rc-pingpong", "rc-pingpong", "ibv_rc_pingpong", "-g 1 -n 10 -s 4096 -m 1024 -c"},
	{"ud-pingpong", "ud-pingpong", "ibv_ud_pingpong", "-g 1 -n 10 -s 1024 -c"},
	{"send-bw", "send-bw", "ib_send_bw", "-x 1 -n 10 -s 4096 -m 1024"},
	{"send-bw-ud", "send-bw", "ib_send_bw", "-x 1 -n 10 -s 1024 -c UD"},
	{"write-bw", "write-bw", "ib_write_bw", "-x 1 -n 10 -s 4096 -m 1024"},
	{"read-bw", "read-bw", "ib_read_bw", "-x 1 -n 10 -s 4096 -m 1024"},
	{"atomic-bw-fadd", "atomic-bw", "ib_atomic_bw", "-x 1 -n 10 -A FETCH_AND_ADD"},
	{"atomic-bw-cmpswp", "atomic-bw", "ib_atomic_bw", "-x 1 -n 10 -A CMP_AND_SWAP"},
	{"send-lat", "send-lat", "ib_send_lat", "-x 1 -n 10 -s 4096 -m 1024"},
	{"write-lat", "write-lat", "ib_write_lat", "-x 1 -n 10 -s 4096 -m 1024"},
	{"read-lat", "read-lat", "ib_read_lat", "-x 1 -n 10 -s 4096 -m 1024"},
	{"atomic-lat", "atomic-lat", "ib_atomic_lat", "-x 1 -n 10"},
	// Options that change the data path or the exchange.
	{"rc-pingpong-events", "rc-pingpong", "ibv_rc_pingpong", "-g 1 -n 10 -s 2048 -e"},
	{"send-bw-bidirectional", "send-bw", "ib_send_bw", "-x 1 -n 10 -s 4096 -m 1024 -b"},
	{"send-bw-uc", "send-bw", "ib_send_bw", "-x 1 -n 10 -s 2048 -m 1024 -c UC"},
	{"write-bw-bidirectional-qps", "write-bw", "ib_write_bw", "-x 1 -n 10 -s 4096 -m 1024 -b -q 2"},
	{"write-bw-default-gid", "write-bw", "ib_write_bw", "-n 10 -s 4096 -m 1024"},
	{"write-bw-ipv6-linklocal", "write-bw", "ib_write_bw", "-n 10 -s 4096 -m 1024 --ipv6"},
	{"rc-pingpong-ipv6-linklocal", "rc-pingpong", "ibv_rc_pingpong", "-g 0 -n 10 -s 4096"},
	{"read-bw-qps-events", "read-bw", "ib_read_bw", "-x 1 -n 10 -s 4096 -m 1024 -q 2 -e"},
	{"atomic-bw-bidirectional", "atomic-bw", "ib_atomic_bw", "-x 1 -n 10 -b"},
	{"send-lat-ud", "send-lat", "ib_send_lat", "-x 1 -n 10 -s 512 -c UD"},
	// Longer runs: thousands of packets, every UD size, -D.
	{"rc-pingpong-64k", "rc-pingpong", "ibv_rc_pingpong", "-g 1 -n 200 -s 65536 -c"},
	{"write-bw-64k", "write-bw", "ib_write_bw", "-x 1 -n 300 -s 65536 -m 1024"},
	{"atomic-bw-2000", "atomic-bw", "ib_atomic_bw", "-x 1 -n 2000"},
	{"send-bw-all-ud", "send-bw", "ib_send_bw", "-x 1 -n 10 -a -c UD"},
	{"write-bw-duration", "write-bw", "ib_write_bw", "-x 1 -D 4 -s 4096"},
}

// Addresses of the interop LAN.
var (
	interopGuestAddr = netip.MustParsePrefix("192.0.2.1/24")
	interopHostAddr  = netip.MustParsePrefix("192.0.2.10/24")
)

// interopLAN is one rxe guest and a host namespace on its bridge.
type interopLAN struct {
	lan   *rxeguest.LAN
	guest *rxeguest.Guest
	host  *rxeguest.Host
	bin   string // the sroce binary
}

// newInteropLAN boots the guest and adds the host namespace; t's cleanup
// tears them down.
func newInteropLAN(t *testing.T, ctx context.Context) *interopLAN {
	t.Helper()
	rxeguest.Skip(t)
	img, err := rxeguest.ImageOptions{Logf: t.Logf}.Ensure(ctx)
	if err != nil {
		t.Fatal(err)
	}
	lan, err := rxeguest.NewLAN(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lan.Close() })
	g, err := lan.Boot(ctx, img, rxeguest.Config{Name: "rxe-interop", IP: interopGuestAddr})
	if err != nil {
		t.Fatal(err)
	}
	h, err := lan.AddHost(ctx, rxeguest.HostConfig{IP: interopHostAddr})
	if err != nil {
		t.Fatal(err)
	}
	return &interopLAN{lan: lan, guest: g, host: h, bin: buildSroce(t)}
}

// sroce returns the command that runs sroce with args in the host
// namespace on its veth over AF_XDP.
func (l *interopLAN) sroce(ctx context.Context, args ...string) *exec.Cmd {
	cmd := l.host.NS.Command(ctx, l.bin, args...)
	cmd.Env = sroceEnv("xdp")
	return cmd
}

// TestInteropRxe runs every tool pair against rdma_rxe, both ways.
func TestInteropRxe(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Minute)
	defer cancel()
	l := newInteropLAN(t, ctx)
	for _, c := range interopCases {
		t.Run(c.name+"/real-server", func(t *testing.T) { l.runPair(t, ctx, c, true) })
		t.Run(c.name+"/real-client", func(t *testing.T) { l.runPair(t, ctx, c, false) })
	}
}

// pairAttempts bounds the runs of a pair that failed for a reason that
// lies wholly on the rdma_rxe side (see notSroce).
const pairAttempts = 3

// perftestUncalibrated reports whether a perftest tool gave up because it
// could not measure its CPU's cycle rate: before its report it times a
// busy loop against gettimeofday and refuses a fit worse than r^2 0.9
// ("Can't produce a report"). In an emulated guest on a busy host that
// happens now and then, whatever the peer did; such a run says nothing
// about sroce and is run again.
func perftestUncalibrated(o toolOutcome) bool {
	return !o.ok() && strings.Contains(o.stderr, "Correlation coefficient r^2:")
}

// notSroce says why a failed run of a pair says nothing about sroce, or
// returns "": the real tool failed its clock calibration, or rxe's
// requester stalled after a spurious retransmission with everything it
// sent acknowledged (rxeRequesterStalled).
func (l *interopLAN) notSroce(c interopCase, real, ours toolOutcome, pcap string) string {
	if perftestUncalibrated(real) {
		return fmt.Sprintf("%s could not calibrate its cycle counter in the guest (%q)", c.real, strings.TrimSpace(real.stderr))
	}
	if real.ok() || ours.ok() {
		return ""
	}
	frames, _, err := rxeguest.ReadPcapFile(pcap)
	if err != nil {
		return ""
	}
	if why, ok := rxeRequesterStalled(c.cmd, real, ours, frames, l.guest.IP()); ok {
		return why
	}
	return ""
}

// runPair runs one pair: the real tool as the server (realServer) or as
// the client, sroce as the other side, and checks both. A run that failed
// for a reason on the rxe side alone is logged, with the end of its
// capture, and repeated, up to pairAttempts runs in all.
func (l *interopLAN) runPair(t *testing.T, ctx context.Context, c interopCase, realServer bool) {
	for attempt := 1; ; attempt++ {
		real, ours, pcap := l.runPairOnce(t, ctx, c, realServer)
		if attempt < pairAttempts {
			if why := l.notSroce(c, real, ours, pcap); why != "" {
				t.Logf("run %d: %s; running the pair again\n%s: %v\nsroce's side: %v\nend of the capture:\n%s",
					attempt, why, c.real, real, ours, l.dissectTail(pcap, 12))
				continue
			}
		}
		l.judge(t, c, realServer, real, ours, pcap)
		return
	}
}

// runPairOnce runs the pair once and returns both outcomes and the
// capture of the guest's tap.
func (l *interopLAN) runPairOnce(t *testing.T, ctx context.Context, c interopCase, realServer bool) (real, ours toolOutcome, pcap string) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	pcap = filepath.Join(t.TempDir(), "roce.pcap")
	capt, err := rxeguest.StartCapture(ctx, l.lan.NS, l.guest.Tap(), pcap, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	realArgs := c.args
	if strings.HasPrefix(c.real, "ib_") {
		realArgs = "-d rxe0 " + realArgs
	}
	sroceArgs := append([]string{c.cmd, "-d", l.host.Ifname}, strings.Fields(c.args)...)

	if realServer {
		srv, err := l.guest.Start(ctx, "exec stdbuf -oL -eL "+c.real+" "+realArgs)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitListening(ctx, l.guest, 18515, srv); err != nil {
			t.Fatal(err)
		}
		p := startTool(t, l.sroce(ctx, append(sroceArgs, l.guest.IP().String())...), (*exec.Cmd).Start)
		ours = p.wait(ctx)
		real = l.guestOutcome(t, ctx, srv, !ours.ok())
	} else {
		p := startTool(t, l.sroce(ctx, sroceArgs...), (*exec.Cmd).Start)
		err := waitFor(ctx, "sroce to listen", func() (bool, error) {
			if p.exited() {
				return false, fmt.Errorf("sroce server ended before listening:\n%v", p.wait(ctx))
			}
			out, err := l.host.NS.Exec(ctx, "ss", "-Hltn", "sport = :18515")
			return strings.TrimSpace(string(out)) != "", err
		})
		if err != nil {
			t.Fatal(err)
		}
		cli, err := l.guest.Start(ctx, "exec stdbuf -oL -eL "+c.real+" "+realArgs+" "+interopHostAddr.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		real = l.guestOutcome(t, ctx, cli, false)
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		ours = p.wait(wctx)
		wcancel()
	}
	capt.Stop()
	if err := capt.Complete(); err != nil {
		t.Logf("the capture %s is not the whole exchange: %v", pcap, err)
	}
	return real, ours, pcap
}

// judge checks both sides of a pair and, when one failed, logs the
// decoded capture.
func (l *interopLAN) judge(t *testing.T, c interopCase, realServer bool, real, ours toolOutcome, pcap string) {
	// The verdicts come after the decoded capture, so that the end of a
	// long log says what failed.
	type verdict struct {
		who, role string
		o         toolOutcome
		problem   string
	}
	var verdicts []verdict
	failed := false
	for _, side := range []struct {
		who    string
		o      toolOutcome
		server bool
	}{{c.real, real, realServer}, {"sroce " + c.cmd, ours, !realServer}} {
		v := verdict{who: side.who, role: "client", o: side.o, problem: sideProblem(c.cmd, side.o, side.server)}
		if side.server {
			v.role = "server"
		}
		failed = failed || v.problem != ""
		verdicts = append(verdicts, v)
	}
	if failed {
		l.dissect(t, pcap)
	}
	for _, v := range verdicts {
		t.Logf("%s (%s): %v", v.who, v.role, v.o)
	}
	for _, v := range verdicts {
		if v.problem != "" {
			t.Errorf("%s as %s %s", v.who, v.role, v.problem)
		}
	}
}

// guestOutcome waits for a real tool; if kill is set (the sroce side has
// already failed) it gives the tool a few seconds and then stops it.
func (l *interopLAN) guestOutcome(t *testing.T, ctx context.Context, p *rxeguest.Proc, kill bool) toolOutcome {
	t.Helper()
	limit := 3 * time.Minute
	if kill {
		limit = 5 * time.Second
	}
	wctx, cancel := context.WithTimeout(ctx, limit)
	res, err := p.Wait(wctx)
	cancel()
	if err != nil {
		p.Kill(ctx)
		kctx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err = p.Wait(kctx)
		cancel()
		if err != nil {
			t.Fatalf("collecting the guest tool's output: %v", err)
		}
		res.ExitCode = -1
	}
	return toolOutcome{exit: res.ExitCode, stdout: string(res.Stdout), stderr: string(res.Stderr)}
}

// dissectTail returns the last n lines of the decoded capture before its
// summary line.
func (l *interopLAN) dissectTail(pcap string, n int) string {
	out, _ := exec.Command(l.bin, "dissect", pcap).CombinedOutput()
	lines := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n-1):], "\n")
}

// dissect logs the decoded capture of a failed pair.
func (l *interopLAN) dissect(t *testing.T, pcap string) {
	out, err := exec.Command(l.bin, "dissect", pcap).CombinedOutput()
	t.Logf("RoCEv2 traffic on the guest's tap (sroce dissect, %v):\n%s", err, out)
	if dir := os.Getenv("SROCE_CAPTURE_DIR"); dir != "" {
		data, err := os.ReadFile(pcap)
		if err == nil {
			name := strings.ReplaceAll(t.Name(), "/", "_") + ".pcap"
			os.WriteFile(filepath.Join(dir, name), data, 0o644)
		}
	}
}
