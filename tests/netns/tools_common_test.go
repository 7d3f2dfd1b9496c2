package netns

// Helpers of the tool tests (tools_*_test.go, interop_*_test.go): the sroce
// binary built once per test, run inside a network namespace with its
// output collected, and the checks both sides of a tool pair must pass.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/testpair"
)

// buildSroce builds cmd/sroce into a temporary directory of t and returns
// the binary's path.
func buildSroce(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot find the source directory")
	}
	root := filepath.Join(filepath.Dir(file), "..", "..")
	bin := filepath.Join(t.TempDir(), "sroce")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sroce")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building sroce: %v\n%s", err, out)
	}
	return bin
}

// toolOutcome is how one side of a tool pair ended.
type toolOutcome struct {
	exit           int
	stdout, stderr string
}

// ok reports whether the side exited with status 0.
func (o toolOutcome) ok() bool { return o.exit == 0 }

// String shows the outcome in a test log.
func (o toolOutcome) String() string {
	return fmt.Sprintf("exit %d\n--- stdout:\n%s--- stderr:\n%s", o.exit, o.stdout, o.stderr)
}

// toolProc is a sroce process started in a namespace.
type toolProc struct {
	cmd            *exec.Cmd
	stdout, stderr testpair.Buffer
	done           chan struct{}
}

// startTool starts cmd with start (which forks it inside the namespace)
// and collects its output.
func startTool(t testing.TB, cmd *exec.Cmd, start func(*exec.Cmd) error) *toolProc {
	t.Helper()
	p := &toolProc{cmd: cmd, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = &p.stdout, &p.stderr
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	}
	if err := start(cmd); err != nil {
		t.Fatalf("starting %v: %v", cmd.Args, err)
	}
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// exited reports whether the process has ended.
func (p *toolProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process until ctx ends, then kills it, and returns
// its outcome (exit -1 when it was killed).
func (p *toolProc) wait(ctx context.Context) toolOutcome {
	select {
	case <-p.done:
	case <-ctx.Done():
		p.cmd.Process.Kill()
		<-p.done
	}
	o := toolOutcome{exit: -1, stdout: p.stdout.String(), stderr: p.stderr.String()}
	if p.cmd.ProcessState != nil && p.cmd.ProcessState.Exited() {
		o.exit = p.cmd.ProcessState.ExitCode()
	}
	return o
}

// sroceEnv is the environment of sroce processes in the tests: the link
// mode, and stall and exchange limits that fit slow guests.
func sroceEnv(link string) []string {
	return append(os.Environ(), "SROCE_LINK="+link, "SROCE_STALL_TIMEOUT=90s", "SROCE_EXCHANGE_TIMEOUT=90s")
}

// Result lines of the tools, which both sides must print.
var (
	pingpongResult = regexp.MustCompile(`(?m)^\d+ bytes in [\d.]+ seconds = [\d.]+ Mbit/sec\n\d+ iters in [\d.]+ seconds = [\d.]+ usec/iter$`)
	bwRow          = regexp.MustCompile(`(?m)^ \d+ +\d+ +[\d.]+ +[\d.]+\s+[\d.]+$`)
	latRow         = regexp.MustCompile(`(?m)^ \d+ +\d+ +([\d.]+|inf)\s+([\d.]+|inf)\s+([\d.]+|inf)\s+([\d.]+|inf)\s+(-?[\d.]+|-?nan|inf)\s+([\d.]+|inf)\s+([\d.]+|inf)\s*$`)
)

// toolKind says which result lines a tool prints.
type toolKind int

// Tool kinds.
const (
	kindPingpong toolKind = iota
	kindBW
	kindLat
)

// kindOf returns the kind of a sroce subcommand.
func kindOf(cmd string) toolKind {
	switch {
	case strings.HasSuffix(cmd, "pingpong"):
		return kindPingpong
	case strings.HasSuffix(cmd, "-bw"):
		return kindBW
	}
	return kindLat
}

// printsResult reports whether one side of a run of cmd printed its
// result: pingpong and BW tools print it on both sides, latency tools on
// the sides that measure (read-lat and atomic-lat only on the client).
func printsResult(cmd string, out string, server bool) (bool, string) {
	switch kindOf(cmd) {
	case kindPingpong:
		return pingpongResult.MatchString(out), "the pingpong result lines"
	case kindBW:
		return bwRow.MatchString(out), "a BW table row"
	}
	if server && (strings.HasPrefix(cmd, "read") || strings.HasPrefix(cmd, "atomic")) {
		return true, ""
	}
	return latRow.MatchString(out), "a latency table row"
}

// sideProblem says what is wrong with one side of a run of cmd (server
// or client), or returns "": it must exit 0 and print its result.
func sideProblem(cmd string, o toolOutcome, server bool) string {
	if !o.ok() {
		return fmt.Sprintf("exited with %d", o.exit)
	}
	if ok, what := printsResult(cmd, o.stdout, server); !ok {
		return "did not print " + what
	}
	return ""
}

// waitFor polls cond every 100ms until it holds or ctx ends.
func waitFor(ctx context.Context, what string, cond func() (bool, error)) error {
	for {
		ok, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
