package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/daemon/ctl"
	"github.com/sroce/sroce/mr"
)

// nobody runs a command as uid and gid 65534 without groups.
func nobody(ctx context.Context, name string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "setpriv", append([]string{"--reuid", "65534", "--regid", "65534", "--clear-groups", name}, args...)...)
}

// resourceJSON runs "sroce resource KIND --json" (as nobody with asNobody)
// and decodes its array.
func resourceJSON[T any](t *testing.T, d *liveDaemon, asNobody bool, kind string) []T {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	args := []string{"resource", kind, "--json", "--socket", d.socket}
	cmd := exec.CommandContext(ctx, d.bin, args...)
	if asNobody {
		cmd = nobody(ctx, d.bin, args...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("sroce resource %s --json (nobody: %v): %v\n%s", kind, asNobody, err, stderr.String())
	}
	var v []T
	if err := json.Unmarshal(out, &v); err != nil {
		t.Fatalf("sroce resource %s --json does not parse as an array: %v\n%s", kind, err, out)
	}
	return v
}

// TestResourceRealPrograms runs an ibv_rc_pingpong server as root and one
// as nobody, both waiting for their clients with their objects made, and
// checks "sroce resource" from root and from nobody: each program's QP
// with the QPN it printed, state INIT, its pid, uid and program name; the
// MRs' keys and addresses to their owner's uid and root only; the text
// form lines up with the JSON.
func TestResourceRealPrograms(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (to run programs as nobody)")
	}
	needPrograms(t, "ibv_rc_pingpong", "ibv_devinfo", "ss", "setpriv", "stdbuf")
	d := startLiveDaemon(t, "127.0.0.85", "127.0.0.1:19203")
	gid := d.gidIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The library sroce run built, for nobody's program (it cannot write
	// root's cache).
	libOut, err := exec.CommandContext(ctx, d.bin, "run", "--print-lib").Output()
	if err != nil {
		t.Fatalf("sroce run --print-lib: %v", err)
	}
	lib := strings.TrimSpace(string(libOut))

	type server struct {
		cmd  *exec.Cmd
		out  bytes.Buffer
		port int
		qpn  uint32
		uid  uint32
	}
	start := func(port int, asNobody bool) *server {
		s := &server{port: port}
		// Line-buffered: it prints its QPN, then waits.
		args := []string{"-oL", "ibv_rc_pingpong", "-d", "sroce_lo", "-g", gid, "-p", strconv.Itoa(port)}
		if asNobody {
			s.cmd = nobody(ctx, "stdbuf", args...)
			s.cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+lib, "SROCE_SOCKET="+d.socket)
			s.uid = 65534
		} else {
			s.cmd = d.command(ctx, "stdbuf", args...)
		}
		s.cmd.Stdout, s.cmd.Stderr = &s.out, &s.out
		if err := s.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.cmd.Process.Kill(); s.cmd.Wait() })
		waitListen(t, port, s.cmd, &s.out)
		// It printed its QPN before it listened.
		m := regexp.MustCompile(`local address:.*QPN 0x([0-9a-f]+)`).FindStringSubmatch(s.out.String())
		if m == nil {
			t.Fatalf("ibv_rc_pingpong printed no local QPN:\n%s", s.out.String())
		}
		n, _ := strconv.ParseUint(m[1], 16, 32)
		s.qpn = uint32(n)
		return s
	}
	root := start(19204, false)
	nob := start(19205, true)

	for _, viewer := range []struct {
		name  string
		uid   uint32
		as    bool
		sees  func(owner uint32) bool
		other string
	}{
		{"root", 0, false, func(uint32) bool { return true }, ""},
		{"nobody", 65534, true, func(o uint32) bool { return o == 65534 }, ""},
	} {
		qps := resourceJSON[ctl.ResQP](t, d, viewer.as, "qp")
		for _, s := range []*server{root, nob} {
			var got []ctl.ResQP
			for _, q := range qps {
				if q.LQPN == s.qpn {
					got = append(got, q)
				}
			}
			if len(got) != 1 {
				t.Fatalf("%s: %d QPs with QPN %#x, want 1: %+v", viewer.name, len(got), s.qpn, qps)
			}
			q := got[0]
			comm, _ := os.ReadFile("/proc/" + strconv.Itoa(int(q.PID)) + "/comm")
			if q.State != "INIT" || q.Type != "RC" || q.Dev != "sroce_lo" || q.Port != 1 || q.UID != s.uid || q.Comm != "ibv_rc_pingpong" ||
				strings.TrimSpace(string(comm)) != "ibv_rc_pingpong" || !descends(int(q.PID), s.cmd.Process.Pid) {
				t.Errorf("%s: the QP of the server of uid %d (pid %d): %+v", viewer.name, s.uid, s.cmd.Process.Pid, q)
			}
		}
		mrs := resourceJSON[ctl.ResMR](t, d, viewer.as, "mr")
		owners := map[uint32]int{}
		for _, m := range mrs {
			owners[m.UID]++
			full := m.LKey != nil && m.RKey != nil && m.IOVA != nil
			none := m.LKey == nil && m.RKey == nil && m.IOVA == nil
			if viewer.sees(m.UID) && !full || !viewer.sees(m.UID) && !none {
				t.Errorf("%s sees MR %+v of uid %d with lkey %v rkey %v iova %v", viewer.name, m, m.UID, m.LKey, m.RKey, m.IOVA)
			}
			if m.Length != 4096 || m.Access != "LOCAL_WRITE" || m.Comm != "ibv_rc_pingpong" {
				t.Errorf("%s: MR %+v, want 4096 bytes of LOCAL_WRITE of ibv_rc_pingpong", viewer.name, m)
			}
		}
		if owners[0] != 1 || owners[65534] != 1 {
			t.Errorf("%s: MRs by uid %v, want one of root's and one of nobody's", viewer.name, owners)
		}
		cqs := resourceJSON[ctl.ResCQ](t, d, viewer.as, "cq")
		for _, c := range cqs {
			if c.Users != 1 || c.CQE < 1 {
				t.Errorf("%s: CQ %+v, want one user (the QP) and a size", viewer.name, c)
			}
		}
		var clients []ctl.ResClient
		for _, c := range resourceJSON[ctl.ResClient](t, d, viewer.as, "clients") {
			// Earlier queries' connections, closed, may not be gone yet.
			if c.Dev != "" {
				clients = append(clients, c)
			}
		}
		if len(clients) != 2 {
			t.Errorf("%s: %d clients, want the two servers (the asking connection is not listed): %+v", viewer.name, len(clients), clients)
		}
	}

	// The text: a line per QP, and the keys of root's MR as "-" to nobody.
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	out, err := nobody(ctx2, d.bin, "resource", "mr", "--socket", d.socket).CombinedOutput()
	if err != nil {
		t.Fatalf("sroce resource mr as nobody: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("sroce resource mr as nobody: %d lines, want 2:\n%s", len(lines), out)
	}
	for _, l := range lines {
		hiddenKeys := strings.Contains(l, "lkey -") && strings.Contains(l, "rkey -") && strings.Contains(l, "iova -")
		if strings.HasSuffix(l, "uid 0") != hiddenKeys {
			t.Errorf("sroce resource mr as nobody: %q: root's keys must be hidden, nobody's shown", l)
		}
	}
	if strings.Index(lines[0], "comm") != strings.Index(lines[1], "comm") {
		t.Errorf("the columns do not line up:\n%s", out)
	}
	out, err = exec.CommandContext(ctx2, d.bin, "resource", "qp", "--socket", d.socket).CombinedOutput()
	want := regexp.MustCompile(`(?m)^link sroce_lo/1 lqpn ` + strconv.Itoa(int(root.qpn)) + ` +rqpn 0 +type RC +state INIT .* comm ibv_rc_pingpong uid 0$`)
	if err != nil || !want.Match(out) {
		t.Errorf("sroce resource qp: %v\n%s\nwant a line matching %s", err, out, want)
	}
	out, err = exec.CommandContext(ctx2, d.bin, "resource", "--socket", d.socket).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^dev sroce_lo pd 2 cq 2 qp 2 cm_id 0 mr 2 ctx 2 srq 0 reg-bytes 8192$`).Match(out) {
		t.Errorf("sroce resource: %v\n%s\nwant the two servers' objects counted on sroce_lo", err, out)
	}
}

// descends reports whether pid is ancestor or a descendant of it (sroce
// run starts the program as its child).
func descends(pid, ancestor int) bool {
	for i := 0; i < 8 && pid > 1; i++ {
		if pid == ancestor {
			return true
		}
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid ...: the comm may hold spaces.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) < 2 {
			return false
		}
		pid, _ = strconv.Atoi(f[1])
	}
	return false
}

// TestResourcePages checks that a listing longer than a datagram comes in
// pages and lists every object once, and that a bad kind is EINVAL and
// a usage error.
func TestResourcePages(t *testing.T) {
	socket, _ := startInProcess(t, "127.0.0.86")
	const contexts, perContext = 3, 70
	for i := 0; i < contexts; i++ {
		x, err := client.Open(socket, "sroce_lo")
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		pd, err := x.AllocPD()
		if err != nil {
			t.Fatal(err)
		}
		buf, err := x.Alloc(perContext * 4096)
		if err != nil {
			t.Fatal(err)
		}
		for j := 0; j < perContext; j++ {
			if _, err := pd.RegMR(buf, j*4096, 4096, mr.AccessLocalWrite|mr.AccessRemoteRead); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	items, err := client.Resources(socket, ctl.ResKindMR)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d MRs listed in %v", len(items), time.Since(start))
	if len(items) != contexts*perContext {
		t.Fatalf("%d MRs listed, want %d", len(items), contexts*perContext)
	}
	// More than a datagram holds: it came in pages.
	size := 0
	seen := map[[2]uint64]bool{}
	for _, it := range items {
		size += len(it)
		var m ctl.ResMR
		if err := json.Unmarshal(it, &m); err != nil {
			t.Fatal(err)
		}
		k := [2]uint64{m.Ctx, uint64(m.MRN)}
		if seen[k] {
			t.Errorf("MR %v listed twice", k)
		}
		seen[k] = true
		if m.LKey == nil || m.Access != "LOCAL_WRITE|REMOTE_READ" || m.Length != 4096 {
			t.Errorf("MR %+v, want its keys (the owner asks) and 4096 bytes LOCAL_WRITE|REMOTE_READ", m)
		}
	}
	if size <= ctl.MaxMsg {
		t.Errorf("the listing is %d bytes, not more than a datagram: the test does not page", size)
	}
	if _, err := client.Resources(socket, 99); err == nil || !strings.Contains(err.Error(), "invalid argument") {
		t.Errorf("kind 99: %v, want EINVAL", err)
	}
	code, _, stderr := runSroce(t, nil, "resource", "qps", "--socket", socket)
	if code != exitUsage || !strings.Contains(stderr, `unknown object kind "qps"`) {
		t.Errorf("sroce resource qps: exit %d, %q", code, stderr)
	}
	code, stdout, stderr := runSroce(t, nil, "resource", "clients", "--json", "--socket", socket)
	var all, cs []ctl.ResClient
	err = json.Unmarshal([]byte(stdout), &all)
	for _, c := range all {
		// Earlier queries' connections, closed, may not be gone yet.
		if c.Dev != "" {
			cs = append(cs, c)
		}
	}
	if code != exitOK || err != nil || len(cs) != contexts {
		t.Errorf("sroce resource clients --json: exit %d, %v, %d clients (want %d)\n%s%s", code, err, len(cs), contexts, stdout, stderr)
	}
	for _, c := range cs {
		if c.MRs != perContext || c.PDs != 1 || c.RegBytes != perContext*4096 || c.Dev != "sroce_lo" {
			t.Errorf("client %+v, want %d MRs, one PD, %d bytes on sroce_lo", c, perContext, perContext*4096)
		}
	}
	code, _, stderr = runSroce(t, nil, "resource", "--socket", filepath.Join(t.TempDir(), "none.sock"))
	if code != exitProblem || !strings.Contains(stderr, "none.sock") {
		t.Errorf("sroce resource without a daemon: exit %d, %q", code, stderr)
	}
}

// TestResourceCMAndSRQ lists the CM ID of an rping server listening and
// the SRQ of an ibv_srq_pingpong server waiting, both through the daemon.
func TestResourceCMAndSRQ(t *testing.T) {
	needPrograms(t, "ibv_srq_pingpong", "rping", "ibv_devinfo", "ss")
	d := startLiveDaemon(t, "127.0.0.88", "127.0.0.1:19206")
	gid := d.gidIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	startServer := func(port int, prog string, args ...string) {
		cmd := d.command(ctx, prog, args...)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		waitListen(t, port, cmd, &out)
	}
	startServer(19207, "ibv_srq_pingpong", "-d", "sroce_lo", "-g", gid, "-p", "19207", "-q", "4", "-r", "64")
	srqs := resourceJSON[ctl.ResSRQ](t, d, false, "srq")
	if len(srqs) != 1 || srqs[0].Type != "BASIC" || srqs[0].Users != 4 || srqs[0].MaxWR < 64 || srqs[0].Comm != "ibv_srq_pingpon" {
		t.Errorf("the SRQ of ibv_srq_pingpong -q 4 -r 64: %+v, want one BASIC SRQ of at least 64 WRs used by 4 QPs", srqs)
	}
	qps := resourceJSON[ctl.ResQP](t, d, false, "qp")
	withSRQ := 0
	for _, q := range qps {
		if len(srqs) == 1 && q.SRQN == srqs[0].SRQN && q.Ctx == srqs[0].Ctx {
			withSRQ++
		}
	}
	if withSRQ != 4 {
		t.Errorf("%d QPs name the SRQ, want 4: %+v", withSRQ, qps)
	}

	// rping's server listens on its CM ID, bound to the daemon's address;
	// the TCP port is not rping's (RDMA CM ports are their own), so wait
	// for the listing.
	cmd := d.command(ctx, "rping", "-s", "-a", d.addr, "-p", "19208")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	want := d.addr + ":19208"
	var ids []ctl.ResCMID
	for deadline := time.Now().Add(30 * time.Second); ; {
		ids = resourceJSON[ctl.ResCMID](t, d, false, "cm_id")
		if len(ids) == 1 && ids[0].State == "LISTEN" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no listening CM ID of rping within 30 s: %+v\n%s", ids, out.String())
		}
		// wall clock: waits for a real rping process
		time.Sleep(50 * time.Millisecond)
	}
	id := ids[0]
	if id.PS != "TCP" || id.QPType != "RC" || id.SrcAddr != want || id.Comm != "rping" || id.Dev != "sroce_lo" || id.Port != 1 {
		t.Errorf("rping's listening CM ID: %+v, want TCP, RC, source %s, on sroce_lo/1", id, want)
	}
	text, err := exec.CommandContext(ctx, d.bin, "resource", "cm_id", "--socket", d.socket).CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^link sroce_lo/1 cm-idn \d+ lqpn 0 qp-type RC state LISTEN ps TCP src-addr `+regexp.QuoteMeta(want)+` dst-addr - ctxn \d+ pid \d+ comm rping uid 0$`).Match(text) {
		t.Errorf("sroce resource cm_id: %v\n%s", err, text)
	}
}

// TestResourcePIDNamespace runs "sroce resource qp" in a PID namespace of
// its own, with an ibv_rc_pingpong server in it and one outside: it lists
// only the server of its namespace, under the pid the namespace knows.
func TestResourcePIDNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("skipping: needs root (unshare --pid)")
	}
	needPrograms(t, "ibv_rc_pingpong", "ibv_devinfo", "ss", "unshare", "stdbuf")
	d := startLiveDaemon(t, "127.0.0.89", "127.0.0.1:19209")
	gid := d.gidIndex(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	outside := d.command(ctx, "ibv_rc_pingpong", "-d", "sroce_lo", "-g", gid, "-p", "19211")
	var outsideOut bytes.Buffer
	outside.Stdout, outside.Stderr = &outsideOut, &outsideOut
	if err := outside.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { outside.Process.Kill(); outside.Wait() })
	waitListen(t, 19211, outside, &outsideOut)
	libOut, err := exec.CommandContext(ctx, d.bin, "run", "--print-lib").Output()
	if err != nil {
		t.Fatalf("sroce run --print-lib: %v", err)
	}
	script := `LD_LIBRARY_PATH="$1" SROCE_SOCKET="$2" ibv_rc_pingpong -d sroce_lo -g "$3" -p 19212 >/dev/null 2>&1 &
echo "pid $!"
i=0
while ! ss -Hltn 'sport = :19212' | grep -q . && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done
"$4" resource qp --json --socket "$2"
kill $!`
	out, err := exec.CommandContext(ctx, "unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", script, "sh",
		strings.TrimSpace(string(libOut)), d.socket, gid, d.bin).CombinedOutput()
	if err != nil {
		t.Fatalf("in a PID namespace: %v\n%s", err, out)
	}
	first, rest, _ := strings.Cut(string(out), "\n")
	var inner int32
	if _, err := fmt.Sscanf(first, "pid %d", &inner); err != nil {
		t.Fatalf("no pid line: %q", out)
	}
	var qps []ctl.ResQP
	if err := json.Unmarshal([]byte(rest), &qps); err != nil {
		t.Fatalf("sroce resource qp --json in the namespace: %v\n%s", err, out)
	}
	if len(qps) != 1 || qps[0].PID != inner || qps[0].Comm != "ibv_rc_pingpong" {
		t.Errorf("in a PID namespace: %+v, want only the QP of its own server, pid %d", qps, inner)
	}
}
