package shim_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/shim"
)

// memAddr is the loopback address of the device of the memory-kind tests
// (not the other shim tests' testAddr, so that both can run at once).
const memAddr = "127.0.0.93"

// hugePages is how many huge pages the memory-kind tests ask the kernel
// for: two per kind at once, eight for the benchmark's 16 MiB.
const hugePages = 16

// reserveHugePages makes n huge pages of the default size available
// (vm.nr_hugepages, restored when the test ends) and reports whether it
// could; the reason when it could not.
func reserveHugePages(t testing.TB, n int) (bool, string) {
	const knob = "/proc/sys/vm/nr_hugepages"
	b, err := os.ReadFile(knob)
	if err != nil {
		return false, err.Error()
	}
	old, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	if old < n {
		if err := os.WriteFile(knob, []byte(strconv.Itoa(n)), 0o644); err != nil {
			return false, "setting " + knob + ": " + err.Error()
		}
		t.Cleanup(func() {
			if err := os.WriteFile(knob, []byte(strconv.Itoa(old)), 0o644); err != nil {
				t.Errorf("restoring %s to %d: %v", knob, old, err)
			}
		})
	}
	b, _ = os.ReadFile("/proc/meminfo")
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "HugePages_Free:" {
			if free, _ := strconv.Atoi(f[1]); free >= n {
				return true, ""
			} else {
				return false, "the kernel gave " + f[1] + " free huge pages of " + strconv.Itoa(n) + " asked"
			}
		}
	}
	return false, "no HugePages_Free in /proc/meminfo"
}

// memKindsProgram starts a daemon on memAddr and compiles
// testdata/memkinds_test.c against the library.
func memKindsProgram(t testing.TB) (*liveDaemon, string) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: the daemon maps a client's shared memory through /proc/PID/map_files, which needs root")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("skipping: /usr/include/infiniband/verbs.h is missing (apt-get install libibverbs-dev)")
	}
	d := startDaemonAt(t, memAddr)
	cc, _ := shim.Compiler()
	bin := filepath.Join(t.TempDir(), "memkinds_test")
	if out, err := exec.Command(cc, "-O1", "-Wall", "-o", bin, "testdata/memkinds_test.c",
		filepath.Join(d.lib, shim.LibName)).CombinedOutput(); err != nil {
		t.Fatalf("compiling testdata/memkinds_test.c: %v\n%s", err, out)
	}
	return d, bin
}

// TestMemoryKinds registers every kind of memory programs register (heap,
// anonymous private and shared, POSIX shm, memfd, files shared and
// private, hugetlb shared, private and memfd, a range mixing private and
// shared pages, one range twice, a re-registration between private and
// shared memory) and moves data through each with RDMA
// WRITE, READ and SEND between two QPs of the device, checking the bytes
// (testdata/memkinds_test.c), as root and as an unprivileged user; a
// non-dumpable process whose shared memory the daemon refuses; fork with
// and without fork safety; a registered file truncated under its MR; and
// perftest's ib_write_bw on its own kinds of buffers.
func TestMemoryKinds(t *testing.T) {
	huge, why := reserveHugePages(t, hugePages)
	d, bin := memKindsProgram(t)
	g := strconv.Itoa(d.gidIdx)
	run := func(t *testing.T, mode string, want int) string {
		o, e, err := d.run(t, 90*time.Second, bin, "sroce_lo", g, mode)
		t.Logf("%s%s", o, e)
		if err != nil {
			t.Fatalf("memkinds_test %s: %v", mode, err)
		}
		if n := strings.Count(o, "ok "); n != want {
			t.Fatalf("memkinds_test %s: %d checks passed, want %d", mode, n, want)
		}
		return o
	}
	t.Run("kinds", func(t *testing.T) {
		if !huge {
			t.Logf("hugetlb kinds skipped: %s", why)
			run(t, "kinds", 12)
			return
		}
		run(t, "kinds", 15)
	})
	// An unprivileged client: the daemon checks that the process it maps
	// from is the client's uid's and dumpable.
	for _, p := range []string{d.socket, d.lib, bin} {
		for dir := filepath.Dir(p); dir != os.TempDir() && dir != "/"; dir = filepath.Dir(dir) {
			os.Chmod(dir, 0o755)
		}
	}
	nobody := func(t *testing.T, mode string, want int) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "sroce_lo", g, mode)
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+d.lib, "SROCE_SOCKET="+d.socket)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		t.Logf("%s", out)
		if n := strings.Count(string(out), "ok "); err != nil || n != want {
			t.Fatalf("memkinds_test %s as uid 65534: %v, %d checks passed, want %d", mode, err, n, want)
		}
	}
	t.Run("kinds as nobody", func(t *testing.T) {
		if huge {
			nobody(t, "kinds", 15)
		} else {
			nobody(t, "kinds", 12)
		}
	})
	t.Run("undumpable as nobody", func(t *testing.T) { nobody(t, "undumpable", 2) })
	t.Run("fork", func(t *testing.T) { run(t, "fork", 2) })
	t.Run("forksafe", func(t *testing.T) {
		t.Setenv("RDMAV_FORK_SAFE", "1")
		run(t, "forksafe", 3)
	})
	t.Run("truncate", func(t *testing.T) { run(t, "truncate", 2) })

	// perftest's own buffers: posix_memalign (private), a file it maps
	// shared (--mmap), SysV shm in huge pages (--use_hugepages).
	dir := t.TempDir()
	for i, tc := range []struct {
		name string
		args func(side string) []string
		huge bool
	}{
		{"ib_write_bw", func(string) []string { return nil }, false},
		{"ib_write_bw --mmap", func(side string) []string {
			f := filepath.Join(dir, side)
			os.WriteFile(f, make([]byte, 1<<20), 0o600)
			return []string{"--mmap=" + f}
		}, false},
		{"ib_write_bw --use_hugepages", func(string) []string { return []string{"--use_hugepages"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.huge && !huge {
				t.Skipf("skipping: %s", why)
			}
			port := 19301 + i
			base := []string{"-d", "sroce_lo", "-x", g, "-s", "65536", "-n", "2000", "-p", strconv.Itoa(port)}
			srv, cli := d.pairOn(t, port, "ib_write_bw", append(base, tc.args("server")...), append(base, tc.args("client")...))
			m := bwLine.FindStringSubmatch(cli)
			if m == nil || !strings.Contains(srv, "#bytes") {
				t.Fatalf("no result table:\nserver:\n%s\nclient:\n%s", srv, cli)
			}
			t.Logf("%s: 64 KiB WRITEs, BW average %s MB/s", tc.name, m[1])
		})
	}
}

// bwLine is the result line of perftest's bandwidth tests: bytes,
// iterations, peak and average MB/s, message rate.
var bwLine = regexp.MustCompile(`(?m)^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)\s+[\d.]+\s*$`)

// BenchmarkMemoryKinds reports the time of ibv_reg_mr (the first, which
// remaps private memory, and a registration and deregistration of a range
// already prepared) and the throughput of RDMA WRITE through an MR, per
// memory kind and size (testdata/memkinds_test.c bench).
func BenchmarkMemoryKinds(b *testing.B) {
	reserveHugePages(b, hugePages)
	d, bin := memKindsProgram(b)
	for range b.N {
		o, e, err := d.run(b, 5*time.Minute, bin, "sroce_lo", strconv.Itoa(d.gidIdx), "bench")
		b.Logf("\n%s%s", o, e)
		if err != nil {
			b.Fatalf("memkinds_test bench: %v", err)
		}
	}
}

// TestMemoryKindsUnitCapabilities runs the sroce daemon with no more
// capabilities than its systemd unit's bounding set
// (daemon/systemd/sroce.service) and registers every kind of memory
// through it as an unprivileged user: the unit gives what reading a
// client's maps and opening its map_files takes.
func TestMemoryKindsUnitCapabilities(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root to run the daemon with a bounding set and the program as another user")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("skipping: setpriv is not installed (util-linux)")
	}
	if _, err := os.Stat("/usr/include/infiniband/verbs.h"); err != nil {
		t.Skip("skipping: /usr/include/infiniband/verbs.h is missing (apt-get install libibverbs-dev)")
	}
	unit, err := os.ReadFile("../daemon/systemd/sroce.service")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CapabilityBoundingSet=(.*)$`).FindSubmatch(unit)
	if m == nil {
		t.Fatal("the unit has no CapabilityBoundingSet")
	}
	bounding := "-all"
	for _, c := range strings.Fields(string(m[1])) {
		bounding += ",+" + strings.ToLower(strings.TrimPrefix(c, "CAP_"))
	}
	cc, err := shim.Compiler()
	if err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir, err := os.MkdirTemp("", "sroce-caps-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	sroce := filepath.Join(dir, "sroce")
	if out, err := exec.Command("go", "build", "-o", sroce, "../cmd/sroce").CombinedOutput(); err != nil {
		t.Fatalf("building sroce: %v\n%s", err, out)
	}
	lib, err := shim.LibIn(context.Background(), filepath.Join(dir, "lib"))
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "memkinds_test")
	if out, err := exec.Command(cc, "-O1", "-Wall", "-o", bin, "testdata/memkinds_test.c",
		filepath.Join(lib, shim.LibName)).CombinedOutput(); err != nil {
		t.Fatalf("compiling testdata/memkinds_test.c: %v\n%s", err, out)
	}
	filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error { return os.Chmod(p, 0o755) })

	socket := filepath.Join(dir, "sroce.sock")
	var log bytes.Buffer
	daemon := exec.Command(setpriv, "--bounding-set="+bounding, "--inh-caps=-all", sroce, "daemon",
		"-d", "lo@"+capsAddr, "--link", "udp", "-v", "--socket", socket)
	daemon.Stdout, daemon.Stderr = &log, &log
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		daemon.Process.Signal(syscall.SIGTERM)
		daemon.Wait()
		if t.Failed() {
			t.Logf("daemon (bounding set %s):\n%s", bounding, log.String())
		}
	})
	env := append(os.Environ(), "LD_LIBRARY_PATH="+lib, "SROCE_SOCKET="+socket)
	var info []byte
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		c := exec.Command("ibv_devinfo", "-v", "-d", "sroce_lo")
		c.Env = env
		if info, err = c.Output(); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon did not serve sroce_lo within 20 s: %v\n%s", err, info)
		}
	}
	g := regexp.MustCompile(`GID\[\s*(\d+)\]:\s+::ffff:` + regexp.QuoteMeta(capsAddr) + `, RoCE v2`).FindSubmatch(info)
	if g == nil {
		t.Fatalf("ibv_devinfo -v lists no RoCE v2 GID for %s:\n%s", capsAddr, info)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "sroce_lo", string(g[1]), "kinds")
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	// The hugetlb kinds skip where the machine has no huge pages.
	if n, skips := strings.Count(string(out), "ok "), strings.Count(string(out), "skip "); err != nil || n+skips != 15 || n < 12 {
		t.Fatalf("memkinds_test kinds as uid 65534 on a daemon with the unit's capabilities: %v, %d checks passed, %d skipped",
			err, n, skips)
	}
}

// capsAddr is the loopback address of TestMemoryKindsUnitCapabilities'
// daemon.
const capsAddr = "127.0.0.94"
