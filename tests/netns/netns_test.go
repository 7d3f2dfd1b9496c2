// Package netns holds privileged end-to-end tests that run real rdma_rxe
// peers in qemu guests (see package rxeguest) and capture their traffic.
// They need root, qemu-system-x86_64, debootstrap, mkfs.ext4 and tcpdump,
// and skip with a message otherwise.
package netns

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
)

func TestMain(m *testing.M) {
	if v := os.Getenv(killedClientEnv); v != "" {
		os.Exit(killedClient(v)) // TestDaemonKilledClient's client
	}
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		// The parallel guest tests take turns through lanes of their
		// own (laneParallel), which start the longest first; go test's
		// limit would pick which of them may ask.
		flag.Set("test.parallel", "64")
	}
	stop := guardTempDirMode()
	code := m.Run()
	stop()
	if err := closeShared(); err != nil {
		fmt.Fprintln(os.Stderr, "closing the shared guests:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func testContext(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

const toolPairTimeout = 2 * time.Minute

// runToolPair runs server on a and client on b (with a's address appended)
// and returns both results; either failing is an error.
// The pair must finish within toolPairTimeout.
func runToolPair(ctx context.Context, a, b *rxeguest.Guest, port int, server, client string) (srv, cli rxeguest.Result, err error) {
	ready := func(ctx context.Context, p *rxeguest.Proc) error { return a.WaitListening(ctx, port, p) }
	return runGuestPair(ctx, a, b, server, client+" "+a.IP().String(), ready)
}

// runGuestPair runs server on a and, once ready returns, client on b, and
// returns both results; either failing is an error. The pair must finish
// within toolPairTimeout.
func runGuestPair(ctx context.Context, a, b *rxeguest.Guest, server, client string, ready func(context.Context, *rxeguest.Proc) error) (srv, cli rxeguest.Result, err error) {
	ctx, cancel := context.WithTimeout(ctx, toolPairTimeout)
	defer cancel()
	p, err := a.Start(ctx, server)
	if err != nil {
		return srv, cli, err
	}
	defer func() {
		if err != nil {
			kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			p.Kill(kctx)
			cancel()
		}
	}()
	if err := ready(ctx, p); err != nil {
		return srv, cli, fmt.Errorf("%s: %w", server, err)
	}
	cli, err = b.Run(ctx, client)
	if err != nil {
		return srv, cli, err
	}
	if cli.ExitCode != 0 {
		// Give the server a moment to report its side, then stop it.
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		srv, _ = p.Wait(wctx)
		cancel()
		return srv, cli, fmt.Errorf("client %q: %w\nclient stdout: %s\nclient stderr: %s\nserver stdout: %s\nserver stderr: %s",
			client, cli.Err(), cli.Stdout, cli.Stderr, srv.Stdout, srv.Stderr)
	}
	srv, err = p.Wait(ctx)
	if err != nil {
		return srv, cli, err
	}
	if srv.ExitCode != 0 {
		return srv, cli, fmt.Errorf("server %q: %w\nserver stdout: %s\nserver stderr: %s", server, srv.Err(), srv.Stdout, srv.Stderr)
	}
	return srv, cli, nil
}

// TestAgent checks the command channel: output, exit status, background
// commands, cancellation and concurrency.
func TestAgent(t *testing.T) {
	laneParallel(t, 10*time.Second, needPair)
	p := sharedPair(t)
	g := p.A
	ctx := testContext(t, 2*time.Minute)

	res, err := g.Run(ctx, "echo out; echo err >&2; printf 'a\\000b'; exit 3")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(res.Stdout), "out\na\x00b"; got != want {
		t.Errorf("stdout = %q, want %q", got, want)
	}
	if string(res.Stderr) != "err\n" || res.ExitCode != 3 {
		t.Errorf("stderr = %q, exit %d; want \"err\\n\", 3", res.Stderr, res.ExitCode)
	}
	var ee *rxeguest.ExitError
	if !errors.As(res.Err(), &ee) {
		t.Errorf("Err() = %v, want *ExitError", res.Err())
	}

	// A background command and a Run at the same time: the background
	// command blocks on a fifo until a Run writes to it.
	if res, err := g.Run(ctx, "rm -f /tmp/agent-fifo && mkfifo /tmp/agent-fifo"); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	bg, err := g.Start(ctx, "read line < /tmp/agent-fifo; echo got $line; echo bye >&2; exit 7")
	if err != nil {
		t.Fatal(err)
	}
	if done, err := bg.Exited(ctx); err != nil || done {
		t.Fatalf("Exited = %v, %v; want false", done, err)
	}
	if res, err := g.Run(ctx, "echo hello > /tmp/agent-fifo"); err != nil || res.Err() != nil {
		t.Fatal(err, res.Err())
	}
	res, err = bg.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if string(res.Stdout) != "got hello\n" || string(res.Stderr) != "bye\n" || res.ExitCode != 7 {
		t.Errorf("background command: stdout %q, stderr %q, exit %d; want \"got hello\\n\", \"bye\\n\", 7",
			res.Stdout, res.Stderr, res.ExitCode)
	}

	// Cancellation kills the guest command and leaves the channel usable.
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	start := time.Now()
	_, err = g.Run(cctx, "sleep 600")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 10*time.Second {
		t.Fatalf("Run with short deadline: %v after %v", err, time.Since(start))
	}
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := g.Run(ctx, fmt.Sprintf("sleep 1; echo %d", i))
			if err == nil && strings.TrimSpace(string(res.Stdout)) != fmt.Sprint(i) {
				err = fmt.Errorf("run %d: stdout %q", i, res.Stdout)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	res, err = g.Run(ctx, "pgrep -f 'sleep 600' || true")
	if err != nil {
		t.Fatal(err)
	}
	if s := strings.TrimSpace(string(res.Stdout)); s != "" {
		t.Errorf("sleep still running after cancellation: pids %s", s)
	}

	// Kill stops a background command.
	bg, err = g.Start(ctx, "sleep 600")
	if err != nil {
		t.Fatal(err)
	}
	if err := bg.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	res, err = bg.Wait(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitCode != 128+9 {
		t.Errorf("killed command exit = %d, want 137", res.ExitCode)
	}
}

// TestGuestNetwork checks addresses, the rxe device and its GIDs, and a
// host namespace on the same bridge reaching both guests.
func TestGuestNetwork(t *testing.T) {
	p := sharedPair(t)
	ctx := testContext(t, 2*time.Minute)
	for _, g := range []*rxeguest.Guest{p.A, p.B} {
		res, err := g.Run(ctx, `set -e
rdma link show rxe0/1
cat /sys/class/infiniband/rxe0/ports/1/gids/1 /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1
cat /sys/class/infiniband/rxe0/ports/1/gids/0 /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/0`)
		if err != nil {
			t.Fatal(err)
		}
		if err := res.Err(); err != nil {
			t.Fatalf("%s: %v", g.Name(), err)
		}
		out := string(res.Stdout)
		ip4 := g.IP().As4()
		mapped := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", ip4[0], ip4[1], ip4[2], ip4[3])
		for _, want := range []string{"state ACTIVE", mapped, "RoCE v2", "fe80:0000:0000:0000:"} {
			if !strings.Contains(out, want) {
				t.Errorf("%s: %q not in\n%s", g.Name(), want, out)
			}
		}
	}

	h, err := p.LAN.AddHost(ctx, rxeguest.HostConfig{IP: mustPrefix(t, "192.0.2.100/24")})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	_, hostPing := exec.LookPath("ping")
	for _, g := range []*rxeguest.Guest{p.A, p.B} {
		if hostPing == nil {
			if out, err := h.NS.Exec(ctx, "ping", "-c", "1", "-W", "5", g.IP().String()); err != nil {
				t.Errorf("host -> %s: %v\n%s", g.Name(), err, out)
			}
		}
		res, err := g.Run(ctx, "ping -c 1 -W 5 192.0.2.100")
		if err == nil {
			err = res.Err()
		}
		if err != nil {
			t.Errorf("%s -> host: %v", g.Name(), err)
		}
	}
}

// TestRCPingpong runs ibv_rc_pingpong between the two rxe guests.
func TestRCPingpong(t *testing.T) {
	p := sharedPair(t)
	ctx := testContext(t, 3*time.Minute)
	const port = 18530
	cmd := fmt.Sprintf("ibv_rc_pingpong -d rxe0 -g 1 -p %d -n 20", port)
	start := time.Now()
	srv, cli, err := runToolPair(ctx, p.A, p.B, port, cmd, cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("ibv_rc_pingpong took %v", time.Since(start).Round(time.Millisecond))
	for side, r := range map[string]rxeguest.Result{"server": srv, "client": cli} {
		// ibv_rc_pingpong reports on stdout, e.g.
		// "81920 bytes in 0.05 seconds = 13.10 Mbit/sec" and
		// "20 iters in 0.05 seconds = 2.50 usec/iter".
		out := string(r.Stdout) + string(r.Stderr)
		if !strings.Contains(out, "bytes in") || !strings.Contains(out, "20 iters in") {
			t.Errorf("%s did not report success:\n%s", side, out)
		}
		t.Logf("%s: %s", side, strings.TrimSpace(out))
	}
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// guardTempDirMode watches the mode of the temporary directory (/tmp)
// while the package's tests run: the unprivileged tests need it as the
// system keeps it (1777). A change is put back at once and said on
// standard error with the time, so that the test which made it can be
// found in the log and later tests do not fail for it. The returned func
// stops the watch.
func guardTempDirMode() (stop func()) {
	dir := os.TempDir()
	st, err := os.Stat(dir)
	if err != nil {
		return func() {}
	}
	want := st.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetuid | os.ModeSetgid)
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			st, err := os.Stat(dir)
			if err != nil {
				continue
			}
			if got := st.Mode() & (os.ModePerm | os.ModeSticky | os.ModeSetuid | os.ModeSetgid); got != want {
				fmt.Fprintf(os.Stderr, "tests/netns: %s changed its mode from %v to %v at %s, during the test running then; put back\n",
					dir, want, got, time.Now().Format("15:04:05.000"))
				os.Chmod(dir, want)
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

// runSelects reports whether this run's -test.run and -test.skip let the
// top-level test name run (go test matches their first '/'-separated
// part against top-level names).
func runSelects(name string) bool {
	matches := func(flagName string) (set, ok bool) {
		f := flag.Lookup(flagName)
		if f == nil || f.Value.String() == "" {
			return false, false
		}
		re, err := regexp.Compile(strings.SplitN(f.Value.String(), "/", 2)[0])
		return true, err == nil && re.MatchString(name)
	}
	if set, ok := matches("test.run"); set && !ok {
		return false
	}
	if _, skip := matches("test.skip"); skip {
		return false
	}
	return true
}

func TestRunSelects(t *testing.T) {
	for _, f := range []string{"test.run", "test.skip"} {
		old := flag.Lookup(f).Value.String()
		t.Cleanup(func() { flag.Set(f, old) })
	}
	for _, c := range []struct {
		run, skip string
		want      bool
	}{
		{"", "", true},
		{"TestInteropRxe", "", false},
		{"TestInteropRxe|TestSroceInterop", "", true},
		{"TestSroce/shim", "", true},
		{"Interop", "", true},
		{"", "TestSroceInterop", false},
		{"Interop", "Sroce", false},
	} {
		flag.Set("test.run", c.run)
		flag.Set("test.skip", c.skip)
		if got := runSelects("TestSroceInterop"); got != c.want {
			t.Errorf("-run %q -skip %q: runSelects(TestSroceInterop) = %v, want %v", c.run, c.skip, got, c.want)
		}
	}
}
