package netns

// Debian's real RDMA CM programs (rdmacm-utils' rping, ucmatose, udaddy,
// rdma_server/rdma_client, and perftest's ib_write_bw -R) through `sroce
// run` and the drop-in librdmacm and libibverbs, between two sroce daemons
// in two namespaces over AF_XDP: the daemons run the CM (MADs to QP1 on
// the wire), the programs are unmodified. And an rping client killed with
// SIGKILL mid-run: its daemon disconnects its connection (a DREQ to the
// peer), the peer's rping ends, and both daemons serve the next pair.

import (
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/client"
)

// cmTool is a real RDMA CM program's server and client command lines; the
// client's gets the server's address where {addr} stands.
type cmTool struct {
	name   string
	prog   string
	server string
	cprog  string // the client's program, when not prog
	client string
	// check looks at both outputs beyond the exit statuses: "" when good.
	check func(srv, cli toolOutcome) string
}

// countPings checks rping -v's output: n verified pings on each side.
func countPings(n int) func(srv, cli toolOutcome) string {
	return func(srv, cli toolOutcome) string {
		s := strings.Count(srv.Stdout, "server ping data: rdma-ping-")
		c := strings.Count(cli.Stdout, "ping data: rdma-ping-")
		if s != n || c != n {
			return "rping printed " + strconv.Itoa(s) + " pings on the server and " + strconv.Itoa(c) + " on the client, want " + strconv.Itoa(n)
		}
		return ""
	}
}

// contains checks that the client's output has want.
func contains(want string) func(srv, cli toolOutcome) string {
	return func(srv, cli toolOutcome) string {
		if !strings.Contains(cli.Stdout+cli.Stderr, want) {
			return "the client did not print " + strconv.Quote(want)
		}
		return ""
	}
}

// bwResult checks that perftest's client printed its result row.
func bwResult(srv, cli toolOutcome) string {
	if !bwRow.MatchString(cli.Stdout) {
		return "the client printed no bandwidth row"
	}
	return ""
}

// latResult checks that perftest's client printed its latency row.
func latResult(srv, cli toolOutcome) string {
	if !latRow.MatchString(cli.Stdout) {
		return "the client printed no latency row"
	}
	return ""
}

var cmTools = []cmTool{
	{"rping", "rping", "-s -a {addrA} -p 7471 -C 20 -v", "", "-c -a {addrA} -p 7471 -C 20 -v", countPings(20)},
	{"rping-4k", "rping", "-s -a {addrA} -p 7472 -C 10 -S 4096 -v", "", "-c -a {addrA} -p 7472 -C 10 -S 4096 -v", countPings(10)},
	{"ucmatose", "ucmatose", "-p 7473 -c 2 -C 20", "", "-s {addrA} -p 7473 -c 2 -C 20", contains("data transfers complete")},
	{"ucmatose -m", "ucmatose", "-p 7475 -m -C 20", "", "-s {addrA} -p 7475 -m -C 20", contains("data transfers complete")},
	{"ucmatose -t -a", "ucmatose", "-p 7476 -C 10", "", "-s {addrA} -p 7476 -C 10 -t 32 -a 18", contains("data transfers complete")},
	{"rdma_server", "rdma_server", "-p 7474", "rdma_client", "-s {addrA} -p 7474", contains("rdma_client: end 0")},
	{"udaddy", "udaddy", "-c 2 -C 10", "", "-s {addrA} -c 2 -C 10", contains("data transfers complete")},
	{"ib_send_lat -R", "ib_send_lat", "-d {devA} -R -n 300 -s 8 -p 18591", "", "-d {devB} -R -n 300 -s 8 -p 18591 {addrA}", latResult},
	{"ib_write_bw -R", "ib_write_bw", "-d {devA} -x {gidA} -R -n 300 -s 65536 -p 18590", "", "-d {devB} -x {gidB} -R -n 300 -s 65536 -p 18590 {addrA}", bwResult},
}

// needCMTools skips when rdmacm-utils or perftest is missing.
func needCMTools(t testing.TB) {
	t.Helper()
	needRealTools(t)
	if _, err := exec.LookPath("rping"); err != nil {
		t.Skip("skipping: rping is not installed (tests/run installs rdmacm-utils)")
	}
}

// expand fills a command line's placeholders.
func (d *daemonPair) expand(t testing.TB, line string) []string {
	r := strings.NewReplacer("{addrA}", d.pair.Veth.AddrA[0].Addr().String(),
		"{devA}", d.devs[0], "{devB}", d.devs[1])
	if strings.Contains(line, "{gid") {
		r = strings.NewReplacer("{addrA}", d.pair.Veth.AddrA[0].Addr().String(),
			"{devA}", d.devs[0], "{devB}", d.devs[1], "{gidA}", d.gidIdx(t, 0), "{gidB}", d.gidIdx(t, 1))
	}
	return strings.Fields(r.Replace(line))
}

// cmPair runs a CM tool's server in A and its client in B. The server
// listens through the CM, which no socket table shows: while the client is
// rejected or finds no listener, server and client start again (a bounded
// number of times, each logged), since a server whose second connection
// (perftest's -R) was refused has moved on (see noListener).
func (d *daemonPair) cmPair(t testing.TB, tool cmTool) (srv, cli toolOutcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := d.runIn(t, ctx, true, false, nil, tool.prog, d.expand(t, tool.server)...)
	for try := 0; ; try++ {
		time.Sleep(300 * time.Millisecond)
		if s.exited() {
			return s.wait(ctx), cli
		}
		prog := tool.prog
		if tool.cprog != "" {
			prog = tool.cprog
		}
		c := d.runIn(t, ctx, false, false, nil, prog, d.expand(t, tool.client)...)
		cli = c.wait(ctx)
		out := cli.Stdout + cli.Stderr
		refused := strings.Contains(out, "REJECTED") || strings.Contains(out, "rejected") ||
			strings.Contains(out, "Connection refused") || strings.Contains(out, "error 8")
		if cli.OK() || !refused || try == 20 {
			break
		}
		s.cmd.Process.Kill()
		old := s.wait(ctx)
		t.Logf("try %d: the client found no listener; server and client start again:\n%s\n(the server: %v)", try, out, old)
		s = d.runIn(t, ctx, true, false, nil, tool.prog, d.expand(t, tool.server)...)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	srv = s.wait(wctx)
	wcancel()
	return srv, cli
}

// TestRealCMToolsDaemonsXDP runs every real CM program between two daemons
// over AF_XDP.
func TestRealCMToolsDaemonsXDP(t *testing.T) {
	needCMTools(t)
	d := startDaemonsIn(t, "cmS-daemon", "xdp", false)
	ran := 0 // programs that connected (udaddy's SIDR is no connection)
	for _, tool := range cmTools {
		t.Run(tool.name, func(t *testing.T) {
			if _, err := exec.LookPath(tool.prog); err != nil {
				t.Skipf("skipping: %s is not installed", tool.prog)
			}
			srv, cli := d.cmPair(t, tool)
			if !srv.OK() || !cli.OK() {
				t.Fatalf("%s failed:\nserver %v\nclient %v", tool.name, srv, cli)
			}
			if p := tool.check(srv, cli); p != "" {
				t.Errorf("%s: %s\nserver %v\nclient %v", tool.name, p, srv, cli)
			}
			if tool.prog != "udaddy" {
				ran++
			}
		})
	}
	// The CM is observable as the engine is: sroce stat on a daemon shows
	// its QP1 agent's counters, and every program above connected.
	ifname := strings.TrimPrefix(d.devs[0], "sroce_")
	out, err := d.pair.A.Command(context.Background(), d.bin, "stat", "-d", ifname, "--socket", d.sockets[0], "--nonzero").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "RDMA CM counters (QP1):") {
		t.Fatalf("sroce stat on the daemon: %v\n%s", err, out)
	}
	var established int
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "cm_established" {
			established, _ = strconv.Atoi(f[1])
		}
	}
	t.Logf("sroce stat:\n%s", out)
	if established < ran {
		t.Errorf("sroce stat counts %d established CM connections after %d programs:\n%s", established, ran, out)
	}
}

// TestRealRpingKilled kills an rping client with SIGKILL in the middle of a
// long run: daemon B destroys its IDs (the connection's DREQ reaches A), the
// server's rping sees DISCONNECTED and ends, daemon B frees the client, and
// a new rping pair then runs through the same daemons.
func TestRealRpingKilled(t *testing.T) {
	needCMTools(t)
	d := startDaemonsIn(t, "cmS-daemon", "xdp", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	addr := d.pair.Veth.AddrA[0].Addr().String()
	srv := d.runIn(t, ctx, true, false, nil, "rping", "-s", "-a", addr, "-p", "7480", "-v")
	libOut, err := exec.Command(d.bin, "run", "--print-lib").Output()
	if err != nil {
		t.Fatalf("sroce run --print-lib: %v", err)
	}
	var cli *toolProc
	var cmd *exec.Cmd
	for try := 0; try < 20; try++ {
		time.Sleep(300 * time.Millisecond)
		// The program itself, so that the SIGKILL reaches it.
		cmd = d.pair.B.Command(ctx, "rping", "-c", "-a", addr, "-p", "7480", "-v")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+strings.TrimSpace(string(libOut)), "SROCE_SOCKET="+d.sockets[1])
		cli = startTool(t, cmd, d.pair.B.Start)
		if err := waitFor(ctx, "the rping client to ping", func() (bool, error) {
			return strings.Count(cli.stdout.String(), "ping data") >= 20 || cli.exited(), nil
		}); err != nil {
			t.Fatal(err)
		}
		if !cli.exited() {
			break
		}
	}
	if cli.exited() {
		t.Fatalf("the rping client never got going:\n%v", cli.wait(ctx))
	}
	cmd.Process.Signal(syscall.SIGKILL)
	if o := cli.wait(ctx); o.Exit != -1 {
		t.Errorf("the client was not killed: %v", o)
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	so := srv.wait(wctx)
	wcancel()
	if so.Exit == -1 || !strings.Contains(so.Stdout+so.Stderr, "DISCONNECT") {
		t.Errorf("the server's rping did not see the peer disconnect within 30 s:\n%v", so)
	}
	if err := waitFor(ctx, "daemon B to free the killed program", func() (bool, error) {
		st, err := client.Stats(d.sockets[1], d.devs[1])
		return err == nil && st.Clients == 0, nil
	}); err != nil {
		t.Error(err)
	}
	s, c := d.cmPair(t, cmTools[0])
	if !s.OK() || !c.OK() {
		t.Fatalf("rping after the kill failed:\nserver %v\nclient %v", s, c)
	}
	if p := cmTools[0].check(s, c); p != "" {
		t.Error(p)
	}
}
