package daemon_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
)

// The environment of TestHelperProcess: what the process is for, and the
// daemon's socket.
const (
	envHelper = "SROCE_DAEMON_TEST_HELPER"
	envSocket = "SROCE_DAEMON_TEST_SOCKET"
	envPort   = "SROCE_DAEMON_TEST_PORT"
)

// helperCmd returns a command that runs this test binary as another client
// process (TestHelperProcess) in mode, through the path exe (a link gives
// the process another name).
func helperCmd(t *testing.T, exe, mode, socket string, env ...string) *exec.Cmd {
	t.Helper()
	// A client process that hangs is killed after a minute, and says so
	// by its exit.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestHelperProcess$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), append([]string{envHelper + "=" + mode, envSocket + "=" + socket}, env...)...)
	return cmd
}

// testExe returns this test binary's path.
func testExe(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// capEff returns this process's effective capabilities.
func capEff(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			c, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
	}
	t.Fatal("no CapEff in /proc/self/status")
	return 0
}

const capNetBindService = 1 << 10

// TestHelperProcess is a client process for the tests below; run
// directly, it does nothing.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(envHelper)
	if mode == "" {
		t.Skip("a client process for other tests of this package")
	}
	socket := os.Getenv(envSocket)
	switch mode {
	case "hold":
		// A client with an MR on sroce_mem0, until its standard input
		// closes.
		x, err := client.Open(socket, "sroce_mem0")
		if err != nil {
			t.Fatal(err)
		}
		pd, err := x.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		buf, err := x.Alloc(1 << 16)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pd.RegMR(buf, 0, 1<<16, mr.AccessLocalWrite); err != nil {
			t.Fatal(err)
		}
		os.Stdout.WriteString("ready\n")
		io.Copy(io.Discard, os.Stdin)
		x.Close()
	case "drop":
		// Drop CAP_NET_BIND_SERVICE from the bounding set and become
		// the client again without it: root's capabilities after exec
		// are the bounding set. The thread that drops it is the one
		// that execs.
		runtime.LockOSThread()
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, 10, 0, 0, 0); err != nil {
			t.Fatalf("PR_CAPBSET_DROP: %v", err)
		}
		var env []string
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, envHelper+"=") {
				env = append(env, e)
			}
		}
		env = append(env, envHelper+"=nocap")
		if err := syscall.Exec(testExe(t), os.Args, env); err != nil {
			t.Fatalf("exec: %v", err)
		}
	case "nocap", "userns":
		c := capEff(t)
		if mode == "nocap" && c&capNetBindService != 0 {
			t.Fatalf("CAP_NET_BIND_SERVICE was not dropped: CapEff %x", c)
		}
		if mode == "userns" && c&capNetBindService == 0 {
			t.Fatalf("the user namespace gave no CAP_NET_BIND_SERVICE: CapEff %x", c)
		}
		port, _ := strconv.Atoi(os.Getenv(envPort))
		checkPrivilegedPorts(t, socket, false, uint16(port))
	default:
		t.Fatalf("unknown helper mode %q", mode)
	}
}

// checkPrivilegedPorts binds, resolves and listens through the daemon's
// CM as this process: ports below 1024 succeed only if privileged, free
// is a port above that always does.
func checkPrivilegedPorts(t *testing.T, socket string, privileged bool, free uint16) {
	t.Helper()
	addr := [4]byte{10, 0, 0, 1} // sroce_mem0's address
	a := dialCM(t, &rig{socket: socket})
	ch := a.channel()
	ids := make([]uint32, 3)
	for i := range ids {
		id, err := a.createID(ch)
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	want := func(what string, err error) {
		t.Helper()
		if privileged && err != nil {
			t.Errorf("%s with CAP_NET_BIND_SERVICE: %v", what, err)
		}
		if !privileged && !errors.Is(err, unix.EACCES) {
			t.Errorf("%s without CAP_NET_BIND_SERVICE: %v, want EACCES", what, err)
		}
	}
	_, err := a.bind(ids[0], addr, 80)
	want("CM_BIND to port 80", err)
	resolve := ctl.CMAddrReq{ID: ids[1], Src: ctl.CMAddr{Family: unix.AF_INET, Port: 81},
		Dst: ctl.CMAddr{Family: unix.AF_INET}, TimeoutMS: 1000}
	copy(resolve.Src.Addr[:], addr[:])
	copy(resolve.Dst.Addr[:], []byte{10, 0, 0, 2})
	_, _, err = a.call(ctl.OpCMResolveAddr, ctl.Bytes(&resolve))
	want("CM_RESOLVE_ADDR from port 81", err)
	if !privileged {
		if info, err := a.bind(ids[0], addr, free); err != nil || info.Src.Port != free {
			t.Errorf("CM_BIND to port %d: %v (port %d)", free, err, info.Src.Port)
		}
	}
	listen := ctl.CMIDArg{ID: ids[2], Arg: 8}
	if _, _, err := a.call(ctl.OpCMListen, ctl.Bytes(&listen)); err != nil {
		t.Errorf("CM_LISTEN on an unbound ID: %v", err)
	}
	b, _, err := a.call(ctl.OpCMQuery, ctl.Bytes(&ctl.CMIDArg{ID: ids[2]}))
	if info, _ := ctl.Get[ctl.CMIDInfo](b); err != nil || info.Src.Port < 1024 {
		t.Errorf("the listener's port: %d, %v; want an ephemeral one", info.Src.Port, err)
	}
}

// TestCMPrivilegedPorts checks that a CM bind below port 1024, and a
// resolve that binds there, need CAP_NET_BIND_SERVICE in the client, as
// with the kernel's rdma_cm: root keeps it; a root process without it in
// its bounding set, and a process whose capabilities are those of a user
// namespace it made, get EACCES, and still bind a high port and listen on
// an ephemeral one.
func TestCMPrivilegedPorts(t *testing.T) {
	if os.Geteuid() != 0 || capEff(t)&capNetBindService == 0 {
		t.Skip("skipping: needs root with CAP_NET_BIND_SERVICE (to check it is kept, then drop it in a child)")
	}
	r := newRig(t, daemon.Options{})
	t.Run("root", func(t *testing.T) { checkPrivilegedPorts(t, r.socket, true, 0) })
	run := func(t *testing.T, cmd *exec.Cmd) {
		out, err := cmd.CombinedOutput()
		if err != nil || !bytes.Contains(out, []byte("--- PASS: TestHelperProcess")) {
			t.Errorf("the client process failed (%v):\n%s", err, out)
		}
	}
	t.Run("without the capability", func(t *testing.T) {
		const capSetPCap = 1 << 8
		if capEff(t)&capSetPCap == 0 {
			t.Skip("skipping: dropping CAP_NET_BIND_SERVICE from a child's bounding set needs CAP_SETPCAP")
		}
		run(t, helperCmd(t, testExe(t), "drop", r.socket, envPort+"=20000"))
	})
	t.Run("user namespace", func(t *testing.T) {
		cmd := helperCmd(t, testExe(t), "userns", r.socket, envPort+"=20001")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}}}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Skipf("skipping: this host makes no user namespace: %v", err)
		}
		err := cmd.Wait()
		if err != nil || !bytes.Contains(out.Bytes(), []byte("--- PASS: TestHelperProcess")) {
			t.Errorf("the client process failed (%v):\n%s", err, out.Bytes())
		}
	})
}

// TestQueryStatsPrivacy checks QUERY_STATS: refused with EINVAL before
// OPEN (the connection stays), then answered for the context's own device
// only, with how many clients it has and nothing of who they are.
func TestQueryStatsPrivacy(t *testing.T) {
	r := newRig(t, daemon.Options{})
	a := dialCM(t, r)
	mem0 := ctl.Open{}
	ctl.SetName(mem0.Name[:], "sroce_mem0")
	if _, _, err := a.call(ctl.OpQueryStats, ctl.Bytes(&mem0)); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("QUERY_STATS before OPEN: %v, want EINVAL", err)
	}
	_, fds, err := a.call(ctl.OpOpen, ctl.Bytes(&mem0))
	for _, fd := range fds {
		unix.Close(fd)
	}
	if err != nil {
		t.Fatalf("OPEN after the refused QUERY_STATS: %v", err)
	}

	// Another process, named peerclient, holds an MR on the device.
	link := filepath.Join(t.TempDir(), "peerclient")
	if err := os.Symlink(testExe(t), link); err != nil {
		t.Fatal(err)
	}
	holder := helperCmd(t, link, "hold", r.socket)
	in, _ := holder.StdinPipe()
	out, _ := holder.StdoutPipe()
	var errOut bytes.Buffer
	holder.Stderr = &errOut
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); holder.Wait() })
	ready := make(chan string, 1)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			if s.Text() == "ready" {
				ready <- s.Text()
				break
			}
		}
		close(ready)
		io.Copy(io.Discard, out)
	}()
	select {
	case s, ok := <-ready:
		if !ok || s != "ready" {
			holder.Wait()
			t.Fatalf("the other client did not get ready:\n%s", errOut.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the other client was not ready after 30 s")
	}

	if c, err := os.ReadFile("/proc/" + strconv.Itoa(holder.Process.Pid) + "/comm"); err != nil || strings.TrimSpace(string(c)) != "peerclient" {
		t.Fatalf("the other client's program name is %q (%v), want peerclient", c, err)
	}
	b, _, err := a.call(ctl.OpQueryStats, ctl.Bytes(&mem0))
	if err != nil {
		t.Fatalf("QUERY_STATS after OPEN: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{"device": true, "interface": true, "link_mode": true, "link_mode_reason": true,
		"port_state": true, "active_mtu": true, "seconds_open": true, "clients": true, "counters": true,
		"link_counters": true, "cm_counters": true, "port_error": true}
	for k := range m {
		if !allowed[k] {
			t.Errorf("QUERY_STATS tells %q: %s", k, m[k])
		}
	}
	if bytes.Contains(b, []byte("peerclient")) || bytes.Contains(b, []byte(`"pid"`)) || bytes.Contains(b, []byte(`"comm"`)) {
		t.Errorf("QUERY_STATS names another client: %s", b)
	}
	var st ctl.Stats
	json.Unmarshal(b, &st)
	if st.Device != "sroce_mem0" || st.Clients != 2 {
		t.Errorf("QUERY_STATS: device %q, %d clients; want sroce_mem0, 2", st.Device, st.Clients)
	}
	mem1 := ctl.Open{}
	ctl.SetName(mem1.Name[:], "sroce_mem1")
	if _, _, err := a.call(ctl.OpQueryStats, ctl.Bytes(&mem1)); !errors.Is(err, unix.EINVAL) {
		t.Errorf("QUERY_STATS of another device: %v, want EINVAL", err)
	}
	if b, _, err := a.call(ctl.OpQueryStats, ctl.Bytes(&ctl.Open{})); err != nil || !bytes.Contains(b, []byte(`"sroce_mem0"`)) {
		t.Errorf("QUERY_STATS of no name: %v, %s; want the context's device", err, b)
	}
	// client.Stats opens a context to ask, and counts the others.
	cs, err := client.Stats(r.socket, "sroce_mem0")
	if err != nil || cs.Device != "sroce_mem0" || cs.Clients != 2 {
		t.Errorf("client.Stats: %+v, %v; want sroce_mem0 with 2 other clients", cs, err)
	}
}

// TestListenModes checks the daemon's socket and the directories Listen
// makes under a umask of 0 and of 077: the socket is 0666 (as
// /dev/infiniband/uverbs*), the directories 0755, and no private
// directory is left behind; a stale socket is replaced.
func TestListenModes(t *testing.T) {
	for _, mask := range []int{0, 0o077} {
		dir := filepath.Join(t.TempDir(), "run", "sroce")
		path := filepath.Join(dir, "sroce.sock")
		old := syscall.Umask(mask)
		ln, err := daemon.Listen(path)
		syscall.Umask(old)
		if err != nil {
			t.Fatal(err)
		}
		check := func() {
			t.Helper()
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Type() != fs.ModeSocket || fi.Mode().Perm() != daemon.SocketMode {
				t.Errorf("umask %03o: the socket is %v, want a socket of mode %v", mask, fi.Mode(), fs.FileMode(daemon.SocketMode))
			}
			for _, p := range []string{dir, filepath.Dir(dir)} {
				fi, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				if fi.Mode().Perm() != daemon.SocketDirMode {
					t.Errorf("umask %03o: %s is %v, want %v", mask, p, fi.Mode().Perm(), fs.FileMode(daemon.SocketDirMode))
				}
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("umask %03o: the directory holds %d entries, want the socket only", mask, len(entries))
			}
		}
		check()
		ln.Close()
		old = syscall.Umask(mask)
		ln, err = daemon.Listen(path) // over the stale socket
		syscall.Umask(old)
		if err != nil {
			t.Fatalf("listening over a stale socket: %v", err)
		}
		check()
		ln.Close()
	}
}
