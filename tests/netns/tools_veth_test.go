package netns

// sroce's tools against themselves between two network namespaces joined
// by a veth pair, each side on its veth over AF_XDP (the sroce binary, run
// as a user would run it): every tool pair, a few of the options that
// change the data path, the same over a lossy and reordering link, and
// the failures a user meets on real interfaces (not root for AF_XDP, a
// peer that vanishes mid-run, an interface that goes down).

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/nsutil"
)

// vethPair is two namespaces joined by a veth pair, with the sroce binary.
type vethPair struct {
	pair *nsutil.Pair
	bin  string
}

// newVethPair creates the namespaces (impaired by netem if not nil).
func newVethPair(t testing.TB, netem *nsutil.Netem) *vethPair {
	t.Helper()
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "sroce-tools", Impair: netem, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	return &vethPair{pair: pair, bin: buildSroce(t)}
}

// start starts sroce with args in namespace a (else b) on its veth.
func (v *vethPair) start(t testing.TB, ctx context.Context, inA bool, env []string, args ...string) *toolProc {
	t.Helper()
	ns, ifname := v.pair.B, v.pair.Veth.NameB
	if inA {
		ns, ifname = v.pair.A, v.pair.Veth.NameA
	}
	full := append([]string{args[0], "-d", ifname}, args[1:]...)
	cmd := ns.Command(ctx, v.bin, full...)
	cmd.Env = env
	return startTool(t, cmd, ns.Start)
}

// serverAddr returns A's address, where the clients connect.
func (v *vethPair) serverAddr() string { return v.pair.Veth.AddrA[0].Addr().String() }

// waitServer waits until the server in A listens on port.
func (v *vethPair) waitServer(ctx context.Context, srv *toolProc, port int) error {
	return waitFor(ctx, "the sroce server to listen", func() (bool, error) {
		if srv.exited() {
			return false, fmt.Errorf("the server ended before listening:\n%v", srv.wait(ctx))
		}
		out, err := v.pair.A.Exec(ctx, "ss", "-Hltn", fmt.Sprintf("sport = :%d", port))
		return strings.TrimSpace(string(out)) != "", err
	})
}

// runPair runs cmd with args as server in A and client in B and checks
// that both succeed and print their results.
func (v *vethPair) runPair(t testing.TB, cmd string, args ...string) (srv, cli toolOutcome) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env := sroceEnv("xdp")
	s := v.start(t, ctx, true, env, append([]string{cmd}, args...)...)
	if err := v.waitServer(ctx, s, 18515); err != nil {
		t.Fatal(err)
	}
	c := v.start(t, ctx, false, env, append(append([]string{cmd}, args...), v.serverAddr())...)
	cli = c.wait(ctx)
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	srv = s.wait(wctx)
	wcancel()
	checkOwn(t, cmd, srv, cli)
	if t.Failed() {
		t.Logf("server: %v\nclient: %v", srv, cli)
	}
	return srv, cli
}

// vethCases are the tool pairs over veth: every tool, with sizes and MTUs
// that make multi-packet messages, and the options that change the data
// path. -g 1 and -x 1 are the IPv4 GIDs; without -x sroce picks the
// index perftest would (the IPv4 one; with --ipv6 index 0, the link-local
// IPv6 GID).
var vethCases = []struct {
	name, cmd, args string
}{
	{"rc-pingpong", "rc-pingpong", "-g 1 -n 200 -s 10000 -m 1024 -c"},
	{"rc-pingpong/events", "rc-pingpong", "-g 1 -n 100 -s 20000 -e -c"},
	{"ud-pingpong", "ud-pingpong", "-g 1 -n 200 -s 1024 -c"},
	{"send-bw", "send-bw", "-x 1 -n 500 -s 8192 -m 1024"},
	{"send-bw/UD", "send-bw", "-x 1 -n 100 -s 1024 -c UD"},
	{"send-bw/bidirectional", "send-bw", "-x 1 -n 300 -s 4096 -b"},
	{"write-bw", "write-bw", "-x 1 -n 1000 -s 65536 -m 1024"},
	{"write-bw/default-gid", "write-bw", "-n 500 -s 4096"},
	{"write-bw/ipv6-linklocal", "write-bw", "-n 500 -s 4096 --ipv6"},
	{"rc-pingpong/ipv6-linklocal", "rc-pingpong", "-g 0 -n 100 -s 4096 -c"},
	{"write-bw/qps-bidirectional", "write-bw", "-x 1 -n 200 -s 4096 -q 4 -b"},
	{"read-bw", "read-bw", "-x 1 -n 500 -s 16384 -m 2048"},
	{"atomic-bw", "atomic-bw", "-x 1 -n 1000"},
	{"atomic-bw/cmp-swap", "atomic-bw", "-x 1 -n 500 -A CMP_AND_SWAP"},
	{"send-lat", "send-lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"write-lat", "write-lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"read-lat", "read-lat", "-x 1 -n 200 -s 4096 -m 1024"},
	{"atomic-lat", "atomic-lat", "-x 1 -n 200"},
}

// TestToolsVeth runs every tool pair over veth with AF_XDP.
func TestToolsVeth(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping the tool pairs over veth in -short mode")
	}
	v := newVethPair(t, nil)
	for _, c := range vethCases {
		t.Run(c.name, func(t *testing.T) { v.runPair(t, c.cmd, strings.Fields(c.args)...) })
	}
}

// TestToolsVethLossy runs the reliable tools over a link that loses 2% of
// the frames and reorders some: the runs complete and the data checks
// (-c, and sroce's own checks of WRITE, READ, SEND and atomic data) pass.
func TestToolsVethLossy(t *testing.T) {
	laneParallel(t, 32*time.Second, needHost)
	if testing.Short() {
		t.Skip("skipping the lossy tool pairs in -short mode")
	}
	v := newVethPair(t, &nsutil.Netem{Delay: time.Millisecond, Loss: 2, Reorder: 25})
	t.Logf("impairment: %v", v.pair.Impairment)
	for _, c := range []struct{ cmd, args string }{
		{"rc-pingpong", "-g 1 -n 100 -s 8192 -m 1024 -c"},
		{"send-bw", "-x 1 -n 200 -s 8192 -m 1024 -u 12"},
		{"write-bw", "-x 1 -n 200 -s 16384 -m 1024 -u 12"},
		{"read-bw", "-x 1 -n 200 -s 8192 -m 1024 -u 12"},
		{"atomic-bw", "-x 1 -n 300 -u 12"},
		// The latency tools end on one side as soon as the last data is
		// there, possibly before the other side has the ACK for it: they
		// pass only because the finished side lingers to answer the
		// retransmissions.
		{"send-lat", "-x 1 -n 100 -s 4096 -m 1024 -u 12"},
		{"write-lat", "-x 1 -n 200 -s 4096 -m 1024 -u 12"},
		{"read-lat", "-x 1 -n 100 -s 4096 -m 1024 -u 12"},
		{"atomic-lat", "-x 1 -n 100 -u 12"},
	} {
		t.Run(c.cmd, func(t *testing.T) { v.runPair(t, c.cmd, strings.Fields(c.args)...) })
	}
}

// TestToolsVethFailures checks the failures of real interfaces.
func TestToolsVethFailures(t *testing.T) {
	laneParallel(t, 16*time.Second, needHost)
	v := newVethPair(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	t.Run("not-root", func(t *testing.T) {
		// AF_XDP asked for by an unprivileged user: one sentence, status 1.
		// Up to the temporary directory, never it: /tmp keeps its mode.
		for d := filepath.Dir(v.bin); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		cmd := v.pair.A.Command(ctx, v.bin, "write-bw", "-d", v.pair.Veth.NameA)
		cmd.Env = sroceEnv("xdp")
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534},
			Pdeathsig: syscall.SIGKILL}
		o := startTool(t, cmd, v.pair.A.Start).wait(ctx)
		want := fmt.Sprintf("sroce write-bw: AF_XDP on %s needs root", v.pair.Veth.NameA)
		if o.Exit != 1 || !strings.HasPrefix(o.Stderr, want) || strings.Count(o.Stderr, "\n") != 1 {
			t.Errorf("want exit 1 and %q, got %v", want, o)
		}
	})

	t.Run("peer-vanishes", func(t *testing.T) {
		// The server is killed mid-run: the client stops at the stall
		// limit with a clear sentence instead of retrying forever.
		env := append(sroceEnv("xdp"), "SROCE_STALL_TIMEOUT=3s")
		s := v.start(t, ctx, true, env, "write-bw", "-x", "1", "-D", "30", "-s", "4096")
		if err := v.waitServer(ctx, s, 18515); err != nil {
			t.Fatal(err)
		}
		c := v.start(t, ctx, false, env, "write-bw", "-x", "1", "-D", "30", "-s", "4096", v.serverAddr())
		time.Sleep(2 * time.Second)
		s.cmd.Process.Kill()
		s.wait(ctx)
		o := c.wait(ctx)
		if o.Exit != 1 || !strings.Contains(o.Stderr, "no completion for 3s") || !strings.Contains(o.Stderr, "the peer stopped answering") {
			t.Errorf("client: %v", o)
		}
	})

	t.Run("peer-stands-still-at-the-end", func(t *testing.T) {
		// The server stops answering (its process is stopped) shortly
		// before a -D run ends and runs again after it: the client ends
		// on time with requests still outstanding, as perftest does,
		// rather than waiting for them until its stall limit; the closing
		// exchange then completes and both sides report.
		env := append(sroceEnv("xdp"), "SROCE_STALL_TIMEOUT=5s")
		s := v.start(t, ctx, true, env, "write-bw", "-x", "1", "-D", "6", "-s", "4096")
		if err := v.waitServer(ctx, s, 18515); err != nil {
			t.Fatal(err)
		}
		c := v.start(t, ctx, false, env, "write-bw", "-x", "1", "-D", "6", "-s", "4096", v.serverAddr())
		time.Sleep(3 * time.Second)
		if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Second)
		if err := s.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, time.Minute)
		defer wcancel()
		co := c.wait(wctx)
		so := s.wait(wctx)
		for _, side := range []struct {
			name   string
			o      toolOutcome
			server bool
		}{{"server", so, true}, {"client", co, false}} {
			if problem := sideProblem("write-bw", side.o, side.server); problem != "" {
				t.Errorf("write-bw %s %s: %v", side.name, problem, side.o)
			}
		}
	})

	t.Run("interface-down", func(t *testing.T) {
		// The client's interface goes down mid-run: its QPs are flushed
		// and it says why.
		env := sroceEnv("xdp")
		s := v.start(t, ctx, true, env, "send-bw", "-x", "1", "-D", "30", "-s", "4096")
		if err := v.waitServer(ctx, s, 18515); err != nil {
			t.Fatal(err)
		}
		c := v.start(t, ctx, false, env, "send-bw", "-x", "1", "-D", "30", "-s", "4096", v.serverAddr())
		time.Sleep(2 * time.Second)
		if err := v.pair.B.SetLinkUp(v.pair.Veth.NameB, false); err != nil {
			t.Fatal(err)
		}
		defer v.pair.B.SetLinkUp(v.pair.Veth.NameB, true)
		o := c.wait(ctx)
		if o.Exit != 1 || !strings.Contains(o.Stderr, v.pair.Veth.NameB) || strings.Count(o.Stderr, "\n") != 1 {
			t.Errorf("client: %v", o)
		}
		s.cmd.Process.Kill()
		s.wait(ctx)
	})
}
