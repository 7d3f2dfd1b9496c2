package netns

// Helpers of the tool tests (tools_*_test.go, interop_*_test.go): the sroce
// binary built once per test, run inside a network namespace with its
// output collected, and the checks both sides of a tool pair must pass.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/interop"
)

// toolOutcome is how one side of a tool pair ended.
type toolOutcome = interop.Outcome

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
	// A program that forks (fio's jobs, mpirun's daemons) leaves its
	// output open in children a kill does not reach: the wait for that
	// output is bounded too.
	if cmd.WaitDelay == 0 {
		cmd.WaitDelay = 5 * time.Second
	}
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
	o := toolOutcome{Exit: -1, Stdout: p.stdout.String(), Stderr: p.stderr.String()}
	if p.cmd.ProcessState != nil && p.cmd.ProcessState.Exited() {
		o.Exit = p.cmd.ProcessState.ExitCode()
	}
	return o
}

// sroceEnv is the environment of sroce processes in the tests: the link
// mode, and stall and exchange limits that fit slow guests.
func sroceEnv(link string) []string {
	return append(os.Environ(), "SROCE_LINK="+link, "SROCE_STALL_TIMEOUT=90s", "SROCE_EXCHANGE_TIMEOUT=90s")
}

// Result lines of the tools (package interop's).
var (
	bwRow  = interop.BWRow
	latRow = interop.LatRow
)

// sideProblem says what is wrong with one side of a run of cmd (server
// or client), or returns "".
var sideProblem = interop.SideProblem

// checkSides checks that both sides of a run of the tool sroce calls name
// ran to their result; label names the run in the messages. With quiet, a
// side that wrote to standard error fails too, except for the READ and
// atomic tools, which print perftest's notes there.
func checkSides(t testing.TB, name, label string, srv, cli toolOutcome, quiet bool) {
	t.Helper()
	for _, side := range []struct {
		name   string
		o      toolOutcome
		server bool
	}{{"server", srv, true}, {"client", cli, false}} {
		if problem := sideProblem(name, side.o, side.server); problem != "" {
			t.Errorf("%s %s %s:\n%v", label, side.name, problem, side.o)
			continue
		}
		if quiet && side.o.Stderr != "" && !strings.Contains(name, "read") && !strings.Contains(name, "atomic") {
			t.Errorf("%s %s wrote to stderr: %q", label, side.name, side.o.Stderr)
		}
	}
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
