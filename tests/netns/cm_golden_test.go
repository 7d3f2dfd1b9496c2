package netns

// The golden captures of package cm: rdma_rxe's own RDMA CM exchanges
// between the two guests (rping, ucmatose, udaddy's SIDR, perftest with
// -R), captured on guest A's tap. Package cm's unit tests decode every CM
// MAD in them; dissect's golden outputs come from them too.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
)

// cmGoldenEnv must be set for TestCMGoldenCaptures to run: it boots the
// guests and runs the tools (minutes under TCG). With -update it rewrites
// the files in cmGoldenDir.
const cmGoldenEnv = "SROCE_CM_GOLDEN"

// cmGoldenDir is where -update writes the CM captures, relative to this
// package.
const cmGoldenDir = "../../cm/testdata"

// A cmCapture is one golden CM capture: the server runs on guest A, the
// client on guest B; port is the RDMA CM port the server listens on. A
// capture without a server is a client's connection to a port nobody
// listens on: the client must fail.
type cmCapture struct {
	file           string
	port           int
	server, client string
	// want are strings the client's or the server's output (stdout, or
	// for a rejected client stderr too) must show.
	want []string
	// pings, if not zero, is the number of pings both rping sides must
	// print (checkRpingOutput).
	pings int
	// stall, if not zero, is how long the server is stopped (SIGSTOP)
	// from the client's start: its kernel CM holds the connection
	// request, and answers the client's second REQ with an MRA.
	stall time.Duration
	// prep and after, if not empty, run on guest A before the client
	// starts and after the run.
	prep, after string
}

var cmCaptures = []cmCapture{
	{
		file:   "rxe-rping.pcap",
		port:   7174,
		server: "rping -s -a 192.0.2.1 -p 7174 -C 3 -v",
		client: "rping -c -a 192.0.2.1 -p 7174 -C 3 -v",
		want:   []string{"ping data: rdma-ping-0: ", "ping data: rdma-ping-2: "},
		pings:  3,
	},
	{
		file:   "rxe-rping-mra.pcap",
		port:   7176,
		server: "rping -s -a 192.0.2.1 -p 7176 -C 1 -v",
		client: "rping -c -a 192.0.2.1 -p 7176 -C 1 -v",
		want:   []string{"ping data: rdma-ping-0: "},
		pings:  1,
		stall:  9 * time.Second,
	},
	{
		// Guest A's kernel CM (ib_cm, loaded with rdma_ucm) rejects the
		// REQ: invalid service ID.
		file:   "rxe-rping-rej.pcap",
		port:   7199,
		prep:   "modprobe rdma_ucm",
		client: "rping -c -a 192.0.2.1 -p 7199 -C 1 -v",
		want:   []string{"RDMA_CM_EVENT_REJECTED, error 8"},
	},
	{
		file:   "rxe-ucmatose.pcap",
		port:   7471,
		server: "ucmatose -b 192.0.2.1 -p 7471 -c 1 -C 2 -S 64",
		client: "ucmatose -s 192.0.2.1 -p 7471 -c 1 -C 2 -S 64",
		want:   []string{"test complete"},
	},
	{
		file:   "rxe-udaddy.pcap",
		port:   7174, // udaddy's fixed port (its -p is the port space)
		server: "udaddy -b 192.0.2.1 -c 1 -C 2 -S 64",
		client: "udaddy -s 192.0.2.1 -c 1 -C 2 -S 64",
		want:   []string{"test complete"},
	},
	{
		file:   "rxe-perftest-R.pcap",
		port:   18620,
		server: "ib_write_bw -d rxe0 -R -s 64 -n 5 -p 18620",
		client: "ib_write_bw -d rxe0 -R -s 64 -n 5 -p 18620 192.0.2.1",
		want:   []string{"#bytes"},
	},
	{
		// Without ib_cm on guest A (nothing there has used the RDMA CM
		// since boot, or it was unloaded), nobody answers the REQ: the
		// client sends it 16 times, about 6.4 s apart, and gives up.
		file:   "rxe-rping-unanswered.pcap",
		port:   7199,
		prep:   "modprobe -r rdma_ucm rdma_cm ib_cm",
		after:  "modprobe rdma_ucm",
		client: "rping -c -a 192.0.2.1 -p 7199 -C 1 -v",
		want:   []string{"RDMA_CM_EVENT_UNREACHABLE"},
	},
}

// TestCMGoldenCaptures runs each RDMA CM tool pair between the two rxe
// guests under tcpdump and checks that each side exited 0 and printed its
// result; with -update it writes the captures to cmGoldenDir.
func TestCMGoldenCaptures(t *testing.T) {
	if os.Getenv(cmGoldenEnv) == "" {
		t.Skipf("skipping: set %s=1 to capture rxe's RDMA CM exchanges (and -update to rewrite %s)", cmGoldenEnv, cmGoldenDir)
	}
	p := sharedPair(t)
	ctx := testContext(t, 10*time.Minute)
	dir := t.TempDir()
	for _, c := range cmCaptures {
		t.Run(strings.TrimSuffix(c.file, ".pcap"), func(t *testing.T) {
			path := filepath.Join(dir, c.file)
			var err error
			for try := 1; ; try++ {
				err = cmCaptureRun(ctx, t, p, c, path)
				if !errors.Is(err, rxeguest.ErrIncomplete) || try == 3 {
					break
				}
				t.Logf("try %d: %v; again", try, err)
			}
			if keep := os.Getenv("SROCE_CAPTURE_DIR"); keep != "" {
				if b, err := os.ReadFile(path); err == nil {
					os.WriteFile(filepath.Join(keep, c.file), b, 0o644)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: %d bytes", c.file, len(b))
			if *update {
				if err := os.WriteFile(filepath.Join(cmGoldenDir, c.file), b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// cmCaptureRun runs c once under tcpdump on guest A's tap into path.
func cmCaptureRun(ctx context.Context, t *testing.T, p *rxeguest.Pair, c cmCapture, path string) error {
	tc, err := rxeguest.StartCapture(ctx, p.LAN.NS, p.A.Tap(), path, fmt.Sprintf("udp port %d", roceUDPPort))
	if err != nil {
		return err
	}
	if c.after != "" {
		defer func() {
			actx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			p.A.Run(actx, c.after)
		}()
	}
	if c.prep != "" {
		if res, err := p.A.Run(ctx, c.prep); err != nil || res.ExitCode != 0 {
			return fmt.Errorf("%s on %s: %v %v\n%s", c.prep, p.A.Name(), err, res.Err(), res.Stderr)
		}
	}
	var srv, cli rxeguest.Result
	if c.server != "" {
		srv, cli, err = runCMPair(ctx, p.A, p.B, c.port, c.server, c.client, c.stall)
	} else if cli, err = p.B.Run(ctx, c.client); err == nil && cli.ExitCode == 0 {
		err = fmt.Errorf("client %q connected to port %d, where nobody listens:\n%s", c.client, c.port, cli.Stdout)
	}
	if serr := tc.Stop(); err == nil {
		err = serr
	}
	if err != nil {
		return err
	}
	out := string(srv.Stdout) + string(cli.Stdout)
	if c.server == "" {
		out += string(cli.Stderr)
	}
	for _, w := range c.want {
		if !strings.Contains(out, w) {
			return fmt.Errorf("neither side printed %q\nserver: %s%s\nclient (exit %d): %s%s", w, srv.Stdout, srv.Stderr, cli.ExitCode, cli.Stdout, cli.Stderr)
		}
	}
	if c.pings > 0 {
		if p := checkRpingOutput(string(cli.Stdout), rpingClientPrefix, c.pings, rpingDefaultSize); p != "" {
			return fmt.Errorf("the rping client: %s:\n%s", p, cli.Stdout)
		}
		if p := checkRpingOutput(string(srv.Stdout), rpingServerPrefix, c.pings, rpingDefaultSize); p != "" {
			return fmt.Errorf("the rping server: %s:\n%s", p, srv.Stdout)
		}
	}
	t.Logf("server: %s", lastLines(srv.Stdout, 2))
	t.Logf("client: %s", lastLines(cli.Stdout, 2))
	t.Logf("tcpdump: %s", tc.Summary())
	return tc.Complete()
}

// runCMPair runs server on a and, once it listens on RDMA CM port port,
// client on b (the client's command line names the server's address
// itself); either failing is an error. With stall, the server is stopped
// for that long from the client's start. The pair must finish within
// toolPairTimeout.
func runCMPair(ctx context.Context, a, b *rxeguest.Guest, port int, server, client string, stall time.Duration) (srv, cli rxeguest.Result, err error) {
	ready := func(ctx context.Context, proc *rxeguest.Proc) error {
		if err := rxeguest.WaitCMListening(ctx, a, a.Name(), port, proc); err != nil || stall == 0 {
			return err
		}
		tool, _, _ := strings.Cut(server, " ")
		if res, err := a.Run(ctx, "pkill -STOP -x "+tool); err != nil || res.ExitCode != 0 {
			return fmt.Errorf("stopping %s: %v %v", tool, err, res.Err())
		}
		go func() {
			select {
			case <-time.After(stall):
			case <-ctx.Done():
			}
			cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			a.Run(cctx, "pkill -CONT -x "+tool)
		}()
		return nil
	}
	return runGuestPair(ctx, a, b, server, client, ready)
}
