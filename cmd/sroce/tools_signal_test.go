package main

// No silent hang: a tool blocked in any phase (waiting for a client,
// connecting, in the TCP exchange, waiting for completions) ends on
// SIGTERM with one sentence naming what it waited for and its QP's state,
// and exits 1; a server's wait for a client is bounded too.

import (
	"context"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/bth"
	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/tools/oob"
	"github.com/sroce/sroce/verbs"
)

// sigterm sends SIGTERM to this process, which runs the tool in-process.
// The test listens for the signal itself, so that it cannot kill the test
// binary, and returns once it has been delivered.
func sigterm(t *testing.T) {
	t.Helper()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM)
	defer signal.Stop(ch)
	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("SIGTERM was not delivered")
	}
}

// eventually waits up to 20 seconds for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		// wall clock: waits for a real process's output
		time.Sleep(5 * time.Millisecond)
	}
}

// wantInterrupted checks that r ended on the signal within a few seconds
// with status 1 and a last line matching re.
func wantInterrupted(t *testing.T, done <-chan testpair.Result, re string) {
	t.Helper()
	var r testpair.Result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the tool did not end within 10s of SIGTERM")
	}
	lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	if r.Code != exitProblem || !regexp.MustCompile(re).MatchString(last) {
		t.Errorf("want exit 1 and a last line matching %q, got %v", re, r)
	}
	t.Logf("%s", last)
}

// clientArgs returns the arguments of a client run of cmd against port.
func clientArgs(cmd string, port int, args ...string) []string {
	all := append([]string{cmd, "-d", "lo@" + pairs.Client.String(), "-p", strconv.Itoa(port)}, args...)
	return append(all, pairs.Server.String())
}

// qpRE matches the state of a QP in the given state.
func qpRE(state string) string {
	return `\(QP 0x[0-9a-f]{6} ` + state + `: \d+ packets unacknowledged, next PSN 0x[0-9a-f]+, expecting PSN 0x[0-9a-f]+; \d+ timeouts, \d+ packets retransmitted, \d+ NAKs sent, \d+ sent, \d+ received\)$`
}

func TestToolSignalWaitingForClient(t *testing.T) {
	t.Setenv(envStall, "60s")
	for _, tc := range []struct{ cmd, state string }{
		{"write-bw", `\(no QP yet\)$`},
		{"send-lat", `\(no QP yet\)$`},
		{"rc-pingpong", qpRE("INIT")},
		{"ud-pingpong", qpRE("INIT")},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			port, done := startServer(t, tc.cmd)
			sigterm(t)
			wantInterrupted(t, done, `^sroce `+tc.cmd+`: interrupted by SIGTERM while waiting for a client to connect on TCP port `+strconv.Itoa(port)+` `+tc.state)
		})
	}
}

func TestToolSignalInExchange(t *testing.T) {
	t.Setenv(envStep, "60s")
	for _, tc := range []struct{ cmd, msg, state string }{
		{"read-bw", "version message", `\(no QP yet\)$`},
		{"rc-pingpong", "address message", qpRE("INIT")},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			connected := make(chan struct{}, 1)
			port := fakeListener(t, func(nc net.Conn) {
				connected <- struct{}{}
				// wall clock: a peer on a real TCP socket that never answers
				time.Sleep(30 * time.Second)
				nc.Close()
			})
			_, done := pairs.Start(clientArgs(tc.cmd, port))
			select {
			case <-connected:
			case r := <-done:
				t.Fatalf("ended before connecting: %v", r)
			}
			// wall clock: lets a real process block in its exchange before the signal
			time.Sleep(50 * time.Millisecond)
			sigterm(t)
			wantInterrupted(t, done, `^sroce `+tc.cmd+`: interrupted by SIGTERM while in the TCP exchange with `+
				regexp.QuoteMeta(net.JoinHostPort(pairs.Server.String(), strconv.Itoa(port)))+`, exchanging the `+tc.msg+` `+tc.state)
		})
	}
}

func TestToolSignalWaitingForCompletions(t *testing.T) {
	t.Setenv(envStall, "60s")
	t.Run("write-bw", func(t *testing.T) {
		port := newFakeWriteBWServer(t, func(*oob.KeyMsg) {}, false)
		out, done := pairs.Start(clientArgs("write-bw", port, "-n", "20", "-s", "4096"))
		eventually(t, "the BW table header", func() bool { return strings.Contains(out.String(), "#bytes") })
		// wall clock: lets a real process get into its run before the signal
		time.Sleep(200 * time.Millisecond)
		sigterm(t)
		wantInterrupted(t, done, `^sroce write-bw: interrupted by SIGTERM while waiting for a completion after 0 of 20 completions `+qpRE("RTS"))
	})
	t.Run("rc-pingpong", func(t *testing.T) {
		ln, err := oob.Listen(context.Background(), net.JoinHostPort(pairs.Server.String(), "0"))
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		exchanged := make(chan struct{})
		gid := bth.GIDFromAddr(pairs.Server)
		go func() {
			oob.ServePingpong(context.Background(), ln, oob.Timeouts{Step: 5 * time.Second},
				oob.Dest{QPN: 0x11, PSN: 0x1234, GID: gid}, nil)
			close(exchanged)
		}()
		_, done := pairs.Start(clientArgs("rc-pingpong", port, "-n", "5"))
		select {
		case <-exchanged:
		case r := <-done:
			t.Fatalf("ended before the exchange was over: %v", r)
		}
		// wall clock: lets a real process block before the signal
		time.Sleep(200 * time.Millisecond)
		sigterm(t)
		wantInterrupted(t, done, `^sroce rc-pingpong: interrupted by SIGTERM while waiting for a completion after 0 of 5 exchanges `+qpRE("RTS"))
	})
}

// TestToolAcceptTimeout: a server waits for its client up to
// SROCE_ACCEPT_TIMEOUT, then says so.
func TestToolAcceptTimeout(t *testing.T) {
	t.Setenv(envAccept, "300ms")
	for _, tc := range []struct{ cmd, state string }{
		{"atomic-bw", `\(no QP yet\)$`},
		{"rc-pingpong", qpRE("INIT")},
	} {
		t.Run(tc.cmd, func(t *testing.T) {
			start := time.Now()
			_, done := startServer(t, tc.cmd)
			r := waitTool(t, done)
			lines := strings.Split(strings.TrimSuffix(r.Stderr, "\n"), "\n")
			last := lines[len(lines)-1]
			re := `^sroce ` + tc.cmd + `: exchange timed out after 300ms waiting for a client to connect ` + tc.state
			if r.Code != exitProblem || !regexp.MustCompile(re).MatchString(last) {
				t.Errorf("want exit 1 and %q, got %v", re, r)
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("took %v", d)
			}
		})
	}
}

// TestToolDurationServerWithoutMessages: a send-lat -D server whose client
// never sends waited for the first message without any bound (the -D
// clock starts with it); the stall limit bounds that wait.
func TestToolDurationServerWithoutMessages(t *testing.T) {
	t.Setenv(envStall, "1s")
	port, done := startServer(t, "send-lat", "-D", "4")
	ctx := context.Background()
	c, err := oob.DialPerftest(ctx, net.JoinHostPort(pairs.Server.String(), strconv.Itoa(port)), oob.Timeouts{Step: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	go func() {
		if _, err := c.Prologue(ctx, oob.LocalSysData(), verbs.MTU1024); err != nil {
			return
		}
		gid := bth.GIDFromAddr(netip.MustParseAddr(pairs.Client.String()))
		key := oob.KeyMsg{OutReads: 1, QPN: 0x77, PSN: 0x1000, RKey: 0x1234, VAddr: 0x10000, GID: gid}
		c.Run(ctx, oob.Flow{Test: oob.SendLat, Sizes: []uint64{2}}, []oob.KeyMsg{key}, oob.Hooks{
			Connect: func([]oob.KeyMsg) error { return nil },
			// wall clock: a run that outlasts the signal the test sends
			Run: func(uint64) (oob.BWReport, error) { time.Sleep(20 * time.Second); return oob.BWReport{}, nil },
		})
	}()
	r := waitTool(t, done)
	wantFailure(t, "silent -D client", r, "no completion for 1s after 0 iterations: the peer stopped answering (QP 0x")
}
