package shim

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// systemLib and systemCMLib are the system's libibverbs and librdmacm,
// when installed.
const (
	systemLib   = "/usr/lib/x86_64-linux-gnu/libibverbs.so.1"
	systemCMLib = "/usr/lib/x86_64-linux-gnu/librdmacm.so.1"
)

// TestHeadersAreTheProjectsOwn checks that the library is built with the
// protocol and ring headers of the daemon and the ring package themselves.
func TestHeadersAreTheProjectsOwn(t *testing.T) {
	dir := t.TempDir()
	if err := WriteSources(dir); err != nil {
		t.Fatal(err)
	}
	for name, orig := range map[string]string{
		"sroce_ctl.h":  "../daemon/ctl/sroce_ctl.h",
		"sroce_ring.h": "../ring/sroce_ring.h",
	} {
		a, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(orig)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(a, b) {
			t.Errorf("the build's %s differs from %s", name, orig[3:])
		}
	}
}

var built struct {
	dir, out string
	err      error
}

// buildOnce compiles the library once per test binary.
func buildOnce(t *testing.T) string {
	t.Helper()
	if built.dir == "" && built.err == nil {
		if _, err := Compiler(); err != nil {
			t.Skipf("skipping: %v", err)
		}
		dir, err := os.MkdirTemp("", "sroce-shim-test-")
		if err != nil {
			t.Fatal(err)
		}
		built.dir = dir
		built.out, built.err = Compile(context.Background(), dir)
	}
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.dir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// TestBuildIsWarningFree compiles the library with -Wall -Wextra and
// expects the compiler to say nothing.
func TestBuildIsWarningFree(t *testing.T) {
	dir := buildOnce(t)
	if built.out != "" {
		t.Errorf("the compiler printed:\n%s", built.out)
	}
	if _, err := os.Stat(filepath.Join(dir, LibName)); err != nil {
		t.Fatal(err)
	}
}

// dynamicSymbols lists "version name type" for every symbol a shared
// library defines, as objdump -T shows it (compatibility versions in
// parentheses).
func dynamicSymbols(t *testing.T, lib string) []string {
	t.Helper()
	out, err := exec.Command("objdump", "-T", lib).Output()
	if err != nil {
		t.Fatalf("objdump -T %s: %v", lib, err)
	}
	var syms []string
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		// address flags... section size version name
		if len(f) < 6 || strings.Contains(line, "*UND*") || !strings.Contains(line, " D") {
			continue
		}
		typ := ""
		for _, x := range f[1 : len(f)-3] {
			if x == "DF" || x == "DO" {
				typ = x
			}
		}
		if typ == "" {
			continue
		}
		syms = append(syms, f[len(f)-2]+" "+f[len(f)-1]+" "+typ)
	}
	sort.Strings(syms)
	return syms
}

// TestSymbolsMatchSystemLibrary compares every exported symbol, its version
// and whether it is a function or an object with the system's libibverbs.
func TestSymbolsMatchSystemLibrary(t *testing.T) {
	compareSymbols(t, systemLib, LibName, 150, "libibverbs1")
}

// TestCMSymbolsMatchSystemLibrary does the same for librdmacm.
func TestCMSymbolsMatchSystemLibrary(t *testing.T) {
	compareSymbols(t, systemCMLib, CMLibName, 60, "librdmacm1")
}

// compareSymbols checks that the built library exports exactly what the
// system's library does (symbols, versions, kinds).
func compareSymbols(t *testing.T, system, name string, atLeast int, pkg string) {
	if _, err := os.Stat(system); err != nil {
		t.Skipf("skipping: %s is missing (apt-get install %s): nothing to compare with", system, pkg)
	}
	if _, err := exec.LookPath("objdump"); err != nil {
		t.Skip("skipping: objdump is missing (apt-get install binutils)")
	}
	dir := buildOnce(t)
	want := dynamicSymbols(t, system)
	got := dynamicSymbols(t, filepath.Join(dir, name))
	if len(want) < atLeast {
		t.Fatalf("the system library shows only %d symbols: objdump's output was not understood", len(want))
	}
	wantSet := map[string]bool{}
	for _, s := range want {
		wantSet[s] = true
	}
	gotSet := map[string]bool{}
	for _, s := range got {
		gotSet[s] = true
		if !wantSet[s] {
			t.Errorf("exported but not by the system library: %s", s)
		}
	}
	for _, s := range want {
		if !gotSet[s] {
			t.Errorf("missing: %s", s)
		}
	}
	t.Logf("%d symbols and version nodes, the same as %s", len(got), system)
}

// runWithLib runs a program with the built library first on its library path
// and no daemon to reach.
func runWithLib(t *testing.T, prog string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	path, err := exec.LookPath(prog)
	if err != nil {
		t.Skipf("skipping: %s is not installed (apt-get install ibverbs-utils perftest)", prog)
	}
	dir := buildOnce(t)
	cmd := exec.Command(path, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "SROCE_SOCKET="+filepath.Join(t.TempDir(), "none.sock"))
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err = cmd.Run()
	code = 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("running %s: %v", prog, err)
		}
		code = ee.ExitCode()
	}
	return o.String(), e.String(), code
}

// TestRealToolsStartWithoutDaemon runs rdma-core's and perftest's own
// binaries on the library with no daemon: they load (perftest's binaries
// also load libmlx5 and libefa, which need the private ABI node), find no
// device, and the library says why in one line.
func TestRealToolsStartWithoutDaemon(t *testing.T) {
	t.Run("ibv_devices", func(t *testing.T) {
		out, errOut, code := runWithLib(t, "ibv_devices")
		if code != 0 {
			t.Fatalf("ibv_devices exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
		if !strings.Contains(out, "node GUID") {
			t.Errorf("ibv_devices printed no table header: %q", out)
		}
		lines := strings.Split(strings.TrimSpace(errOut), "\n")
		if len(lines) != 1 || !strings.Contains(lines[0], "no sroce daemon at") {
			t.Errorf("want one line saying there is no daemon, got %q", errOut)
		}
	})
	t.Run("ib_write_bw -h", func(t *testing.T) {
		// perftest's -h prints the usage and exits 1, with the system library too.
		out, errOut, code := runWithLib(t, "ib_write_bw", "-h")
		if code > 1 || !strings.Contains(out, "Usage:") || strings.Contains(errOut, "symbol lookup error") {
			t.Fatalf("ib_write_bw -h exited %d\nstdout: %s\nstderr: %s", code, out, errOut)
		}
	})
	t.Run("ib_write_bw", func(t *testing.T) {
		_, errOut, code := runWithLib(t, "ib_write_bw")
		if code == 0 {
			t.Fatal("ib_write_bw found a device with no daemon")
		}
		if !strings.Contains(errOut, "no sroce daemon at") || strings.Contains(errOut, "symbol lookup error") {
			t.Errorf("stderr: %s", errOut)
		}
		if code > 128 || code < 0 {
			t.Errorf("ib_write_bw died of a signal (status %d)", code)
		}
	})
	t.Run("ibv_devinfo", func(t *testing.T) {
		out, errOut, code := runWithLib(t, "ibv_devinfo")
		if code < 0 || code > 255 || strings.Contains(errOut, "symbol lookup error") {
			t.Fatalf("ibv_devinfo exited %d: %s", code, errOut)
		}
		if !strings.Contains(out+errOut, "No IB devices found") {
			t.Errorf("ibv_devinfo: stdout %q stderr %q", out, errOut)
		}
	})
}

// TestLibBuildsOnceIntoTheCache checks the cache: the first call builds, the
// second finds the same directory, and no build directory is left behind.
func TestLibBuildsOnceIntoTheCache(t *testing.T) {
	if _, err := Compiler(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	cache := t.TempDir()
	dir, err := LibIn(context.Background(), cache)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, LibName))
	if err != nil {
		t.Fatal(err)
	}
	dir2, err := LibIn(context.Background(), cache)
	if err != nil || dir2 != dir {
		t.Fatalf("second call: %q, %v; want %q", dir2, err, dir)
	}
	st2, _ := os.Stat(filepath.Join(dir, LibName))
	if !st2.ModTime().Equal(st.ModTime()) {
		t.Error("the library was built again")
	}
	entries, _ := os.ReadDir(cache)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("cache holds %v, want only the library's directory", names)
	}
	key, _ := Hash()
	if filepath.Base(dir) != "libibverbs-"+key {
		t.Errorf("directory %s is not keyed by the sources' hash %s", dir, key)
	}
}

// TestCompilerMissing checks the error when no compiler can be found.
func TestCompilerMissing(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	t.Setenv("CC", "")
	_, err := Compiler()
	if err == nil || !strings.Contains(err.Error(), "no C compiler found") || !strings.Contains(err.Error(), "apt-get install gcc") {
		t.Fatalf("err = %v", err)
	}
}

// TestMemoryRemapping runs testdata/mr_test.c, compiled with the library's
// sources: what ibv_reg_mr does to the program's memory, without a daemon.
func TestMemoryRemapping(t *testing.T) {
	cc, err := Compiler()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir := t.TempDir()
	if err := WriteSources(dir); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"mr_test.c", "check.h"} {
		src, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	names, _ := filepath.Glob(filepath.Join(dir, "*.c"))
	args := append([]string{"-O1", "-Wall", "-DSROCE_NO_SYMVER", "-o", filepath.Join(dir, "mr_test")}, names...)
	if out, err := exec.Command(cc, append(args, "-lpthread")...).CombinedOutput(); err != nil {
		t.Fatalf("compiling mr_test.c: %v\n%s", err, out)
	}
	out, err := exec.Command(filepath.Join(dir, "mr_test")).CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("mr_test: %v", err)
	}
	if n := strings.Count(string(out), "ok "); n != 10 {
		t.Fatalf("%d checks passed, want 10", n)
	}
}

// TestInstalledMatchesOnlyItsSources checks the installed libraries'
// key: the same sources match, other sources are refused with a sentence
// naming the directory, and no key means no installed libraries.
func TestInstalledMatchesOnlyItsSources(t *testing.T) {
	dir := t.TempDir()
	if ok, err := installedMatches(dir); ok || err != nil {
		t.Fatalf("empty directory: %v, %v; want false, nil", ok, err)
	}
	key, err := Hash()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range Libraries() {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, KeyFile), []byte(key+"\n"), 0o644)
	if ok, err := installedMatches(dir); !ok || err != nil {
		t.Fatalf("matching key: %v, %v; want true", ok, err)
	}
	os.WriteFile(filepath.Join(dir, KeyFile), []byte("0123456789abcdef\n"), 0o644)
	if ok, err := installedMatches(dir); ok || err == nil || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "other sources") {
		t.Fatalf("other key: %v, %v; want false and a sentence naming %s", ok, err, dir)
	}
	if got := InstalledDir("/usr/bin/sroce"); got != "/usr/lib/"+Multiarch()+"/sroce" {
		t.Errorf("InstalledDir(/usr/bin/sroce) = %s", got)
	}
}
