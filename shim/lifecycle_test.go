package shim_test

// The daemon as an operator runs it: a real "sroce daemon" process, found
// by programs through the one rule (internal/sockpath, sroce_socket_path
// in ctl.c) as root and as an unprivileged user, and its going seen by
// the programs that use it.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/internal/testpair"
	"github.com/sroce/sroce/shim"
)

// Loopback addresses of the daemons of these tests (UDP link on lo).
const (
	lfSysAddr  = "127.0.191.1"
	lfUserAddr = "127.0.191.2"
)

// lfRig is a built sroce and library in a directory every user may read,
// and a mount namespace whose /run is a fresh tmpfs: a root daemon in it
// listens at /run/sroce/sroce.sock without touching the host's.
type lfRig struct {
	dir, sroce, lib string
	nsPid           int
}

func newRig(t *testing.T) *lfRig {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (a mount namespace, and programs run as another user)")
	}
	for _, p := range []string{"setpriv", "unshare", "nsenter", "ibv_devinfo", "ibv_rc_pingpong", "ib_write_bw"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("skipping: %s is not installed (util-linux, ibverbs-utils, perftest)", p)
		}
	}
	if _, err := shim.Compiler(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	dir, err := os.MkdirTemp("", "sroce-lf-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &lfRig{dir: dir, sroce: filepath.Join(dir, "sroce")}
	if out, err := exec.Command("go", "build", "-o", r.sroce, "../cmd/sroce").CombinedOutput(); err != nil {
		t.Fatalf("building sroce: %v\n%s", err, out)
	}
	// "sroce run" as any user finds the library in XDG_CACHE_HOME/sroce.
	if r.lib, err = shim.LibIn(context.Background(), filepath.Join(dir, "cache", "sroce")); err != nil {
		t.Fatal(err)
	}
	filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error { return os.Chmod(p, 0o755) })

	ns := exec.Command("unshare", "--mount", "--propagation", "private", "--",
		"sh", "-c", "mount -t tmpfs -o mode=0755 lf-run /run && echo ready && exec sleep 3600")
	out, _ := ns.StdoutPipe()
	ns.Stderr = os.Stderr
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Process.Kill(); ns.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		if strings.TrimSpace(l) != "ready" {
			t.Fatalf("the mount namespace did not start: %q", l)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the mount namespace was not ready within 10 s")
	}
	r.nsPid = ns.Process.Pid
	return r
}

// lfUser is who runs a command: root, or uid and gid 65534.
type lfUser bool

const (
	asRoot   lfUser = false
	asNobody lfUser = true
)

// cmd returns a command run in the rig's mount namespace as who, with a
// clean environment plus env.
func (r *lfRig) cmd(ctx context.Context, who lfUser, env []string, args ...string) *exec.Cmd {
	argv := []string{"-t", strconv.Itoa(r.nsPid), "-m", "--"}
	if who == asNobody {
		argv = append(argv, "setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--")
	}
	argv = append(argv, args...)
	c := exec.CommandContext(ctx, "nsenter", argv...)
	c.Env = append([]string{"PATH=" + os.Getenv("PATH"), "XDG_CACHE_HOME=" + filepath.Join(r.dir, "cache"),
		"HOME=/nonexistent", "TMPDIR=" + filepath.Join(r.dir, "tmp")}, env...)
	c.Dir = "/"
	return c
}

// run runs a command as cmd makes it, bounded by 60 s.
func (r *lfRig) run(t *testing.T, who lfUser, env []string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c := r.cmd(ctx, who, env, args...)
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	err = c.Run()
	if ctx.Err() != nil {
		err = fmt.Errorf("%v did not finish within 60 s", args)
	}
	return o.String(), e.String(), err
}

// lfBuf is a buffer one goroutine writes while another reads it.
type lfBuf struct{ testpair.Buffer }

// waitFor waits up to d for the buffer to match re.
func (b *lfBuf) waitFor(t *testing.T, re string, d time.Duration, what string) []string {
	t.Helper()
	rx := regexp.MustCompile(re)
	for deadline := time.Now().Add(d); ; time.Sleep(20 * time.Millisecond) {
		if m := rx.FindStringSubmatch(b.String()); m != nil {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v (wanted %q); output:\n%s", what, d, re, b.String())
		}
	}
}

// lfDaemon is a running "sroce daemon" process.
type lfDaemon struct {
	cmd  *exec.Cmd
	log  *lfBuf
	done chan error
}

// daemon starts "sroce daemon -d lo@addr --link udp" plus args as who,
// and waits until it listens.
func (r *lfRig) daemon(t *testing.T, who lfUser, env []string, addr string, args ...string) *lfDaemon {
	t.Helper()
	d := &lfDaemon{log: &lfBuf{}, done: make(chan error, 1)}
	d.cmd = r.cmd(context.Background(), who, env, append([]string{r.sroce, "daemon", "-d", "lo@" + addr, "--link", "udp"}, args...)...)
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(10 * time.Second):
			d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("daemon on %s:\n%s", addr, d.log)
		}
	})
	d.log.waitFor(t, `msg=listening`, 20*time.Second, "the daemon on "+addr+" listening")
	return d
}

// stop signals the daemon and waits up to 10 s for it to exit.
func (d *lfDaemon) stop(t *testing.T, sig syscall.Signal) error {
	t.Helper()
	d.cmd.Process.Signal(sig)
	select {
	case err := <-d.done:
		d.done <- err
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("the daemon did not exit within 10 s of %v; log:\n%s", sig, d.log)
		return nil
	}
}

// servedAddr runs "sroce run -- ibv_devinfo -v" and "sroce stat -d lo"
// as who and returns the address of the RoCE v2 GID the C library's
// device has, and the socket the Go client says it used.
func (r *lfRig) servedAddr(t *testing.T, who lfUser, env []string) (addr, goSocket string) {
	t.Helper()
	o, e, err := r.run(t, who, env, r.sroce, "run", "--", "ibv_devinfo", "-v", "-d", "sroce_lo")
	if err != nil {
		t.Fatalf("sroce run -- ibv_devinfo as %v: %v\n%s%s", who, err, o, e)
	}
	m := regexp.MustCompile(`GID\[\s*\d+\]:\s+::ffff:(127\.0\.191\.[0-9]+), RoCE v2`).FindStringSubmatch(o)
	if m == nil {
		t.Fatalf("ibv_devinfo -v lists no RoCE v2 GID of the test's addresses:\n%s%s", o, e)
	}
	o, e, err = r.run(t, who, env, r.sroce, "stat", "-d", "lo")
	if err != nil {
		t.Fatalf("sroce stat -d lo as %v: %v\n%s%s", who, err, o, e)
	}
	s := regexp.MustCompile(`the device of the sroce daemon at (\S+),`).FindStringSubmatch(o)
	if s == nil {
		t.Fatalf("sroce stat found no daemon:\n%s%s", o, e)
	}
	return m[1], s[1]
}

func (w lfUser) String() string {
	if w == asNobody {
		return "uid 65534"
	}
	return "root"
}

// TestFindDaemon checks the one rule from C (the drop-in library, through
// "sroce run") and Go ("sroce stat"), as root and as an unprivileged
// user: a root daemon started with no --socket listens at
// /run/sroce/sroce.sock and every user finds it with no flag; a user's own
// daemon (no --socket either) is preferred by that user; a stale socket
// left at the user's place is skipped; SROCE_SOCKET overrides all.
func TestFindDaemon(t *testing.T) {
	r := newRig(t)
	sys := r.daemon(t, asRoot, nil, lfSysAddr)
	sys.log.waitFor(t, `msg=listening socket=/run/sroce/sroce.sock`, time.Second, "root daemon's socket")

	for _, who := range []lfUser{asRoot, asNobody} {
		if a, s := r.servedAddr(t, who, nil); a != lfSysAddr || s != "/run/sroce/sroce.sock" {
			t.Errorf("%v with no daemon of its own: device at %s through %s, want the system daemon's (%s, /run/sroce/sroce.sock)", who, a, s, lfSysAddr)
		}
	}

	// The user's own daemon, in XDG_RUNTIME_DIR.
	xdg := filepath.Join(r.dir, "xdg")
	os.Mkdir(xdg, 0o700)
	os.Chown(xdg, 65534, 65534)
	env := []string{"XDG_RUNTIME_DIR=" + xdg}
	user := r.daemon(t, asNobody, env, lfUserAddr)
	userSock := filepath.Join(xdg, "sroce.sock")
	user.log.waitFor(t, `msg=listening socket=`+regexp.QuoteMeta(userSock), time.Second, "user daemon's socket")
	if a, s := r.servedAddr(t, asNobody, env); a != lfUserAddr || s != userSock {
		t.Errorf("uid 65534 with its own daemon: device at %s through %s, want %s through %s", a, s, lfUserAddr, userSock)
	}
	// SROCE_SOCKET wins.
	if a, _ := r.servedAddr(t, asNobody, append(env, "SROCE_SOCKET=/run/sroce/sroce.sock")); a != lfSysAddr {
		t.Errorf("SROCE_SOCKET=/run/sroce/sroce.sock: device at %s, want %s", a, lfSysAddr)
	}
	// Killed, the user's daemon leaves its socket: it is skipped.
	user.stop(t, syscall.SIGKILL)
	if _, err := os.Stat(userSock); err != nil {
		t.Fatalf("a killed daemon's socket should stay behind for this test: %v", err)
	}
	if a, s := r.servedAddr(t, asNobody, env); a != lfSysAddr || s != "/run/sroce/sroce.sock" {
		t.Errorf("uid 65534 with a stale socket of its own: device at %s through %s, want the system daemon's", a, s)
	}
	// A new daemon of the user's replaces the stale socket and is found.
	r.daemon(t, asNobody, env, lfUserAddr)
	if a, _ := r.servedAddr(t, asNobody, env); a != lfUserAddr {
		t.Errorf("uid 65534 after its daemon restarted over a stale socket: device at %s, want %s", a, lfUserAddr)
	}

	// No runtime directory: the user's daemon listens in TMPDIR/sroce-UID.
	tmp := filepath.Join(r.dir, "tmp")
	os.Mkdir(tmp, 0o1777)
	os.Chmod(tmp, 0o1777)
	r.daemon(t, asNobody, nil, "127.0.191.3")
	tmpSock := filepath.Join(tmp, "sroce-65534", "sroce.sock")
	if a, s := r.servedAddr(t, asNobody, nil); a != "127.0.191.3" || s != tmpSock {
		t.Errorf("uid 65534 without a runtime directory: device at %s through %s, want 127.0.191.3 through %s", a, s, tmpSock)
	}
	if fi, err := os.Stat(filepath.Dir(tmpSock)); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("the user's socket directory: %v, %v; want mode 0700", fi.Mode(), err)
	}
	// Root does not take a user's daemon.
	if a, _ := r.servedAddr(t, asRoot, nil); a != lfSysAddr {
		t.Errorf("root: device at %s, want the system daemon's %s", a, lfSysAddr)
	}
}

// lfProg is a program started in the background, its output collected.
type lfProg struct {
	name     string
	cmd      *exec.Cmd
	out, err *lfBuf
	done     chan error
	cancel   context.CancelFunc
}

// start starts a program as cmd makes it; it is killed after 3 minutes
// at most, and at the end of the test.
func (r *lfRig) start(t *testing.T, name string, who lfUser, env []string, args ...string) *lfProg {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	p := &lfProg{name: name, out: &lfBuf{}, err: &lfBuf{}, done: make(chan error, 1), cancel: cancel}
	p.cmd = r.cmd(ctx, who, env, args...)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.err
	if err := p.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		cancel()
		<-p.done
		p.done <- nil
		if t.Failed() {
			t.Logf("%s stdout:\n%s\nstderr:\n%s", name, p.out, p.err)
		}
	})
	return p
}

// exited waits up to d for the program to exit and returns its error.
func (p *lfProg) exited(t *testing.T, d time.Duration, after string) error {
	t.Helper()
	select {
	case err := <-p.done:
		p.done <- err
		return err
	case <-time.After(d):
		t.Fatalf("%s did not exit within %v of %s\nstdout:\n%s\nstderr:\n%s", p.name, d, after, p.out, p.err)
		return nil
	}
}

// goneLine is the line the library prints once when the daemon goes.
var goneLine = regexp.MustCompile(`(?m)^sroce: the sroce daemon at (\S+) has gone \(([^)]*)\); device (\S+) is unusable.*$`)

// saidGone checks that the program printed the line once, naming the
// system daemon's socket and the device.
func (p *lfProg) saidGone(t *testing.T) {
	t.Helper()
	m := goneLine.FindAllStringSubmatch(p.err.String(), -1)
	if len(m) != 1 {
		t.Errorf("%s printed %d lines saying the daemon has gone, want 1; stderr:\n%s", p.name, len(m), p.err)
		return
	}
	if m[0][1] != "/run/sroce/sroce.sock" || m[0][3] != "sroce_lo" {
		t.Errorf("%s: %q: want the socket /run/sroce/sroce.sock and the device sroce_lo", p.name, m[0][0])
	}
}

// gidIndex returns the index of the RoCE v2 GID of addr on sroce_lo.
func (r *lfRig) gidIndex(t *testing.T, addr string) string {
	t.Helper()
	o, e, err := r.run(t, asNobody, nil, r.sroce, "run", "--", "ibv_devinfo", "-v", "-d", "sroce_lo")
	if err != nil {
		t.Fatalf("ibv_devinfo -v: %v\n%s%s", err, o, e)
	}
	m := regexp.MustCompile(`GID\[\s*(\d+)\]:\s+::ffff:` + regexp.QuoteMeta(addr) + `, RoCE v2`).FindStringSubmatch(o)
	if m == nil {
		t.Fatalf("ibv_devinfo -v lists no RoCE v2 GID for %s:\n%s", addr, o)
	}
	return m[1]
}

// TestDaemonGoesUnderPrograms stops (SIGTERM) or kills (SIGKILL) the
// system daemon under real programs run by an unprivileged user through
// "sroce run" with no flag: ib_write_bw in the middle of its run, an
// ibv_rc_pingpong server waiting for its peer, and gone_test (which
// checks the errno of every kind of call, DEVICE_FATAL and the RDMA CM's
// DEVICE_REMOVAL). Each prints one line naming the daemon and its socket
// and ends within a bound; a restarted daemon is found by new programs,
// and the waiting server fails (its device is gone) when its peer comes.
func TestDaemonGoesUnderPrograms(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGKILL} {
		t.Run(sig.String(), func(t *testing.T) { daemonGoes(t, sig) })
	}
}

func daemonGoes(t *testing.T, sig syscall.Signal) {
	r := newRig(t)
	cc, _ := shim.Compiler()
	gone := filepath.Join(r.dir, "gone_test")
	if out, err := exec.Command(cc, "-Wall", "-o", gone, "testdata/gone_test.c",
		filepath.Join(r.lib, shim.LibName), filepath.Join(r.lib, shim.CMLibName)).CombinedOutput(); err != nil {
		t.Fatalf("compiling testdata/gone_test.c: %v\n%s", err, out)
	}
	os.Chmod(gone, 0o755)
	d := r.daemon(t, asRoot, nil, lfSysAddr)
	gid := r.gidIndex(t, lfSysAddr)
	run := func(name string, args ...string) *lfProg {
		return r.start(t, name, asNobody, nil, append([]string{r.sroce, "run", "--"}, args...)...)
	}
	g := run("gone_test", gone, "sroce_lo", lfSysAddr, "19110")
	g.out.waitFor(t, `(?m)^ready$`, 20*time.Second, "gone_test holding its objects")
	bwSrv := run("ib_write_bw server", "stdbuf", "-oL", "ib_write_bw", "-d", "sroce_lo", "-x", gid, "-p", "19111", "-D", "60")
	time.Sleep(300 * time.Millisecond)
	bwCli := run("ib_write_bw client", "stdbuf", "-oL", "ib_write_bw", "-d", "sroce_lo", "-x", gid, "-p", "19111", "-D", "60", "127.0.0.1")
	bwCli.out.waitFor(t, `#bytes`, 30*time.Second, "ib_write_bw running")
	pp := run("ibv_rc_pingpong server", "ibv_rc_pingpong", "-d", "sroce_lo", "-g", gid, "-p", "19112")
	// The server has its QP and waits for a peer on TCP.
	d.log.waitFor(t, `client opened device.*comm=ibv_rc_pingpong`, 20*time.Second, "ibv_rc_pingpong opening the device")
	time.Sleep(500 * time.Millisecond) // past its QP's creation

	stopped := time.Now()
	err := d.stop(t, sig)
	if sig == syscall.SIGTERM {
		if err != nil {
			t.Errorf("the daemon's exit after SIGTERM: %v, want status 0", err)
		}
		if _, err := os.Lstat(fmt.Sprintf("/proc/%d/root/run/sroce/sroce.sock", r.nsPid)); err == nil {
			t.Error("the daemon left its socket after SIGTERM")
		}
		d.log.waitFor(t, `stopping: clients told \(DEVICE_FATAL\)`, time.Second, "the daemon telling its clients")
	}
	for _, p := range []*lfProg{g, bwSrv, bwCli} {
		err := p.exited(t, 15*time.Second, sig.String())
		t.Logf("%s exited %v after %v", p.name, err, time.Since(stopped).Round(time.Millisecond))
		p.saidGone(t)
		if p == g {
			if err != nil || strings.Count(g.out.String(), "ok ") != 11 {
				t.Errorf("gone_test: %v, want 11 checks passed:\n%s", err, g.out)
			}
		} else if err == nil {
			t.Errorf("%s exited 0 after its device went away", p.name)
		}
	}
	if strings.Contains(bwCli.err.String()+bwCli.out.String(), "Failed status") {
		t.Errorf("ib_write_bw got a flushed completion instead of the device's fate:\n%s%s", bwCli.out, bwCli.err)
	}
	// The waiting server is told at once, while it waits.
	pp.err.waitFor(t, goneLine.String(), 5*time.Second, "the waiting ibv_rc_pingpong server saying the daemon has gone")
	pp.saidGone(t)

	// A restarted daemon (over the socket a SIGKILL left) serves new
	// programs; the old server fails when its peer comes.
	r.daemon(t, asRoot, nil, lfSysAddr)
	if a, _ := r.servedAddr(t, asNobody, nil); a != lfSysAddr {
		t.Errorf("after the restart: device at %s, want %s", a, lfSysAddr)
	}
	cli := run("ibv_rc_pingpong client", "ibv_rc_pingpong", "-d", "sroce_lo", "-g", gid, "-p", "19112", "127.0.0.1")
	if err := pp.exited(t, 20*time.Second, "its peer connecting"); err == nil {
		t.Error("the ibv_rc_pingpong server of the old daemon exited 0")
	}
	if err := cli.exited(t, 20*time.Second, "its server failing"); err == nil {
		t.Error("the ibv_rc_pingpong client exited 0 with a server whose device had gone")
	}
	pp.saidGone(t)
	if n := len(goneLine.FindAllString(cli.err.String(), -1)); n != 0 {
		t.Errorf("the new client (on the restarted daemon) said the daemon had gone")
	}
}

// TestDaemonReload runs the system daemon from a configuration file under
// a service manager's NOTIFY_SOCKET, with its log in a file and its socket
// for one group: SIGHUP during a running ib_write_bw (an unprivileged
// user's, through "sroce run") reopens the rotated log, applies the
// changed keys that may change live and names those that need a restart,
// and the program completes its run with data; the notifications come in
// order (READY, RELOADING, READY, STOPPING); SIGTERM removes the socket.
func TestDaemonReload(t *testing.T) {
	r := newRig(t)
	notify := filepath.Join(r.dir, "notify.sock")
	nc, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notify, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	msgs := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := nc.Read(buf)
			if err != nil {
				close(msgs)
				return
			}
			msgs <- string(buf[:n])
		}
	}()
	var seen []string
	await := func(want string) string {
		t.Helper()
		deadline := time.After(20 * time.Second)
		for {
			select {
			case m, ok := <-msgs:
				if !ok {
					t.Fatalf("the notification socket closed while waiting for %s", want)
				}
				seen = append(seen, m)
				if strings.Contains(m, want+"\n") {
					return m
				}
			case <-deadline:
				t.Fatalf("no %s notification within 20 s; got %q", want, seen)
			}
		}
	}
	conf := filepath.Join(r.dir, "sroce.conf")
	write := func(s string) {
		if err := os.WriteFile(conf, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("# the test's daemon\ninterface = lo@" + lfSysAddr + "\nlink = udp\nlog-level = info\nmax-qps = 64\nsocket-mode = 0660\n")
	logDir := filepath.Join(r.dir, "log")
	os.Mkdir(logDir, 0o755)
	logFile := filepath.Join(logDir, "sroce.log")
	d := &lfDaemon{log: &lfBuf{}, done: make(chan error, 1)}
	d.cmd = r.cmd(context.Background(), asRoot, []string{"NOTIFY_SOCKET=" + notify},
		r.sroce, "daemon", "--config", conf, "--log-file", logFile, "--socket-group", "nogroup")
	d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { d.done <- d.cmd.Wait() }()
	t.Cleanup(func() {
		d.cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("daemon's stderr:\n%s\nits log file:\n%s", d.log, b)
		}
	})
	if m := await("READY=1"); !strings.Contains(m, "STATUS=serving sroce_lo on /run/sroce/sroce.sock") {
		t.Errorf("READY=1 came with %q, want a STATUS naming the device and the socket", m)
	}
	sock := fmt.Sprintf("/proc/%d/root/run/sroce/sroce.sock", r.nsPid)
	if fi, err := os.Stat(sock); err != nil {
		t.Fatal(err)
	} else if st := fi.Sys().(*syscall.Stat_t); fi.Mode().Perm() != 0o660 || st.Gid != 65534 {
		t.Errorf("the socket: mode %v group %d, want 0660 and nogroup (65534) as configured", fi.Mode().Perm(), st.Gid)
	}
	gid := r.gidIndex(t, lfSysAddr)
	run := func(name string, args ...string) *lfProg {
		return r.start(t, name, asNobody, nil, append([]string{r.sroce, "run", "--", "stdbuf", "-oL"}, args...)...)
	}
	srv := run("ib_write_bw server", "ib_write_bw", "-d", "sroce_lo", "-x", gid, "-p", "19120", "-D", "6")
	time.Sleep(300 * time.Millisecond)
	cli := run("ib_write_bw client", "ib_write_bw", "-d", "sroce_lo", "-x", gid, "-p", "19120", "-D", "6", "127.0.0.1")
	cli.out.waitFor(t, `#bytes`, 30*time.Second, "ib_write_bw running")
	time.Sleep(time.Second)

	// Rotate the log, change the configuration, SIGHUP.
	if err := os.Rename(logFile, logFile+".1"); err != nil {
		t.Fatal(err)
	}
	write("interface = lo@" + lfSysAddr + "\nlink = udp\nlog-level = debug\nmax-qps = 8\nsocket-mode = 0660\nmetrics = 127.0.0.1:19121\n")
	d.cmd.Process.Signal(syscall.SIGHUP)
	if m := await("RELOADING=1"); !strings.Contains(m, "MONOTONIC_USEC=") {
		t.Errorf("RELOADING=1 without MONOTONIC_USEC: %q", m)
	}
	await("READY=1")
	for _, p := range []*lfProg{srv, cli} {
		if err := p.exited(t, 30*time.Second, "the end of its 6 s run"); err != nil {
			t.Errorf("%s across SIGHUP: %v", p.name, err)
		}
	}
	m := regexp.MustCompile(`(?m)^\s*65536\s+\d+\s+[\d.]+\s+([\d.]+)`).FindStringSubmatch(cli.out.String())
	if m == nil || m[1] == "0.00" {
		t.Errorf("ib_write_bw across SIGHUP reported no bandwidth:\n%s", cli.out)
	}
	b, err := os.ReadFile(logFile)
	if err != nil {
		t.Fatalf("SIGHUP did not reopen the log file: %v", err)
	}
	for _, want := range []string{`msg="log file reopened"`, `msg="configuration reread"`, `applied=log-level,max-qps`, `needs_restart=metrics`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("the reopened log lacks %s:\n%s", want, b)
		}
	}
	if old, _ := os.ReadFile(logFile + ".1"); !strings.Contains(string(old), "msg=listening") || strings.Contains(string(old), "configuration reread") {
		t.Errorf("the rotated log should hold the start and not what came after SIGHUP:\n%s", old)
	}
	d.cmd.Process.Signal(syscall.SIGTERM)
	if m := await("STOPPING=1"); !strings.Contains(m, "STATUS=") {
		t.Errorf("STOPPING=1 without a STATUS: %q", m)
	}
	select {
	case err := <-d.done:
		d.done <- err
		if err != nil {
			t.Errorf("the daemon after SIGTERM: %v, want exit 0", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the daemon did not exit within 10 s of SIGTERM")
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("the daemon left its socket after SIGTERM")
	}
	t.Logf("notifications: %q", seen)
}

// TestDaemonSocketFlagsChecked: a bad --socket-mode or --socket-group is
// a bad command line (exit 2, naming the flag), found before any
// interface is opened.
func TestDaemonSocketFlagsChecked(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct{ flag, val string }{{"--socket-mode", "0999"}, {"--socket-mode", "rw"}, {"--socket-group", "no-such-group-lf"}} {
		o, e, err := r.run(t, asRoot, nil, r.sroce, "daemon", "-d", "no-such-if-lf", c.flag, c.val)
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(e, c.flag) || strings.Contains(e, "no-such-if-lf:") {
			t.Errorf("sroce daemon %s %s: %v, want exit 2 naming %s before opening the interface\n%s%s", c.flag, c.val, err, c.flag, o, e)
		}
	}
}

// TestDaemonExitsLeaveNoSocket: a start that fails after the socket is
// made (the metrics address is taken) and a stop by SIGINT remove the
// socket; only SIGKILL leaves one (TestFindDaemon).
func TestDaemonExitsLeaveNoSocket(t *testing.T) {
	r := newRig(t)
	taken, err := net.Listen("tcp", "127.0.0.1:19140")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	sock := fmt.Sprintf("/proc/%d/root/run/sroce/sroce.sock", r.nsPid)
	o, e, err := r.run(t, asRoot, nil, r.sroce, "daemon", "-d", "lo@"+lfSysAddr, "--link", "udp", "--metrics", "127.0.0.1:19140")
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(e, "--metrics") {
		t.Errorf("a daemon whose metrics address is taken: %v, want exit 1 naming --metrics\n%s%s", err, o, e)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("the daemon that failed to start left its socket")
	}
	d := r.daemon(t, asRoot, nil, lfSysAddr)
	if err := d.stop(t, syscall.SIGINT); err != nil {
		t.Errorf("the daemon after SIGINT: %v, want exit 0", err)
	}
	if _, err := os.Lstat(sock); err == nil {
		t.Error("the daemon left its socket after SIGINT")
	}
}
