package netns

// The attacks of issue 23 on a real daemon over AF_XDP, each run as the
// unprivileged user nobody (internal/hostile's command) against daemon A
// of a veth pair while a victim run by root (another uid) moves verified
// RDMA traffic between daemons A and B throughout: daemon A must outlive
// the attack and still answer, the victim must complete every operation
// with the right data, the attacker must be refused or disconnected, and
// daemon A's memory, descriptors, mappings and threads must stay under
// the bounds below, sampled all along.
//
// The daemons run with small budgets (hostileLimits). A daemon that does
// not know these flags refuses to start; SROCE_TEST_HOSTILE_NO_LIMITS=1
// leaves them out, to watch the attacks against such a daemon.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sroce/sroce/client"
	"github.com/sroce/sroce/internal/nsutil"
	"github.com/sroce/sroce/internal/testdirs"
	"github.com/sroce/sroce/mr"
	"github.com/sroce/sroce/verbs"
	"golang.org/x/sys/unix"
)

// The budgets the daemons run with: per uid and for the whole daemon.
var hostileLimits = []string{
	"--limit-user", "conns=32,fds=2048,maps=8192,qps=256,mrs=8192,reg=256M,queue=128M",
	"--limit-total", "conns=128,fds=8192,maps=20000,qps=1024,mrs=20000,reg=1G,queue=256M",
}

// The bounds on daemon A while it is attacked, over what it had before
// (the victim connected): the totals of hostileLimits with room for what
// the budgets do not count (the daemon's own goroutines, the Go heap, the
// victim's objects).
const (
	boundFDs     = 8192 + 256
	boundMaps    = 20000 + 1024
	boundRSS     = (256 + 256) << 20 // queue budget + slack
	boundThreads = 32
)

// startHostileDaemons is startDaemons over AF_XDP (daemons run by root)
// with the budget flags (hostileLimits unless SROCE_TEST_HOSTILE_NO_LIMITS
// is set) and the sockets where nobody reaches them.
func startHostileDaemons(t *testing.T, prefix string) *daemonPair {
	t.Helper()
	nsutil.Skip(t)
	var extra []string
	if os.Getenv("SROCE_TEST_HOSTILE_NO_LIMITS") == "" {
		extra = hostileLimits
	}
	pair, err := nsutil.NewPair(nsutil.PairConfig{Prefix: prefix, Seed: 11})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pair.Close() })
	d := &daemonPair{pair: pair, bin: buildSroce(t)}
	dir := nobodyDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, side := range []struct {
		ns     *nsutil.Namespace
		ifname string
	}{{pair.A, pair.Veth.NameA}, {pair.B, pair.Veth.NameB}} {
		d.sockets[i] = filepath.Join(dir, fmt.Sprintf("d%d.sock", i))
		d.devs[i] = "sroce_" + side.ifname
		args := append([]string{"daemon", "-d", side.ifname, "--link", "xdp", "--socket", d.sockets[i]}, extra...)
		cmd := side.ns.Command(context.Background(), d.bin, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		d.procs[i] = startTool(t, cmd, side.ns.Start)
		sock, p := d.sockets[i], d.procs[i]
		if err := waitFor(ctx, "the daemon's socket "+sock, func() (bool, error) {
			if p.exited() {
				return false, fmt.Errorf("the daemon ended (a daemon without the budget flags %q refuses them):\n%v", extra, p.wait(ctx))
			}
			_, err := client.Devices(sock)
			return err == nil, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		if t.Failed() || testing.Verbose() {
			for i, p := range d.procs {
				t.Logf("daemon %d log (last 8 KiB):\n%s", i, lastBytes(p.stderr.String(), 8192))
			}
		}
	})
	return d
}

// lastBytes returns the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// nobodyDir returns a temporary directory that nobody can enter and
// write, its parents made searchable.
func nobodyDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	testdirs.Searchable(dir)
	return dir
}

// buildHostile builds the hostile client where nobody can run it.
func buildHostile(t *testing.T) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	bin := filepath.Join(nobodyDir(t), "sroce-hostile")
	cmd := exec.Command("go", "build", "-o", bin, "./internal/hostile/cmd/sroce-hostile")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building sroce-hostile: %v\n%s", err, out)
	}
	os.Chmod(bin, 0o755)
	return bin
}

// startHostile runs `sroce-hostile attack` as nobody against daemon i.
func startHostile(t *testing.T, bin string, d *daemonPair, i int, attack string, args ...string) *toolProc {
	t.Helper()
	full := append([]string{attack, "--socket", d.sockets[i], "--device", d.devs[i]}, args...)
	cmd := exec.Command(bin, full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	return startTool(t, cmd, (*exec.Cmd).Start)
}

// procUse is what a process holds at one moment.
type procUse struct {
	RSS, FDs, Maps, Threads int
}

func (u procUse) String() string {
	return fmt.Sprintf("RSS %d MiB, %d descriptors, %d mappings, %d threads", u.RSS>>20, u.FDs, u.Maps, u.Threads)
}

var (
	vmRSSRe   = regexp.MustCompile(`VmRSS:\s+(\d+) kB`)
	threadsRe = regexp.MustCompile(`Threads:\s+(\d+)`)
)

// useOf reads a process's use from /proc; ok is false when it is gone.
func useOf(pid int) (u procUse, ok bool) {
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return u, false
	}
	if m := vmRSSRe.FindSubmatch(st); m != nil {
		kb, _ := strconv.Atoi(string(m[1]))
		u.RSS = kb << 10
	}
	if m := threadsRe.FindSubmatch(st); m != nil {
		u.Threads, _ = strconv.Atoi(string(m[1]))
	}
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
		u.FDs = len(ents)
	}
	if maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid)); err == nil {
		u.Maps = bytes.Count(maps, []byte("\n"))
	}
	return u, true
}

// sampler records the most a process held, every 100 ms until stopped.
type sampler struct {
	pid     int
	mu      sync.Mutex
	peak    procUse
	samples int
	stop    chan struct{}
	done    chan struct{}
}

func sample(pid int) *sampler {
	s := &sampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for {
			if u, ok := useOf(pid); ok {
				s.mu.Lock()
				s.peak = procUse{max(s.peak.RSS, u.RSS), max(s.peak.FDs, u.FDs), max(s.peak.Maps, u.Maps), max(s.peak.Threads, u.Threads)}
				s.samples++
				s.mu.Unlock()
			}
			select {
			case <-s.stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	return s
}

// end stops sampling and returns the peak and the number of samples.
func (s *sampler) end() (procUse, int) {
	close(s.stop)
	<-s.done
	return s.peak, s.samples
}

// victim is a client of daemon A connected to one of daemon B that moves
// checked data both ways until stopped: every round a SEND, a WRITE and a
// READ of a pattern of its own, and an MR registered and deregistered on
// daemon A.
type victim struct {
	a, b   *dEnd
	rounds atomic.Int64
	err    error
	stop   chan struct{}
	done   chan struct{}
}

func startVictim(t *testing.T, d *daemonPair) *victim {
	t.Helper()
	v := &victim{a: openEnd(t, d.sockets[0], d.devs[0], 1<<20), b: openEnd(t, d.sockets[1], d.devs[1], 1<<20),
		stop: make(chan struct{}), done: make(chan struct{})}
	v.a.connect(t, v.b, 7)
	v.b.connect(t, v.a, 7)
	go func() {
		defer close(v.done)
		for r := 0; ; r++ {
			select {
			case <-v.stop:
				return
			default:
			}
			if err := v.round(r); err != nil {
				v.err = fmt.Errorf("round %d: %w", r, err)
				return
			}
			v.rounds.Add(1)
		}
	}()
	return v
}

// end stops the victim after its current round (bounded) and returns its
// first failure.
func (v *victim) end() error {
	close(v.stop)
	select {
	case <-v.done:
	case <-time.After(time.Minute):
		return fmt.Errorf("the victim's round did not end within a minute")
	}
	return v.err
}

// wait takes one completion of e's CQ, which must be a success.
func (e *dEnd) wait(what string) (verbs.WC, error) {
	wcs := make([]verbs.WC, 1)
	if _, err := e.cq.Wait(wcs, 15*time.Second); err != nil {
		return wcs[0], fmt.Errorf("%s: %w", what, err)
	}
	if wcs[0].Status != verbs.WCSuccess {
		return wcs[0], fmt.Errorf("%s: %v", what, wcs[0].Status)
	}
	return wcs[0], nil
}

// round moves 64 KiB each way with a pattern of round r and checks it.
func (v *victim) round(r int) error {
	const n = 64 << 10
	a, b := v.a, v.b
	src, dst, back := a.buf.Buf[:n], b.buf.Buf[n:2*n], a.buf.Buf[2*n:3*n]
	for i := range src {
		src[i] = byte(i*7 + r*13 + 1)
	}
	// SEND of the first 4 KiB into a receive at B.
	if err := b.qp.PostRecv(&verbs.RecvWR{WRID: uint64(r), SGL: []mr.SGE{b.mr.SGE(3*n, 4096)}}); err != nil {
		return fmt.Errorf("posting a receive: %w", err)
	}
	if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(r), Opcode: verbs.WROpSend, Flags: verbs.Signaled, SGL: []mr.SGE{a.mr.SGE(0, 4096)}}); err != nil {
		return fmt.Errorf("posting a SEND: %w", err)
	}
	if _, err := a.wait("SEND"); err != nil {
		return err
	}
	if wc, err := b.wait("receive"); err != nil {
		return err
	} else if wc.ByteLen != 4096 || !bytes.Equal(b.buf.Buf[3*n:3*n+4096], src[:4096]) {
		return fmt.Errorf("the SEND arrived as %d bytes, or damaged", wc.ByteLen)
	}
	// WRITE A -> B, then READ it back at A from B.
	if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(r), Opcode: verbs.WROpRDMAWrite, Flags: verbs.Signaled,
		SGL: []mr.SGE{a.mr.SGE(0, n)}, RemoteAddr: b.buf.Addr(n), RKey: b.mr.RKey()}); err != nil {
		return fmt.Errorf("posting a WRITE: %w", err)
	}
	if _, err := a.wait("WRITE"); err != nil {
		return err
	}
	if !bytes.Equal(dst, src) {
		return fmt.Errorf("the WRITE left other bytes")
	}
	// The READ lands in an MR registered for this round.
	m, err := a.pd.RegMR(a.buf, 2*n, n, mr.AccessLocalWrite)
	if err != nil {
		return fmt.Errorf("registering an MR: %w", err)
	}
	if err := a.qp.PostSend(&verbs.SendWR{WRID: uint64(r), Opcode: verbs.WROpRDMARead, Flags: verbs.Signaled,
		SGL: []mr.SGE{m.SGE(0, n)}, RemoteAddr: b.buf.Addr(n), RKey: b.mr.RKey()}); err != nil {
		return fmt.Errorf("posting a READ: %w", err)
	}
	if _, err := a.wait("READ"); err != nil {
		return err
	}
	if !bytes.Equal(back, src) {
		return fmt.Errorf("the READ brought other bytes")
	}
	if err := m.Dereg(); err != nil {
		return fmt.Errorf("deregistering the round's MR: %w", err)
	}
	return nil
}

// attackCase is one attack's test.
type attackCase struct {
	attack string
	args   []string
	// confine, when set, confines daemon A before the attack (as a host
	// would: a descriptor limit, a memory cgroup) and returns flags to
	// add to the attack's.
	confine func(t *testing.T, pid int) []string
}

// runAttack runs one attack against daemon A with a victim throughout and
// checks the outcome.
func runAttack(t *testing.T, c attackCase) {
	needGo(t)
	bin := buildHostile(t)
	d := startHostileDaemons(t, "sroce-hostile")
	pid := d.procs[0].cmd.Process.Pid
	args := c.args
	if c.confine != nil {
		args = append(append([]string(nil), args...), c.confine(t, pid)...)
	}
	v := startVictim(t, d)
	before, _ := useOf(pid)
	s := sample(pid)
	start := time.Now()
	h := startHostile(t, bin, d, 0, c.attack, args...)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out := h.wait(ctx)
	verr := v.end()
	peak, n := s.end()
	t.Logf("attack %s: %.1f s; daemon A before: %v; peak: %v (%d samples); victim rounds: %d\nattacker's report:\n%s%s",
		c.attack, time.Since(start).Seconds(), before, peak, n, v.rounds.Load(), out.Stdout, out.Stderr)

	checkAlive(t, d, 0)
	if verr != nil {
		t.Errorf("the victim was harmed after %d good rounds: %v", v.rounds.Load(), verr)
	} else if v.rounds.Load() == 0 {
		t.Errorf("the victim completed no round during the attack")
	}
	if out.Exit != 0 {
		t.Errorf("the attacker exited with %d (0: refused or disconnected by a daemon that still answers)", out.Exit)
	}
	for _, b := range []struct {
		what        string
		peak, bound int
	}{
		{"descriptors", peak.FDs - before.FDs, boundFDs},
		{"mappings", peak.Maps - before.Maps, boundMaps},
		{"bytes resident", peak.RSS - before.RSS, boundRSS},
		{"threads", peak.Threads - before.Threads, boundThreads},
	} {
		if b.peak > b.bound {
			t.Errorf("daemon A grew by %d %s under the attack; the bound is %d", b.peak, b.what, b.bound)
		}
	}
}

// checkAlive checks that daemon i is running and its socket answers.
func checkAlive(t *testing.T, d *daemonPair, i int) {
	t.Helper()
	_, err := client.Devices(d.sockets[i])
	if err == nil && !d.procs[i].exited() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	o := d.procs[i].wait(ctx) // a daemon that died is reaped within this
	t.Errorf("daemon %d died (socket: %v; exit %d, %v):\n%s", i, err, o.Exit, d.procs[i].cmd.ProcessState, lastBytes(o.Stderr, 4096))
}

// needGo skips when the go command (to build the hostile client) is
// missing.
func needGo(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("skipping: the go command is needed to build internal/hostile's client")
	}
}

// TestHostileDoubleRead races writers against the daemon's reads of the
// send WQEs' inline length (issue 23, attack 1), one writer fewer than the
// CPUs (the attacker's default).
func TestHostileDoubleRead(t *testing.T) {
	laneParallel(t, 11*time.Second, needHost)
	runAttack(t, attackCase{attack: "double-read", args: []string{"--duration", "10s"}})
}

// TestHostileDescriptors exhausts descriptors with completion channels,
// CQs, QPs and SRQs whose client copies are closed (issue 23, attack 2).
// The daemon's descriptor limit is 16,384, as a service's may be: today's
// daemon reaches it with one connection and ends when accept fails.
func TestHostileDescriptors(t *testing.T) {
	laneParallel(t, 11*time.Second, needHost)
	runAttack(t, attackCase{attack: "fds", args: []string{"--duration", "10s", "--conns", "8"},
		confine: func(t *testing.T, pid int) []string {
			lim := unix.Rlimit{Cur: 16384, Max: 16384}
			if err := unix.Prlimit(pid, unix.RLIMIT_NOFILE, &lim, nil); err != nil {
				t.Fatalf("limiting daemon A's descriptors: %v", err)
			}
			return nil
		}})
}

// TestHostileMappings exhausts mappings with one-page MRs, past the
// kernel's 65,530 mappings per process (issue 23, attack 3): 1,024 on each
// of 72 connections, so that the daemon stays at its limit when it drops
// a connection whose registration failed, and refilled by new connections
// while the attack holds.
func TestHostileMappings(t *testing.T) {
	laneParallel(t, 16*time.Second, needHost)
	runAttack(t, attackCase{attack: "maps", args: []string{"--duration", "15s", "--conns", "72", "--per-conn", "1024"}})
}

// TestHostileMemory creates QPs of the largest queues, up to 4,096 per
// connection on sixteen connections (issue 23, attack 4). Daemon A runs
// in a memory cgroup of 640 MiB, so that a daemon without budgets meets the
// OOM killer there and not the host's; where no memory cgroup can be
// made, the attack stops at 300 QPs on one connection (about 660 MB of a
// daemon without budgets), which the bound on its memory still catches.
func TestHostileMemory(t *testing.T) {
	laneParallel(t, 11*time.Second, needHost)
	runAttack(t, attackCase{attack: "memory", args: []string{"--duration", "10s", "--conns", "16", "--per-conn", "4096"},
		confine: func(t *testing.T, pid int) []string {
			if err := memoryCgroup(t, pid, 640<<20); err != nil {
				t.Logf("daemon A runs without a memory cgroup (%v): the attack stops at 300 QPs", err)
				return []string{"--conns", "1", "--per-conn", "300"}
			}
			return nil
		}})
}

// memoryCgroup moves pid into a new memory cgroup of limit bytes (cgroup
// v1's memory controller or cgroup v2), or says why it cannot.
func memoryCgroup(t *testing.T, pid int, limit int64) error {
	t.Helper()
	self, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return fmt.Errorf("no cgroups: %w", err)
	}
	var parent, limitFile string
	for _, line := range strings.Split(strings.TrimSpace(string(self)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		if f[1] == "memory" {
			parent, limitFile = filepath.Join("/sys/fs/cgroup/memory", f[2]), "memory.limit_in_bytes"
			break
		}
		if f[0] == "0" && f[1] == "" {
			if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
				parent, limitFile = filepath.Join("/sys/fs/cgroup", f[2]), "memory.max"
			}
		}
	}
	if parent == "" {
		return fmt.Errorf("no memory cgroup controller")
	}
	dir := filepath.Join(parent, fmt.Sprintf("sroce-hostile-%d", pid))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return fmt.Errorf("making a memory cgroup: %w", err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(parent, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		os.Remove(dir)
	})
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		return fmt.Errorf("limiting the memory cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("moving the daemon into the memory cgroup %s: %w", dir, err)
	}
	return nil
}
