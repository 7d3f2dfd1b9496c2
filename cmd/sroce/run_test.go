package main

import (
	"bytes"
	"context"
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
// directory first on LD_LIBRARY_PATH, what was there after it, the
// preloaded library first in LD_PRELOAD before what was there, and
// SROCE_SOCKET from --socket.
func TestRunSetsTheEnvironment(t *testing.T) {
	needCompiler(t)
	t.Setenv("LD_LIBRARY_PATH", "/opt/other")
	t.Setenv("LD_PRELOAD", "/opt/other.so") // ld.so warns that it is missing, and goes on
	out, errOut, code := runCmd(t, "--socket", "/tmp/x.sock", "--", "sh", "-c", `echo "$LD_LIBRARY_PATH|$SROCE_SOCKET|$LD_PRELOAD"`)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	parts := strings.Split(strings.TrimSpace(out), "|")
	if len(parts) != 3 {
		t.Fatalf("output %q", out)
	}
	dirs := strings.Split(parts[0], ":")
	if len(dirs) != 2 || dirs[1] != "/opt/other" {
		t.Errorf("LD_LIBRARY_PATH = %q, want the library's directory then /opt/other", parts[0])
	}
	for _, lib := range shim.Libraries() {
		if _, err := os.Stat(filepath.Join(dirs[0], lib)); err != nil {
			t.Errorf("no %s in %s: %v", lib, dirs[0], err)
		}
	}
	if want := filepath.Join(dirs[0], shim.PreloadName) + ":/opt/other.so"; parts[2] != want {
		t.Errorf("LD_PRELOAD = %q, want %q", parts[2], want)
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

// TestRunUsesInstalledLibraries lays out a package's files (bin/sroce and
// lib/<multiarch>/sroce with the libraries and their key) and runs the
// installed sroce with no C compiler on PATH: it uses the installed
// libraries, and a real program loads them (the library's own message
// about the missing daemon shows it did).
func TestRunUsesInstalledLibraries(t *testing.T) {
	needCompiler(t)
	ibvDevices, err := exec.LookPath("ibv_devices")
	if err != nil {
		t.Skip("skipping: ibv_devices is not installed (apt-get install ibverbs-utils)")
	}
	root := t.TempDir()
	libDir := shim.InstalledDir(filepath.Join(root, "usr", "bin", "sroce"))
	if err := os.MkdirAll(libDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := shim.Install(context.Background(), libDir); err != nil {
		t.Fatal(err)
	}
	sroce := filepath.Join(root, "usr", "bin", "sroce")
	if out, err := exec.Command("go", "build", "-o", sroce, ".").CombinedOutput(); err != nil {
		t.Fatalf("building sroce: %v\n%s", err, out)
	}
	// PATH holds ibv_devices and nothing else: no cc, no gcc.
	path := t.TempDir()
	if err := os.Symlink(ibvDevices, filepath.Join(path, "ibv_devices")); err != nil {
		t.Fatal(err)
	}
	runInstalled := func(args ...string) (string, string, error) {
		cmd := exec.Command(sroce, args...)
		cmd.Env = append(os.Environ(), "PATH="+path, "CC=", "SROCE_LIBDIR=",
			"XDG_CACHE_HOME="+t.TempDir(), "HOME="+t.TempDir())
		var o, e bytes.Buffer
		cmd.Stdout, cmd.Stderr = &o, &e
		err := cmd.Run()
		return o.String(), e.String(), err
	}
	out, errOut, err := runInstalled("run", "--print-lib")
	if err != nil || strings.TrimSpace(out) != libDir {
		t.Fatalf("run --print-lib without a compiler: %v, printed %q, stderr %q; want %s", err, out, errOut, libDir)
	}
	sock := filepath.Join(t.TempDir(), "none.sock")
	out, errOut, err = runInstalled("run", "--socket", sock, "--", "ibv_devices")
	if err != nil || !strings.Contains(out, "node GUID") || !strings.Contains(errOut, "no sroce daemon at "+sock) {
		t.Errorf("ibv_devices through the installed sroce: %v\nstdout: %s\nstderr: %s", err, out, errOut)
	}
}
