package shim_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRealFioOnTheDaemon runs Debian's fio with its rdma ioengine, server
// and client, through the built libraries against one daemon: RDMA WRITE,
// RDMA READ and SEND at iodepth 1 and 16. fio's client acknowledges
// completions rather than events and destroys its CQ before its QP; each
// run must move all its bytes, say nothing of unacknowledged events, and
// both sides end within the bound (on rxe they end at once; sroce once
// waited 30 s there).
func TestRealFioOnTheDaemon(t *testing.T) {
	if _, err := exec.LookPath("fio"); err != nil {
		t.Skip("skipping: fio is not installed (apt-get install fio)")
	}
	d := startDaemon(t)
	port := 19870
	for _, tc := range []struct {
		verb  string
		depth int
	}{{"write", 1}, {"write", 16}, {"read", 1}, {"read", 16}, {"send", 1}, {"send", 16}} {
		port++
		t.Run(fmt.Sprintf("%s-iodepth%d", tc.verb, tc.depth), func(t *testing.T) {
			// The engine's options (port, hostname, verb) after --ioengine.
			common := []string{"--ioengine=rdma", fmt.Sprintf("--port=%d", port), "--bs=64k",
				"--size=4m", fmt.Sprintf("--iodepth=%d", tc.depth)}
			// fio connects with rnr_retry_count 0: for SEND the server
			// posts a receive for every message (64) at once, as fio's
			// engine advises a RECV side deeper than the SEND side; with
			// fewer, a server descheduled while the client sends meets
			// an RNR NAK (on rxe too; tests/netns TestAppFio says more).
			serverArgs := append([]string{"--name=server", "--rw=read"}, common...)
			if tc.verb == "send" {
				serverArgs = append(serverArgs, "--iodepth=64")
			}
			srv := newWatch("waiting for connection")
			sc := make(chan error, 1)
			go func() {
				sc <- d.fio(10*time.Second, srv, serverArgs...)
			}()
			select {
			case <-srv.seen:
			case err := <-sc:
				t.Fatalf("fio's server ended before it listened: %v\n%s", err, srv)
			case <-time.After(10 * time.Second):
				t.Fatalf("fio's server did not say it waits for a connection within 10 s:\n%s", srv)
			}
			cli := newWatch("")
			start := time.Now()
			err := d.fio(10*time.Second, cli, append(append([]string{"--name=client", "--rw=write"}, common...),
				"--hostname="+testAddr, "--verb="+tc.verb)...)
			took := time.Since(start)
			serr := <-sc
			t.Logf("client (%v):\n%s\nserver:\n%s", took.Round(time.Millisecond), cli, srv)
			if err != nil || serr != nil {
				t.Fatalf("fio: client %v, server %v", err, serr)
			}
			if !strings.Contains(cli.String(), "io=4096KiB") {
				t.Fatal("the client did not report 4 MiB moved")
			}
			for _, out := range []string{cli.String(), srv.String()} {
				if strings.Contains(out, "not acknowledged") || strings.Contains(out, "err=") && !strings.Contains(out, "err= 0") {
					t.Fatal("fio or the library reported an error")
				}
			}
		})
	}
}

// fio runs fio on the library against the daemon, its output written to
// out, killed with its job processes (its process group) after timeout.
func (d *liveDaemon) fio(timeout time.Duration, out *watch, args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "fio", args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+d.lib, "SROCE_SOCKET="+d.socket)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	if ctx.Err() != nil {
		return fmt.Errorf("fio %s did not end within %v", strings.Join(args, " "), timeout)
	}
	return err
}
