package netns

// UCX 1.13 and Open MPI 4.1 (pml ucx), Debian's unmodified binaries, on
// sroce through `sroce run`: ucx_info lists the sroce device with rc_verbs
// and ud_verbs (the daemon's /dev/infiniband entry, GID index 1);
// ucx_perftest's tag_lat, ucp_put_bw and ucp_am_bw over rc_verbs and over
// ud_verbs between two daemons and on one daemon's device (loopback); and
// two MPI ranks in two namespaces, and on one daemon, doing a checked
// ping-pong and allreduce.

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
)

// needUCX skips unless UCX's tools are installed.
func needUCX(t testing.TB) {
	t.Helper()
	for _, p := range []string{"ucx_info", "ucx_perftest"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("skipping: %s is not installed (tests/run installs ucx-utils)", p)
		}
	}
}

// needMPI skips unless Open MPI's launcher and compiler are installed.
func needMPI(t testing.TB) {
	t.Helper()
	needUCX(t)
	for _, p := range []string{"mpirun", "mpicc"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("skipping: %s is not installed (tests/run installs openmpi-bin and libopenmpi-dev)", p)
		}
	}
}

// ucxEnv is the environment of every UCX program in these tests, with the
// transports tls. Nothing else is needed: UCX_UD_VERBS_ETH_DGID_CHECK
// stays on (UCX 1.13's ud_verbs finds the destination address of each
// packet by the completion's sl, which sroce fills as ConnectX does).
func ucxEnv(tls string) []string {
	return []string{"UCX_TLS=" + tls}
}

// TestUCXInfo checks that ucx_info -d lists each daemon's device with
// rc_verbs and ud_verbs, that UCX picks the IPv4 GID (index 1, as on rxe),
// and that the daemon's /dev/infiniband entry, which UCX looks for, goes
// away when the daemon ends while the other daemon's stays.
func TestUCXInfo(t *testing.T) {
	needUCX(t)
	d := startDaemonsIn(t, "ux", "xdp", false)
	var nodes [2]string
	for i := range 2 {
		nodes[i] = devNode(t, d, i)
		if target, err := os.Readlink(nodes[i]); err != nil || target != "/dev/null" {
			t.Fatalf("daemon %d's entry %s: %q, %v; want a link to /dev/null", i, nodes[i], target, err)
		}
		if st, err := os.Stat(nodes[i]); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			t.Fatalf("daemon %d's entry %s is not a character device: %v", i, nodes[i], err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		o := d.runIn(t, ctx, i == 0, false, []string{"UCX_LOG_LEVEL=debug"}, "ucx_info", "-d").wait(ctx)
		cancel()
		if !o.OK() {
			t.Fatalf("ucx_info -d through daemon %d: %v", i, o)
		}
		dev := d.devs[i] + ":1"
		for _, tl := range []string{"rc_verbs", "ud_verbs"} {
			if !ucxListed(o.Stdout, tl, dev) {
				t.Errorf("ucx_info -d through daemon %d does not list %s on %s:\n%s", i, tl, dev, o.Stdout)
			}
		}
		want := fmt.Sprintf("%s using gid_index %s", dev, d.gidIdx(t, i))
		if !strings.Contains(o.Stdout+o.Stderr, want) {
			t.Errorf("ucx_info's debug log through daemon %d lacks %q (the IPv4 GID):\n%s", i, want, o.Stderr)
		}
	}
	// The daemon removes its own entry when it ends, and only its own.
	p := d.procs[0]
	p.cmd.Process.Signal(syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if o := p.wait(ctx); o.Exit != 0 {
		t.Fatalf("daemon 0 after SIGTERM: %v", o)
	}
	if _, err := os.Lstat(nodes[0]); !os.IsNotExist(err) {
		t.Errorf("daemon 0 ended and left %s (%v)", nodes[0], err)
	}
	if _, err := os.Lstat(nodes[1]); err != nil {
		t.Errorf("daemon 0 ended and daemon 1's entry went too: %v", err)
	}
}

// devNode returns the path of daemon i's /dev/infiniband entry.
func devNode(t testing.TB, d *daemonPair, i int) string {
	t.Helper()
	devs, err := client.Devices(d.sockets[i])
	if err != nil || len(devs) != 1 {
		t.Fatalf("daemon %d's devices: %v, %v", i, devs, err)
	}
	var guid [8]byte
	binary.NativeEndian.PutUint64(guid[:], devs[0].NodeGUID)
	return filepath.Join(daemon.DevNodeDir, daemon.DevNodeName(devs[0].Name, guid))
}

// ucxListed reports whether ucx_info -d's output lists transport tl on
// device dev.
func ucxListed(out, tl, dev string) bool {
	lines := strings.Split(out, "\n")
	for i, l := range lines {
		if strings.TrimSpace(strings.TrimPrefix(l, "#")) != "Transport: "+tl {
			continue
		}
		if i+1 < len(lines) && strings.TrimSpace(strings.TrimPrefix(lines[i+1], "#")) == "Device: "+dev {
			return true
		}
	}
	return false
}

// perfResult is ucx_perftest's "Final:" line.
type perfResult struct {
	iters                  int
	latMedian, latOverall  float64 // µs
	bwOverall, rateOverall float64 // MB/s, messages/s
}

// parsePerf finds the Final: line of ucx_perftest's output.
func parsePerf(out string) (perfResult, error) {
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 9 || f[0] != "Final:" {
			continue
		}
		var v [8]float64
		for i := range v {
			x, err := strconv.ParseFloat(f[i+1], 64)
			if err != nil || math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
				return perfResult{}, fmt.Errorf("ucx_perftest's result line %q: field %d", l, i+1)
			}
			v[i] = x
		}
		return perfResult{iters: int(v[0]), latMedian: v[1], latOverall: v[3], bwOverall: v[5], rateOverall: v[7]}, nil
	}
	return perfResult{}, fmt.Errorf("ucx_perftest printed no Final: line")
}

// ucxCase is one ucx_perftest run.
type ucxCase struct {
	test  string
	size  int
	iters int
	// uct, for a test of UCX's transport layer (put_bw, am_bw), is the
	// transport and the data layout (-x and -D): ucx_perftest's server
	// takes the client's device name (-d), so these run on one device.
	uct []string
}

// ucxUCTCases are the transport-layer runs, on one device: ud_verbs has
// no RDMA (no put), and its messages are at most 1016 bytes.
var ucxUCTCases = []ucxCase{
	{"put_bw", 65536, 2000, []string{"rc_verbs", "zcopy"}},
	{"am_bw", 4096, 5000, []string{"rc_verbs", "bcopy"}},
	{"am_bw", 1000, 5000, []string{"ud_verbs", "bcopy"}},
}

// ucxTransports are the transports the runs use: rc_verbs needs a UD
// transport for its wire-up (what UCX's own "rc_v" alias means).
var ucxTransports = []struct{ name, tls string }{
	{"rc_verbs", "rc_verbs,ud_verbs:aux"},
	{"ud_verbs", "ud_verbs"},
}

var ucxCases = []ucxCase{
	{"tag_lat", 8, 10000, nil},
	{"ucp_put_bw", 65536, 2000, nil},
	{"ucp_am_bw", 65536, 2000, nil},
}

// TestUCXPerftest runs ucx_perftest's server in A and client in B (and
// both in A on one device: loopback), each transport and test, and checks
// the figures; and the transport-layer tests on one device.
func TestUCXPerftest(t *testing.T) {
	laneParallel(t, 9*time.Second, needHost)
	needUCX(t)
	d := startDaemonsIn(t, "ux", "xdp", false)
	port := 19100
	for _, c := range ucxUCTCases {
		port++
		t.Run("loopback/uct/"+c.uct[0]+"/"+c.test, func(t *testing.T) {
			r := d.ucxPerf(t, c.uct[0], c, port, true)
			if r.iters != c.iters || r.bwOverall < 1 {
				t.Fatalf("%d iterations (asked for %d), %.2f MB/s", r.iters, c.iters, r.bwOverall)
			}
			t.Logf("loopback uct %s %s: %d B messages, %.1f MB/s, %.0f msg/s", c.uct[0], c.test, c.size, r.bwOverall, r.rateOverall)
		})
	}
	for _, loop := range []bool{false, true} {
		for _, tr := range ucxTransports {
			for _, c := range ucxCases {
				port++
				name := tr.name + "/" + c.test
				if loop {
					name = "loopback/" + name
				}
				t.Run(name, func(t *testing.T) {
					r := d.ucxPerf(t, tr.tls, c, port, loop)
					if r.iters != c.iters {
						t.Fatalf("%d iterations, asked for %d", r.iters, c.iters)
					}
					if c.test == "tag_lat" {
						// Bounds that only a broken path misses on a loaded machine.
						if r.latOverall <= 0 || r.latOverall > 5000 {
							t.Fatalf("latency %.2f µs", r.latOverall)
						}
						t.Logf("%s: latency median %.2f µs, overall %.2f µs", name, r.latMedian, r.latOverall)
						return
					}
					if r.bwOverall < 1 {
						t.Fatalf("bandwidth %.2f MB/s", r.bwOverall)
					}
					t.Logf("%s: %d B messages, %.1f MB/s, %.0f msg/s", name, c.size, r.bwOverall, r.rateOverall)
				})
			}
		}
	}
}

// ucxPerf runs one ucx_perftest pair through the daemons (or both sides
// through daemon A with loop) and returns the client's result.
func (d *daemonPair) ucxPerf(t *testing.T, tls string, c ucxCase, port int, loop bool) perfResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	env := append(ucxEnv(tls), "UCX_NET_DEVICES="+d.devs[0]+":1")
	before := d.received(t, 0)
	s := d.runIn(t, ctx, true, false, env, "ucx_perftest", "-p", strconv.Itoa(port))
	if err := listening(ctx, d.pair.A, s, port); err != nil {
		t.Fatal(err)
	}
	cenv := append(ucxEnv(tls), "UCX_NET_DEVICES="+d.devs[1]+":1")
	if loop {
		cenv = env
	}
	args := []string{d.pair.Veth.AddrA[0].Addr().String(),
		"-p", strconv.Itoa(port), "-t", c.test, "-s", strconv.Itoa(c.size), "-n", strconv.Itoa(c.iters)}
	if c.uct != nil {
		args = append(args, "-x", c.uct[0], "-D", c.uct[1], "-d", d.devs[0]+":1")
	}
	cli := d.runIn(t, ctx, loop, false, cenv, "ucx_perftest", args...).wait(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	srv := s.wait(wctx)
	wcancel()
	if ctx.Err() != nil {
		t.Fatalf("ucx_perftest %s over %s did not end within 90 s:\nserver: %v\nclient: %v", c.test, tls, srv, cli)
	}
	if !cli.OK() || !srv.OK() {
		t.Fatalf("ucx_perftest %s over %s:\nserver: %v\nclient: %v", c.test, tls, srv, cli)
	}
	r, err := parsePerf(cli.Stdout)
	if err != nil {
		t.Fatalf("%v:\n%v", err, cli)
	}
	// The server's side received at least a packet per iteration: the
	// run went through sroce, not a transport UCX chose instead.
	if got := d.received(t, 0) - before; got < uint64(c.iters) {
		t.Fatalf("daemon 0's device received %d packets in %d iterations", got, c.iters)
	}
	return r
}

// TestOpenMPIUCX runs two MPI ranks with --mca pml ucx over the sroce
// devices: one rank in each namespace (mpirun in A starts the other
// rank's orted in B through a plm_rsh_agent script that enters B with
// `ip netns exec` and `sroce run`), and both ranks on A's device
// (loopback). Each run is a ping-pong of checked messages of 8 B to 1 MiB
// and an allreduce (sum and maximum) checked element by element; the
// daemons' counters show the traffic went through sroce.
func TestOpenMPIUCX(t *testing.T) {
	needMPI(t)
	d := startDaemonsIn(t, "ux", "xdp", false)
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	progs := map[string]string{}
	for _, p := range []string{"mpi_pingpong", "mpi_allreduce"} {
		bin := filepath.Join(dir, p)
		if out, err := exec.Command("mpicc", "-O2", "-o", bin, filepath.Join("testdata", p+".c")).CombinedOutput(); err != nil {
			t.Fatalf("mpicc %s: %v\n%s", p, err, out)
		}
		progs[p] = bin
	}
	// Open MPI's rsh launcher runs AGENT HOST COMMAND...: the command is a
	// shell command line for the other host, here namespace B through its
	// daemon.
	agent := filepath.Join(dir, "netns-agent")
	script := fmt.Sprintf("#!/bin/sh\nshift\nexec ip netns exec %s %s run --socket %s -- /bin/sh -c \"$*\"\n",
		d.pair.B.Name(), d.bin, d.sockets[1])
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	a, b := d.pair.Veth.AddrA[0].Addr().String(), d.pair.Veth.AddrB[0].Addr().String()
	for _, run := range []struct {
		name, hosts string
		traffic     int // the daemon whose received packets must grow
	}{
		{"two-namespaces", a + ":1," + b + ":1", 1},
		{"loopback", a + ":2", 0},
	} {
		for _, p := range []struct{ prog, want string }{
			{"mpi_pingpong", "pingpong ok"},
			{"mpi_allreduce", "allreduce ok 2 100000"},
		} {
			t.Run(run.name+"/"+p.prog, func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				before := d.received(t, run.traffic)
				// self for a rank's messages to itself; no shared memory,
				// so the loopback ranks talk through the device too.
				env := ucxEnv("self,rc_verbs,ud_verbs:aux")
				o := d.runIn(t, ctx, true, false, env, "mpirun", "--allow-run-as-root", "-np", "2",
					"--host", run.hosts, "--mca", "plm_rsh_agent", agent,
					"--mca", "pml", "ucx", "--mca", "btl", "self",
					"-x", "UCX_TLS", progs[p.prog]).wait(ctx)
				if ctx.Err() != nil {
					t.Fatalf("mpirun %s did not end within 2 minutes: %v", p.prog, o)
				}
				if !o.OK() || !strings.Contains(o.Stdout, p.want) {
					t.Fatalf("mpirun %s: want %q: %v", p.prog, p.want, o)
				}
				after := d.received(t, run.traffic)
				if after-before < 100 {
					t.Fatalf("daemon %d's device received %d packets during the run: the ranks did not talk through sroce", run.traffic, after-before)
				}
				t.Logf("%s (daemon %d received %d packets)", strings.TrimSpace(o.Stdout), run.traffic, after-before)
			})
		}
	}
}
