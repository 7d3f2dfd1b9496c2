package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sroce/sroce/shim"
)

func runCmd(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(append([]string{"run"}, args...), &env{Stdin: strings.NewReader(""), Stdout: &o, Stderr: &e})
	return o.String(), e.String(), code
}

func needCompiler(t *testing.T) {
	t.Helper()
	if _, err := shim.Compiler(); err != nil {
		t.Skipf("skipping: %v", err)
	}
}

// TestRunSetsTheEnvironment checks what the program gets: the library's
// directory first on LD_LIBRARY_PATH, what was there after it, and
// SROCE_SOCKET from --socket.
func TestRunSetsTheEnvironment(t *testing.T) {
	needCompiler(t)
	t.Setenv("LD_LIBRARY_PATH", "/opt/other")
	out, errOut, code := runCmd(t, "--socket", "/tmp/x.sock", "--", "sh", "-c", `echo "$LD_LIBRARY_PATH|$SROCE_SOCKET"`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	parts := strings.Split(strings.TrimSpace(out), "|")
	if len(parts) != 2 {
		t.Fatalf("output %q", out)
	}
	dirs := strings.Split(parts[0], ":")
	if len(dirs) != 2 || dirs[1] != "/opt/other" {
		t.Errorf("LD_LIBRARY_PATH = %q, want the library's directory then /opt/other", parts[0])
	}
	for _, lib := range []string{shim.LibName, shim.CMLibName} {
		if _, err := os.Stat(filepath.Join(dirs[0], lib)); err != nil {
			t.Errorf("no %s in %s: %v", lib, dirs[0], err)
		}
	}
	if parts[1] != "/tmp/x.sock" {
		t.Errorf("SROCE_SOCKET = %q", parts[1])
	}
	lib, _, code := runCmd(t, "--print-lib")
	if code != 0 || strings.TrimSpace(lib) != dirs[0] {
		t.Errorf("--print-lib printed %q (exit %d), the program got %q", lib, code, dirs[0])
	}
}

// TestRunPassesStatusAndStreams checks the exit status (also of a program
// killed by a signal), standard input and arguments that look like flags.
func TestRunPassesStatusAndStreams(t *testing.T) {
	needCompiler(t)
	if _, _, code := runCmd(t, "sh", "-c", "exit 3"); code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	if _, _, code := runCmd(t, "sh", "-c", "kill -TERM $$"); code != 128+15 {
		t.Errorf("a program killed by SIGTERM gave %d, want 143", code)
	}
	var o bytes.Buffer
	code := run([]string{"run", "--", "cat", "-n"}, &env{Stdin: strings.NewReader("hello\n"), Stdout: &o, Stderr: &bytes.Buffer{}})
	if code != 0 || !strings.Contains(o.String(), "1\thello") {
		t.Errorf("cat -n: exit %d, output %q", code, o.String())
	}
	if _, errOut, code := runCmd(t); code != exitUsage || !strings.Contains(errOut, "give the program to run") {
		t.Errorf("no program: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCmd(t, "no-such-program-sroce"); code != 127 || !strings.Contains(errOut, "no-such-program-sroce") {
		t.Errorf("missing program: exit %d, %q", code, errOut)
	}
}

// TestRunWithoutDaemon runs rdma-core's ibv_devices through sroce run with
// no daemon listening: it starts, lists nothing, and the library says why
// in one line.
func TestRunWithoutDaemon(t *testing.T) {
	needCompiler(t)
	if _, err := exec.LookPath("ibv_devices"); err != nil {
		t.Skip("skipping: ibv_devices is not installed (apt-get install ibverbs-utils)")
	}
	sock := filepath.Join(t.TempDir(), "none.sock")
	out, errOut, code := runCmd(t, "--socket", sock, "ibv_devices")
	if code != 0 || !strings.Contains(out, "node GUID") {
		t.Fatalf("ibv_devices: exit %d\n%s\n%s", code, out, errOut)
	}
	if lines := strings.Split(strings.TrimSpace(errOut), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "no sroce daemon at "+sock) {
		t.Errorf("stderr %q, want one line naming %s", errOut, sock)
	}
}
