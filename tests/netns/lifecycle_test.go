package netns

// One daemon per interface, and --link auto's fallback, with real
// daemons over AF_XDP in network namespaces.

import (
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

	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/internal/testdirs"
)

// TestDaemonOnePerInterface starts a second daemon on an interface a
// daemon serves over AF_XDP: with --link xdp and with --link auto it
// refuses the interface with a sentence naming the holder's pid and
// socket (auto does not quietly take the UDP link), exits 1, and leaves
// no socket behind.
func TestDaemonOnePerInterface(t *testing.T) {
	d := startDaemonsIn(t, "lf-one", "xdp", false)
	holder := d.procs[0].cmd.Process.Pid
	for _, link := range []string{"xdp", "auto"} {
		sock := filepath.Join(t.TempDir(), "second.sock")
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := d.pair.A.Command(context.Background(), d.bin, "daemon", "-d", d.pair.Veth.NameA, "--link", link, "--socket", sock)
		p := startTool(t, cmd, d.pair.A.Start)
		o := p.wait(ctx)
		cancel()
		if o.Exit != 1 {
			t.Errorf("a second daemon on %s with --link %s: exit %d, want 1\n%v", d.pair.Veth.NameA, link, o.Exit, o)
		}
		re := regexp.MustCompile(`interface ` + regexp.QuoteMeta(d.pair.Veth.NameA) +
			` is already served by another sroce daemon \(pid (\d+) \(sroce\), socket (\S+)\)`)
		m := re.FindStringSubmatch(o.Stderr)
		if m == nil {
			t.Errorf("--link %s: the refusal does not name the holder:\n%s", link, o.Stderr)
			continue
		}
		if m[1] != strconv.Itoa(holder) || m[2] != d.sockets[0] {
			t.Errorf("--link %s: holder named pid %s socket %s, want pid %d socket %s", link, m[1], m[2], holder, d.sockets[0])
		}
		if _, err := os.Lstat(sock); err == nil {
			t.Errorf("--link %s: the refused daemon left a socket", link)
		}
		t.Logf("--link %s: %s", link, strings.TrimSpace(o.Stderr))
	}
	// The first daemon still serves.
	if out, err := d.pair.A.Exec(context.Background(), d.bin, "stat", "-d", d.pair.Veth.NameA, "--socket", d.sockets[0]); err != nil ||
		!strings.Contains(string(out), "the device of the sroce daemon at "+d.sockets[0]) {
		t.Errorf("the first daemon after the refusals: %v\n%s", err, out)
	}
}

// TestDaemonLinkAuto: --link auto takes the UDP link when AF_XDP is not
// permitted (a daemon run by nobody), saying so at WARN; when AF_XDP fails
// for another reason (its queue held by another sroce process) the daemon
// stops with the sentence instead of serving over UDP.
func TestDaemonLinkAuto(t *testing.T) {
	nsutil.Skip(t)
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: "lf-auto", Seed: 19})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	bin := buildSroce(t)
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	// nobody's daemon runs the binary and makes its socket in dir.
	testdirs.Searchable(filepath.Dir(bin), dir)
	os.Chmod(bin, 0o755)
	ifname := pair.Veth.NameA

	// Not permitted: nobody's daemon serves over UDP, with a WARN.
	sock := filepath.Join(dir, "nobody.sock")
	cmd := pair.A.Command(context.Background(), bin, "daemon", "-d", ifname, "--link", "auto", "--socket", sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	p := startTool(t, cmd, pair.A.Start)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := waitFor(ctx, "nobody's daemon listening", func() (bool, error) {
		return strings.Contains(p.stderr.String(), "msg=listening") || p.exited(), nil
	}); err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`level=WARN msg="AF_XDP is not permitted here: serving over the UDP link.*interface=`+regexp.QuoteMeta(ifname)).MatchString(p.stderr.String()) ||
		!strings.Contains(p.stderr.String(), "link=UDP") {
		t.Errorf("nobody's daemon with --link auto: want the UDP link and a WARN saying why:\n%s", p.stderr.String())
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	if o := p.wait(ctx); o.Exit != 0 {
		t.Errorf("nobody's daemon after SIGTERM: exit %d\n%v", o.Exit, o)
	}

	// AF_XDP busy: a tool holds the interface's queue with a device of
	// its own ("sroce stat --mode xdp --for"), outside any daemon.
	hold := startTool(t, pair.A.Command(context.Background(), bin, "stat", "-d", ifname, "--mode", "xdp", "--for", "60s"), pair.A.Start)
	time.Sleep(2 * time.Second)
	if hold.exited() {
		t.Fatalf("sroce stat holding AF_XDP ended:\n%v", hold.wait(ctx))
	}
	sock = filepath.Join(dir, "root.sock")
	d := startTool(t, pair.A.Command(context.Background(), bin, "daemon", "-d", ifname, "--link", "auto", "--socket", sock), pair.A.Start)
	o := d.wait(ctx)
	if o.Exit != 1 || !strings.Contains(o.Stderr, "AF_XDP") || !strings.Contains(o.Stderr, "--link auto") || strings.Contains(o.Stderr, "msg=listening") {
		t.Errorf("--link auto with AF_XDP busy: exit %d, want 1 with a sentence on AF_XDP, not the UDP link:\n%v", o.Exit, o)
	}
	t.Logf("AF_XDP busy: %s", strings.TrimSpace(o.Stderr))
	hold.cmd.Process.Kill()
}

// TestDaemonContainer runs a verbs program the way a container does: an
// unprivileged user's process in its own user namespace (root in it),
// mount namespace and PID namespace (pid 1 in it), which sees the host
// daemon's socket only through a bind mount at the default place
// (/run/sroce/sroce.sock) and the drop-in libraries through another.
// ibv_rc_pingpong in it, through "sroce run" with no flag, exchanges
// checked data (--chk) with ibv_rc_pingpong on a second daemon in another
// network namespace; the daemon sees the program's host pid and uid.
func TestDaemonContainer(t *testing.T) {
	if _, err := exec.LookPath("ibv_rc_pingpong"); err != nil {
		t.Skip("skipping: ibv_rc_pingpong is not installed (apt-get install ibverbs-utils)")
	}
	for _, p := range []string{"unshare", "setpriv"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("skipping: %s is not installed (util-linux)", p)
		}
	}
	d := startDaemonsIn(t, "lf-ctr", "xdp", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// What the container is given: sroce, the libraries, the socket.
	dir := t.TempDir()
	bin := filepath.Join(dir, "sroce")
	b, err := os.ReadFile(d.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	testdirs.Searchable(dir, filepath.Dir(d.sockets[0]))
	out, err := exec.Command(bin, "run", "--print-lib").Output()
	if err != nil {
		t.Fatalf("sroce run --print-lib: %v", err)
	}
	// A copy the container's root (the host's uid 65534) may read: the
	// host's cache is root's.
	built := strings.TrimSpace(string(out))
	lib := filepath.Join(dir, filepath.Base(built))
	os.Mkdir(lib, 0o755)
	files, err := os.ReadDir(built)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if b, err := os.ReadFile(filepath.Join(built, f.Name())); err == nil {
			os.WriteFile(filepath.Join(lib, f.Name()), b, 0o755)
		}
	}

	const port = "19130"
	srv := d.runIn(t, ctx, false, false, nil, "ibv_rc_pingpong", "-d", d.devs[1], "-g", d.gidIdx(t, 1), "-p", port, "-n", "500", "-s", "4096", "--chk")
	script := `set -e
mount -t tmpfs lf-run /run
mkdir -p /run/sroce
touch /run/sroce/sroce.sock
mount --bind "$HOST_SOCKET" /run/sroce/sroce.sock
mount -t tmpfs lf-cache /var/cache
mkdir -p "/var/cache/sroce/$(basename "$HOST_LIB")"
mount --bind "$HOST_LIB" "/var/cache/sroce/$(basename "$HOST_LIB")"
echo "container: pid $$ uid $(id -u)"
exec "$SROCE" run -- "$@"`
	cmd := d.pair.A.Command(ctx, "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
		"unshare", "--user", "--map-root-user", "--mount", "--pid", "--fork", "--mount-proc", "--",
		"sh", "-c", script, "sh", "ibv_rc_pingpong", "-d", d.devs[0], "-g", d.gidIdx(t, 0), "-p", port,
		"-n", "500", "-s", "4096", "--chk", d.pair.Veth.AddrB[0].Addr().String())
	env := []string{"PATH=" + os.Getenv("PATH"), "HOST_SOCKET=" + d.sockets[0], "HOST_LIB=" + lib, "SROCE=" + bin}
	cmd.Env = env
	if err := waitFor(ctx, "the server listening", func() (bool, error) {
		o, err := d.pair.B.Exec(ctx, "ss", "-Hltn", "sport = :"+port)
		return strings.TrimSpace(string(o)) != "", err
	}); err != nil {
		t.Fatal(err)
	}
	cli := startTool(t, cmd, d.pair.A.Start).wait(ctx)
	so := srv.wait(ctx)
	if cli.Exit != 0 || so.Exit != 0 {
		t.Fatalf("ibv_rc_pingpong from the container: client exit %d, server exit %d\nclient:\n%v\nserver:\n%v", cli.Exit, so.Exit, cli, so)
	}
	if !strings.Contains(cli.Stdout, "container: pid 1 uid 0") {
		t.Errorf("the program did not run as pid 1 and uid 0 of its own namespaces:\n%s", cli.Stdout)
	}
	for _, o := range []toolOutcome{cli, so} {
		if !regexp.MustCompile(`4096000 bytes in [\d.]+ seconds`).MatchString(o.Stdout) || !strings.Contains(o.Stdout, "500 iters in") {
			t.Errorf("ibv_rc_pingpong did not report its 500 checked exchanges of 4096 bytes:\n%v", o)
		}
	}
	// The daemon saw the program as the host sees it: uid 65534, a pid of
	// the host's PID namespace (not 1).
	m := regexp.MustCompile(`msg="client opened device" client=\d+ pid=(\d+) comm=ibv_rc_pingpong`).FindStringSubmatch(d.procs[0].stderr.String())
	if m == nil || m[1] == "1" {
		t.Errorf("the daemon's log does not show the container's program with its host pid:\n%s", d.procs[0].stderr.String())
	}
	if !regexp.MustCompile(`uid=65534 comm=ibv_rc_pingpong`).MatchString(d.procs[0].stderr.String()) {
		t.Errorf("the daemon's log does not show the container's program as uid 65534")
	}
	t.Logf("client:\n%s", cli.Stdout)
}
