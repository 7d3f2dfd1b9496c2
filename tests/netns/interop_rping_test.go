package netns

// RDMA CM against rdma_rxe: rdma-core's rping in the guest and "sroce
// rping" on the host (over AF_XDP on the veth of the guest's bridge), each
// once as the server and once as the client, then again with the guest
// dropping 2% of the RoCEv2 frames each way, CM MADs included (the CM's
// retries must carry the connection through); both sides must exit 0 and
// print every ping line (-v) with the text rping puts in it. Then
// perftest's ib_write_bw -R and ib_send_lat -R against sroce's write-bw -R
// and send-lat -R, both ways; both sides must print their results. A
// failed run logs the capture taken on the guest's tap, dissected (CM
// messages by name) and as a ladder.

import (
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/dissect"
	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/interop"
)

// rpingCount is the number of pings of each interop run.
const rpingCount = 100

// cmPairLimit bounds one run of a pair (TCG guests are slow; with loss a
// lost REQ costs rxe's CM response timeout, about 6 s, and a lost DREQ
// more).
const cmPairLimit = 2 * time.Minute

// A cmPair is a real tool in the guest and its sroce counterpart, both
// connecting through the RDMA CM.
type cmPair struct {
	name string
	// real returns the real tool's command line, as the server (listening
	// on port at the guest's address guest) or as the client (of host).
	real func(server bool, port int, guest, host string) string
	// sroce returns the arguments of sroce (the subcommand first), as
	// the server on host or as the client of guest, on interface ifname.
	sroce func(server bool, port int, guest, host, ifname string) []string
	// listening is what sroce's server prints once it listens.
	listening string
	// problem says what is wrong with one side's outcome, or "".
	problem func(o toolOutcome, server bool) string
}

// rpingPair is rping against "sroce rping", rpingCount pings.
var rpingPair = rpingPairOf(rpingCount)

// rpingPairOf is rping against "sroce rping", n pings.
func rpingPairOf(n int) cmPair {
	return cmPair{
		name: "rping",
		real: func(server bool, port int, guest, host string) string {
			addr := host
			if server {
				addr = guest
			}
			return "rping " + strings.Join(rpingArgs(server, addr, port, n), " ")
		},
		sroce: func(server bool, port int, guest, host, _ string) []string {
			if server {
				// -d: its "rdma_listen" line says when it listens.
				return append(append([]string{"rping"}, rpingArgs(true, host, port, n)...), "-d")
			}
			return append([]string{"rping"}, rpingArgs(false, guest, port, n)...)
		},
		listening: "rdma_listen",
		problem: func(o toolOutcome, server bool) string {
			prefix := rpingClientPrefix
			if server {
				prefix = rpingServerPrefix
			}
			var p []string
			if o.Exit != 0 {
				p = append(p, fmt.Sprintf("exit %d", o.Exit))
			}
			if s := checkRpingOutput(o.Stdout, prefix, n, rpingDefaultSize); s != "" {
				p = append(p, s)
			}
			return strings.Join(p, "; ")
		},
	}
}

// perftestPair is a perftest tool with -R (its connection and its
// exchange through the RDMA CM) against sroce's tool cmd with -R; args
// are common to both.
func perftestPair(real, cmd, args string) cmPair {
	return cmPair{
		name: cmd,
		real: func(server bool, port int, guest, host string) string {
			line := fmt.Sprintf("%s -d rxe0 -R -p %d %s", real, port, args)
			if !server {
				line += " " + host
			}
			return line
		},
		sroce: func(server bool, port int, guest, host, ifname string) []string {
			a := append([]string{cmd, "-d", ifname, "-R", "-p", strconv.Itoa(port)}, strings.Fields(args)...)
			if !server {
				a = append(a, guest)
			}
			return a
		},
		listening: "Waiting for client to connect",
		problem:   func(o toolOutcome, server bool) string { return sideProblem(cmd, o, server) },
	}
}

// TestInteropRping runs rping against "sroce rping", both ways, without
// and with loss.
func TestInteropRping(t *testing.T) {
	rigTestParallel(t, 25*time.Second)
	rig, ctx := newCMInteropRig(t)
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
			port++
			t.Run(name+"/"+realSide(realServer), func(t *testing.T) {
				var before rxeguest.LossCount
				if loss > 0 {
					before, _ = rig.Guest.RoCELoss(ctx)
				}
				pair := rpingPair
				if loss > 0 {
					pair = rpingPairOf(rxeLossyPings)
				}
				runCMInteropPair(t, ctx, rig, pair, realServer, port)
				if loss > 0 {
					if after, err := rig.Guest.RoCELoss(ctx); err == nil {
						t.Logf("%s", after.Minus(before).Describe(rig.Guest.Name(), "sroce"))
					}
				}
			})
		}
	}
}

// cmDropScript replaces the guest's impairment by one that drops the
// first REQ, REP and RTU the guest receives and the first of each it
// sends, then every other one (the third, the fifth...): a management
// datagram is a RoCEv2 packet to QP1 (the BTH's destination QP, bytes 32
// to 35 of an IPv4 packet without options, is 1) and its attribute ID is
// at byte 64. Each filter counts its own packets (gact determ: one in two
// passes, the others are dropped). DREQ and DREP pass.
const cmDropScript = `set -e
tc qdisc del dev eth0 root 2>/dev/null || true
tc qdisc del dev eth0 ingress 2>/dev/null || true
tc qdisc del dev eth0 clsact 2>/dev/null || true
tc qdisc add dev eth0 clsact
for dir in ingress egress; do
  for attr in 0x0010 0x0013 0x0014; do
    tc filter add dev eth0 $dir protocol ip prio 1 u32 match ip protocol 17 0xff match ip dport 4791 0xffff \
      match u32 0x00000001 0x00ffffff at 32 match u16 $attr 0xffff at 64 action gact drop random determ ok 2
  done
done`

// TestInteropRpingCMDrops runs rping against "sroce rping", both ways,
// with the guest dropping the first REQ, REP and RTU each way: each
// connection gets through only by the CMs' resends and their answers to
// duplicates, on both sides. (Disconnection is left alone: rping, real
// or sroce's, destroys its ID right after rdma_disconnect, which ends the
// DREQ's resends with it, so a lost DREQ leaves the server waiting for
// ever, whoever the client is.)
func TestInteropRpingCMDrops(t *testing.T) {
	rigTestParallel(t, 25*time.Second)
	rig, ctx := newCMInteropRig(t)
	if res, err := rig.Guest.Run(ctx, cmDropScript); err != nil || res.ExitCode != 0 {
		t.Fatalf("setting the guest's CM drops: %v %v\n%s%s", err, res.Err(), res.Stdout, res.Stderr)
	}
	port := 7190
	for _, realServer := range []bool{true, false} {
		port++
		t.Run(realSide(realServer), func(t *testing.T) {
			runCMInteropPair(t, ctx, rig, rpingPair, realServer, port)
		})
	}
	res, err := rig.Guest.Run(ctx, "tc -s filter show dev eth0 ingress")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("the guest's CM drops (its filters and their counts):\n%s", res.Stdout)
	// Every filter (REQ, REP, RTU, each way) must have dropped one.
	if n := len(regexp.MustCompile(`\(dropped [1-9]`).FindAll(res.Stdout, -1)); n < 6 {
		t.Errorf("%d of the 6 filters dropped anything: the runs did not need the CMs' resends", n)
	}
}

// TestInteropPerftestRDMACM runs ib_write_bw -R and ib_send_lat -R against
// sroce's write-bw -R and send-lat -R, both ways.
func TestInteropPerftestRDMACM(t *testing.T) {
	rigTestParallel(t, 20*time.Second)
	rig, ctx := newCMInteropRig(t)
	port := 18700
	for _, c := range []cmPair{
		perftestPair("ib_write_bw", "write-bw", "-s 4096 -n 200"),
		perftestPair("ib_send_lat", "send-lat", "-s 64 -n 200"),
	} {
		for _, realServer := range []bool{true, false} {
			port++
			t.Run(c.name+"/"+realSide(realServer), func(t *testing.T) {
				runCMInteropPair(t, ctx, rig, c, realServer, port)
			})
		}
	}
}

// newCMInteropRig skips where the interop tests cannot run, boots the
// guest with ib_cm loaded and returns the rig and the test's context.
func newCMInteropRig(t *testing.T) (*interop.Rig, context.Context) {
	if testing.Short() {
		t.Skip("skipping the rdma_rxe interop tests in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the rdma_rxe interop tests need root (namespaces, AF_XDP, qemu)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	t.Cleanup(cancel)
	rig := newInteropLAN(t, ctx)
	// The guest's kernel CM answers REQs only once ib_cm is loaded (a
	// real tool loads it through rdma_ucm; sroce's REQ may come first).
	if res, err := rig.Guest.Run(ctx, "modprobe rdma_ucm"); err != nil || res.ExitCode != 0 {
		t.Fatalf("modprobe rdma_ucm in the guest: %v %v\n%s", err, res.Err(), res.Stderr)
	}
	return rig, ctx
}

// realSide names a direction of a pair.
func realSide(realServer bool) string {
	if realServer {
		return "real-server"
	}
	return "real-client"
}

// runCMInteropPair runs c once on port: the guest's real tool as the
// server (realServer) or the client, sroce's as the other side, and checks
// both.
func runCMInteropPair(t *testing.T, testCtx context.Context, rig *interop.Rig, c cmPair, realServer bool, port int) {
	ctx, cancel := context.WithTimeout(testCtx, cmPairLimit)
	defer cancel()
	pcap := filepath.Join(t.TempDir(), c.name+".pcap")
	capt, err := rxeguest.StartCapture(testCtx, rig.LAN.NS, rig.Guest.Tap(), pcap, "udp port 4791")
	if err != nil {
		t.Fatal(err)
	}
	guestIP, hostIP := rig.Guest.IP().String(), rig.Host.IP.Addr().String()
	sroce := func() *toolProc {
		cmd := rig.Host.NS.Command(ctx, rig.Bin, c.sroce(!realServer, port, guestIP, hostIP, rig.Host.Ifname)...)
		cmd.Env = rig.Env
		return startTool(t, cmd, (*exec.Cmd).Start)
	}
	realCmd := "exec stdbuf -oL -eL " + c.real(realServer, port, guestIP, hostIP)
	var real, ours toolOutcome
	if realServer {
		srv, err := rig.Guest.Start(ctx, realCmd)
		if err != nil {
			t.Fatal(err)
		}
		if err := rxeguest.WaitCMListening(ctx, rig.Guest, rig.Guest.Name(), port, srv); err != nil {
			t.Fatal(err)
		}
		ours = sroce().wait(ctx)
		real = guestWait(ctx, srv, !ours.OK())
	} else {
		srv := sroce()
		err := waitFor(ctx, fmt.Sprintf("sroce %s as the server to listen (its %q line)", c.name, c.listening), func() (bool, error) {
			if srv.exited() {
				return false, fmt.Errorf("sroce %s as the server ended before listening: %v", c.name, srv.wait(ctx))
			}
			return strings.Contains(srv.stdout.String()+srv.stderr.String(), c.listening), nil
		})
		if err != nil {
			t.Fatal(err)
		}
		res, err := rig.Guest.Run(ctx, realCmd)
		real = toolOutcome{Exit: res.ExitCode, Stdout: string(res.Stdout), Stderr: string(res.Stderr)}
		if err != nil {
			real.Exit, real.Stderr = -1, real.Stderr+fmt.Sprintf("\n(the real client did not end within %v: %v)", cmPairLimit, err)
		}
		wctx, wcancel := context.WithTimeout(testCtx, time.Minute)
		ours = srv.wait(wctx)
		wcancel()
	}
	capt.Stop()
	// What follows must run even when the pair used up its time.
	ctx, cancel = context.WithTimeout(testCtx, 2*time.Minute)
	defer cancel()
	var problems []string
	if p := c.problem(real, realServer); p != "" {
		problems = append(problems, fmt.Sprintf("the real tool as the %s: %s", role(realServer), p))
	}
	if p := c.problem(ours, !realServer); p != "" {
		problems = append(problems, fmt.Sprintf("sroce %s as the %s: %s", c.name, role(!realServer), p))
	}
	if len(problems) == 0 {
		t.Logf("both sides ended well; %s; %s", capt.Summary(), cmMADSummary(pcap))
		return
	}
	keepCapture(t, pcap)
	t.Logf("the capture on the guest's tap, dissected:\n%s", dissectOrErr(rig, pcap))
	t.Logf("its ladder:\n%s", ladderOrErr(rig, pcap))
	t.Logf("the guest after the run:\n%s", rig.GuestState(ctx))
	t.Logf("the real tool: %v", real)
	t.Logf("sroce %s: %v", c.name, ours)
	t.Error(strings.Join(problems, "\n"))
}

// role names a side.
func role(server bool) string {
	if server {
		return "server"
	}
	return "client"
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
func ladderOrErr(rig *interop.Rig, pcap string) string {
	out, err := exec.Command(rig.Bin, "ladder", pcap).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("(sroce ladder: %v)\n%s", err, out)
	}
	return string(out)
}

// cmMADSummary counts the management datagrams of a capture by name
// ("CM REQ", ...) and says how many repeat one already seen (the same
// sender, name and transaction ID: sent again after a loss).
func cmMADSummary(pcap string) string {
	frames, _, err := rxeguest.ReadPcapFile(pcap)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", pcap, err)
	}
	type key struct {
		src  netip.Addr
		name string
		tid  uint64
	}
	seen := map[key]bool{}
	count := map[string]int{}
	again := 0
	var p bth.Packet
	for _, f := range frames {
		if p.Parse(f.Data) != nil {
			continue
		}
		m, ok := dissect.DecodeMAD(&p)
		if !ok {
			continue
		}
		k := key{p.SrcAddr(), m.Name(), m.Header.TID}
		if seen[k] {
			again++
		}
		seen[k] = true
		count[m.Name()]++
	}
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(count)) {
		parts = append(parts, fmt.Sprintf("%s x%d", n, count[n]))
	}
	return fmt.Sprintf("CM MADs: %s; %d sent again", strings.Join(parts, ", "), again)
}
