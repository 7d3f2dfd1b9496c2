package shim_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/roce/iface"
	"github.com/sroce/sroce/shim"
)

// testAddr is the loopback address the test device's UDP link binds
// (port 4791); another test binding it at the same time makes Open fail
// with "address already in use".
const testAddr = "127.0.0.77"

// liveDaemon is an in-process sroce daemon serving a device on the loopback
// interface over the UDP link, and the built library.
type liveDaemon struct {
	socket string
	lib    string
	gidIdx int
	log    *bytes.Buffer
	mu     sync.Mutex
	stop   func() // stops the daemon (once)
	srv    *daemon.Server
}

func (d *liveDaemon) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.Write(p)
}

func startDaemon(t testing.TB) *liveDaemon {
	t.Helper()
	return startDaemonAt(t, testAddr)
}

// startDaemonAt starts a daemon as startDaemon does, its device's UDP
// link on loopback address addr, so that tests on other addresses can run
// beside it.
func startDaemonAt(t testing.TB, addr string) *liveDaemon {
	t.Helper()
	if _, err := shim.Compiler(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	for _, p := range []string{"ibv_devinfo", "ibv_rc_pingpong"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("skipping: %s is not installed (apt-get install ibverbs-utils perftest)", p)
		}
	}
	d := &liveDaemon{log: &bytes.Buffer{}}
	lib, err := shim.LibIn(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d.lib = lib
	port, err := iface.Open(context.Background(), "lo", iface.Options{Mode: iface.ModeUDP, Addr: netip.MustParseAddr(addr)})
	if err != nil {
		t.Fatalf("opening a device on lo at %s (another test using the address makes this fail): %v", addr, err)
	}
	t.Cleanup(func() { port.Close() })
	srv, err := daemon.New([]daemon.Device{port}, daemon.Options{Logger: slog.New(slog.NewTextHandler(d, nil))})
	if err != nil {
		t.Fatal(err)
	}
	d.srv = srv
	d.socket = filepath.Join(t.TempDir(), "sroce.sock")
	ln, err := daemon.Listen(d.socket)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	var once sync.Once
	d.stop = func() {
		once.Do(func() {
			srv.Close()
			<-done
		})
	}
	t.Cleanup(func() {
		d.stop()
		if t.Failed() {
			d.mu.Lock()
			t.Logf("daemon log:\n%s", d.log)
			d.mu.Unlock()
		}
	})

	out, errOut, err := d.run(t, 20*time.Second, "ibv_devinfo", "-v", "-d", "sroce_lo")
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s\n%s", err, out, errOut)
	}
	m := regexp.MustCompile(`GID\[\s*(\d+)\]:\s+::ffff:` + regexp.QuoteMeta(addr) + `, RoCE v2`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("ibv_devinfo -v lists no RoCE v2 GID for %s:\n%s", addr, out)
	}
	fmt.Sscan(m[1], &d.gidIdx)
	return d
}

// run runs a program on the library against the daemon, bounded by timeout.
func (d *liveDaemon) run(t testing.TB, timeout time.Duration, prog string, args ...string) (string, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	o, e, err := d.runCtx(ctx, prog, args...)
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %v", prog, timeout)
	}
	return o, e, err
}

// runCtx is run bounded by ctx (killed when ctx ends).
func (d *liveDaemon) runCtx(ctx context.Context, prog string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+d.lib, "SROCE_SOCKET="+d.socket)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	return o.String(), e.String(), err
}

// start runs a program as run does, its stdout and stderr written to out
// as they come.
func (d *liveDaemon) start(t testing.TB, timeout time.Duration, out io.Writer, prog string, args ...string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+d.lib, "SROCE_SOCKET="+d.socket)
	cmd.Stdout, cmd.Stderr = out, out
	err := cmd.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%s did not finish within %v", prog, timeout)
	}
	return err
}

// pair runs a tool's server and client (the client given the server's
// address last) and returns both outputs.
func (d *liveDaemon) pair(t *testing.T, prog string, args ...string) (srv, cli string) {
	t.Helper()
	return d.pairOn(t, 18515, prog, args, args)
}

// pairOn is pair for a tool whose arguments make it listen on TCP port
// port, with the server's and the client's own arguments.
func (d *liveDaemon) pairOn(t *testing.T, port int, prog string, srvArgs, cliArgs []string) (srv, cli string) {
	t.Helper()
	if _, err := exec.LookPath(prog); err != nil {
		t.Skipf("skipping: %s is not installed", prog)
	}
	type result struct {
		out, errOut string
		err         error
	}
	sc := make(chan result, 1)
	go func() {
		o, e, err := d.run(t, 60*time.Second, prog, srvArgs...)
		sc <- result{o, e, err}
	}()
	var c result
	// The client connects once, after the server listens on its TCP port.
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, _ := exec.Command("ss", "-Hltn", fmt.Sprintf("sport = :%d", port)).Output()
		if len(bytes.TrimSpace(out)) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s's server did not listen on TCP port %d within 20 s", prog, port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.out, c.errOut, c.err = d.run(t, 60*time.Second, prog, append(append([]string{}, cliArgs...), "127.0.0.1")...)
	s := <-sc
	if c.err != nil || s.err != nil {
		t.Fatalf("%s %v:\nclient: %v\n%s%s\nserver: %v\n%s%s", prog, cliArgs, c.err, c.out, c.errOut, s.err, s.out, s.errOut)
	}
	return s.out + s.errOut, c.out + c.errOut
}

// TestRealProgramsOnTheDaemon runs rdma-core's and perftest's unmodified
// binaries through the library against a live daemon: device queries, RC,
// UC, UD and SRQ ping-pong (also with completion events), and perftest's
// WRITE, READ, SEND and atomic tests. Each run moves real data through
// registered memory, the shared rings and the daemon's engine.
func TestRealProgramsOnTheDaemon(t *testing.T) {
	d := startDaemon(t)
	g := fmt.Sprint(d.gidIdx)

	t.Run("ibv_devices", func(t *testing.T) {
		out, errOut, err := d.run(t, 20*time.Second, "ibv_devices")
		if err != nil || !strings.Contains(out, "sroce_lo") {
			t.Fatalf("ibv_devices: %v\n%s%s", err, out, errOut)
		}
	})
	t.Run("verbs_test.c", func(t *testing.T) {
		if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
			t.Skip("skipping: /usr/include/infiniband/verbs.h is missing (apt-get install libibverbs-dev)")
		}
		cc, _ := shim.Compiler()
		bin := filepath.Join(t.TempDir(), "verbs_test")
		out, err := exec.Command(cc, "-O1", "-Wall", "-o", bin, "testdata/verbs_test.c",
			filepath.Join(d.lib, shim.LibName)).CombinedOutput()
		if err != nil {
			t.Fatalf("compiling testdata/verbs_test.c against the system's verbs.h: %v\n%s", err, out)
		}
		o, e, err := d.run(t, 60*time.Second, bin, "sroce_lo", g)
		t.Logf("%s%s", o, e)
		if err != nil {
			t.Fatalf("verbs_test: %v", err)
		}
		if n := strings.Count(o, "ok "); n != 17 {
			t.Fatalf("%d checks passed, want 17", n)
		}
	})
	t.Run("pyverbs", func(t *testing.T) {
		const python = "/usr/bin/python3"
		if _, err := os.Stat("/usr/lib/python3/dist-packages/pyverbs"); err != nil {
			t.Skip("skipping: pyverbs is not installed (apt-get install python3-pyverbs)")
		}
		o, e, err := d.run(t, 60*time.Second, python, "testdata/pyverbs_test.py", "sroce_lo", g)
		t.Logf("%s%s", o, e)
		if err != nil {
			t.Fatalf("pyverbs_test.py: %v", err)
		}
		if n := strings.Count(o, "ok "); n != 8 {
			t.Fatalf("%d checks passed, want 8", n)
		}
	})
	iters := regexp.MustCompile(`(?m)^100 iters in `)
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"ibv_rc_pingpong", []string{"-n", "100"}},
		{"ibv_rc_pingpong", []string{"-n", "100", "-e"}},
		{"ibv_uc_pingpong", []string{"-n", "100"}},
		{"ibv_ud_pingpong", []string{"-n", "100", "-s", "1024"}},
		{"ibv_srq_pingpong", []string{"-n", "100"}},
	} {
		t.Run(tc.prog+strings.Join(tc.args, ""), func(t *testing.T) {
			args := append([]string{"-d", "sroce_lo", "-g", g}, tc.args...)
			srv, cli := d.pair(t, tc.prog, args...)
			if !iters.MatchString(srv) || !iters.MatchString(cli) {
				t.Fatalf("no result line:\nserver:\n%s\nclient:\n%s", srv, cli)
			}
		})
	}
	for _, tc := range []struct {
		prog string
		args []string
	}{
		{"ib_write_bw", []string{"-s", "65536", "-n", "200"}},
		{"ib_read_bw", []string{"-s", "65536", "-n", "200"}},
		{"ib_send_bw", []string{"-s", "4096", "-n", "200"}},
		{"ib_atomic_bw", []string{"-n", "200"}},
		{"ib_send_lat", []string{"-s", "8", "-n", "200"}},
	} {
		t.Run(tc.prog, func(t *testing.T) {
			args := append([]string{"-d", "sroce_lo", "-x", g}, tc.args...)
			srv, cli := d.pair(t, tc.prog, args...)
			if !strings.Contains(cli, "#bytes") || !strings.Contains(srv, "#bytes") {
				t.Fatalf("no result table:\nserver:\n%s\nclient:\n%s", srv, cli)
			}
		})
	}
}

// TestDaemonGoneIsDeviceFatal stops the daemon under a program waiting for
// asynchronous events, or removes its device (the interface was deleted):
// it gets IBV_EVENT_DEVICE_FATAL once, as when a device goes away under
// rdma-core, and exits cleanly.
func TestDaemonGoneIsDeviceFatal(t *testing.T) {
	for _, how := range []string{"daemon stopped", "device removed"} {
		t.Run(how, func(t *testing.T) { deviceFatal(t, how == "device removed") })
	}
}

func deviceFatal(t *testing.T, remove bool) {
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("skipping: /usr/include/infiniband/verbs.h is missing (apt-get install libibverbs-dev)")
	}
	d := startDaemon(t)
	cc, _ := shim.Compiler()
	bin := filepath.Join(t.TempDir(), "async_test")
	if out, err := exec.Command(cc, "-Wall", "-o", bin, "testdata/async_test.c", filepath.Join(d.lib, shim.LibName)).CombinedOutput(); err != nil {
		t.Fatalf("compiling testdata/async_test.c: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+d.lib, "SROCE_SOCKET="+d.socket)
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 16)
	go func() {
		defer close(lines)
		buf := make([]byte, 4096)
		var acc string
		for {
			n, err := pr.Read(buf)
			acc += string(buf[:n])
			for {
				i := strings.IndexByte(acc, '\n')
				if i < 0 {
					break
				}
				lines <- acc[:i]
				acc = acc[i+1:]
			}
			if err != nil {
				return
			}
		}
	}()
	select {
	case l := <-lines:
		if l != "ready" {
			t.Fatalf("async_test printed %q first", l)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("async_test did not open the device within 20 s")
	}
	if remove {
		d.srv.Remove("lo")
	} else {
		d.stop()
	}
	err := cmd.Wait()
	pw.Close()
	var got []string
	for l := range lines {
		got = append(got, l)
	}
	if err != nil {
		t.Fatalf("async_test: %v: %q %s", err, got, errOut.String())
	}
	if len(got) != 1 || got[0] != "event: local catastrophic error" {
		t.Fatalf("events %q, want one DEVICE_FATAL (\"local catastrophic error\")", got)
	}
	// One line says what happened: the daemon took the device away (it
	// still listens), or the daemon has gone.
	want := "sroce: the sroce daemon at " + d.socket + " has gone"
	if remove {
		want = "sroce: the sroce daemon at " + d.socket + " took device sroce_lo away"
	}
	if n := strings.Count(errOut.String(), "sroce: the sroce daemon at "); n != 1 || !strings.Contains(errOut.String(), want) {
		t.Errorf("stderr %q: want one line %q...", errOut.String(), want)
	}
}

var _ io.Writer = (*liveDaemon)(nil)

// BenchmarkRegMR prints what ibv_reg_mr and ibv_dereg_mr cost through the
// library (the pages remapped onto its memfd, the daemon mapping them):
//
//	go test -run '^$' -bench RegMR -benchtime 1x ./shim
func BenchmarkRegMR(b *testing.B) {
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		b.Skip("skipping: /usr/include/infiniband/verbs.h is missing (apt-get install libibverbs-dev)")
	}
	d := startDaemon(b)
	cc, _ := shim.Compiler()
	bin := filepath.Join(b.TempDir(), "regmr_bench")
	if out, err := exec.Command(cc, "-O2", "-Wall", "-o", bin, "testdata/regmr_bench.c", filepath.Join(d.lib, shim.LibName)).CombinedOutput(); err != nil {
		b.Fatalf("compiling testdata/regmr_bench.c: %v\n%s", err, out)
	}
	for i := 0; i < b.N; i++ {
		o, e, err := d.run(b, 2*time.Minute, bin, "sroce_lo")
		if err != nil {
			b.Fatalf("regmr_bench: %v\n%s%s", err, o, e)
		}
		fmt.Printf("%12s %14s %16s %10s\n", "bytes", "ibv_reg_mr us", "ibv_dereg_mr us", "GB/s")
		for _, line := range strings.Split(strings.TrimSpace(o), "\n") {
			f := strings.Fields(line)
			if len(f) == 4 {
				fmt.Printf("%12s %14s %16s %10s\n", f[0], f[1], f[2], f[3])
			}
		}
	}
}
