package netns

// First contact with the real thing: each sroce tool against its
// counterpart (rdma-core's ibv_*_pingpong, perftest's ib_*) in an rdma_rxe
// guest, with the real tool once as the server and once as the client.
// sroce runs in a host namespace whose veth is a port of the guest's
// bridge, on that veth over AF_XDP. Both sides must exit 0 and print their
// result lines. One guest boot serves every subtest (TCG is slow: the runs
// are short, the limits generous). When a pair fails, the RoCEv2 traffic
// captured on the guest's tap is decoded with "sroce dissect" into the log,
// with the guest's interface, qdisc and rxe counters and its kernel log.

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

	"github.com/sroce/sroce/internal/rxeguest"
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
	img   *rxeguest.Image
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
	return &interopLAN{img: img, lan: lan, guest: g, host: h, bin: buildSroce(t)}
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
		t.Run(c.name+"/real-server", func(t *testing.T) { l.runPair(t, ctx, c, true, nil) })
		t.Run(c.name+"/real-client", func(t *testing.T) { l.runPair(t, ctx, c, false, nil) })
	}
}

// pairAttempts bounds the runs of a pair whose real tool failed for a
// reason that has nothing to do with the wire (see offWire).
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

// offWire says why a failed run of a pair says nothing about the traffic
// between the two sides, or returns "". The only such failure is the real
// tool's clock calibration; everything else, stalls included, is judged.
func offWire(c interopCase, real toolOutcome) string {
	if perftestUncalibrated(real) {
		return fmt.Sprintf("%s could not calibrate its cycle counter in the guest (%q)", c.real, strings.TrimSpace(real.stderr))
	}
	return ""
}

// pairOpts are what an impaired run of a pair adds: an environment for
// the real tool, and an impairment that runs while both sides do.
type pairOpts struct {
	// realEnv is put before the real tool's command line (VAR=value ...).
	realEnv func(c interopCase) string
	// impair starts the impairment of one run, whose RoCEv2 traffic is
	// being captured into pcap; the function it returns stops it and
	// describes what it did.
	impair func(t *testing.T, ctx context.Context, pcap string) (stop func() string)
}

// runPair runs one pair: the real tool as the server (realServer) or as
// the client, sroce as the other side, and checks both. A run whose real
// tool failed off the wire is logged, with the end of its capture, and
// repeated, up to pairAttempts runs in all. opts, if not nil, impairs the
// runs.
func (l *interopLAN) runPair(t *testing.T, ctx context.Context, c interopCase, realServer bool, opts *pairOpts) {
	for attempt := 1; ; attempt++ {
		real, ours, pcap, impaired := l.runPairOnce(t, ctx, c, realServer, opts)
		if impaired != "" {
			t.Logf("run %d: %s", attempt, impaired)
		}
		if attempt < pairAttempts {
			if why := offWire(c, real); why != "" {
				t.Logf("run %d: %s; running the pair again\n%s: %v\nsroce's side: %v\nend of the capture:\n%s",
					attempt, why, c.real, real, ours, l.dissectTail(pcap, 12))
				continue
			}
			if !real.ok() || !ours.ok() {
				if hung := l.nicHung(ctx); hung != "" {
					t.Logf("run %d: the guest's emulated NIC stopped transmitting (its kernel: %q); qemu's virtio-net took none of the guest's frames, RoCE or TCP, from then on, so this run says nothing about sroce; rebooting the guest and running the pair again\n%s: %v\nsroce's side: %v\nend of the capture:\n%s",
						attempt, hung, c.real, real, ours, l.dissectTail(pcap, 12))
					l.reboot(t, ctx)
					continue
				}
			}
		}
		l.judge(t, ctx, c, realServer, real, ours, pcap)
		return
	}
}

// runPairOnce runs the pair once and returns both outcomes, the capture
// of the guest's tap and, for an impaired run, what the impairment and the
// capture say about it.
func (l *interopLAN) runPairOnce(t *testing.T, ctx context.Context, c interopCase, realServer bool, opts *pairOpts) (real, ours toolOutcome, pcap, impaired string) {
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
	realCmd := "exec stdbuf -oL -eL " + c.real + " " + realArgs
	var stop func() string
	if opts != nil {
		if opts.realEnv != nil {
			if env := opts.realEnv(c); env != "" {
				realCmd = "exec env " + env + " stdbuf -oL -eL " + c.real + " " + realArgs
			}
		}
		if opts.impair != nil {
			defer func() {
				if stop != nil {
					stop()
				}
			}()
		}
	}
	startImpairment := func() {
		if opts != nil && opts.impair != nil {
			stop = opts.impair(t, ctx, pcap)
		}
	}

	if realServer {
		srv, err := l.guest.Start(ctx, realCmd)
		if err != nil {
			t.Fatal(err)
		}
		if err := waitListening(ctx, l.guest, 18515, srv); err != nil {
			t.Fatal(err)
		}
		startImpairment()
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
		startImpairment()
		cli, err := l.guest.Start(ctx, realCmd+" "+interopHostAddr.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		real = l.guestOutcome(t, ctx, cli, false)
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		ours = p.wait(wctx)
		wcancel()
	}
	if stop != nil {
		impaired = stop()
		stop = nil
	}
	capt.Stop()
	if err := capt.Complete(); err != nil {
		t.Logf("the capture %s is not the whole exchange: %v", pcap, err)
	}
	if opts != nil {
		impaired += "; " + resentInCapture(pcap, l.guest.IP())
	}
	return real, ours, pcap, impaired
}

// judge checks both sides of a pair and, when one failed, logs the
// decoded capture.
func (l *interopLAN) judge(t *testing.T, ctx context.Context, c interopCase, realServer bool, real, ours toolOutcome, pcap string) {
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
		t.Logf("the guest after the run:\n%s", l.guestState(ctx))
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

// nicHung returns the guest kernel's report that eth0's transmit queue
// timed out (the netdev watchdog: the emulated virtio-net device stopped
// consuming the guest's frames), or "" if the log has none. The guest's
// agent answers over virtio-serial, so it is reachable when eth0 is not.
func (l *interopLAN) nicHung(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := l.guest.Run(ctx, `dmesg | grep -m1 'NETDEV WATCHDOG.*transmit queue.*timed out' || true`)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(res.Stdout))
}

// reboot replaces the guest with a fresh one with the same name, address
// and MAC on the same bridge.
func (l *interopLAN) reboot(t *testing.T, ctx context.Context) {
	t.Helper()
	old := l.guest.Config()
	l.guest.Close()
	g, err := l.lan.Boot(ctx, l.img, rxeguest.Config{Name: old.Name, IP: old.IP, MAC: old.MAC})
	if err != nil {
		t.Fatalf("rebooting the guest after its NIC hung: %v", err)
	}
	l.guest = g
	l.host.NS.Exec(ctx, "ip", "neigh", "flush", "all")
}

// guestState describes the guest's side of a failed run: eth0's
// counters, its qdiscs, rxe0's counters and the end of the kernel log, so
// that a guest whose network or rxe stopped shows it.
func (l *interopLAN) guestState(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := l.guest.Run(ctx, `ip -s link show dev eth0
tc -s qdisc show dev eth0
cd /sys/class/infiniband/rxe0/ports/1/hw_counters 2>/dev/null && for f in *; do printf '%s=%s ' "$f" "$(cat $f)"; done; echo
dmesg | tail -n 20`)
	if err != nil {
		return fmt.Sprintf("(the guest did not answer within a minute: %v)", err)
	}
	return strings.TrimRight(string(res.Stdout)+string(res.Stderr), "\n")
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
