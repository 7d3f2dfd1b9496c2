package nsutil

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// The helper modes re-run this test binary as a child process that
// creates namespaces and then gets killed or signalled.
const helperEnv = "NSUTIL_TEST_HELPER"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		os.Exit(m.Run())
	case "create-and-hang":
		ns, err := New(os.Getenv("NSUTIL_TEST_PREFIX"))
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		fmt.Println(ns.Name())
		time.Sleep(time.Minute)
		os.Exit(3)
	case "signals":
		p, err := NewPair(PairConfig{Prefix: os.Getenv("NSUTIL_TEST_PREFIX")})
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(2)
		}
		HandleSignals(func() { fmt.Println("cleanup ran") })
		fmt.Println(p.A.Name(), p.B.Name())
		time.Sleep(time.Minute)
		os.Exit(3)
	}
	os.Exit(4)
}

// testPrefix returns a namespace prefix unique to the test, so concurrent
// runs and other users of the default prefix are not disturbed.
func testPrefix(t *testing.T) string {
	return "sroce-nsutil-" + strings.ToLower(strings.TrimPrefix(t.Name(), "Test"))
}

func newNS(t *testing.T) *Namespace {
	t.Helper()
	Skip(t)
	ns, err := New(testPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ns.Close() })
	return ns
}

func newPair(t *testing.T, cfg PairConfig) *Pair {
	t.Helper()
	Skip(t)
	if cfg.Prefix == "" {
		cfg.Prefix = testPrefix(t)
	}
	p, err := NewPair(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// nsInode returns the inode of a namespace file.
func nsInode(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

func TestParsePid(t *testing.T) {
	for _, c := range []struct {
		name, prefix string
		pid          int
		ok           bool
	}{
		{"sroce-123-4", "sroce", 123, true},
		{"sroce-rxe-123-4", "sroce", 0, false},
		{"sroce-rxe-123-4", "sroce-rxe", 123, true},
		{"sroce-123", "sroce", 0, false},
		{"sroce-123-4x", "sroce", 0, false},
		{"sroce-0-1", "sroce", 0, false},
		{"other-123-4", "sroce", 0, false},
		{"sroce--4", "sroce", 0, false},
	} {
		pid, ok := parsePid(c.name, c.prefix)
		if pid != c.pid || ok != c.ok {
			t.Errorf("parsePid(%q, %q) = %d, %v; want %d, %v", c.name, c.prefix, pid, ok, c.pid, c.ok)
		}
	}
}

func TestNetemArgs(t *testing.T) {
	n := Netem{Loss: 2, Reorder: 25, Delay: time.Millisecond}
	if got, want := n.String(), "delay 1ms loss 2% reorder 25%"; got != want {
		t.Errorf("Args = %q, want %q", got, want)
	}
	n = Netem{Delay: 10 * time.Millisecond, Jitter: time.Millisecond, Duplicate: 0.5, Corrupt: 1, Limit: 5000}
	if got, want := n.String(), "delay 10ms 1ms duplicate 0.5% corrupt 1% limit 5000"; got != want {
		t.Errorf("Args = %q, want %q", got, want)
	}
}

// TestNamespace creates a namespace and checks it is visible under
// /run/netns (and to `ip netns`), has loopback up and nothing else, and is
// gone after Close.
func TestNamespace(t *testing.T) {
	ns := newNS(t)
	if !strings.HasPrefix(ns.Name(), testPrefix(t)+fmt.Sprintf("-%d-", os.Getpid())) {
		t.Errorf("name %q does not follow <prefix>-<pid>-<n>", ns.Name())
	}
	if _, err := os.Stat(ns.Path()); err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("ip"); err == nil {
		out, err := exec.Command("ip", "netns", "list").CombinedOutput()
		if err != nil {
			t.Fatalf("ip netns list: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), ns.Name()) {
			t.Errorf("ip netns list does not show %s:\n%s", ns.Name(), out)
		}
	}
	if nsInode(t, ns.Path()) == nsInode(t, "/proc/self/ns/net") {
		t.Fatal("the namespace file is the host's namespace")
	}
	var ifaces []net.Interface
	if err := ns.Do(func() (err error) {
		ifaces, err = net.Interfaces()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(ifaces) != 1 || ifaces[0].Name != "lo" || ifaces[0].Flags&net.FlagUp == 0 {
		t.Errorf("interfaces inside = %+v, want only lo, up", ifaces)
	}
	var dad []byte
	if err := ns.Do(func() (err error) {
		dad, err = os.ReadFile("/proc/sys/net/ipv6/conf/default/accept_dad")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(dad)) != "0" {
		t.Errorf("accept_dad = %q, want 0", dad)
	}
	if err := ns.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(ns.Path()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after Close, %s: %v (want not exist)", ns.Path(), err)
	}
	if err := ns.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := ns.Do(func() error { return nil }); err == nil {
		t.Error("Do after Close succeeded")
	}
	for _, n := range Live() {
		if n == ns.Name() {
			t.Errorf("%s still registered as live after Close", n)
		}
	}
}

// TestDo checks that Do runs inside the namespace, leaves no thread of the
// process behind in it, and passes errors and panics through.
func TestDo(t *testing.T) {
	ns := newNS(t)
	want := nsInode(t, ns.Path())
	host := nsInode(t, "/proc/self/ns/net")
	for i := 0; i < 50; i++ {
		var got uint64
		if err := ns.Do(func() error {
			var st unix.Stat_t
			err := unix.Stat("/proc/thread-self/ns/net", &st)
			got = st.Ino
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Fatalf("inside Do: namespace inode %d, want %d", got, want)
		}
	}
	// Every thread of the process is back in the host namespace.
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join("/proc/self/task", task.Name(), "ns/net"), &st); err != nil {
			continue // thread exited meanwhile
		}
		if st.Ino != host {
			t.Errorf("thread %s is in namespace %d after Do, want host %d", task.Name(), st.Ino, host)
		}
	}

	sentinel := errors.New("sentinel")
	if err := ns.Do(func() error { return sentinel }); !errors.Is(err, sentinel) {
		t.Errorf("Do error = %v, want sentinel", err)
	}
	func() {
		defer func() {
			if v := recover(); v != "boom" {
				t.Errorf("recovered %v, want boom", v)
			}
		}()
		ns.Do(func() error { panic("boom") })
		t.Error("Do did not re-panic")
	}()

	// A socket made inside stays in the namespace: a UDP socket bound to
	// 127.0.0.1 inside is not reachable from the host's loopback.
	var pc net.PacketConn
	if err := ns.Do(func() (err error) {
		pc, err = net.ListenPacket("udp4", "127.0.0.1:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	addr := pc.LocalAddr().(*net.UDPAddr)
	host4, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer host4.Close()
	host4.WriteTo([]byte("x"), addr)
	pc.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, _, err := pc.ReadFrom(make([]byte, 10)); err == nil {
		t.Error("a datagram from the host's loopback reached a socket inside the namespace")
	}
}

// TestGo checks a long-lived goroutine runs inside the namespace.
func TestGo(t *testing.T) {
	ns := newNS(t)
	want := nsInode(t, ns.Path())
	got := make(chan uint64, 1)
	if err := ns.Go(func() {
		time.Sleep(10 * time.Millisecond) // still inside after a reschedule
		runtime.Gosched()
		var st unix.Stat_t
		unix.Stat("/proc/thread-self/ns/net", &st)
		got <- st.Ino
	}); err != nil {
		t.Fatal(err)
	}
	if g := <-got; g != want {
		t.Errorf("goroutine started by Go is in namespace %d, want %d", g, want)
	}
}

// TestExec runs programs inside the namespace.
func TestExec(t *testing.T) {
	ns := newNS(t)
	ctx := ctxFor(t, 30*time.Second)
	out, err := ns.Exec(ctx, "readlink", "/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("net:[%d]", nsInode(t, ns.Path()))
	if strings.TrimSpace(string(out)) != want {
		t.Errorf("child's namespace = %q, want %q", strings.TrimSpace(string(out)), want)
	}
	if _, err := exec.LookPath("ip"); err == nil {
		out, err := ns.Exec(ctx, "ip", "-o", "link", "show")
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], "lo:") {
			t.Errorf("ip link inside shows:\n%s\nwant only lo", out)
		}
	}
	out, err = ns.Exec(ctx, "sh", "-c", "echo to-stdout; echo to-stderr >&2; exit 3")
	if err == nil {
		t.Fatal("failing command returned no error")
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Errorf("error %v, want exit status 3", err)
	}
	if !strings.Contains(string(out), "to-stdout") || !strings.Contains(string(out), "to-stderr") {
		t.Errorf("combined output %q lacks stdout or stderr", out)
	}
	if !strings.Contains(err.Error(), "to-stderr") {
		t.Errorf("error %q does not include the output", err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := ns.Exec(short, "sleep", "10"); err == nil {
		t.Error("sleep 10 with a 200ms context succeeded")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("context end took %v to stop the command", d)
	}
	if _, err := ns.Exec(ctx, "/nonexistent/program"); err == nil {
		t.Error("missing program: no error")
	}
}

// TestVethPing builds the pair topology with IPv4 and IPv6 and different
// MTUs on the two ends, checks what was configured, and pings across in
// both address families.
func TestVethPing(t *testing.T) {
	p := newPair(t, PairConfig{IPv6: true, Veth: VethConfig{MTU: 9000, MTUB: 1500, Queues: 2,
		MACA: net.HardwareAddr{0x02, 0x53, 0x52, 0x00, 0x00, 0x01}}})
	v := p.Veth
	if v.MTUA != 9000 || v.MTUB != 1500 {
		t.Errorf("MTUs %d/%d, want 9000/1500", v.MTUA, v.MTUB)
	}
	if v.MACA.String() != "02:53:52:00:00:01" || len(v.MACB) != 6 {
		t.Errorf("MACs %v/%v", v.MACA, v.MACB)
	}
	for _, end := range []struct {
		ns    *Namespace
		name  string
		addrs []netip.Prefix
	}{{p.A, v.NameA, []netip.Prefix{DefaultAddrA, DefaultAddr6A}}, {p.B, v.NameB, []netip.Prefix{DefaultAddrB, DefaultAddr6B}}} {
		c, err := end.ns.Dial()
		if err != nil {
			t.Fatal(err)
		}
		l, err := c.LinkByName(end.name)
		if err != nil {
			t.Fatal(err)
		}
		if l.Type() != "veth" || l.Attrs().RawFlags&unix.IFF_UP == 0 || l.Attrs().NumRxQueues != 2 {
			t.Errorf("%s/%s: kind %q flags %#x rx queues %d", end.ns, end.name, l.Type(), l.Attrs().RawFlags, l.Attrs().NumRxQueues)
		}
		var got []netip.Prefix
		for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
			as, err := c.AddrList(l, fam)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range as {
				prefix := netip.MustParsePrefix(a.IPNet.String())
				if a.Scope == unix.RT_SCOPE_UNIVERSE {
					got = append(got, prefix)
				}
				if a.Flags&unix.IFA_F_TENTATIVE != 0 {
					t.Errorf("%s: %v is tentative (DAD should be off)", end.ns, prefix)
				}
			}
		}
		c.Close()
		if fmt.Sprint(got) != fmt.Sprint(end.addrs) {
			t.Errorf("%s/%s global addresses %v, want %v", end.ns, end.name, got, end.addrs)
		}
	}
	for _, dst := range []netip.Addr{DefaultAddrB.Addr(), DefaultAddr6B.Addr()} {
		if err := pingFrom(p.A, dst); err != nil {
			t.Errorf("ping %v from A: %v", dst, err)
		}
	}
	if err := pingFrom(p.B, DefaultAddrA.Addr()); err != nil {
		t.Errorf("ping from B: %v", err)
	}
	if err := pingFrom(p.A, netip.MustParseAddr("10.47.0.99")); err == nil {
		t.Error("ping to an absent address got an answer")
	}
}

// pingFrom sends ICMP echo requests from inside ns to dst and waits for a
// reply to any of them (five tries over about two and a half seconds, so
// that a lost ARP request, retried by the kernel after a second, does not
// fail it).
func pingFrom(ns *Namespace, dst netip.Addr) error {
	var conn *icmp.PacketConn
	network, laddr := "ip4:icmp", "0.0.0.0"
	if dst.Is6() {
		network, laddr = "ip6:ipv6-icmp", "::"
	}
	if err := ns.Do(func() (err error) {
		conn, err = icmp.ListenPacket(network, laddr)
		return err
	}); err != nil {
		return err
	}
	defer conn.Close()
	var typ icmp.Type = ipv4.ICMPTypeEcho
	var reply icmp.Type = ipv4.ICMPTypeEchoReply
	proto := 1
	if dst.Is6() {
		typ, reply, proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, 58
	}
	id := os.Getpid() & 0xffff
	buf := make([]byte, 1500)
	for seq := 1; seq <= 5; seq++ {
		msg := icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("sroce-nsutil")}}
		b, err := msg.Marshal(nil)
		if err != nil {
			return err
		}
		if _, err := conn.WriteTo(b, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return err
		}
		deadline := time.Now().Add(500 * time.Millisecond)
		conn.SetReadDeadline(deadline)
		for time.Now().Before(deadline) {
			n, from, err := conn.ReadFrom(buf)
			if err != nil {
				break
			}
			m, err := icmp.ParseMessage(proto, buf[:n])
			if err != nil || m.Type != reply {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && string(e.Data) == "sroce-nsutil" && from.String() == dst.String() {
				return nil
			}
		}
	}
	return fmt.Errorf("no echo reply from %v", dst)
}

// TestVethClose deletes a pair explicitly.
func TestVethClose(t *testing.T) {
	a, b := newNS(t), newNS(t)
	v, err := NewVeth(a, b, VethConfig{NameA: "x0", NameB: "x0", Down: true})
	if err != nil {
		t.Fatal(err)
	}
	ca, err := a.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer ca.Close()
	l, err := ca.LinkByName("x0")
	if err != nil {
		t.Fatal(err)
	}
	if l.Attrs().RawFlags&unix.IFF_UP != 0 {
		t.Error("Down: the end is up")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []*Namespace{a, b} {
		c, err := ns.Dial()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.LinkByName("x0"); !errors.As(err, &netlink.LinkNotFoundError{}) {
			t.Errorf("%s: after Close, x0: %v", ns, err)
		}
		c.Close()
	}
	if err := v.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestNetem installs the netem qdisc the netns tests use and checks that
// tc shows it.
func TestNetem(t *testing.T) {
	p := newPair(t, PairConfig{})
	if err := HaveTC(); err != nil {
		t.Skip("skipping: ", err)
	}
	ctx := ctxFor(t, 30*time.Second)
	n := Netem{Loss: 2, Reorder: 25, Delay: time.Millisecond}
	err := p.A.SetNetem(ctx, p.Veth.NameA, n)
	if errors.Is(err, ErrNoNetem) {
		t.Skip("skipping: ", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	out, err := p.A.Qdiscs(ctx, p.Veth.NameA)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"qdisc netem", "root", "delay 1ms", "loss 2%", "reorder 25%"} {
		if !strings.Contains(out, want) {
			t.Errorf("tc qdisc show lacks %q:\n%s", want, out)
		}
	}
	// Only A's end has it.
	outB, err := p.B.Qdiscs(ctx, p.Veth.NameB)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(outB, "netem") {
		t.Errorf("B's end has netem too:\n%s", outB)
	}
	// Traffic still flows (1ms delay, 2% loss: the pings retry).
	if err := pingFrom(p.A, DefaultAddrB.Addr()); err != nil {
		t.Error(err)
	}
	if err := p.A.ClearQdisc(ctx, p.Veth.NameA); err != nil {
		t.Fatal(err)
	}
	out, _ = p.A.Qdiscs(ctx, p.Veth.NameA)
	if strings.Contains(out, "netem") {
		t.Errorf("netem still there after ClearQdisc:\n%s", out)
	}
	if err := p.A.ClearQdisc(ctx, p.Veth.NameA); err != nil {
		t.Errorf("second ClearQdisc: %v", err)
	}
}

// TestCloseRemovesEverything checks that Pair.Close leaves nothing: no
// namespace files, no live registrations, and the namespace itself freed
// (its veth, watched from a namespace that outlives it, disappears).
func TestCloseRemovesEverything(t *testing.T) {
	Skip(t)
	keeper := newNS(t)
	p, err := NewPair(PairConfig{Prefix: testPrefix(t)})
	if err != nil {
		t.Fatal(err)
	}
	// A third end in keeper lets us see B's namespace being freed: a veth
	// between B and keeper vanishes from keeper once B is destroyed.
	if _, err := NewVeth(p.B, keeper, VethConfig{NameA: "tokeeper", NameB: "fromb"}); err != nil {
		t.Fatal(err)
	}
	names := []string{p.A.Name(), p.B.Name()}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(RunDir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still exists: %v", n, err)
		}
		for _, l := range Live() {
			if l == n {
				t.Errorf("%s still live", n)
			}
		}
	}
	c, err := keeper.Dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := c.LinkByName("fromb")
		if errors.As(err, &netlink.LinkNotFoundError{}) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the veth into a closed namespace still exists after 10s (err %v): namespace not freed", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestSweep kills a process that made a namespace and checks Sweep removes
// the leftover, while namespaces of live processes and other prefixes stay.
func TestSweep(t *testing.T) {
	Skip(t)
	prefix := testPrefix(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=create-and-hang", "NSUTIL_TEST_PREFIX="+prefix)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper: %v", err)
	}
	leftover := strings.TrimSpace(line)
	t.Cleanup(func() { removeNetns(filepath.Join(RunDir, leftover)) })
	if !strings.HasPrefix(leftover, fmt.Sprintf("%s-%d-", prefix, cmd.Process.Pid)) {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q", leftover)
	}

	// While the helper runs, Sweep leaves its namespace alone.
	mine := newNS(t) // this process's, same prefix
	if removed, err := Sweep(prefix); err != nil || len(removed) != 0 {
		t.Fatalf("Sweep with the helper alive removed %v (err %v)", removed, err)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if _, err := os.Stat(filepath.Join(RunDir, leftover)); err != nil {
		t.Fatalf("killed helper's namespace: %v (want it left behind)", err)
	}
	other, err := New(prefix + "-other")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	removed, err := Sweep(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 1 || removed[0] != leftover {
		t.Errorf("Sweep removed %v, want [%s]", removed, leftover)
	}
	if _, err := os.Stat(filepath.Join(RunDir, leftover)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("leftover still there: %v", err)
	}
	for _, ns := range []*Namespace{mine, other} {
		if _, err := os.Stat(ns.Path()); err != nil {
			t.Errorf("Sweep removed %s: %v", ns, err)
		}
	}
}

// TestHandleSignals interrupts a process holding a pair of namespaces and
// checks that its cleanups ran, it exited 130 and nothing is left.
func TestHandleSignals(t *testing.T) {
	Skip(t)
	prefix := testPrefix(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=signals", "NSUTIL_TEST_PREFIX="+prefix)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(stdout)
	line, err := r.ReadString('\n')
	names := strings.Fields(line)
	if err != nil || len(names) != 2 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("helper said %q (%v)", line, err)
	}
	t.Cleanup(func() {
		for _, n := range names {
			removeNetns(filepath.Join(RunDir, n))
		}
	})
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(RunDir, n)); err != nil {
			t.Fatal(err)
		}
	}
	cmd.Process.Signal(syscall.SIGINT)
	rest, _ := bufioReadAll(r)
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("helper exit: %v, want status 130", err)
	}
	if !strings.Contains(rest, "cleanup ran") {
		t.Errorf("cleanup did not run; output %q", rest)
	}
	for _, n := range names {
		if _, err := os.Stat(filepath.Join(RunDir, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind after SIGINT: %v", n, err)
		}
	}
}

func bufioReadAll(r *bufio.Reader) (string, error) {
	var sb strings.Builder
	_, err := r.WriteTo(&sb)
	return sb.String(), err
}

// udpBurst sends n numbered datagrams from A to B (one every gap) and
// returns the sequence numbers B received, in arrival order.
func udpBurst(t *testing.T, p *Pair, n int, gap time.Duration) []int {
	t.Helper()
	var rx, tx net.PacketConn
	if err := p.B.Do(func() (err error) {
		rx, err = net.ListenPacket("udp4", DefaultAddrB.Addr().String()+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := p.A.Do(func() (err error) {
		tx, err = net.ListenPacket("udp4", DefaultAddrA.Addr().String()+":0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	dst := rx.LocalAddr()
	got := make(chan []int, 1)
	var sent atomic.Bool
	go func() {
		var seqs []int
		buf := make([]byte, 64)
		for {
			// Stop when nothing came for 500ms after the last send.
			rx.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			k, _, err := rx.ReadFrom(buf)
			if err != nil {
				if !sent.Load() {
					continue
				}
				got <- seqs
				return
			}
			var s int
			fmt.Sscanf(string(buf[:k]), "seq %d", &s)
			seqs = append(seqs, s)
		}
	}()
	// Resolve ARP first so the burst is not held in the neighbour queue.
	if err := pingFrom(p.A, DefaultAddrB.Addr()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := tx.WriteTo([]byte(fmt.Sprintf("seq %d", i)), dst); err != nil {
			t.Fatal(err)
		}
		if gap > 0 {
			time.Sleep(gap)
		}
	}
	sent.Store(true)
	return <-got
}

// TestForwarder joins A and B through the user-space impairment and checks
// that plain traffic (ICMP, TCP with checksum offload and GSO) passes
// unharmed, then loss, duplication and reordering.
func TestForwarder(t *testing.T) {
	p := newPair(t, PairConfig{IPv6: true, Impair: &Netem{}, ImpairWith: ImpairForwarder})
	if p.Impairment != ImpairForwarder || p.Mid == nil || p.Forwarder == nil {
		t.Fatalf("pair %+v", p)
	}
	if p.Veth.NameA != "veth0" || p.Veth.NameB != "veth1" || p.Veth.MACA.String() == p.Veth.MACB.String() {
		t.Errorf("ends %+v", p.Veth)
	}
	for _, dst := range []netip.Addr{DefaultAddrB.Addr(), DefaultAddr6B.Addr()} {
		if err := pingFrom(p.A, dst); err != nil {
			t.Errorf("ping %v through the forwarder: %v", dst, err)
		}
	}
	// TCP: 8 MiB with a checked pattern; veth sends with checksum offload
	// and TSO, which must survive the trip through user space.
	var ln net.Listener
	if err := p.B.Do(func() (err error) {
		ln, err = net.Listen("tcp", "[fd00:5352::2]:0")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	const size = 8 << 20
	sum := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			sum <- err
			return
		}
		defer c.Close()
		buf := make([]byte, 64<<10)
		total := 0
		for total < size {
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			k, err := c.Read(buf)
			for i := 0; i < k; i++ {
				if buf[i] != byte((total+i)%251) {
					sum <- fmt.Errorf("byte %d corrupted", total+i)
					return
				}
			}
			total += k
			if err != nil {
				sum <- fmt.Errorf("after %d bytes: %w", total, err)
				return
			}
		}
		sum <- nil
	}()
	var conn net.Conn
	if err := p.A.Do(func() (err error) {
		conn, err = net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i % 251)
	}
	start := time.Now()
	if _, err := conn.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := <-sum; err != nil {
		t.Fatalf("TCP through the forwarder: %v", err)
	}
	conn.Close()
	t.Logf("8 MiB over TCP through the forwarder in %v; %+v", time.Since(start), p.Forwarder.Stats())
	// Frames may be in flight while the counters are read: Sent can lag.
	if st := p.Forwarder.Stats(); st.Received == 0 || st.Sent == 0 || st.Sent > st.Received || st.Errors != 0 || st.Lost != 0 {
		t.Errorf("stats without impairment: %+v", st)
	}
}

func TestForwarderLoss(t *testing.T) {
	p := newPair(t, PairConfig{Impair: &Netem{Loss: 20}, ImpairWith: ImpairForwarder, Seed: 1})
	const n = 2000
	seqs := udpBurst(t, p, n, 20*time.Microsecond)
	st := p.Forwarder.Stats()
	t.Logf("received %d of %d; %+v", len(seqs), n, st)
	if len(seqs) < n*70/100 || len(seqs) > n*90/100 {
		t.Errorf("received %d of %d with 20%% loss", len(seqs), n)
	}
	if st.Lost == 0 {
		t.Error("no loss counted")
	}
}

func TestForwarderReorderDuplicate(t *testing.T) {
	p := newPair(t, PairConfig{Impair: &Netem{Delay: 2 * time.Millisecond, Reorder: 25, Duplicate: 5},
		ImpairWith: ImpairForwarder, Seed: 2})
	const n = 1000
	seqs := udpBurst(t, p, n, 50*time.Microsecond)
	st := p.Forwarder.Stats()
	seen := map[int]int{}
	outOfOrder, maxSeq := 0, -1
	for _, s := range seqs {
		seen[s]++
		if s < maxSeq {
			outOfOrder++
		}
		maxSeq = max(maxSeq, s)
	}
	dups := len(seqs) - len(seen)
	t.Logf("received %d (%d distinct, %d duplicates, %d out of order); %+v", len(seqs), len(seen), dups, outOfOrder, st)
	if len(seen) != n {
		t.Errorf("%d distinct datagrams arrived, want all %d", len(seen), n)
	}
	if outOfOrder == 0 || st.Reordered == 0 {
		t.Error("nothing was reordered")
	}
	if dups == 0 || st.Duplicated == 0 {
		t.Error("nothing was duplicated")
	}
}

// TestImpairAuto picks the netem qdisc where the kernel has it and the
// forwarder otherwise.
func TestImpairAuto(t *testing.T) {
	p := newPair(t, PairConfig{Impair: &Netem{Delay: time.Millisecond, Loss: 2, Reorder: 25}})
	err := NetemAvailable()
	t.Logf("netem qdisc: %v; using %v", err, p.Impairment)
	want := ImpairQdisc
	if err != nil {
		want = ImpairForwarder
	}
	if p.Impairment != want {
		t.Errorf("method %v, want %v", p.Impairment, want)
	}
	if err := pingFrom(p.A, DefaultAddrB.Addr()); err != nil {
		t.Error(err)
	}
	if want == ImpairQdisc {
		out, err := p.A.Qdiscs(ctxFor(t, 10*time.Second), p.Veth.NameA)
		if err != nil || !strings.Contains(out, "netem") {
			t.Errorf("qdisc: %q %v", out, err)
		}
	}
	if _, err := NewPair(PairConfig{Prefix: testPrefix(t), Impair: &Netem{}, ImpairWith: ImpairQdisc}); err == nil {
		if NetemAvailable() != nil {
			t.Error("ImpairQdisc without netem succeeded")
		}
	} else if NetemAvailable() == nil {
		t.Errorf("ImpairQdisc: %v", err)
	}
}
