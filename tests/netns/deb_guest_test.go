package netns

// The Debian package as an operator installs it: built with
// "go run ./dist/deb", installed with dpkg -i into an rxe guest (Debian
// bookworm, its C compiler removed), and used: the installed daemon on eth0 (rxe
// taken off that guest) and rdma-core's unmodified ib_write_bw through
// "sroce run" with no flag, against the real ib_write_bw on rxe in the
// other guest.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/rxeguest"
	"github.com/sroce/sroce/shim"
)

// buildDeb builds the package into dir and returns its path.
func buildDeb(ctx context.Context, dir string) (string, error) {
	cmd := exec.CommandContext(ctx, "go", "run", "./dist/deb", "-o", dir)
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	cmd.Dir = filepath.Join(wd, "..", "..")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go run ./dist/deb: %v\n%s", err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// unitStart runs the daemon in the guest as sroce@eth0.service would.
const unitStart = `set -e
unit=/usr/lib/systemd/system/sroce@.service
sed -i 's/^SROCE_DAEMON_FLAGS=.*/SROCE_DAEMON_FLAGS="--link xdp"/' /etc/default/sroce
. /etc/default/sroce
caps=$(sed -n 's/^AmbientCapabilities=//p' $unit | tr A-Z a-z | sed 's/cap_/+/g; s/ /,/g')
start=$(sed -n 's/^ExecStart=//p' $unit | sed 's/%[iI]/eth0/g')
test -n "$caps" && test -n "$start"
install -d -o nobody -g nogroup -m 0755 /run/sroce
mkdir -p /dev/infiniband
echo "starting as nobody with $caps: $start" >&2
eval "exec prlimit --memlock=unlimited:unlimited -- setpriv --reuid=nobody --regid=nogroup --clear-groups \
	--inh-caps=-all,$caps --ambient-caps=-all,$caps --bounding-set=-all,$caps --no-new-privs -- $start"
`

// TestDebInGuest installs the package in guest b and runs ib_write_bw
// through the installed sroce against rxe's in guest a.
func TestDebInGuest(t *testing.T) {
	laneParallel(t, 36*time.Second, needPair)
	if testing.Short() {
		t.Skip("skipping the package in an rxe guest in -short mode")
	}
	if os.Geteuid() != 0 {
		t.Skip("skipping: the package in an rxe guest needs root (namespaces, qemu)")
	}
	rxeguest.Skip(t)
	if _, err := shim.Compiler(); err != nil {
		t.Skipf("skipping: building the package compiles the drop-in libraries: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The package builds while the guests boot.
	type built struct {
		path string
		err  error
	}
	debc := make(chan built, 1)
	go func() {
		path, err := buildDeb(ctx, t.TempDir())
		debc <- built{path, err}
	}()
	_, a, b, share := bootSroceGuests(t)
	// b loses its compilers and rxe0 and gets the package: the next test
	// to take the shared guests gets it booted afresh.
	taintGuest(t, b, "installed the package and removed the C compilers and rxe0")
	var deb built
	select {
	case deb = <-debc:
	case <-ctx.Done():
		t.Fatal("waiting for the package to build: ", ctx.Err())
	}
	if deb.err != nil {
		t.Fatal(deb.err)
	}
	data, err := os.ReadFile(deb.path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(share, filepath.Base(deb.path)), data, 0o644); err != nil {
		t.Fatal(err)
	}
	guestDeb := rxeguest.SharePath + "/" + filepath.Base(deb.path)
	start := time.Now()
	defer func() { t.Logf("in the guests after boot: %v", time.Since(start).Round(time.Second)) }()

	run := func(what, script string) string {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		res, err := b.Run(rctx, script)
		if err == nil {
			err = res.Err()
		}
		if err != nil {
			t.Fatalf("%s in %s: %v\nstdout: %s", what, b.Name(), err, res.Stdout)
		}
		return string(res.Stdout)
	}
	// The package must not need a compiler. The image carries gcc (its
	// helper tools are built in it); this guest's private overlay drops
	// every compiler driver first.
	run("removing the C compilers", "rm -f /usr/bin/cc /usr/bin/c89 /usr/bin/c99 /usr/bin/gcc /usr/bin/gcc-[0-9]* /usr/bin/*-linux-gnu-gcc* /usr/bin/clang* /usr/bin/tcc")
	if out := run("looking for a C compiler", "command -v cc gcc clang tcc || true"); strings.TrimSpace(out) != "" {
		t.Fatalf("the guest still has a C compiler (%s): the test would not show the package needs none", out)
	}
	run("dpkg -i", "dpkg -i "+guestDeb)
	status := run("dpkg -s", "dpkg -s sroce && dpkg -L sroce")
	for _, want := range []string{"Status: install ok installed", "/usr/bin/sroce",
		"/usr/lib/x86_64-linux-gnu/sroce/libibverbs.so.1", "/usr/lib/systemd/system/sroce.service", "/usr/share/man/man1/sroce-run.1.gz",
		"/usr/share/doc/sroce/docs/operator-guide.md"} {
		if !strings.Contains(status, want) {
			t.Errorf("dpkg -s/-L sroce lacks %q:\n%s", want, status)
		}
	}
	if lib := strings.TrimSpace(run("sroce run --print-lib", "PATH=/usr/bin:/bin sroce run --print-lib")); lib != "/usr/lib/x86_64-linux-gnu/sroce" {
		t.Errorf("sroce run --print-lib in the guest: %q, want the installed /usr/lib/x86_64-linux-gnu/sroce", lib)
	}

	// rxe off b, the installed daemon on its eth0.
	run("rdma link delete rxe0", "rdma link delete rxe0 && ! test -e /sys/class/infiniband/rxe0")
	// The guest does not boot systemd: the daemon starts as the installed
	// sroce@eth0.service would start it, read from the unit: its ExecStart
	// line with the settings of /etc/default/sroce (edited as an operator
	// would: AF_XDP only, so a missing capability fails instead of falling
	// back to the UDP link), as an unprivileged user holding only the
	// unit's AmbientCapabilities, with its memory lock limit, runtime
	// directory and /dev/infiniband.
	daemon, err := b.Start(ctx, unitStart)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		daemon.Kill(kctx)
	})
	wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
	res, err := b.Run(wctx, fmt.Sprintf("for i in $(seq 600); do test -S /run/sroce/sroce.sock && exit 0; kill -0 %d || exit 2; sleep 0.1; done; exit 1", daemon.Pid))
	wcancel()
	if err != nil || res.ExitCode != 0 {
		dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, _ := daemon.Wait(dctx)
		cancel()
		t.Fatalf("the installed daemon did not listen on /run/sroce/sroce.sock within 60 s (%v, exit %d; 2: the daemon exited)\ndaemon: %s%s",
			err, res.ExitCode, d.Stdout, d.Stderr)
	}
	args := "-x 1 -s 65536 -n 200 -F"
	srv, cli, err := runToolPair(ctx, a, b, 18515, "ib_write_bw -d rxe0 "+args, "PATH=/usr/bin:/bin sroce run -- ib_write_bw "+args)
	if err != nil {
		t.Fatalf("ib_write_bw through the installed sroce against rxe: %v", err)
	}
	for i, out := range []string{string(srv.Stdout), string(cli.Stdout)} {
		row := bwRow.FindString(out)
		if row == "" {
			t.Errorf("%s printed no bandwidth row:\n%s", []string{"rxe's server", "the client on sroce"}[i], out)
			continue
		}
		f := strings.Fields(row)
		if f[0] != "65536" || f[1] != "200" {
			t.Errorf("%s: bandwidth row %q, want 65536 bytes, 200 iterations", []string{"rxe's server", "the client on sroce"}[i], row)
		}
		t.Logf("%s: %s", []string{"rxe's server", "the client on sroce"}[i], row)
	}
	if out := run("the daemon's user", fmt.Sprintf("ps -o user=,comm= -p %d", daemon.Pid)); strings.Join(strings.Fields(out), " ") != "nobody sroce" {
		t.Errorf("the daemon runs as %q, want nobody sroce", out)
	}
	if out := run("the device's entry", "ls /dev/infiniband/"); !strings.Contains(out, "sroce_eth0.") {
		t.Errorf("the daemon made no entry for sroce_eth0 in /dev/infiniband: %q", out)
	}
	if !strings.Contains(string(cli.Stdout), "sroce_eth0") {
		t.Errorf("the client did not run on the daemon's device sroce_eth0:\n%s", cli.Stdout)
	}
}
